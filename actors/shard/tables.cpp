// SPDX-License-Identifier: BSD-3-Clause
// A shard's row-sparse tables: making its part of a table, checking and
// applying pushes of rows.
#include "actors/shard/state.hpp"

#include <cstring>

#include "core/huge_pages.hpp"
#include "core/optimizer.hpp"
#include "core/rows.hpp"
#include "messages/errors.hpp"

namespace actorps {

// -- row-sparse tables (table_init, rows_push, rows_pull) ---------------------

namespace {

// Most floats one shard's part of a table may hold (64 GiB).
constexpr uint64_t max_table_floats = uint64_t{1} << 34;

// A float in [0, 1) from a 64-bit counter (splitmix64's finalizer): each
// value of a uniform table depends on its seed and place only.
float unit_float(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
}

} // namespace

caf::error shard_state::init(const table_init& msg) {
  auto name = slice_name(msg.slice);
  if (find(msg.slice) != nullptr)
    return make_error(errc::already_initialized,
                      "init: " + name + " is already initialized on shard "
                        + std::to_string(cfg.index));
  if (msg.rows == 0 || msg.dim == 0 || msg.rows > max_table_floats / msg.dim)
    return make_error(errc::shape_mismatch,
                      "init: table " + name + " of " + std::to_string(msg.rows)
                        + " rows of " + std::to_string(msg.dim)
                        + " floats (need at least one of each, at most 2^34 "
                          "floats per shard)");
  if (msg.rule > table_init::uniform)
    return make_error(errc::bad_config, "init: table " + name
                                          + ": unknown rule "
                                          + std::to_string(msg.rule));
  if (msg.rule == table_init::uniform && !(msg.low <= msg.high))
    return make_error(errc::bad_config,
                      "init: table " + name + ": uniform needs low <= high");
  auto v = core::large_vector(msg.rows * msg.dim, msg.low);
  if (msg.rule == table_init::uniform) {
    auto span = msg.high - msg.low;
    for (uint64_t i = 0; i < msg.rows; ++i) {
      auto row = msg.first + i * msg.stride;
      auto* out = v.data() + i * msg.dim;
      for (uint64_t j = 0; j < msg.dim; ++j)
        out[j] = msg.low
                 + span
                     * unit_float(
                       msg.seed ^ (row * msg.dim + j) * 0xd1342543de82ef95ULL);
    }
  }
  auto& s = add_slice(msg.slice, std::move(v));
  s.dim = msg.dim;
  core::assign_large(s.row_steps, msg.rows, uint64_t{0});
  core::assign_large(s.opt_state, msg.rows * core::state_size(opt, msg.dim),
                     0.0f);
  return caf::none;
}

caf::error shard_state::check_rows(const char* op, const slice_state& s,
                                   slice_id id,
                                   const std::vector<uint64_t>& rows) const {
  if (s.dim == 0)
    return make_error(errc::shape_mismatch, std::string{op} + ": "
                                              + slice_name(id)
                                              + " is not a row table");
  auto held = s.value.size() / s.dim;
  for (auto r : rows)
    if (r >= held)
      return make_error(errc::unknown_key,
                        std::string{op} + ": row " + std::to_string(r)
                          + " out of range (" + slice_name(id) + " holds "
                          + std::to_string(held) + " rows here)");
  return caf::none;
}

caf::error shard_state::do_push_rows(slice_state& s, slice_id id,
                                     uint32_t worker, const float* g,
                                     std::size_t n, std::vector<uint64_t>& rows,
                                     std::vector<float>* owned) {
  ++stats.pushes;
  if (auto err = check_live("push_rows", worker))
    return err;
  if (auto err = check_rows("push_rows", s, id, rows))
    return err;
  if (n != rows.size() * s.dim)
    return make_error(errc::shape_mismatch,
                      "push_rows: " + std::to_string(rows.size()) + " rows of "
                        + std::to_string(s.dim) + " floats but the push has "
                        + std::to_string(n));
  // A row named more than once: its rows added up, as MXNet sums a
  // row-sparse gradient's (every replica does the same with the same push).
  std::vector<float> summed;
  if (core::sum_repeats(rows, g, s.dim, summed)) {
    g = summed.data();
    owned = &summed;
  }
  auto& t = traffic(worker);
  ++t.pushes;
  t.floats_pushed += n;
  if (cfg.sync) {
    // The round sums each row over the workers that pushed it; the round
    // completes when every live worker pushed to this slice (no rows is a
    // push too), and only then are the rows updated, once each.
    auto round = s.clocks[worker].pushes++;
    auto& r = s.rounds[round];
    charge_ahead(s, r, worker, round,
                 n * sizeof(float) + rows.size() * sizeof(uint64_t));
    r.rows.add(rows, g, owned, s.dim);
    r.add(worker);
    return caf::none;
  }
  if (cfg.ssp())
    ++s.clocks[worker].pushes;
  // Nobody else holds a table's buffer: pulls get copies of their rows.
  apply_rows(s, rows, g);
  ++stats.updates;
  return caf::none;
}

} // namespace actorps
