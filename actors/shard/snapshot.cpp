// SPDX-License-Identifier: BSD-3-Clause
// Saving and loading a shard's slices, the set of live workers, and dropping
// unfinished sync rounds.
#include "actors/shard/state.hpp"

#include <algorithm>
#include <limits>

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
    auto& s = slices[make_slice_id(rec.key_id, rec.part)];
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

void shard_state::clear_pending() {
  if (!cfg.sync)
    return;
  for (auto& kvp : slices) {
    auto& sl = kvp.second;
    sl.rounds.clear();
    // Every worker is back at the first round not applied.
    for (auto& n : sl.pushes_of)
      n = sl.rounds_done;
    // Pulls that waited for a dropped round get the last applied value.
    release_waiting(sl, std::numeric_limits<uint64_t>::max());
  }
}

caf::error shard_state::set_live(const std::vector<uint32_t>& workers) {
  std::vector<bool> next(cfg.num_workers, false);
  for (auto w : workers) {
    if (w >= cfg.num_workers)
      return make_error(errc::bad_config, "workers: worker " + std::to_string(w)
                                            + " out of range (shard expects "
                                            + std::to_string(cfg.num_workers)
                                            + " workers)");
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
      sl.pushes_of[w] = std::max(sl.pushes_of[w], now);
      // A new process in the rank (a replacement) numbers its operations
      // from 0; what the dead one left here is dropped.
      sl.next_seq[w] = 0;
      sl.pull_waiting[w] = false;
      for (auto i = sl.stash.begin(); i != sl.stash.end();)
        i = i->first.first == w ? sl.stash.erase(i) : std::next(i);
      auto gone = [w](const waiting_pull& p) { return p.worker == w; };
      auto first = std::remove_if(sl.waiting.begin(), sl.waiting.end(), gone);
      stats.waiting_pulls -= static_cast<uint64_t>(sl.waiting.end() - first);
      sl.waiting.erase(first, sl.waiting.end());
    }
  }
  live = std::move(next);
  for (auto& kvp : slices)
    advance_rounds(kvp.second);
  return caf::none;
}

} // namespace actorps
