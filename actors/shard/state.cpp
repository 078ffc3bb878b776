// SPDX-License-Identifier: BSD-3-Clause
// A shard's ordering of operations and updates (its sync rounds:
// rounds.cpp; its batches: batch.cpp; its row-sparse tables: tables.cpp).
#include "actors/shard/state.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/batching.hpp"
#include "core/float_pool.hpp"
#include "core/huge_pages.hpp"
#include "core/optimizer.hpp"
#include "core/rows.hpp"
#include "core/update_rule.hpp"
#include "messages/errors.hpp"

namespace actorps {

std::string slice_name(slice_id id) {
  return "slice " + std::to_string(key_of(id)) + "/"
         + std::to_string(part_of(id));
}

caf::error shard_state::check_worker(const char* op, slice_id id,
                                     uint32_t worker) const {
  if (worker >= cfg.num_workers)
    return make_error(errc::bad_config,
                      std::string{op} + ": worker " + std::to_string(worker)
                        + " out of range (shard " + std::to_string(cfg.index)
                        + " expects " + std::to_string(cfg.num_workers)
                        + " workers) on " + slice_name(id));
  return caf::none;
}

void shard_state::stash(const char* op, slice_state& s, slice_id id,
                        uint32_t worker, uint64_t seq, stashed_op x) {
  auto bytes = x.grad.size() * sizeof(float);
  if (auto err = take_room(worker, bytes,
                           std::string{op} + ": sequence number "
                             + std::to_string(seq) + " of worker "
                             + std::to_string(worker) + " on " + slice_name(id)
                             + " came ahead of an earlier one",
                           " (an earlier operation is lost or far behind)")) {
    x.target.fail(std::move(err));
    return;
  }
  auto [i, added] = s.stash.emplace(std::make_pair(worker, seq), stashed_op{});
  if (added) {
    i->second = std::move(x);
    return;
  }
  give_room(worker, bytes);
  x.target.fail(
    make_error(errc::bad_config, std::string{op} + ": sequence number "
                                   + std::to_string(seq) + " of worker "
                                   + std::to_string(worker) + " on "
                                   + slice_name(id) + " is already waiting"));
}

stashed_op shard_state::unstash(
  slice_state& s,
  std::map<std::pair<uint32_t, uint64_t>, stashed_op>::iterator i) {
  auto worker = i->first.first;
  auto op = std::move(i->second);
  s.stash.erase(i);
  give_room(worker, op.grad.size() * sizeof(float));
  return op;
}

slice_state* shard_state::find_in_map(slice_id id) {
  auto i = slices.find(id);
  return i == slices.end() ? nullptr : &i->second;
}

void shard_state::clear_slices() {
  first_parts.clear();
  slices.clear();
}

caf::error shard_state::not_initialized(const char* op, slice_id id) const {
  return make_error(errc::not_initialized, std::string{op} + ": "
                                             + slice_name(id)
                                             + " is not initialized on shard "
                                             + std::to_string(cfg.index));
}

caf::error shard_state::a_table(const char* op, slice_id id) const {
  return make_error(errc::shape_mismatch,
                    std::string{op} + ": " + slice_name(id)
                      + " is a row table (push_rows and pull_rows move its "
                        "rows)");
}

void shard_state::set_optimizer(const optimizer_config& x) {
  opt = x;
  replaces = core::replaces_value(opt);
  for (auto& kvp : slices) {
    auto& s = kvp.second;
    if (s.dim > 0) {
      // A table's state lies row by row.
      auto rows = s.value.size() / s.dim;
      core::assign_large(s.opt_state, rows * core::state_size(opt, s.dim),
                         0.0f);
      std::fill(s.row_steps.begin(), s.row_steps.end(), 0);
    } else {
      core::assign_large(s.opt_state, core::state_size(opt, s.value.size()),
                         0.0f);
    }
    s.step = 0;
  }
}

std::shared_ptr<const core::update_rule> shard_state::own_rule() const {
  if (!cfg.hooks || !cfg.hooks->has_rule())
    return nullptr;
  return cfg.hooks->rule();
}

void shard_state::apply(slice_state& s, const float* merged) {
  auto& w = s.value.mutate();
  // The rule runs outside any lock of the hooks (it may take Python's).
  if (auto rule = own_rule())
    (*rule)(cfg.hooks->key_name(key_of(s.id)), merged, w.data(), w.size());
  else
    core::apply_update(opt, w.data(), merged, s.opt_state.data(), w.size(),
                       s.step);
  ++s.step;
  ++stats.updates;
}

void shard_state::apply(slice_state& s, std::vector<float>&& merged) {
  if (!replaces || (cfg.hooks && cfg.hooks->has_rule())) {
    apply(s, merged.data());
    return;
  }
  // A short value nobody else holds is overwritten in place: cheaper than
  // a new shared buffer (many small keys).
  if (merged.size() <= core::min_shared_floats && s.value.unique()
      && s.value.size() == merged.size()) {
    std::copy(merged.begin(), merged.end(), s.value.mutate().begin());
    ++s.step;
    ++stats.updates;
    return;
  }
  s.value = shared_floats{std::move(merged)};
  ++s.step;
  ++stats.updates;
}

caf::error shard_state::check_reply(const char* op, uint64_t floats) const {
  // (Headers: the 1 MiB the job's bound allows beside its largest value.)
  constexpr uint64_t headers = uint64_t{1} << 20;
  auto cap = cfg.message_cap;
  if (cap == 0 || floats <= (cap - std::min(cap, headers)) / sizeof(float))
    return caf::none;
  return make_error(errc::bad_config,
                    std::string{op} + ": the answer would hold "
                      + std::to_string(floats)
                      + " floats, more than one message of this job carries ("
                      + std::to_string(cap >> 20) + " MiB)");
}

void shard_state::apply_rows(slice_state& s, const std::vector<uint64_t>& rows,
                             const float* g) {
  auto& w = s.value.mutate();
  if (auto rule = own_rule()) {
    // Row by row, as a lazy optimizer updates them.
    auto name = cfg.hooks->key_name(key_of(s.id));
    for (size_t i = 0; i < rows.size(); ++i)
      (*rule)(name, g + i * s.dim, w.data() + rows[i] * s.dim, s.dim);
    return;
  }
  core::apply_rows(opt, w.data(), s.opt_state.data(), s.row_steps.data(), s.dim,
                   rows, g);
}

caf::error shard_state::check_live(const char* op, uint32_t worker) const {
  if (live[worker])
    return caf::none;
  return make_error(errc::dead_node, std::string{op} + ": worker "
                                       + std::to_string(worker)
                                       + " left the job or was declared dead");
}

void shard_state::count_push(uint32_t worker, std::size_t n) {
  auto& t = traffic(worker);
  ++t.pushes;
  t.floats_pushed += n;
}

caf::error shard_state::do_push(slice_state& s, slice_id id, uint32_t worker,
                                const float* g, std::size_t n,
                                std::vector<float>* owned) {
  ++stats.pushes;
  // Checked in order, so the refused push still uses its sequence number.
  if (auto err = check_live("push", worker))
    return err;
  if (s.dim != 0)
    return a_table("push", id);
  if (n != s.value.size())
    return make_error(errc::shape_mismatch, "push: " + slice_name(id) + " has "
                                              + std::to_string(s.value.size())
                                              + " floats but the push has "
                                              + std::to_string(n));
  count_push(worker, n);
  if (!cfg.sync) {
    if (cfg.ssp())
      ++s.clocks[worker].pushes;
    if (owned != nullptr)
      apply(s, std::move(*owned));
    else
      apply(s, g);
    return caf::none;
  }
  auto round = s.clocks[worker].pushes++;
  auto open = s.rounds.find(round);
  auto& r = open != s.rounds.end() ? open->second : open_round(s, round);
  if (round == s.rounds_done && completes(r, worker)) {
    // The push that completes the next round is applied at once, without a
    // sum buffer of its own (one worker) or a new value (under "assign"):
    // advance_rounds then finds the round complete with nothing to add.
    r.add(worker);
    finish_round(s, r, g, owned);
    return caf::none;
  }
  charge_ahead(s, r, worker, round, n * sizeof(float));
  // (A round may count contributions of nothing, see start_from_clocks.)
  if (r.sum.empty()) {
    if (owned != nullptr)
      r.sum = std::move(*owned);
    else if (r.sum.capacity() >= n)
      r.sum.assign(g, g + n);
    else
      r.sum = core::copy_floats(g, n);
  } else {
    core::accumulate_into(r.sum.data(), g, n);
  }
  r.add(worker);
  return caf::none;
}

void shard_state::do_pull(slice_state& s, uint32_t worker, op_target& t) {
  ++stats.pulls;
  if (!t.table && s.dim != 0) {
    t.fail(a_table("pull", s.id));
    return;
  }
  if (t.table) {
    auto& rows = t.single().rows;
    auto err = check_rows("pull_rows", s, s.id, rows);
    if (!err)
      err = check_reply("pull_rows", rows.size() * s.dim);
    if (err) {
      t.fail(std::move(err));
      return;
    }
    t.single().dim = s.dim;
  }
  auto& w = traffic(worker);
  ++w.pulls;
  w.floats_pulled += t.table ? t.single().rows.size() * s.dim : s.value.size();
  // The round (sync) or the slowest live worker's clock (bounded
  // staleness) this pull needs.
  uint64_t need = 0;
  bool wait = false;
  if (cfg.sync) {
    need = s.clocks[worker].pushes;
    wait = s.rounds_done < need;
  } else if (cfg.ssp()) {
    auto clock = s.clocks[worker].pushes;
    auto bound = static_cast<uint64_t>(cfg.staleness);
    need = clock > bound ? clock - bound : 0;
    wait = slowest_clock(s) < need;
  }
  if (wait) {
    waiting_pull p{need, std::move(t), worker};
    // Counted with the worker's early operations (a pull holds no values
    // while it waits, but a worker must not pile up waiting pulls either).
    if (auto err = take_room(worker, waiting_cost(p),
                             "pull: worker " + std::to_string(worker)
                               + "'s pull of " + slice_name(s.id)
                               + " waits for a round")) {
      p.target.fail(std::move(err));
      return;
    }
    s.waiting.push_back(std::move(p));
    ++stats.waiting_pulls;
    if (cfg.ssp())
      s.pull_waiting[worker] = true;
    return;
  }
  t.pulled(s.value);
}

namespace {

// A push of at least this many values goes to the backup over the link
// before this shard applies it (both then apply it at once), not at the end
// of the handler.
constexpr std::size_t early_forward_floats = std::size_t{1} << 16;

} // namespace

void shard_state::run(slice_state& s, slice_id id, uint32_t worker,
                      uint64_t seq, const float* g, std::size_t n, op_target& t,
                      std::vector<float>* owned, const shared_floats* view) {
  // Pushes held ahead that the rounds this one completes release run once
  // it is done (a push_pull's pull still reads the clocks of its own push).
  ++running;
  run_op(s, id, worker, seq, g, n, t, owned, view);
  if (--running == 0 && release_pending)
    release_held();
}

void shard_state::run_op(slice_state& s, slice_id id, uint32_t worker,
                         uint64_t seq, const float* g, std::size_t n,
                         op_target& t, std::vector<float>* owned,
                         const shared_floats* view) {
  // The outbox's operation whose values are the slice's value after this
  // push (below), if any.
  std::optional<std::size_t> share;
  bool early = false;
  // Keeps `g` while a forward sent before the push is applied here may let
  // go of the values it took.
  shared_floats pinned;
  if (backup) {
    // The backup runs it too, before anyone hears of it.
    replica_op r;
    r.slice = id;
    r.worker = worker;
    r.seq = seq;
    r.kind = static_cast<uint8_t>(t.kind);
    r.table = t.table;
    if (t.kind != op_kind::pull) {
      if (t.table)
        r.rows = t.single().rows;
      // The pushed buffer goes to the backup when this shard would not keep
      // it (async, an update rule that reads the push): no copy then. A
      // view of the worker's segment goes from there: the worker's memory
      // is read twice, by the apply here and by the forward. (A worker that
      // breaks the segment's protocol and writes it meanwhile makes the
      // copies apply different values for its push: no more than it could
      // do by pushing them, except that they then differ. Floats only: no
      // length or offset is read twice.)
      // Over the link a large push leaves first (early, below): shared then.
      early = link_peer != 0 && n >= early_forward_floats;
      if (view != nullptr && !t.table) {
        r.shared = *view;
      } else if (owned != nullptr && !cfg.sync && (t.table || !replaces)) {
        if (early) {
          r.shared = shared_floats{std::move(*owned)};
          pinned = r.shared;
          g = pinned.data();
        } else {
          r.values.data = std::move(*owned);
          g = r.values.data.data();
        }
        owned = nullptr;
      } else if (!cfg.sync && !t.table && replaces) {
        // Async "assign": the value becomes the push, shared once applied.
        share = outbox.size();
      } else {
        r.values.data.assign(g, g + n);
      }
    }
    early = early && !share;
    outbox.push_back(std::move(r));
  }
  // (Also while the coordinator is told that the backup is lost.)
  if (holding()) {
    t.gate = gate;
    t.forward = ++forwarded;
  }
  if (early && forward_now)
    forward_now();
  if (t.kind != op_kind::pull) {
    auto err = t.table
                 ? do_push_rows(s, id, worker, g, n, t.single().rows, owned)
                 : do_push(s, id, worker, g, n, owned);
    // (Refused, it goes with no values, and the backup refuses it too.)
    if (share && !err && *share < outbox.size())
      outbox[*share].shared = s.value;
    if (err) {
      t.fail(std::move(err));
      return;
    }
    if (t.kind == op_kind::push) {
      t.pushed();
      advance_rounds(s);
      return;
    }
    advance_rounds(s);
  }
  do_pull(s, worker, t);
}

uint64_t shard_state::waiting_cost(const waiting_pull& p) {
  uint64_t cost = sizeof(waiting_pull);
  if (p.target.one)
    cost += sizeof(op_single) + p.target.one->rows.size() * sizeof(uint64_t);
  return cost;
}

void shard_state::stop_waiting(const waiting_pull& p) {
  give_room(p.worker, waiting_cost(p));
}

uint64_t shard_state::room_bound() const {
  return std::max(cfg.max_stash_bytes, cfg.message_cap);
}

caf::error shard_state::take_room(uint32_t worker, uint64_t bytes,
                                  const std::string& what, const char* why) {
  if (worker >= stashed_bytes.size())
    stashed_bytes.resize(worker + 1, 0);
  auto& held = stashed_bytes[worker];
  auto bound = room_bound();
  if (bytes > bound || held > bound - bytes)
    return make_error(errc::bad_config,
                      what
                        + ", and the worker's operations waiting here "
                          "would then hold "
                        + std::to_string((held + bytes) >> 20)
                        + " MiB, over the bound of "
                        + std::to_string(bound >> 20) + " MiB" + why);
  held += bytes;
  return caf::none;
}

void shard_state::give_room(uint32_t worker, uint64_t bytes) {
  if (worker < stashed_bytes.size())
    stashed_bytes[worker] -= std::min(stashed_bytes[worker], bytes);
}

void shard_state::drain(slice_state& s, slice_id id, uint32_t worker) {
  for (;;) {
    if (cfg.ssp() && s.pull_waiting[worker])
      return;
    auto i = s.stash.find({worker, s.clocks[worker].next_seq});
    if (i == s.stash.end())
      return;
    if (i->second.target.kind != op_kind::pull
        && holds_ahead(s, worker, i->second.grad.size() * sizeof(float)))
      return;
    auto op = unstash(s, i);
    auto seq = s.clocks[worker].next_seq++;
    run(s, id, worker, seq, op.grad.data(), op.grad.size(), op.target,
        &op.grad);
  }
}

void shard_state::submit(const char* op, slice_state* s, slice_id id,
                         uint32_t worker, uint64_t seq, const float* g,
                         std::size_t n, op_target& t, std::vector<float>* owned,
                         const shared_floats* view) {
  if (s == nullptr) {
    t.fail(not_initialized(op, id));
    return;
  }
  if (promoted && worker < cfg.num_workers
      && seq < s->clocks[worker].next_seq) {
    // It ran as a forward, which this shard may have passed on to a backup
    // of its own that did not run it yet: answered once it did.
    if (holding()) {
      t.gate = gate;
      t.forward = forwarded;
    }
    answer_again(*s, worker, t);
    return;
  }
  auto now = admit(op, *s, id, worker, seq,
                   t.kind == op_kind::pull ? 0 : n * sizeof(float));
  if (!now) {
    t.fail(std::move(now.error()));
    return;
  }
  if (*now) {
    run(*s, id, worker, seq, g, n, t, owned, view);
    drain(*s, id, worker);
    return;
  }
  stashed_op x;
  if (owned != nullptr)
    x.grad = std::move(*owned);
  else
    x.grad.assign(g, g + n);
  x.target = std::move(t);
  stash(op, *s, id, worker, seq, std::move(x));
}

void shard_state::submit(const char* op, slice_push& msg, op_target t) {
  auto& g = msg.grad.data;
  submit(op, find(msg.slice), msg.slice, msg.worker, msg.seq, g.data(),
         g.size(), t, &g);
}

void shard_state::answer_again(slice_state& s, uint32_t worker, op_target& t) {
  if (t.kind == op_kind::push)
    t.pushed();
  else
    do_pull(s, worker, t);
}

caf::expected<bool> shard_state::admit(const char* op, slice_state& s,
                                       slice_id id, uint32_t worker,
                                       uint64_t seq, uint64_t push_bytes) {
  if (auto err = check_worker(op, id, worker))
    return err;
  auto expected_seq = s.clocks[worker].next_seq;
  // A gap this large means lost messages or a restarted shard: waiting
  // for the missing operations would only pile up stashed copies.
  if (seq > expected_seq + max_seq_gap)
    return make_error(
      errc::bad_config,
      std::string{op} + ": sequence number " + std::to_string(seq)
        + " of worker " + std::to_string(worker) + " on " + slice_name(id)
        + " is too far ahead (next is " + std::to_string(expected_seq) + ")");
  if (seq < expected_seq)
    return make_error(
      errc::bad_config,
      std::string{op} + ": sequence number " + std::to_string(seq)
        + " of worker " + std::to_string(worker) + " on " + slice_name(id)
        + " was used before (next is " + std::to_string(expected_seq) + ")");
  // Held until every live worker told its clocks (start_from_clocks).
  if (awaiting_clocks)
    return false;
  if (seq == expected_seq && !(cfg.ssp() && s.pull_waiting[worker])
      && !holds_ahead(s, worker, push_bytes)) {
    ++s.clocks[worker].next_seq;
    return true;
  }
  ++stats.reordered;
  return false;
}

// -- handlers' work -----------------------------------------------------------

caf::error shard_state::init(slice_init& msg) {
  if (find(msg.slice) != nullptr)
    return make_error(errc::already_initialized,
                      "init: " + slice_name(msg.slice)
                        + " is already initialized on shard "
                        + std::to_string(cfg.index));
  if (msg.value.data.empty())
    return make_error(errc::shape_mismatch,
                      "init: " + slice_name(msg.slice) + " has an empty value");
  auto& s = add_slice(msg.slice, std::move(msg.value.data));
  s.opt_state.assign(core::state_size(opt, s.value.size()), 0.0f);
  return caf::none;
}

slice_state& shard_state::add_slice(slice_id id, std::vector<float> value) {
  auto& s = slices[id];
  // (Key ids past a bound that the slices held so far set are left to the
  // map: a key numbered far out grows no table. A shard of S holds about
  // k / S slices when key k arrives, so the bound allows 64 entries a slice
  // held: every key of a job of up to 64 shards, at most 512 bytes a slice.)
  auto key = key_of(id);
  if (part_of(id) == 0 && key < 64 * slices.size() + 4096) {
    if (key >= first_parts.size())
      first_parts.resize(key + 1, nullptr);
    first_parts[key] = &s;
  }
  s.value = shared_floats{std::move(value)};
  s.id = id;
  s.clocks.assign(cfg.num_workers, worker_clock{});
  s.pull_waiting.assign(cfg.num_workers, false);
  ++stats.slices;
  stats.floats_stored += s.value.size();
  return s;
}

} // namespace actorps
