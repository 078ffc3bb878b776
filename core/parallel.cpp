// SPDX-License-Identifier: BSD-3-Clause
#include "core/parallel.hpp"

#include <numeric>
#include <system_error>
#include <thread>

namespace actorps::core {

bool split_in_two(const std::vector<uint64_t>& weights, uint64_t min_total,
                  const std::function<void(std::size_t)>& fn) {
  const auto n = weights.size();
  auto run = [&](std::size_t from, std::size_t to) {
    for (auto i = from; i < to; ++i)
      fn(i);
  };
  const auto total = std::accumulate(weights.begin(), weights.end(),
                                     uint64_t{0});
  // The cut in [1, n) that leaves the two runs closest in weight.
  std::size_t cut = 0;
  uint64_t best = UINT64_MAX;
  uint64_t before = 0;
  for (std::size_t i = 1; i < n; ++i) {
    before += weights[i - 1];
    auto after = total - before;
    auto gap = before > after ? before - after : after - before;
    if (gap < best) {
      best = gap;
      cut = i;
    }
  }
  if (total < min_total || cut == 0) {
    run(0, n);
    return false;
  }
  std::thread helper;
  try {
    helper = std::thread{[&] { run(cut, n); }};
  } catch (const std::system_error&) {
    run(0, n);
    return false;
  }
  run(0, cut);
  helper.join();
  return true;
}

} // namespace actorps::core
