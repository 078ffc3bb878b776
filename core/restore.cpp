// SPDX-License-Identifier: BSD-3-Clause
#include "core/restore.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "core/optimizer.hpp"
#include "core/rows.hpp"

namespace actorps::core {

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

} // namespace actorps::core
