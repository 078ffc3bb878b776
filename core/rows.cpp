// SPDX-License-Identifier: BSD-3-Clause
#include "core/rows.hpp"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "core/optimizer.hpp"

namespace actorps::core {

status split_rows(const row_layout& layout, const std::vector<uint64_t>& ids,
                  std::vector<shard_rows>& out) {
  if (layout.shards == 0 || layout.dim == 0)
    return {errc::bad_config, "rows: a table needs a row size and a shard"};
  std::vector<shard_rows> result(layout.shards);
  std::vector<std::unordered_map<uint64_t, uint32_t>> seen(layout.shards);
  for (uint64_t pos = 0; pos < ids.size(); ++pos) {
    auto id = ids[pos];
    if (id >= layout.rows)
      return {errc::unknown_key, "rows: row " + std::to_string(id)
                                   + " out of range (the table has "
                                   + std::to_string(layout.rows) + " rows)"};
    auto s = layout.shard_of(id);
    auto& r = result[s];
    auto [it, fresh]
      = seen[s].try_emplace(id, static_cast<uint32_t>(r.local.size()));
    if (fresh)
      r.local.push_back(layout.local_of(id));
    r.uses.emplace_back(pos, it->second);
  }
  out = std::move(result);
  return {};
}

std::vector<float> summed_rows(const shard_rows& rows, const float* values,
                               uint64_t dim) {
  std::vector<float> sum(rows.local.size() * dim, 0.0f);
  for (auto [pos, idx] : rows.uses) {
    auto* dst = sum.data() + idx * dim;
    auto* src = values + pos * dim;
    for (uint64_t j = 0; j < dim; ++j)
      dst[j] += src[j];
  }
  return sum;
}

void scatter_rows(const shard_rows& rows, const float* pulled, uint64_t dim,
                  float* out) {
  for (auto [pos, idx] : rows.uses)
    std::copy(pulled + idx * dim, pulled + (idx + 1) * dim, out + pos * dim);
}

void apply_rows(const optimizer_config& cfg, float* table, float* state,
                uint64_t* steps, uint64_t dim,
                const std::vector<uint64_t>& local, const float* grads) {
  auto per_row = state_size(cfg, dim);
  for (size_t i = 0; i < local.size(); ++i) {
    auto r = local[i];
    apply_update(cfg, table + r * dim, grads + i * dim, state + r * per_row,
                 dim, steps[r]);
    ++steps[r];
  }
}

} // namespace actorps::core
