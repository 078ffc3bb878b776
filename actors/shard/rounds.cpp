// SPDX-License-Identifier: BSD-3-Clause
// A shard's synchronous rounds and bounded staleness: when a round is
// complete, how its pushes become the value, and which waiting pulls that
// releases (the ordering of operations is in state.cpp).
#include "actors/shard/state.hpp"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "core/float_pool.hpp"
#include "core/optimizer.hpp"

namespace actorps {

bool shard_state::others_in(const round_sum& r, uint32_t except) const {
  for (uint32_t w = 0; w < cfg.num_workers; ++w)
    if (w != except && live[w] && !r.contributed(w))
      return false;
  return true;
}

bool shard_state::completes(const round_sum& r, uint32_t worker) const {
  return others_in(r, worker) && !r.contributed(worker);
}

void shard_state::finish_round(slice_state& s, round_sum& r, const float* g,
                               std::vector<float>* owned) {
  auto n = s.value.size();
  if (!replaces || own_rule()) {
    // An update rule reads the round's sum once: the push itself when it is
    // the round's only one.
    if (r.sum.empty()) {
      apply(s, g);
    } else {
      core::accumulate_into(r.sum.data(), g, n);
      apply(s, r.sum.data());
    }
  } else if (r.sum.empty() && owned != nullptr) {
    // A push of a buffer of its own becomes the value.
    apply(s, std::move(*owned));
  } else if (!s.value.unique()) {
    // Someone reads the old value (a reply on its way): a new one.
    if (r.sum.empty()) {
      apply(s, core::copy_floats(g, n));
    } else {
      core::accumulate_into(r.sum.data(), g, n);
      apply(s, std::move(r.sum));
    }
  } else {
    // "assign" into a value nobody else holds: written where it lies, so a
    // round allocates nothing and frees nothing.
    auto* w = s.value.mutate().data();
    if (r.sum.empty())
      std::copy(g, g + n, w);
    else
      core::sum_into(w, r.sum.data(), g, n);
    ++s.step;
    ++stats.updates;
  }
  // (A small sum keeps its buffer for the slice's spare entry.)
  if (r.sum.capacity() <= s.spare_floats)
    r.sum.clear();
  else
    core::give_floats(r.sum);
}

bool shard_state::round_complete(const round_sum& r) const {
  // A round with no live contributor at all has nothing to apply yet.
  return others_in(r, cfg.num_workers) && r.contributors > 0;
}

void shard_state::apply_round(slice_state& s, round_sum& r) {
  if (s.dim == 0) {
    // (Only contributions lost with a replaced server: nothing to add.)
    if (!r.sum.empty())
      apply(s, std::move(r.sum));
    return;
  }
  // Only the rows some worker pushed this round change (lazy update).
  if (!r.rows.rows().empty())
    apply_rows(s, r.rows.rows(), r.rows.values());
  ++stats.updates;
}

uint64_t shard_state::slowest_clock(const slice_state& s) const {
  auto lowest = std::numeric_limits<uint64_t>::max();
  for (uint32_t w = 0; w < cfg.num_workers; ++w)
    if (live[w])
      lowest = std::min(lowest, s.clocks[w].pushes);
  return lowest;
}

void shard_state::release_waiting(slice_state& s, uint64_t reached) {
  auto ready = [&](const waiting_pull& p) { return p.min_rounds <= reached; };
  // Bounded staleness only: whose held operations may run afterwards.
  std::vector<uint32_t> released;
  for (auto& p : s.waiting)
    if (ready(p)) {
      // The value holds whatever released the pull: its answer waits for
      // the backup to have run that too.
      if (holding()) {
        p.target.gate = gate;
        p.target.forward = std::max(p.target.forward, forwarded);
      }
      stop_waiting(p);
      p.target.pulled(s.value);
      if (cfg.ssp())
        released.push_back(p.worker);
    }
  auto first = std::remove_if(s.waiting.begin(), s.waiting.end(), ready);
  stats.waiting_pulls -= static_cast<uint64_t>(s.waiting.end() - first);
  s.waiting.erase(first, s.waiting.end());
  // The operations each released worker issued after its pull run now, in
  // order (they may wait again).
  for (auto w : released)
    s.pull_waiting[w] = false;
  for (auto w : released)
    drain(s, s.id, w);
}

void shard_state::advance_rounds(slice_state& s) {
  if (cfg.ssp()) {
    if (!s.waiting.empty())
      release_waiting(s, slowest_clock(s));
    return;
  }
  bool advanced = false;
  for (;;) {
    auto i = s.rounds.find(s.rounds_done);
    if (i == s.rounds.end() || !round_complete(i->second))
      break;
    apply_round(s, i->second);
    close_round(s, i);
    ++s.rounds_done;
    release_waiting(s, s.rounds_done);
    advanced = true;
  }
  if (advanced && !held_ahead.empty()) {
    if (running > 0)
      release_pending = true;
    else
      release_held();
  }
}

round_sum& shard_state::open_round(slice_state& s, uint64_t round) {
  if (s.spare.empty())
    return s.rounds[round];
  s.spare.key() = round;
  auto placed = s.rounds.insert(std::move(s.spare));
  // (A round already open stays as it was; the spare is dropped then.)
  return placed.position->second;
}

void shard_state::close_round(slice_state& s,
                              std::map<uint64_t, round_sum>::iterator i) {
  auto& r = i->second;
  settle(r);
  if (s.dim != 0 || !s.spare.empty() || s.value.size() > s.spare_floats
      || r.sum.capacity() > s.spare_floats || !r.high.empty()) {
    s.rounds.erase(i);
    return;
  }
  r.sum.clear();
  r.low = 0;
  r.contributors = 0;
  s.spare = s.rounds.extract(i);
}

bool shard_state::holds_ahead(const slice_state& s, uint32_t worker,
                              uint64_t bytes) {
  // (The current round always takes a push: the others never wait for
  // this one.)
  if (!cfg.sync || bytes == 0 || worker >= ahead_bytes.size()
      || s.clocks[worker].pushes <= s.rounds_done)
    return false;
  auto bound = room_bound();
  auto held = ahead_bytes[worker];
  if (held <= bound && bytes <= bound - held)
    return false;
  held_ahead.emplace(worker, s.id);
  return true;
}

void shard_state::charge_ahead(const slice_state& s, round_sum& r,
                               uint32_t worker, uint64_t round,
                               uint64_t bytes) {
  if (round <= s.rounds_done || worker >= ahead_bytes.size() || bytes == 0)
    return;
  r.charges.emplace_back(worker, bytes);
  ahead_bytes[worker] += bytes;
}

void shard_state::settle(round_sum& r) {
  for (auto& [worker, bytes] : r.charges)
    if (worker < ahead_bytes.size())
      ahead_bytes[worker] -= std::min(ahead_bytes[worker], bytes);
  r.charges.clear();
}

void shard_state::release_held() {
  // (A push run here may complete rounds that release more: the outer
  // call goes round again instead of iterating the set being changed.)
  if (releasing) {
    release_again = true;
    return;
  }
  releasing = true;
  do {
    release_again = false;
    release_pending = false;
    auto held = std::move(held_ahead);
    held_ahead.clear();
    for (auto& [worker, id] : held) {
      auto* s = find(id);
      if (s == nullptr)
        continue;
      // drain holds it again (held_ahead) if it must still wait.
      drain(*s, id, worker);
    }
  } while (release_again);
  releasing = false;
}

} // namespace actorps
