// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/ucx/ingress.hpp"
#include "runtime/ucx/segment.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>

#include "caf/actor_system.hpp"
#include "caf/binary_serializer.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/mailbox_element.hpp"
#include "caf/message_priority.hpp"
#include "caf/send.hpp"

#include "actors/run_here.hpp"
#include "core/batch_ids.hpp"
#include "core/link_proof.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"
#include "runtime/ucx/frames.hpp"
#include "runtime/ucx/replicas.hpp"

namespace actorps::ucx {

// -- ingress ------------------------------------------------------------------

uint64_t reply_peer(peer_id from, uint32_t identity) {
  return (uint64_t{identity} << 32) | (from & 0xFFFFFFFFu);
}

namespace {

// Where a reply goes, as the shards hand it back to the sink.
uint64_t reply_to(const frame& x) {
  return reply_peer(x.from, x.identity);
}

std::vector<char> reply_header(frame_kind kind, uint64_t request, uint64_t to) {
  frame_header h;
  h.kind = kind;
  h.request = request;
  h.shard = static_cast<uint32_t>(to >> 32);
  return encode(h);
}

// Sends the shards' outcomes back over the plane, on the shards' threads.
class plane_sink : public reply_sink {
public:
  plane_sink(caf::actor_system& sys, std::weak_ptr<plane> out)
    : sys_(sys), out_(std::move(out)) {
    // nop
  }

  void ok(uint64_t peer, uint64_t request) override {
    send(peer, frame_kind::reply, request, payload{});
  }

  void value(uint64_t peer, uint64_t request, const shared_floats& x) override {
    auto keep = std::make_shared<shared_floats>(x);
    send(peer, frame_kind::reply, request,
         payload{keep->data(), keep->size() * sizeof(float), keep});
  }

  // Copied into the segment for the peer now (on the shard's thread, while
  // the backup works), sent when the returned function runs; empty where
  // the value would not go through a segment (nothing to gain).
  std::function<void()> value_later(uint64_t peer, uint64_t request,
                                    const shared_floats& x) override {
    auto out = out_.lock();
    if (!out)
      return {};
    auto keep = std::make_shared<shared_floats>(x);
    auto body = std::make_shared<ucx::staged_body>(
      out->stage(peer & 0xFFFFFFFFu,
                 payload{keep->data(), keep->size() * sizeof(float), keep}));
    if (!body->in_segment())
      return {};
    return [to = out_, peer, request, body] {
      if (auto out = to.lock())
        out->send_staged(peer & 0xFFFFFFFFu,
                         reply_header(frame_kind::reply, request, peer),
                         std::move(*body));
    };
  }

  // The pieces of a pulled value, in the value's order, sent as they lie in
  // the shards' buffers.
  void parts(uint64_t peer, uint64_t request, float_parts&& x) override {
    auto keep = std::make_shared<float_parts>(std::move(x));
    auto order = keep->pieces;
    std::sort(order.begin(), order.end(),
              [](const float_piece& a, const float_piece& b) {
                return a.at < b.at;
              });
    std::vector<payload::piece> pieces;
    pieces.reserve(order.size());
    for (const auto& p : order)
      pieces.push_back(payload::piece{keep->buffers[p.buffer].data() + p.from,
                                      p.length * sizeof(float)});
    send(peer, frame_kind::reply, request,
         payload{std::move(pieces), std::move(keep)});
  }

  void fail(uint64_t peer, uint64_t request, const caf::error& err) override {
    auto buf = std::make_shared<std::vector<char>>();
    caf::binary_serializer sink{sys_, *buf};
    auto copy = err;
    if (sink(copy))
      buf->clear();
    send(peer, frame_kind::failure, request,
         payload{buf->data(), buf->size(), buf});
  }

private:
  void send(uint64_t peer, frame_kind kind, uint64_t request, payload body) {
    if (auto out = out_.lock())
      out->send(peer & 0xFFFFFFFFu, reply_header(kind, request, peer),
                std::move(body));
  }

  caf::actor_system& sys_;
  std::weak_ptr<plane> out_;
};

// The `count` values at the front of `body`, as `enc` lays them out, into
// `out`: taken over without a copy when raw (so whatever lies behind them
// must be read first), else decoded. False if a raw body is no whole floats.
bool take_values(buffer& body, const compression& enc, uint64_t count,
                 floats& out) {
  out.encoding = enc;
  if (enc.kind == codec::none) {
    if (!body.take_floats(out.data))
      return false;
    out.data.resize(count);
    return true;
  }
  out.data.resize(count);
  decode(enc, reinterpret_cast<const uint8_t*>(body.data()), count,
         out.data.data());
  return true;
}

// The `slice_batch` of a batch request whose header holds `m`, or none if
// its body does not make one. Uncompressed values are taken over from the
// body.
std::optional<slice_batch> decode_batch(const batch_meta& m, buffer& body) {
  if (body.size() != body_size(m)
      || (m.op == static_cast<uint8_t>(op_kind::pull) && m.count != 0))
    return std::nullopt;
  slice_batch b;
  b.worker = m.worker;
  b.kind = m.op;
  auto n = std::size_t{m.slices};
  auto values = encoded_size(m.encoding, m.count);
  b.slices.resize(n);
  b.seqs.resize(n);
  // (Copied out first, as the ids were before they were packed: the body
  // may lie in the peer's segment, which the peer may still write, and
  // every check reads the copy.)
  const auto* at = reinterpret_cast<const uint8_t*>(body.data()) + values;
  std::vector<uint8_t> ids(at, at + (body.size() - values));
  if (!core::unpack_ids(ids.data(), m.ids_size, n, b.slices.data(),
                        b.seqs.data())
      || std::any_of(ids.begin() + m.ids_size, ids.end(),
                     [](uint8_t x) { return x != 0; }))
    return std::nullopt;
  if (m.count > 0 && !take_values(body, m.encoding, m.count, b.data))
    return std::nullopt;
  return b;
}

// The values and rows of a rows_push or rows_pull body, or none if the body
// is not what `meta` describes. Uncompressed values are taken over.
bool decode_rows(const slice_meta& meta, buffer& body, floats& values,
                 std::vector<uint64_t>& rows) {
  if (body.size() != rows_body_size(meta))
    return false;
  auto at = encoded_size(meta.encoding, meta.count);
  rows.resize(meta.rows);
  if (meta.rows > 0)
    std::memcpy(rows.data(), body.data() + at, meta.rows * sizeof(uint64_t));
  // The rows behind the values are 8-byte words: a raw body is whole floats.
  return meta.count == 0
         || take_values(body, meta.encoding, meta.count, values);
}

// Turns request frames into the shards' typed messages, on the plane's
// progress thread; the shards answer through the sink.
struct ingress {
  caf::actor_system* sys = nullptr;
  std::shared_ptr<plane_link> link;
  std::weak_ptr<plane> out;
  std::map<uint32_t, shard_actor> shards;
  std::shared_ptr<reply_sink> sink;
  std::mutex mtx;
  // The peers each worker rank sent requests from, to drop them when the
  // worker's node goes down.
  std::map<uint32_t, std::set<peer_id>> peers_of;

  void seen(uint32_t worker, peer_id from) {
    // A dropped peer's frames no longer arrive; a rank beyond any job's
    // (the shard refuses it) is not recorded.
    if (worker >= (uint32_t{1} << 20))
      return;
    std::lock_guard<std::mutex> guard{mtx};
    peers_of[worker].insert(from);
  }

  // Worker `rank`'s node went down: its peers are dropped, so that replies
  // still owed to it fail instead of waiting on a peer that never reads.
  void worker_down(uint32_t rank) {
    std::set<peer_id> peers;
    {
      std::lock_guard<std::mutex> guard{mtx};
      auto i = peers_of.find(rank);
      if (i == peers_of.end())
        return;
      peers = std::move(i->second);
      peers_of.erase(i);
    }
    if (auto plane = out.lock())
      for (auto peer : peers)
        plane->drop(peer, "UCX: worker " + std::to_string(rank) + " is down");
  }

  // The values of a push frame's body, or none if the body is not
  // `meta.count` values as `meta.encoding` lays them out.
  static std::optional<floats> values_of(const slice_meta& meta, buffer& body) {
    floats out;
    if (body.size() != encoded_size(meta.encoding, meta.count)
        || !take_values(body, meta.encoding, meta.count, out))
      return std::nullopt;
    return out;
  }

  // Whether the plane's thread runs the shards (spawn_ingress): requests
  // of normal priority wait in `held` for the end of the progress pass.
  bool run_shards = false;
  std::vector<std::pair<caf::actor, caf::message>> held;

  // Requests on slices of at least this many bytes go to the shard's
  // mailbox at once even then: applying a large push or copying out a large
  // reply on the plane's thread would keep it from receiving meanwhile.
  static constexpr uint64_t large_bytes = uint64_t{1} << 20;

  // Slices whose pushes were large (pulls of them are large too), as far as
  // admitted workers pushed them (at most `max_large_slices`; under `mtx`).
  std::unordered_set<uint64_t> large_slices;
  static constexpr std::size_t max_large_slices = std::size_t{1} << 16;

  // Whether a request on `slice` is large: a push of `count` values, or
  // any request on a slice a large push went to.
  bool large(uint64_t slice, uint64_t count = 0) {
    if (!run_shards)
      return false;
    std::lock_guard<std::mutex> guard{mtx};
    if (count * sizeof(float) >= large_bytes) {
      if (large_slices.size() < max_large_slices)
        large_slices.insert(slice);
      return true;
    }
    return large_slices.count(slice) != 0;
  }

  template <class... Ts>
  void tell(const shard_actor& shard, int32_t priority, bool big, Ts&&... xs) {
    if (priority > 0) {
      caf::anon_send<caf::message_priority::high>(shard,
                                                  std::forward<Ts>(xs)...);
    } else if (run_shards && !big) {
      std::lock_guard<std::mutex> guard{mtx};
      held.emplace_back(caf::actor_cast<caf::actor>(shard),
                        caf::make_message(std::forward<Ts>(xs)...));
    } else {
      // What came before goes first (a large request does not overtake the
      // requests held in this pass: a shard promoted from backup answers a
      // request it already ran as it finds the slice then).
      if (run_shards)
        release_held(false);
      caf::anon_send(shard, std::forward<Ts>(xs)...);
    }
  }

  // Hands the held requests to their shards, in the order they came. On
  // the plane's thread (`here`), those to the shard of the first one run
  // it there if it is idle; the others go to their shards' mailboxes, so
  // that scheduler threads run several shards side by side (a server with
  // a shard per core). Otherwise they are only sent.
  void release_held(bool here) {
    std::vector<std::pair<caf::actor, caf::message>> now;
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (held.empty())
        return;
      now.swap(held);
    }
    const auto first = now.front().first;
    for (auto& [dest, msg] : now) {
      if (here && dest == first) {
        if (detail::send_and_run(nullptr, caf::make_message_id(), dest,
                                 std::move(msg)))
          if (auto counts = out.lock())
            counts->note_thread_run();
      } else
        caf::actor_cast<caf::abstract_actor*>(dest)->enqueue(
          caf::make_mailbox_element(nullptr, caf::make_message_id(), {},
                                    std::move(msg)),
          nullptr);
    }
  }

  // True if frame `x` may act as worker `worker`: its connection's hello
  // proved that worker's secret. Otherwise the request fails with
  // `unauthorized`.
  bool admits(const frame& x, uint32_t worker, uint64_t request) {
    if (x.identity == 0 || x.identity - 1 != worker) {
      sink->fail(reply_to(x), request,
                 make_error(errc::unauthorized,
                            "ucx: a request in worker " + std::to_string(worker)
                              + "'s name from a connection that did not "
                                "prove its secret"));
      return false;
    }
    seen(worker, x.from);
    return true;
  }

  void serve(frame& x) {
    auto h = decode(x.header);
    if (!h)
      return;
    // Requests and forwards read each byte of their body once (values,
    // ids, a forward's operations: copied out before they are checked;
    // values may be read where they lie); anything else is decoded in
    // several passes, so a body that lies in a peer's segment, which the
    // peer may still write, is copied first.
    if (h->kind != frame_kind::push && h->kind != frame_kind::push_pull
        && h->kind != frame_kind::pull && h->kind != frame_kind::batch
        && h->kind != frame_kind::rows_push && h->kind != frame_kind::rows_pull
        && h->kind != frame_kind::replicate)
      x.body.own();
    if (h->kind == frame_kind::reply || h->kind == frame_kind::failure) {
      // Answers to this server's forwards (from servers only).
      if (link && x.identity == server_identity)
        link->on_reply(x, *h);
      return;
    }
    auto from = reply_to(x);
    auto request = h->request;
    auto i = shards.find(h->shard);
    if (i == shards.end()) {
      sink->fail(from, request,
                 make_error(errc::bad_config, "ucx: no shard "
                                                + std::to_string(h->shard)
                                                + " on this server"));
      return;
    }
    auto& shard = i->second;
    auto bad_body = [&] {
      sink->fail(from, request,
                 make_error(errc::bad_config,
                            "ucx: a request body does not decode"));
    };
    plane_reply reply{sink, from, request, nullptr, {}};
    if (h->kind == frame_kind::replicate
        || h->kind == frame_kind::replicate_change) {
      if (x.identity != server_identity) {
        sink->fail(from, request,
                   make_error(errc::unauthorized,
                              "ucx: a forward from a connection that did not "
                              "prove it is a server"));
        return;
      }
      if (!deliver_forward(*sys, x, *h, shard, std::move(reply)))
        bad_body();
      return;
    }
    // A worker's values stay counted until the shard handled them.
    reply.hold = x.body.take_hold();
    switch (h->kind) {
      case frame_kind::push:
      case frame_kind::push_pull: {
        auto meta = decode_meta(x.header);
        if (!meta)
          return bad_body();
        std::optional<floats> values;
        auto in_place = meta->encoding.kind == codec::none
                          ? x.body.floats_in_place()
                          : shared_floats{};
        if (!in_place.empty() && in_place.size() == meta->count) {
          // Raw values in the worker's segment: the shard reads them there.
          values.emplace();
          reply.values = std::move(in_place);
        } else {
          values = values_of(*meta, x.body);
        }
        if (!values)
          return bad_body();
        if (!admits(x, meta->worker, request))
          return;
        auto big = large(meta->slice, meta->count);
        slice_push p{meta->slice, meta->worker, meta->seq, std::move(*values)};
        if (h->kind == frame_kind::push)
          tell(shard, h->priority, big, push_atom::value, std::move(p),
               std::move(reply));
        else
          tell(shard, h->priority, big, push_pull_atom::value, std::move(p),
               std::move(reply));
        return;
      }
      case frame_kind::pull: {
        auto meta = decode_meta(x.header);
        if (!meta || x.body.size() != 0)
          return bad_body();
        if (!admits(x, meta->worker, request))
          return;
        tell(shard, h->priority, large(meta->slice), pull_atom::value,
             slice_pull{meta->slice, meta->worker, meta->seq},
             std::move(reply));
        return;
      }
      case frame_kind::rows_push:
      case frame_kind::rows_pull: {
        auto meta = decode_meta(x.header);
        auto big = x.body.size() >= large_bytes;
        floats values;
        std::vector<uint64_t> rows;
        if (!meta || !decode_rows(*meta, x.body, values, rows))
          return bad_body();
        if (!admits(x, meta->worker, request))
          return;
        if (h->kind == frame_kind::rows_push)
          tell(shard, h->priority, big, push_atom::value,
               actorps::rows_push{meta->slice, meta->worker, meta->seq,
                                  std::move(rows), std::move(values)},
               std::move(reply));
        else
          tell(shard, h->priority, big, pull_atom::value,
               actorps::rows_pull{meta->slice, meta->worker, meta->seq,
                                  std::move(rows)},
               std::move(reply));
        return;
      }
      case frame_kind::batch: {
        // (The sender is checked before anything is sized by the batch: its
        // ids take 16 bytes a slice once unpacked, about 1 on the wire.)
        auto m = decode_batch_meta(x.header);
        if (!m)
          return bad_body();
        if (!admits(x, m->worker, request))
          return;
        auto big = x.body.size() + 16 * uint64_t{m->slices} >= large_bytes;
        auto b = decode_batch(*m, x.body);
        if (!b)
          return bad_body();
        tell(shard, h->priority, big, batch_atom::value, std::move(*b),
             std::move(reply));
        return;
      }
      default:
        return;
    }
  }
};

} // namespace

std::shared_ptr<reply_sink> make_plane_sink(caf::actor_system& sys,
                                            std::weak_ptr<plane> plane) {
  return std::make_shared<plane_sink>(sys, std::move(plane));
}

caf::actor spawn_ingress(caf::actor_system& sys,
                         std::shared_ptr<frame_queue> queue,
                         std::shared_ptr<plane> plane,
                         std::map<uint32_t, shard_actor> shards,
                         std::shared_ptr<plane_link> link, bool run_shards) {
  // The plane's handlers hold the queue, whose handler holds this: only
  // weak references back to the plane.
  auto state = std::make_shared<ingress>();
  state->sys = &sys;
  state->link = std::move(link);
  state->out = plane;
  state->shards = std::move(shards);
  state->sink = make_plane_sink(sys, plane);
  state->run_shards = run_shards && detail::can_run_here(sys);
  if (state->run_shards)
    queue->set_idle([state] { state->release_held(true); });
  queue->set_handler([state](frame& x) { state->serve(x); });
  // (Frames queued before the handler was set were served on this thread,
  // which runs no actor here: their requests are only sent.)
  state->release_held(false);
  return sys.spawn([state](caf::event_based_actor*) -> caf::behavior {
    return {
      // From the server's runner (this actor is not published).
      [state](node_down_atom, uint32_t worker_rank) {
        state->worker_down(worker_rank);
      },
    };
  });
}

} // namespace actorps::ucx
