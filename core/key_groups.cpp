// SPDX-License-Identifier: BSD-3-Clause
#include "core/key_groups.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace actorps::core {

key_groups group_keys(const std::vector<std::string>& keys) {
  key_groups g;
  g.index.reserve(keys.size());
  std::unordered_map<std::string, uint32_t> seen;
  seen.reserve(keys.size());
  for (auto& k : keys) {
    auto [i, added] = seen.emplace(k, static_cast<uint32_t>(g.unique.size()));
    if (added)
      g.unique.push_back(k);
    g.index.push_back(i->second);
  }
  return g;
}

status sum_groups(const key_groups& g, const std::vector<uint64_t>& sizes,
                  const float_parts& data, float_parts& out) {
  uint64_t total = 0;
  for (auto k : g.index)
    total += sizes[k];
  if (data.size != total || !data.valid(true))
    return {errc::shape_mismatch, "push: " + std::to_string(g.index.size())
                                    + " keys hold " + std::to_string(total)
                                    + " floats but the push has "
                                    + std::to_string(data.size)};
  auto flat = data.flatten();
  std::vector<std::vector<float>> sums(g.unique.size());
  uint64_t at = 0;
  for (auto k : g.index) {
    auto n = sizes[k];
    auto& sum = sums[k];
    const float* x = flat.data() + at;
    if (sum.empty()) {
      sum.assign(x, x + n);
    } else {
      for (uint64_t j = 0; j < n; ++j)
        sum[j] += x[j];
    }
    at += n;
  }
  out = float_parts{};
  for (auto& s : sums)
    out.append(shared_floats{std::move(s)});
  return {};
}

float_parts expand_groups(const key_groups& g,
                          const std::vector<uint64_t>& sizes, float_parts x) {
  // Where each unique key starts in `x`.
  std::vector<uint64_t> start(sizes.size(), 0);
  for (std::size_t k = 1; k < sizes.size(); ++k)
    start[k] = start[k - 1] + sizes[k - 1];
  // The pieces of `x` by the key they lie in, cut where keys meet (a pull
  // of many short keys comes as one piece over all of them).
  std::vector<std::vector<float_piece>> by_key(sizes.size());
  for (auto& p : x.pieces) {
    auto k = static_cast<std::size_t>(
      std::upper_bound(start.begin(), start.end(), p.at) - start.begin() - 1);
    for (uint64_t done = 0; done < p.length && k < sizes.size(); ++k) {
      auto at = p.at + done;
      auto n = std::min(p.length - done, start[k] + sizes[k] - at);
      if (n > 0)
        by_key[k].push_back(float_piece{p.buffer, p.from + done, at, n});
      done += n;
    }
  }
  float_parts out;
  uint64_t at = 0;
  for (auto k : g.index) {
    for (auto& p : by_key[k])
      out.pieces.push_back(
        float_piece{p.buffer, p.from, at + (p.at - start[k]), p.length});
    at += sizes[k];
  }
  out.size = at;
  out.buffers = std::move(x.buffers);
  return out;
}

} // namespace actorps::core
