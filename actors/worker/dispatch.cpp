// SPDX-License-Identifier: BSD-3-Clause
// How a worker turns one call into requests to shards: slicing and batching
// (core/batching.hpp), compression, the per-shard send queues
// (core/send_queue.hpp), and the assembly of pulled values (core/parts.hpp).
// The requests themselves leave through `to_shard` (shard_link.hpp).
#include "actors/worker/shard_link.hpp"
#include "actors/worker/state.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>

#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "actors/fan_in.hpp"
#include "core/batch_ids.hpp"
#include "core/layout.hpp"
#include "core/parts.hpp"
#include "core/prefetch.hpp"
#include "messages/errors.hpp"

namespace actorps {

const char* op_name(op_kind kind) {
  switch (kind) {
    case op_kind::push:
      return "push";
    case op_kind::pull:
      return "pull";
    default:
      return "push_pull";
  }
}

void set_compression(worker_state& st, route& r, const compression& c) {
  if (r.comp == c)
    return;
  r.comp = c;
  r.residual.clear();
  ++st.route_changes;
}

namespace {

// Runs the compression filter of `r` over the `n` floats of part `part`
// about to be pushed (in place; 2-bit updates the part's residual). With
// `packed` (the slice goes to a remote shard in a message of its own, so it
// crosses packed by its key's codec), fp16 is left to the serializer:
// packing truncates just as quantizing would, so the shard gets the same
// values one pass sooner. A batch may mix codecs and cross unpacked: its
// slices are always quantized here.
void quantize_part(route& r, uint32_t part, float* x, uint64_t n, bool packed) {
  if (r.comp.kind == codec::none || (packed && r.comp.kind == codec::fp16))
    return;
  float* residual = nullptr;
  if (r.comp.kind == codec::two_bit) {
    if (r.residual.size() < r.info.slices.size())
      r.residual.resize(r.info.slices.size());
    auto& res = r.residual[part];
    if (res.size() != n)
      res.assign(n, 0.0f);
    residual = res.data();
  }
  quantize(r.comp, x, residual, n);
}

// The encoding of a payload that holds slices of several keys: theirs if
// they all share it, else none (the values are quantized all the same, so
// they only cross the network unpacked).
void merge_encoding(floats& payload, bool first, const compression& c) {
  if (first)
    payload.encoding = c;
  else if (payload.encoding != c)
    payload.encoding = compression{};
}

// True if `x` is one view (shared_floats::is_view) as a whole: a pushed
// slice of its own that the facade wrote into room the data channel lent
// (payload::pack), the only views a push holds. Were other views to come,
// they would still be sent right, as a plain push, only without the
// channel finding lent room in them.
bool lies_in_view(const float_parts& x) {
  return x.pieces.size() == 1 && x.buffers.size() == 1 && x.buffers[0].is_view()
         && x.pieces[0].length == x.size;
}

// A batch being filled for one shard.
struct batch_builder {
  slice_batch msg;
  std::vector<core::piece> pieces;
  uint64_t floats = 0;
};

// Sends a batch, or its only operation as a plain push, pull or push_pull,
// through the shard's send queue.
void flush(worker_ptr self, uint32_t shard, int32_t priority, op_kind kind,
           batch_builder& b, const gather_ptr& g) {
  if (b.pieces.empty())
    return;
  ++g->remaining;
  std::function<void(caf::error&)> fail = [g](caf::error& err) {
    g->fail(std::move(err));
  };
  auto msg = std::move(b.msg);
  auto pieces = std::move(b.pieces);
  auto expected = b.floats;
  b.msg = slice_batch{msg.worker, msg.kind, {}, {}, {}, {}};
  b.pieces.clear();
  b.floats = 0;
  // (A slice of its own in room its data channel lent stays a batch of one
  // here: its values stay where they lie, and the channel sends it as a
  // plain push or push_pull, see to_request below.)
  if (msg.slices.size() == 1 && !lies_in_view(msg.parts)) {
    auto at = pieces[0].offset;
    auto on_value = [g, at, expected](shared_floats& x) {
      g->put(at, expected, x);
    };
    if (msg.parts.size > 0)
      msg.data.data = core::take_all(msg.parts);
    auto one = slice_push{msg.slices[0], msg.worker, msg.seqs[0],
                          std::move(msg.data)};
    switch (kind) {
      case op_kind::push:
        submit<caf::ok_atom>(
          self, shard, priority, kind, expected,
          [g](caf::ok_atom) { g->arrive(); }, fail, push_atom::value,
          std::move(one));
        return;
      case op_kind::pull:
        submit<shared_floats>(self, shard, priority, kind, expected, on_value,
                              fail, pull_atom::value,
                              slice_pull{one.slice, one.worker, one.seq});
        return;
      case op_kind::push_pull:
        submit<shared_floats>(self, shard, priority, kind, expected, on_value,
                              fail, push_pull_atom::value, std::move(one));
        return;
    }
  }
  // A push batch answers with no floats: nothing to place.
  auto sent = expected;
  if (kind == op_kind::push) {
    pieces.clear();
    expected = 0;
  }
  submit<float_parts>(
    self, shard, priority, kind, sent,
    [g, pieces = std::move(pieces), expected](float_parts& x) {
      g->put(pieces, expected, x);
    },
    fail, batch_atom::value, std::move(msg));
}

// Lays out the batches of a kept list whose every slice is batched, none
// compressed and no shard's batch over the cap (see list_plan); else leaves
// the plan invalid.
void make_plan(const worker_state& st, const std::vector<route*>& rs,
               list_summary& sum) {
  auto& plan = sum.plan;
  plan = list_plan{};
  auto cap = st.cfg.batching.cap();
  if (sum.batched != sum.parts || !sum.uncompressed || sum.parts == 0)
    return;
  for (auto& [slices, floats] : sum.per_shard)
    if (floats > cap)
      return;
  plan.shards.resize(sum.per_shard.size());
  for (std::size_t i = 0; i < plan.shards.size(); ++i) {
    auto& p = plan.shards[i];
    auto n = sum.per_shard[i].first;
    p.slices.reserve(n);
    p.seq_at.reserve(n);
    p.pieces.reserve(n);
  }
  uint64_t key_offset = 0;
  for (auto* r : rs) {
    for (auto& s : r->parts) {
      if (s.shard >= plan.shards.size()) {
        plan = list_plan{};
        return;
      }
      auto& p = plan.shards[s.shard];
      p.slices.push_back(make_slice_id(r->info.id, s.part));
      p.seq_at.push_back(r->seq_at + s.part);
      p.pieces.push_back(core::piece{key_offset + s.offset, s.length});
    }
    key_offset += r->info.size;
  }
  plan.valid = true;
}

// Sends a call on a kept list as its plan lays it out: per shard, a push's
// values gathered into the batch, the plan's slices and pieces copied, the
// sequence numbers read and counted in one sweep. (The values are gathered
// for every shard before any number is counted, so that a call failing
// there uses none. The plan is read whole before the first flush: sending
// may start another call, which may keep another list in its place.)
void send_planned(worker_ptr self, op_kind kind, int32_t priority,
                  const list_plan& plan,
                  const std::vector<std::pair<uint64_t, uint64_t>>& per_shard,
                  const float_parts& data, std::vector<batch_builder>& open,
                  const gather_ptr& g) {
  auto& st = self->state;
  auto shards = std::min(open.size(), plan.shards.size());
  if (kind != op_kind::pull) {
    // (The facade lays a list's values out in one buffer: read there
    // directly, else through a cursor over the pieces.)
    const float* whole = nullptr;
    if (data.pieces.size() == 1 && data.pieces[0].at == 0
        && data.pieces[0].length == data.size)
      whole = data.buffers[data.pieces[0].buffer].data() + data.pieces[0].from;
    for (std::size_t i = 0; i < shards; ++i) {
      const auto& p = plan.shards[i];
      if (p.slices.empty())
        continue;
      auto& dst = open[i].msg.data.data;
      dst.resize(per_shard[i].second);
      auto* out = dst.data();
      core::parts_cursor in{data};
      for (const auto& pc : p.pieces) {
        const auto* x = whole != nullptr ? whole + pc.offset
                                         : in.read(pc.offset, pc.length);
        if (x == nullptr) {
          // (Not reached: the value's size and pieces were checked.)
          g->fail(make_error(errc::shape_mismatch,
                             std::string{op_name(kind)}
                               + ": the pushed value ends before its keys"));
          return;
        }
        if (pc.length == 1)
          *out = *x;
        else
          std::memcpy(out, x, pc.length * sizeof(float));
        out += pc.length;
      }
    }
  }
  for (std::size_t i = 0; i < shards; ++i) {
    const auto& p = plan.shards[i];
    auto n = p.slices.size();
    if (n == 0)
      continue;
    auto& b = open[i];
    b.msg.slices = p.slices;
    b.pieces = p.pieces;
    b.floats = per_shard[i].second;
    b.msg.seqs.resize(n);
    auto* seqs = st.seqs.data();
    for (std::size_t j = 0; j < n; ++j)
      b.msg.seqs[j] = seqs[p.seq_at[j]]++;
  }
  for (uint32_t i = 0; i < open.size(); ++i)
    flush(self, i, priority, kind, open[i], g);
  g->sealed = true;
  if (!g->failed && g->remaining == 0)
    g->finish(g->take());
}

} // namespace

// Pulled slices of at most this many floats on average, every one sent in
// a batch, are gathered into one buffer (gather::flat).
constexpr uint64_t flat_slice_floats = 16;

void start_ops(worker_ptr self, op_kind kind, std::vector<route*> rs,
               int32_t priority, float_parts data,
               std::function<void(float_parts)> finish,
               std::function<void(caf::error)> on_error,
               list_summary* summary) {
  auto& st = self->state;
  auto op = op_name(kind);
  auto pushes = kind != op_kind::pull;
  const auto& batching = st.cfg.batching;
  // (Routes are read a few ahead: a call naming many keys misses the cache
  // on each route otherwise, one after another.)
  // (Written out in the loops: GCC drops a helper's prefetches, see
  // core/prefetch.hpp.)
  constexpr std::size_t ahead = 8;
  auto num_shards = static_cast<uint32_t>(st.cfg.shards.size());
  // What every key adds up to: kept with a list the worker keeps while no
  // route changed, else read here.
  list_summary fresh;
  auto* sum = &fresh;
  if (summary != nullptr && summary->valid
      && summary->taken_at == st.route_changes)
    sum = summary;
  else {
    // Batched slices of uncompressed keys refer to the caller's buffers
    // instead of being copied into the batch, unless they are too short to
    // be worth a piece each (compressed ones are quantized into a copy).
    // Per shard, the slices and floats it may get in batches (reserved
    // below: grown one key at a time, the batch's vectors were copied over
    // and over).
    fresh.per_shard.resize(num_shards);
    for (std::size_t i = 0; i < rs.size(); ++i) {
      auto* r = rs[i];
      if (i + ahead < rs.size())
        core::prefetch_lines(rs[i + ahead], route_front(*rs[i + ahead]));
      if (r->info.dim > 0) {
        on_error(make_error(errc::shape_mismatch,
                            std::string{op} + ": key '" + r->info.name
                              + "' is a row table (push and pull its rows)"));
        return;
      }
      fresh.total += r->info.size;
      fresh.parts += r->parts.size();
      fresh.uncompressed = fresh.uncompressed && r->comp.kind == codec::none;
      for (auto& s : r->parts)
        if (!batching.alone(s.length)) {
          ++fresh.batched;
          fresh.batched_floats += s.length;
          if (s.shard < num_shards) {
            ++fresh.per_shard[s.shard].first;
            fresh.per_shard[s.shard].second += s.length;
          }
        }
    }
    fresh.valid = true;
    fresh.taken_at = st.route_changes;
    if (summary != nullptr) {
      *summary = fresh;
      make_plan(st, rs, *summary);
    }
  }
  const auto total = sum->total;
  const auto parts = sum->parts;
  const auto uncompressed = sum->uncompressed;
  const auto batched = sum->batched;
  const auto batched_floats = sum->batched_floats;
  // (A copy of a kept summary's: sending may start another call, which may
  // keep another list in its place.)
  const auto per_shard = sum == &fresh ? std::move(fresh.per_shard)
                                       : sum->per_shard;
  auto share = pushes && uncompressed
               && core::batching::share(batched, batched_floats);
  if (pushes && data.size != total) {
    if (rs.size() == 1)
      on_error(to_error(core::check_size(op, rs[0]->info, data.size, "push")));
    else
      on_error(make_error(errc::shape_mismatch,
                          std::string{op} + ": " + std::to_string(rs.size())
                            + " keys hold " + std::to_string(total)
                            + " floats but the push has "
                            + std::to_string(data.size)));
    return;
  }
  if (pushes && !data.valid(true)) {
    on_error(make_error(errc::shape_mismatch,
                        std::string{op}
                          + ": the pieces of the pushed value do not cover it "
                            "in order"));
    return;
  }
  auto g = std::make_shared<gather>();
  g->finish = std::move(finish);
  g->on_error = std::move(on_error);
  if (kind != op_kind::push) {
    if (batched == parts && batched_floats <= flat_slice_floats * batched) {
      g->flat.resize(total);
      g->flat_out = true;
    } else {
      g->out.size = total;
      g->out.pieces.reserve(parts);
    }
  }
  core::parts_reader in{data};
  auto rank = st.cfg.rank;
  auto cap = batching.cap();
  std::vector<batch_builder> open(num_shards);
  for (uint32_t i = 0; i < num_shards; ++i) {
    auto& b = open[i];
    b.msg = slice_batch{rank, static_cast<uint8_t>(kind), {}, {}, {}, {}};
    auto [slices, floats] = per_shard[i];
    if (slices < 2)
      continue;
    b.msg.slices.reserve(slices);
    b.msg.seqs.reserve(slices);
    b.pieces.reserve(slices);
    if (pushes && !share)
      b.msg.data.data.reserve(std::min(floats, cap));
  }
  if (sum->plan.valid && !(pushes && share)) {
    send_planned(self, kind, priority, sum->plan, per_shard, data, open, g);
    return;
  }
  auto remote = !st.cfg.relays.empty();
  uint64_t key_offset = 0;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    auto* r = rs[i];
    if (i + ahead < rs.size())
      core::prefetch_lines(rs[i + ahead], route_front(*rs[i + ahead]));
    const auto& info = r->info;
    for (auto& s : r->parts) {
      auto id = make_slice_id(info.id, s.part);
      auto seq = next_seq(st, *r, s.part);
      auto at = key_offset + s.offset;
      auto& b = open[s.shard];
      auto alone = batching.alone(s.length);
      if (alone || b.floats + s.length > cap)
        flush(self, s.shard, priority, kind, b, g);
      // In sync mode, a large push-pull that has to wait goes as a push
      // (which holds room until the shard took it, never longer) and a pull
      // (which holds none while it waits for its round): a fused one could
      // hold room while its round waits for this worker's queued pushes.
      if (alone && kind == op_kind::push_pull && st.cfg.sync
          && !st.queues[s.shard].fits(2 * s.length * sizeof(float))) {
        auto part = [&](op_kind k, uint64_t part_seq, floats data) {
          batch_builder one;
          one.msg = slice_batch{rank,       static_cast<uint8_t>(k), {id},
                                {part_seq}, std::move(data),         {}};
          one.pieces.push_back(core::piece{at, s.length});
          one.floats = s.length;
          flush(self, s.shard, priority, k, one, g);
        };
        auto pushed = in.take(s.length);
        quantize_part(*r, s.part, pushed.data(), s.length, remote);
        part(op_kind::push, seq, floats{std::move(pushed), r->comp});
        part(op_kind::pull, next_seq(st, *r, s.part), floats{});
        continue;
      }
      b.msg.slices.push_back(id);
      b.msg.seqs.push_back(seq);
      b.pieces.push_back(core::piece{at, s.length});
      b.floats += s.length;
      if (pushes
          && ((share && !alone)
              || (alone && r->comp.kind == codec::none
                  && in.next_is_view(s.length)))) {
        // (A slice of its own in room its data channel lent leaves from
        // there: payload::pack.)
        in.share(b.msg.parts, s.length);
      } else if (pushes) {
        auto& dst = b.msg.data;
        auto first = b.msg.slices.size() == 1;
        if (alone)
          dst.data = in.take(s.length);
        else
          in.append(dst.data, s.length);
        quantize_part(*r, s.part, dst.data.data() + dst.data.size() - s.length,
                      s.length, remote && alone);
        merge_encoding(dst, first, r->comp);
      }
      // A large slice travels alone, so big tensors stream over all shards.
      if (alone)
        flush(self, s.shard, priority, kind, b, g);
    }
    key_offset += info.size;
  }
  for (uint32_t i = 0; i < num_shards; ++i)
    flush(self, i, priority, kind, open[i], g);
  g->sealed = true;
  if (!g->failed && g->remaining == 0)
    g->finish(g->take());
}

// -- the data channel's encoding ------------------------------------------

void add_values(data_request& out, const floats& values,
                std::vector<uint8_t>& encoded) {
  out.encoding = values.encoding;
  out.count = values.data.size();
  if (out.count == 0)
    return;
  if (out.encoding.kind == codec::none) {
    out.pieces.push_back({values.data.data(), out.count * sizeof(float)});
    return;
  }
  encoded.resize(encoded_size(out.encoding, out.count));
  encode(out.encoding, values.data.data(), out.count, encoded.data());
  out.pieces.push_back({encoded.data(), encoded.size()});
}

caf::error to_request(caf::actor_system&, std::shared_ptr<const slice_push> msg,
                      data_request& out) {
  out.slice = msg->slice;
  out.worker = msg->worker;
  out.seq = msg->seq;
  struct held {
    std::shared_ptr<const slice_push> msg;
    std::vector<uint8_t> encoded;
  };
  auto keep = std::make_shared<held>();
  keep->msg = std::move(msg);
  add_values(out, keep->msg->grad, keep->encoded);
  out.keep = std::move(keep);
  return caf::none;
}

caf::error to_request(caf::actor_system&, std::shared_ptr<const slice_pull> msg,
                      data_request& out) {
  out.slice = msg->slice;
  out.worker = msg->worker;
  out.seq = msg->seq;
  return caf::none;
}

caf::error to_request(caf::actor_system&,
                      std::shared_ptr<const slice_batch> msg,
                      data_request& out) {
  struct held {
    std::shared_ptr<const slice_batch> msg;
    std::vector<uint8_t> encoded;
    std::vector<uint8_t> ids;
  };
  auto keep = std::make_shared<held>();
  keep->msg = std::move(msg);
  auto& b = *keep->msg;
  auto n = b.slices.size();
  if (n == 0 || n != b.seqs.size())
    return make_error(errc::bad_config,
                      "batch: " + std::to_string(n) + " slices and "
                        + std::to_string(b.seqs.size())
                        + " sequence numbers (need as many, at least one)");
  out.worker = b.worker;
  if (n == 1 && lies_in_view(b.parts)
      && (b.kind == static_cast<uint8_t>(op_kind::push)
          || b.kind == static_cast<uint8_t>(op_kind::push_pull))) {
    // One slice in lent room (flush above): a plain push or push_pull, its
    // values sent from where they lie, and read there by the shard.
    out.kind = b.kind == static_cast<uint8_t>(op_kind::push)
                 ? data_kind::push
                 : data_kind::push_pull;
    out.slice = b.slices[0];
    out.seq = b.seqs[0];
    out.count = b.parts.size;
    auto& p = b.parts.pieces[0];
    out.pieces.push_back(
      {b.parts.buffers[p.buffer].data() + p.from, p.length * sizeof(float)});
    out.keep = std::move(keep);
    return caf::none;
  }
  out.op = b.kind;
  out.slices = static_cast<uint32_t>(n);
  // The pushed values: uncompressed pieces where they lie, one buffer of
  // floats, or that buffer encoded.
  if (b.parts.size > 0) {
    out.count = b.parts.size;
    for (const auto& p : b.parts.pieces)
      out.pieces.push_back(
        {b.parts.buffers[p.buffer].data() + p.from, p.length * sizeof(float)});
  } else {
    add_values(out, b.data, keep->encoded);
  }
  core::pack_ids(b.slices.data(), b.seqs.data(), n, keep->ids);
  out.ids_size = static_cast<uint32_t>(keep->ids.size());
  keep->ids.resize(core::padded_ids(keep->ids.size()));
  out.pieces.push_back({keep->ids.data(), keep->ids.size()});
  out.keep = std::move(keep);
  return caf::none;
}

caf::error deserialize_error(caf::actor_system& sys,
                             const std::vector<char>& body) {
  caf::error err;
  caf::binary_deserializer source{sys, body};
  if (source(err) || !err)
    return make_error(errc::bad_config, "ucx: a failure reply holds no error");
  return err;
}

bool decode_reply(data_reply& r, caf::ok_atom&) {
  return r.values.empty();
}

bool decode_reply(data_reply& r, shared_floats& x) {
  x = std::move(r.values);
  return true;
}

bool decode_reply(data_reply& r, float_parts& x) {
  x = float_parts{};
  x.append(std::move(r.values));
  return true;
}

} // namespace actorps
