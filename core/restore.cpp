// SPDX-License-Identifier: BSD-3-Clause
#include "core/restore.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "core/huge_pages.hpp"
#include "core/optimizer.hpp"
#include "core/rows.hpp"

namespace actorps::core {

namespace {

// Appends floats [from, from + k) of each of the `blocks` state blocks of a
// dense slice of `n` floats (block b is [b * n, (b + 1) * n)): the state
// of that range of the slice, block after block.
void append_blocks(const std::vector<float>& state, uint64_t n,
                   std::size_t blocks, uint64_t from, uint64_t k,
                   std::vector<float>& out) {
  out.reserve(out.size() + blocks * k);
  for (std::size_t b = 0; b < blocks; ++b) {
    auto s = state.begin() + static_cast<std::ptrdiff_t>(b * n + from);
    out.insert(out.end(), s, s + static_cast<std::ptrdiff_t>(k));
  }
}

} // namespace

status reslice(const std::vector<const slice_record*>& saved, uint64_t size,
               const std::vector<slice_range>& target, std::size_t per_float,
               std::vector<slice_record>& out) {
  auto mismatch = [&](const std::string& why) {
    auto key = saved.empty() ? std::string{"?"} : saved.front()->key;
    return status{errc::checkpoint_mismatch,
                  "load_state: key '" + key + "': " + why};
  };
  if (saved.empty())
    return mismatch("no saved slices");
  auto order = saved;
  std::sort(order.begin(), order.end(),
            [](const slice_record* a, const slice_record* b) {
              return a->offset < b->offset;
            });
  uint64_t next = 0;
  for (auto* rec : order) {
    auto n = static_cast<uint64_t>(rec->value.data.size());
    if (rec->offset != next)
      return mismatch(
        "the saved slices "
        + std::string{rec->offset < next ? "overlap" : "leave a gap"}
        + " at float " + std::to_string(rec->offset));
    if (rec->state.data.size() != per_float * n)
      return mismatch("saved part " + std::to_string(rec->part) + " has "
                      + std::to_string(rec->state.data.size())
                      + " state floats, expected "
                      + std::to_string(per_float * n));
    next += n;
  }
  if (next != size)
    return mismatch("the checkpoint holds " + std::to_string(next)
                    + " floats, the key here " + std::to_string(size));
  // Where each float of the key sits: saved slice and index in it.
  std::vector<slice_record> result;
  result.reserve(target.size());
  for (auto& t : target) {
    std::size_t src = 0;
    slice_record rec;
    rec.key_id = order.front()->key_id;
    rec.key = order.front()->key;
    rec.part = t.part;
    rec.offset = t.offset;
    bool first = true;
    rec.value.data.reserve(t.length);
    rec.state.data.resize(per_float * t.length);
    uint64_t at = t.offset;
    while (at < t.offset + t.length) {
      while (src < order.size()
             && order[src]->offset + order[src]->value.data.size() <= at)
        ++src;
      if (src == order.size())
        return mismatch("slice " + std::to_string(t.part)
                        + " lies outside the saved floats");
      auto* from = order[src];
      // A slice cut from several saved ones needs one step for all of them.
      if (first)
        rec.step = from->step;
      else if (from->step != rec.step)
        return mismatch("slice " + std::to_string(t.part)
                        + " would join saved slices that saw different "
                          "numbers of updates ("
                        + std::to_string(rec.step) + " and "
                        + std::to_string(from->step)
                        + "); load it into a store sliced as when it was "
                          "saved");
      first = false;
      auto n_from = from->value.data.size();
      auto i = at - from->offset;
      auto k = std::min<uint64_t>(n_from - i, t.offset + t.length - at);
      auto v = from->value.data.begin() + static_cast<std::ptrdiff_t>(i);
      rec.value.data.insert(rec.value.data.end(), v,
                            v + static_cast<std::ptrdiff_t>(k));
      // State block b of a slice of n floats is [b * n, (b + 1) * n).
      for (std::size_t b = 0; b < per_float; ++b)
        std::copy_n(
          from->state.data.begin()
            + static_cast<std::ptrdiff_t>(b * n_from + i),
          k,
          rec.state.data.begin()
            + static_cast<std::ptrdiff_t>(b * t.length + (at - t.offset)));
      at += k;
    }
    result.push_back(std::move(rec));
  }
  out = std::move(result);
  return {};
}

status
split_snapshot(const state_snapshot& snap, uint32_t shards,
               const std::function<const key_info*(const std::string&)>& find,
               std::vector<state_snapshot>& out) {
  std::vector<state_snapshot> per_shard(shards);
  for (auto& part : per_shard)
    part.optimizer = snap.optimizer;
  std::map<std::string, std::vector<const slice_record*>> by_key;
  for (auto& rec : snap.slices)
    by_key[rec.key].push_back(&rec);
  auto per_float = state_size(snap.optimizer, 1);
  for (auto& [name, saved] : by_key) {
    auto* info = find(name);
    if (info == nullptr)
      return {errc::unknown_key, "load_state: key '" + name
                                   + "' of the checkpoint is not initialized "
                                     "in this store"};
    std::vector<slice_record> records;
    // A table's rows go back where this store keeps them, whatever number
    // of shards saved them.
    auto res = info->dim > 0
                 ? reslice_rows(saved,
                                row_layout{info->shape[0], info->dim, shards},
                                per_float * info->dim, records)
                 : reslice(saved, info->size, info->slices, per_float, records);
    if (!res.ok())
      return res;
    for (auto& rec : records) {
      rec.key_id = info->id;
      per_shard[info->slices[rec.part].shard].slices.push_back(std::move(rec));
    }
  }
  out = std::move(per_shard);
  return {};
}

bool shape_fits(const slice_record& rec, uint64_t dim) noexcept {
  auto n = static_cast<uint64_t>(rec.value.data.size());
  auto unit = dim > 0 ? dim : 1;
  if (n % unit != 0)
    return false;
  auto units = n / unit;
  if (units == 0)
    return rec.state.data.empty() && rec.row_steps.empty();
  if (rec.state.data.size() % units != 0)
    return false;
  if (dim == 0)
    return rec.row_steps.empty();
  return rec.row_steps.empty() || rec.row_steps.size() == units;
}

uint64_t take_piece(const slice_record& whole, uint64_t from, uint64_t budget,
                    uint64_t dim, slice_record& out) {
  auto n = static_cast<uint64_t>(whole.value.data.size());
  auto unit = dim > 0 ? dim : 1;
  auto units = n / unit;
  auto state_per = units > 0 ? whole.state.data.size() / units : 0;
  auto steps = whole.row_steps.empty() ? 0 : 8;
  // Bytes one float (one row) takes with its state and step.
  uint64_t unit_bytes = dim > 0 ? 4 * dim + 4 * state_per + steps
                                : 4 + 4 * state_per;
  auto first_unit = from / unit;
  if (first_unit >= units)
    return n; // nothing left (or no whole row): the caller checked shapes
  auto k = std::max<uint64_t>(1, budget / unit_bytes);
  k = std::min(k, units - first_unit);
  out = slice_record{};
  out.key_id = whole.key_id;
  out.key = whole.key;
  out.part = whole.part;
  out.offset = whole.offset;
  out.step = whole.step;
  out.parts = whole.parts;
  bool is_whole = first_unit == 0 && k == units;
  out.first = is_whole ? 0 : first_unit * unit;
  out.total = is_whole ? 0 : n;
  auto v = whole.value.data.begin();
  out.value.data.assign(
    v + static_cast<std::ptrdiff_t>(first_unit * unit),
    v + static_cast<std::ptrdiff_t>((first_unit + k) * unit));
  auto s = whole.state.data.begin();
  if (dim > 0) {
    out.state.data.assign(
      s + static_cast<std::ptrdiff_t>(first_unit * state_per),
      s + static_cast<std::ptrdiff_t>((first_unit + k) * state_per));
    if (!whole.row_steps.empty())
      out.row_steps.assign(
        whole.row_steps.begin() + static_cast<std::ptrdiff_t>(first_unit),
        whole.row_steps.begin() + static_cast<std::ptrdiff_t>(first_unit + k));
  } else {
    append_blocks(whole.state.data, n, state_per, first_unit, k,
                  out.state.data);
  }
  return (first_unit + k) * unit;
}

status cut_piece(const slice_record& saved, const key_info& info,
                 uint32_t shards, std::size_t per_float,
                 std::vector<std::pair<uint32_t, slice_record>>& out) {
  auto mismatch = [&](const std::string& why) {
    return status{errc::checkpoint_mismatch,
                  "load_state: key '" + saved.key + "': " + why};
  };
  auto n = static_cast<uint64_t>(saved.value.data.size());
  auto total = saved.slice_floats();
  if (saved.first > total || n > total - saved.first)
    return mismatch("a saved piece lies outside its slice");
  std::vector<std::pair<uint32_t, slice_record>> result;
  if (info.dim == 0) {
    if (saved.state.data.size() != per_float * n)
      return mismatch("saved part " + std::to_string(saved.part) + " has "
                      + std::to_string(saved.state.data.size())
                      + " state floats, expected "
                      + std::to_string(per_float * n));
    if (saved.offset > info.size || saved.first > info.size - saved.offset)
      return mismatch("a saved piece starts past the key's "
                      + std::to_string(info.size) + " floats");
    auto start = saved.offset + saved.first;
    if (n > info.size - start)
      return mismatch("the checkpoint holds floats up to "
                      + std::to_string(saved.offset + total) + ", the key here "
                      + std::to_string(info.size));
    for (auto& t : info.slices) {
      auto lo = std::max(start, t.offset);
      auto hi = std::min(start + n, t.offset + t.length);
      if (lo >= hi)
        continue;
      slice_record piece;
      piece.key_id = info.id;
      piece.key = info.name;
      piece.part = t.part;
      piece.offset = t.offset;
      piece.step = saved.step;
      piece.first = lo - t.offset;
      piece.total = t.length;
      auto v = saved.value.data.begin()
               + static_cast<std::ptrdiff_t>(lo - start);
      piece.value.data.assign(v, v + static_cast<std::ptrdiff_t>(hi - lo));
      append_blocks(saved.state.data, n, per_float, lo - start, hi - lo,
                    piece.state.data);
      result.emplace_back(t.shard, std::move(piece));
    }
  } else {
    auto dim = info.dim;
    auto rows = info.shape.empty() ? 0 : info.shape[0];
    if (saved.parts == 0)
      return mismatch("the checkpoint does not say over how many parts the "
                      "table was saved");
    row_layout old{rows, dim, saved.parts};
    if (saved.parts > rows || saved.part >= saved.parts)
      return mismatch("saved part " + std::to_string(saved.part) + " of "
                      + std::to_string(saved.parts) + " for "
                      + std::to_string(rows) + " rows");
    auto rows_here = old.rows_on(saved.part);
    auto what = "saved part " + std::to_string(saved.part) + " ";
    if (total != rows_here * dim)
      return mismatch(
        what + "has " + std::to_string(total) + " floats, the table here needs "
        + std::to_string(rows_here * dim) + " (" + std::to_string(rows_here)
        + " rows of " + std::to_string(dim) + ")");
    if (saved.first % dim != 0 || n % dim != 0)
      return mismatch(what + "holds part of a row");
    auto a = saved.first / dim;
    auto m = n / dim;
    auto per_row = per_float * dim;
    if (saved.state.data.size() != m * per_row)
      return mismatch(what + "has " + std::to_string(saved.state.data.size())
                      + " state floats, expected "
                      + std::to_string(m * per_row));
    if (!saved.row_steps.empty() && saved.row_steps.size() != m)
      return mismatch(what + "has " + std::to_string(saved.row_steps.size())
                      + " row steps for " + std::to_string(m) + " rows");
    row_layout now{rows, dim, shards};
    auto here_parts = static_cast<uint32_t>(info.slices.size());
    std::vector<slice_record> by_part(here_parts);
    for (uint32_t t = 0; t < here_parts; ++t) {
      auto& piece = by_part[t];
      piece.key_id = info.id;
      piece.key = info.name;
      piece.part = t;
      piece.offset = info.slices[t].offset;
      piece.step = saved.step;
      piece.total = now.rows_on(t) * dim;
    }
    bool same = saved.parts == shards;
    for (uint64_t i = 0; i < m; ++i) {
      auto row = (a + i) * saved.parts + saved.part;
      auto t = now.shard_of(row);
      if (t >= here_parts)
        return mismatch("row " + std::to_string(row) + " has no slice here");
      auto& piece = by_part[t];
      if (same) {
        if (piece.value.data.empty())
          piece.first = now.local_of(row) * dim;
      } else {
        piece.rows.push_back(now.local_of(row));
      }
      auto v = saved.value.data.begin() + static_cast<std::ptrdiff_t>(i * dim);
      piece.value.data.insert(piece.value.data.end(), v,
                              v + static_cast<std::ptrdiff_t>(dim));
      auto s = saved.state.data.begin()
               + static_cast<std::ptrdiff_t>(i * per_row);
      piece.state.data.insert(piece.state.data.end(), s,
                              s + static_cast<std::ptrdiff_t>(per_row));
      if (!saved.row_steps.empty())
        piece.row_steps.push_back(saved.row_steps[i]);
    }
    for (uint32_t t = 0; t < here_parts; ++t)
      if (!by_part[t].value.data.empty())
        result.emplace_back(info.slices[t].shard, std::move(by_part[t]));
  }
  for (auto& x : result)
    out.push_back(std::move(x));
  return {};
}

void slice_assembly::reset(uint64_t length, uint64_t dim,
                           std::size_t state_per) {
  length_ = length;
  dim_ = dim;
  per_ = state_per;
  units_ = dim > 0 ? length / dim : length;
  value.clear();
  state.clear();
  row_steps.clear();
  have_.assign(dim > 0 ? units_ : 0, false);
  ranges_.clear();
  have_count_ = 0;
  step = 0;
  stepped_ = false;
}

void slice_assembly::allocate() {
  if (value.size() == length_)
    return;
  assign_large(value, length_, 0.0f);
  assign_large(state, per_ * units_, 0.0f);
  assign_large(row_steps, dim_ > 0 ? units_ : 0, uint64_t{0});
}

status slice_assembly::add(slice_record& piece, const std::string& name) {
  auto mismatch = [&](const std::string& why) {
    return status{errc::checkpoint_mismatch,
                  "load_state: " + name + ": " + why};
  };
  auto n = static_cast<uint64_t>(piece.value.data.size());
  if (piece.slice_floats() != length_)
    return mismatch("the checkpoint's slice has "
                    + std::to_string(piece.slice_floats())
                    + " floats, the slice here " + std::to_string(length_));
  auto unit = dim_ > 0 ? dim_ : 1;
  if (n % unit != 0 || piece.first % unit != 0)
    return mismatch("a piece holds part of a row");
  auto units = n / unit;
  if (!piece.rows.empty() && (dim_ == 0 || piece.rows.size() != units))
    return mismatch("a piece names " + std::to_string(piece.rows.size())
                    + " rows for " + std::to_string(dim_ == 0 ? 0 : units));
  if (piece.first > length_ || n > length_ - piece.first)
    return mismatch("a piece lies outside the slice");
  if (piece.state.data.size() != per_ * units)
    return mismatch("a piece has " + std::to_string(piece.state.data.size())
                    + " state floats, expected "
                    + std::to_string(per_ * units));
  if (dim_ == 0 && !piece.row_steps.empty())
    return mismatch("a dense piece has row steps");
  if (!piece.row_steps.empty() && piece.row_steps.size() != units)
    return mismatch("a piece has " + std::to_string(piece.row_steps.size())
                    + " row steps for " + std::to_string(units) + " rows");
  if (dim_ == 0 && stepped_ && piece.step != step)
    return mismatch("it would join saved slices that saw different numbers "
                    "of updates ("
                    + std::to_string(step) + " and "
                    + std::to_string(piece.step)
                    + "); load it into a store sliced as when it was saved");
  if (n == 0)
    return {};
  auto pv = piece.value.data.begin();
  auto ps = piece.state.data.begin();
  if (dim_ == 0) {
    // One range of floats: refused if it meets one that came before.
    auto lo = piece.first;
    auto hi = lo + n;
    auto next = ranges_.lower_bound(lo);
    if (next != ranges_.end() && next->first < hi)
      return mismatch("the saved pieces overlap at float "
                      + std::to_string(next->first));
    if (next != ranges_.begin() && std::prev(next)->second > lo)
      return mismatch("the saved pieces overlap at float "
                      + std::to_string(lo));
    ranges_.emplace(lo, hi);
    have_count_ += n;
    step = piece.step;
    stepped_ = true;
    if (n == length_) {
      // The whole slice in one piece: its buffers are taken over (a dense
      // piece's state blocks are then laid out as the slice's).
      value = std::move(piece.value.data);
      state = std::move(piece.state.data);
      return {};
    }
    allocate();
    // State block b of the piece is [b * n, (b + 1) * n).
    std::copy_n(pv, n, value.begin() + static_cast<std::ptrdiff_t>(lo));
    for (std::size_t b = 0; b < per_; ++b)
      std::copy_n(ps + static_cast<std::ptrdiff_t>(b * n), n,
                  state.begin()
                    + static_cast<std::ptrdiff_t>(b * length_ + lo));
    return {};
  }
  // Rows: where each row of the piece goes, checked before anything is
  // copied.
  auto first_unit = piece.first / unit;
  auto at = [&](uint64_t i) {
    return piece.rows.empty() ? first_unit + i : piece.rows[i];
  };
  for (uint64_t i = 0; i < units; ++i) {
    auto u = at(i);
    if (u >= have_.size())
      return mismatch("a piece names row " + std::to_string(u) + " of "
                      + std::to_string(have_.size()));
    if (have_[u]) {
      for (uint64_t j = 0; j < i; ++j)
        have_[at(j)] = false;
      return mismatch("the saved pieces overlap at row " + std::to_string(u));
    }
    have_[u] = true;
  }
  have_count_ += units;
  step = std::max(step, piece.step);
  stepped_ = true;
  allocate();
  for (uint64_t i = 0; i < units; ++i) {
    auto u = at(i);
    std::copy_n(pv + static_cast<std::ptrdiff_t>(i * unit), unit,
                value.begin() + static_cast<std::ptrdiff_t>(u * unit));
    std::copy_n(ps + static_cast<std::ptrdiff_t>(i * per_), per_,
                state.begin() + static_cast<std::ptrdiff_t>(u * per_));
    if (!piece.row_steps.empty())
      row_steps[u] = piece.row_steps[i];
  }
  return {};
}

} // namespace actorps::core
