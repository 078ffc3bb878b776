// SPDX-License-Identifier: BSD-3-Clause
// Saving and loading a shard's slices, the set of live workers, and dropping
// unfinished sync rounds.
#include "actors/shard/state.hpp"

#include <algorithm>
#include <limits>

#include "core/checkpoint.hpp"
#include "core/optimizer.hpp"
#include "messages/errors.hpp"

namespace actorps {

state_snapshot shard_state::save() const {
  state_snapshot snap;
  snap.optimizer = opt;
  snap.slices.reserve(slices.size());
  for (auto& [id, s] : slices) {
    slice_record rec;
    rec.key_id = key_of(id);
    rec.part = part_of(id);
    rec.step = s.step;
    rec.value.data = s.value.vec();
    rec.state.data = s.opt_state;
    rec.row_steps = s.row_steps;
    snap.slices.push_back(std::move(rec));
  }
  // Deterministic order: by slice id.
  std::sort(snap.slices.begin(), snap.slices.end(),
            [](const slice_record& a, const slice_record& b) {
              return std::make_pair(a.key_id, a.part)
                     < std::make_pair(b.key_id, b.part);
            });
  return snap;
}

caf::error shard_state::load(state_snapshot& snap) {
  if (auto err = to_error(core::validate(snap.optimizer)))
    return err;
  // Check everything before changing anything: loading is all-or-nothing.
  for (auto& rec : snap.slices) {
    auto id = make_slice_id(rec.key_id, rec.part);
    auto s = find(id);
    if (s == nullptr)
      return make_error(errc::unknown_key, "load_state: " + slice_name(id)
                                             + " is not initialized on shard "
                                             + std::to_string(cfg.index));
    auto n = s->value.size();
    if (rec.value.data.size() != n)
      return make_error(errc::checkpoint_mismatch,
                        "load_state: " + slice_name(id) + " has "
                          + std::to_string(n)
                          + " floats but the checkpoint has "
                          + std::to_string(rec.value.data.size()));
    auto want = s->dim > 0
                  ? n / s->dim * core::state_size(snap.optimizer, s->dim)
                  : core::state_size(snap.optimizer, n);
    if (!rec.row_steps.empty()
        && (s->dim == 0 || rec.row_steps.size() != n / s->dim))
      return make_error(errc::checkpoint_mismatch,
                        "load_state: " + slice_name(id) + " has "
                          + std::to_string(s->dim > 0 ? n / s->dim : 0)
                          + " rows but the checkpoint has "
                          + std::to_string(rec.row_steps.size())
                          + " row steps");
    if (rec.state.data.size() != want)
      return make_error(errc::checkpoint_mismatch,
                        "load_state: " + slice_name(id) + " needs "
                          + std::to_string(want) + " state floats for '"
                          + snap.optimizer.name + "' but the checkpoint has "
                          + std::to_string(rec.state.data.size()));
  }
  set_optimizer(snap.optimizer);
  for (auto& rec : snap.slices) {
    auto& s = *find(make_slice_id(rec.key_id, rec.part));
    s.value = shared_floats{std::move(rec.value.data)};
    s.opt_state = std::move(rec.state.data);
    s.step = rec.step;
    // Checkpoints from before row steps were saved: every row at 0.
    if (s.dim > 0)
      s.row_steps = rec.row_steps.empty()
                      ? std::vector<uint64_t>(s.value.size() / s.dim, 0)
                      : std::move(rec.row_steps);
  }
  return caf::none;
}

namespace {

// Drops the oldest sessions (lowest numbers: the coordinator counts up)
// so that one more fits.
template <class Map>
void make_room(Map& sessions) {
  while (sessions.size() >= shard_state::max_sessions)
    sessions.erase(sessions.begin());
}

caf::error no_session(const char* op, uint64_t session) {
  return make_error(errc::checkpoint_io,
                    std::string{op} + ": session " + std::to_string(session)
                      + " is not open on this shard (given up, or a newer "
                        "one took its place)");
}

// `bad_config` naming `op` and a worker rank past `num_workers`.
caf::error worker_out_of_range(const char* op, uint32_t worker,
                               uint32_t num_workers) {
  return make_error(errc::bad_config,
                    std::string{op} + ": worker " + std::to_string(worker)
                      + " out of range (shard expects "
                      + std::to_string(num_workers) + " workers)");
}

} // namespace

void shard_state::open_save(uint64_t session) {
  // A number seen before (a shard that outlived its coordinator) starts
  // afresh.
  saves.erase(session);
  make_room(saves);
  auto& x = saves[session];
  x.snap = save();
  for (auto& rec : x.snap.slices) {
    auto* s = find(make_slice_id(rec.key_id, rec.part));
    x.dims.push_back(s != nullptr ? s->dim : 0);
  }
}

caf::expected<save_piece> shard_state::save_next(uint64_t session,
                                                 uint64_t position) {
  if (position == save_cursor::give_up) {
    saves.erase(session);
    save_piece out;
    out.next.session = session;
    out.done = true;
    return out;
  }
  auto i = saves.find(session);
  if (i == saves.end())
    return no_session("save_optimizer_states", session);
  auto& x = i->second;
  if (position != x.served)
    return make_error(errc::checkpoint_io,
                      "save_optimizer_states: piece " + std::to_string(position)
                        + " asked, " + std::to_string(x.served) + " expected");
  save_piece out;
  out.optimizer = x.snap.optimizer;
  uint64_t used = 0;
  auto& recs = x.snap.slices;
  while (x.record < recs.size() && (used == 0 || used < save_piece_bytes)
         && out.records.size() < max_piece_records) {
    auto& rec = recs[x.record];
    if (rec.value.data.empty()) {
      ++x.record;
      continue;
    }
    auto room = save_piece_bytes - used;
    if (x.from == 0 && core::record_payload_size(rec) <= room) {
      // Whole: the session's copy goes out as it is (its memory with it).
      used += core::record_payload_size(rec);
      out.records.push_back(std::move(rec));
      ++x.record;
      continue;
    }
    slice_record piece;
    auto next = core::take_piece(rec, x.from, room, x.dims[x.record], piece);
    used += core::record_payload_size(piece);
    out.records.push_back(std::move(piece));
    if (next < rec.value.data.size()) {
      x.from = next;
      continue;
    }
    // Taken to its end: its memory goes now, not at the end of the save.
    rec = slice_record{};
    ++x.record;
    x.from = 0;
  }
  out.next.session = session;
  out.next.position = ++x.served;
  out.done = x.record == recs.size();
  if (out.done)
    saves.erase(i);
  return out;
}

caf::error shard_state::open_load(uint64_t session, const optimizer_config& opt,
                                  bool weights) {
  if (auto err = to_error(core::validate(opt)))
    return err;
  loads.erase(session);
  make_room(loads);
  loads[session].opt = opt;
  loads[session].weights = weights;
  return caf::none;
}

caf::error shard_state::load_pieces(uint64_t session,
                                    std::vector<slice_record>& pieces) {
  auto i = loads.find(session);
  if (i == loads.end())
    return no_session("load_optimizer_states", session);
  auto& x = i->second;
  for (auto& piece : pieces) {
    auto id = make_slice_id(piece.key_id, piece.part);
    auto* s = find(id);
    if (s == nullptr) {
      loads.erase(i);
      return make_error(errc::unknown_key, "load_state: " + slice_name(id)
                                             + " is not initialized on shard "
                                             + std::to_string(cfg.index));
    }
    auto j = x.slices.find(id);
    if (j == x.slices.end()) {
      j = x.slices.emplace(id, core::slice_assembly{}).first;
      // Sized by this shard's own slice, never by the piece.
      j->second.reset(s->value.size(), s->dim,
                      s->dim > 0 ? core::state_size(x.opt, s->dim)
                                 : core::state_size(x.opt, 1));
    }
    if (auto st = j->second.add(piece, slice_name(id)); !st.ok()) {
      loads.erase(i);
      return to_error(st);
    }
  }
  return caf::none;
}

caf::error shard_state::end_load(uint64_t session, bool commit) {
  auto i = loads.find(session);
  if (i == loads.end())
    return commit ? no_session("load_optimizer_states", session) : caf::none;
  auto x = std::move(i->second);
  loads.erase(i);
  if (!commit)
    return caf::none;
  for (auto& [id, a] : x.slices) {
    // (A backup that took a new state since the pieces came may not hold
    // the slice any more.)
    auto* s = find(id);
    if (s == nullptr)
      return make_error(errc::unknown_key, "load_state: " + slice_name(id)
                                             + " is no longer on shard "
                                             + std::to_string(cfg.index));
    if (!a.complete())
      return make_error(errc::checkpoint_mismatch,
                        "load_state: the checkpoint leaves "
                          + std::to_string(a.missing())
                          + (s->dim > 0 ? " rows" : " floats") + " of "
                          + slice_name(id) + " out");
  }
  set_optimizer(x.opt);
  for (auto& [id, a] : x.slices) {
    auto& s = *find(id);
    // load_optimizer_states leaves the weights as they are (MXNet).
    if (x.weights)
      s.value = shared_floats{std::move(a.value)};
    s.opt_state = std::move(a.state);
    s.step = a.step;
    if (s.dim > 0)
      s.row_steps = std::move(a.row_steps);
  }
  return caf::none;
}

void shard_state::clear_pending() {
  if (!cfg.sync)
    return;
  for (auto& kvp : slices) {
    auto& sl = kvp.second;
    for (auto& [number, r] : sl.rounds)
      settle(r);
    sl.rounds.clear();
    // Every worker is back at the first round not applied.
    for (auto& c : sl.clocks)
      c.pushes = sl.rounds_done;
    // Pulls that waited for a dropped round get the last applied value.
    release_waiting(sl, std::numeric_limits<uint64_t>::max());
  }
  // Pushes held ahead go into the rounds now current.
  if (!held_ahead.empty())
    release_held();
}

caf::error shard_state::set_live(const std::vector<uint32_t>& workers) {
  std::vector<bool> next(cfg.num_workers, false);
  for (auto w : workers) {
    if (w >= cfg.num_workers)
      return worker_out_of_range("workers", w, cfg.num_workers);
    next[w] = true;
  }
  for (auto& kvp : slices) {
    auto& sl = kvp.second;
    // A worker that comes back joins the current round, not a past one
    // (bounded staleness: the slowest clock of those live before).
    auto now = cfg.ssp() ? slowest_clock(sl) : sl.rounds_done;
    if (now == std::numeric_limits<uint64_t>::max())
      now = 0;
    for (uint32_t w = 0; w < cfg.num_workers; ++w) {
      if (!next[w] || live[w])
        continue;
      sl.clocks[w].pushes = std::max(sl.clocks[w].pushes, now);
      // A new process in the rank (a replacement) numbers its operations
      // from 0; what the dead one left here is dropped.
      sl.clocks[w].next_seq = 0;
      sl.pull_waiting[w] = false;
      for (auto i = sl.stash.begin(); i != sl.stash.end();) {
        auto next = std::next(i);
        if (i->first.first == w)
          unstash(sl, i);
        i = next;
      }
      held_ahead.erase({w, kvp.first});
      auto gone = [w](const waiting_pull& p) { return p.worker == w; };
      for (auto& p : sl.waiting)
        if (gone(p))
          stop_waiting(p);
      auto first = std::remove_if(sl.waiting.begin(), sl.waiting.end(), gone);
      stats.waiting_pulls -= static_cast<uint64_t>(sl.waiting.end() - first);
      sl.waiting.erase(first, sl.waiting.end());
    }
  }
  if (awaiting_clocks)
    for (uint32_t w = 0; w < cfg.num_workers; ++w)
      if (next[w] && !live[w] && !clocks_in[w]) {
        clocks_in[w] = true;
        clocks_rejoined[w] = true;
      }
  live = std::move(next);
  if (awaiting_clocks) {
    // (Perhaps the last one it waited for left.)
    start_from_clocks();
    return caf::none;
  }
  for (auto& kvp : slices)
    advance_rounds(kvp.second);
  return caf::none;
}

void shard_state::await_clocks() {
  if (!cfg.sync && !cfg.ssp())
    return;
  awaiting_clocks = true;
  clocks_in.assign(cfg.num_workers, false);
  clocks_rejoined.assign(cfg.num_workers, false);
  told_clocks.assign(cfg.num_workers, {});
}

caf::error
shard_state::take_clocks(uint32_t worker, const std::vector<uint64_t>& ids,
                         const std::vector<uint64_t>& pushes, bool fresh) {
  if (worker >= cfg.num_workers)
    return worker_out_of_range("clocks", worker, cfg.num_workers);
  // (dist_async, or started already: nothing to line up.)
  if (!awaiting_clocks || clocks_in[worker])
    return caf::none;
  clocks_in[worker] = true;
  caf::error err;
  if (ids.size() != pushes.size() || ids.size() > slices.size()) {
    err
      = make_error(errc::bad_config,
                   "clocks: " + std::to_string(ids.size()) + " slices and "
                     + std::to_string(pushes.size()) + " counts for a shard of "
                     + std::to_string(slices.size()) + " slices; worker "
                     + std::to_string(worker) + " joins where the others are");
    fresh = true;
  }
  if (fresh) {
    clocks_rejoined[worker] = true;
  } else {
    auto& mine = told_clocks[worker];
    for (size_t i = 0; i < ids.size(); ++i)
      if (find(ids[i]) != nullptr)
        mine[ids[i]] = pushes[i];
  }
  start_from_clocks();
  return err;
}

caf::expected<std::pair<std::vector<uint64_t>, std::vector<uint64_t>>>
shard_state::clocks_of(uint32_t worker) const {
  if (worker >= cfg.num_workers)
    return worker_out_of_range("clocks", worker, cfg.num_workers);
  if (awaiting_clocks)
    return make_error(errc::bad_config,
                      "clocks: shard " + std::to_string(cfg.index)
                        + " was restored and waits for the workers' clocks");
  std::pair<std::vector<uint64_t>, std::vector<uint64_t>> out;
  for (auto& [id, s] : slices) {
    if (s.clocks[worker].pushes == 0)
      continue;
    out.first.push_back(id);
    out.second.push_back(s.clocks[worker].pushes);
  }
  return out;
}

void shard_state::start_from_clocks() {
  if (!awaiting_clocks)
    return;
  for (uint32_t w = 0; w < cfg.num_workers; ++w)
    if (live[w] && !clocks_in[w])
      return;
  awaiting_clocks = false;
  auto told = [this](uint32_t w) { return live[w] && !clocks_rejoined[w]; };
  for (auto& [id, s] : slices) {
    auto clock = [&, id = id](uint32_t w) {
      auto i = told_clocks[w].find(id);
      return i == told_clocks[w].end() ? uint64_t{0} : i->second;
    };
    // Every round below the lowest clock was complete where it ran before:
    // the checkpoint stands in for those.
    auto lowest = std::numeric_limits<uint64_t>::max();
    for (uint32_t w = 0; w < cfg.num_workers; ++w)
      if (told(w))
        lowest = std::min(lowest, clock(w));
    if (lowest == std::numeric_limits<uint64_t>::max())
      lowest = 0;
    for (uint32_t w = 0; w < cfg.num_workers; ++w) {
      if (!told(w)) {
        s.clocks[w].pushes = std::max(s.clocks[w].pushes, lowest);
        continue;
      }
      // (A sync count far ahead of the others' is no real one: a few
      // bytes told must not open a round per slice for every count. A
      // bounded-staleness clock may lead by the bound.)
      auto lead = cfg.sync ? max_clock_lead : max_seq_gap;
      auto mine = std::min(clock(w), lowest + lead);
      s.clocks[w].pushes = mine;
      // Its pushes to the rounds still open were acknowledged and lost:
      // they count as contributions of nothing.
      if (cfg.sync)
        for (auto r = lowest; r < mine; ++r)
          s.rounds[r].add(w);
    }
    if (cfg.sync)
      s.rounds_done = lowest;
  }
  told_clocks.clear();
  clocks_in.clear();
  clocks_rejoined.clear();
  // What was held runs now, each worker's in its order.
  for (auto& [id, s] : slices) {
    for (uint32_t w = 0; w < cfg.num_workers; ++w)
      drain(s, id, w);
    advance_rounds(s);
  }
}

} // namespace actorps
