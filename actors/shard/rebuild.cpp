// SPDX-License-Identifier: BSD-3-Clause
// A rebuilt replica: a primary's whole state, cut into parts for a backup
// paired with it after it began to serve, and the backup's side that takes
// those parts over (shard.hpp, "Replicas").
#include "actors/shard/state.hpp"

#include <algorithm>
#include <cstring>

#include "core/huge_pages.hpp"
#include "core/optimizer.hpp"
#include "messages/errors.hpp"

namespace actorps {

namespace {

// Most floats (row steps count as two) in one part of a state: a part may
// carry more only when one slice's open rounds alone are larger (about one
// push of that slice per round).
constexpr uint64_t part_floats = uint64_t{1} << 24;

// Largest slice a state may declare, in floats (as a table's bound).
constexpr uint64_t max_state_floats = uint64_t{1} << 34;

caf::error bad_state(const shard_config& cfg, const std::string& what) {
  return make_error(errc::bad_config, "replica_state: shard "
                                        + std::to_string(cfg.index) + ": "
                                        + what);
}

// Cuts `n` values read by `copy(offset, count, into)` into pieces of at
// most the room left in the current part, opening new parts as needed.
template <class Copy>
void add_pieces(std::vector<replica_state>& parts, uint64_t& used, slice_id id,
                uint8_t part, uint64_t n, uint64_t weight, Copy copy) {
  uint64_t at = 0;
  while (at < n) {
    if (used >= part_floats) {
      parts.emplace_back();
      used = 0;
    }
    auto count = std::min(n - at, (part_floats - used) / weight + 1);
    replica_piece p;
    p.slice = id;
    p.part = part;
    p.offset = at;
    copy(at, count, p);
    parts.back().pieces.push_back(std::move(p));
    used += count * weight;
    at += count;
  }
}

} // namespace

std::vector<replica_state> shard_state::state_parts() const {
  std::vector<replica_state> parts(1);
  parts.front().first = true;
  parts.front().optimizer = opt;
  for (uint32_t w = 0; w < live.size(); ++w)
    if (live[w])
      parts.front().live.push_back(w);
  uint64_t used = 0;
  // In slice id order: the same state cuts the same way.
  std::vector<slice_id> ids;
  for (auto& kvp : slices)
    ids.push_back(kvp.first);
  std::sort(ids.begin(), ids.end());
  for (auto id : ids) {
    auto& s = slices.at(id);
    replica_slice head;
    head.slice = id;
    head.dim = s.dim;
    head.value_floats = s.value.size();
    head.state_floats = s.opt_state.size();
    head.step = s.step;
    for (auto& c : s.clocks) {
      head.next_seq.push_back(c.next_seq);
      head.pushes_of.push_back(c.pushes);
    }
    head.rounds_done = s.rounds_done;
    uint64_t weight = 0;
    for (auto& [number, r] : s.rounds) {
      replica_round x;
      x.number = number;
      for (uint32_t w = 0; w < cfg.num_workers; ++w)
        if (r.contributed(w))
          x.contributors.push_back(w);
      if (s.dim > 0) {
        x.rows = r.rows.rows();
        x.sum.data.assign(r.rows.values(),
                          r.rows.values() + x.rows.size() * s.dim);
      } else {
        x.sum.data = r.sum;
      }
      weight += x.sum.data.size() + 2 * x.rows.size();
      head.rounds.push_back(std::move(x));
    }
    if (used > 0 && used + weight > part_floats) {
      parts.emplace_back();
      used = 0;
    }
    parts.back().slices.push_back(std::move(head));
    used += weight + 1;
    add_pieces(parts, used, id, 0, s.value.size(), 1,
               [&](uint64_t at, uint64_t n, replica_piece& p) {
                 p.data.data.assign(s.value.data() + at,
                                    s.value.data() + at + n);
               });
    add_pieces(parts, used, id, 1, s.opt_state.size(), 1,
               [&](uint64_t at, uint64_t n, replica_piece& p) {
                 p.data.data.assign(s.opt_state.begin() + at,
                                    s.opt_state.begin() + at + n);
               });
    add_pieces(parts, used, id, 2, s.row_steps.size(), 2,
               [&](uint64_t at, uint64_t n, replica_piece& p) {
                 p.steps.assign(s.row_steps.begin() + at,
                                s.row_steps.begin() + at + n);
               });
  }
  parts.back().last = true;
  return parts;
}

caf::error shard_state::take_state(replica_state& x) {
  if (!standby())
    return bad_state(cfg, "takes a state only as a backup");
  if (x.first) {
    if (auto err = to_error(core::validate(x.optimizer)))
      return err;
    std::vector<bool> next(cfg.num_workers, false);
    for (auto w : x.live) {
      if (w >= cfg.num_workers)
        return bad_state(cfg, "worker " + std::to_string(w) + " out of range");
      next[w] = true;
    }
    // Whatever this backup held before is replaced.
    clear_slices();
    std::fill(stashed_bytes.begin(), stashed_bytes.end(), 0);
    std::fill(ahead_bytes.begin(), ahead_bytes.end(), 0);
    held_ahead.clear();
    stats.slices = 0;
    stats.floats_stored = 0;
    opt = x.optimizer;
    replaces = core::replaces_value(opt);
    live = std::move(next);
    rebuilding = true;
  } else if (!rebuilding) {
    return bad_state(cfg, "a part came before the first");
  }
  // Every slice is checked before it is added (once: a slice named twice
  // in one part would keep the rounds checked against the first's size).
  std::set<slice_id> seen;
  for (auto& h : x.slices) {
    auto name = slice_name(h.slice);
    if (slices.count(h.slice) > 0 || !seen.insert(h.slice).second)
      return bad_state(cfg, name + " came twice");
    if (h.value_floats == 0 || h.value_floats > max_state_floats
        || (h.dim > 0 && h.value_floats % h.dim != 0))
      return bad_state(cfg, name + ": bad size");
    auto want = h.dim > 0
                  ? h.value_floats / h.dim * core::state_size(opt, h.dim)
                  : core::state_size(opt, h.value_floats);
    if (h.state_floats != want)
      return bad_state(cfg, name + ": " + std::to_string(h.state_floats)
                              + " optimizer state floats, not "
                              + std::to_string(want));
    if (h.next_seq.size() != cfg.num_workers
        || h.pushes_of.size() != cfg.num_workers)
      return bad_state(cfg, name + ": not one sequence number per worker");
    for (auto& r : h.rounds) {
      for (auto w : r.contributors)
        if (w >= cfg.num_workers)
          return bad_state(cfg, name + ": a round names worker "
                                  + std::to_string(w));
      // (A dense round may hold only contributions of nothing, see
      // start_from_clocks: no sum yet.)
      if (h.dim == 0
            ? !r.rows.empty()
                || (r.sum.data.size() != h.value_floats && !r.sum.data.empty())
            : r.sum.data.size() != r.rows.size() * h.dim)
        return bad_state(cfg, name + ": a round of the wrong size");
      auto rows = h.dim > 0 ? h.value_floats / h.dim : 0;
      for (auto row : r.rows)
        if (row >= rows)
          return bad_state(cfg,
                           name + ": a round names row " + std::to_string(row));
    }
  }
  for (auto& h : x.slices) {
    auto& s = add_slice(h.slice, core::large_vector(h.value_floats, 0.0f));
    s.dim = h.dim;
    core::assign_large(s.opt_state, h.state_floats, 0.0f);
    if (h.dim > 0)
      core::assign_large(s.row_steps, h.value_floats / h.dim, uint64_t{0});
    s.step = h.step;
    for (uint32_t w = 0; w < cfg.num_workers; ++w)
      s.clocks[w] = worker_clock{h.next_seq[w], h.pushes_of[w]};
    s.rounds_done = h.rounds_done;
    for (auto& r : h.rounds) {
      auto& sum = s.rounds[r.number];
      for (auto w : r.contributors)
        if (!sum.contributed(w))
          sum.add(w);
      if (h.dim > 0)
        sum.rows.add(r.rows, r.sum.data.data(), &r.sum.data, h.dim);
      else
        sum.sum = std::move(r.sum.data);
    }
  }
  for (auto& p : x.pieces) {
    auto s = find(p.slice);
    auto n = p.part == 2 ? p.steps.size() : p.data.data.size();
    auto room = s == nullptr  ? 0
                : p.part == 0 ? s->value.size()
                : p.part == 1 ? s->opt_state.size()
                : p.part == 2 ? s->row_steps.size()
                              : 0;
    if (s == nullptr || p.offset > room || n > room - p.offset)
      return bad_state(cfg, "a piece outside " + slice_name(p.slice));
    if (p.part == 0)
      std::memcpy(s->value.mutate().data() + p.offset, p.data.data.data(),
                  n * sizeof(float));
    else if (p.part == 1)
      std::memcpy(s->opt_state.data() + p.offset, p.data.data.data(),
                  n * sizeof(float));
    else
      std::copy(p.steps.begin(), p.steps.end(),
                s->row_steps.begin() + static_cast<std::ptrdiff_t>(p.offset));
  }
  if (x.last)
    rebuilding = false;
  return caf::none;
}

} // namespace actorps
