// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// A primary shard's gate (internal to actors/shard/): what waits for its
// backup's acknowledgements. No CAF here.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace actorps {

// A primary's completions held until its backup acknowledged the
// operations they answer (see shard.hpp, "Replicas"): operation n (numbered
// from 1 as forwarded) completes once `acked` >= n.
struct replica_gate {
  uint64_t acked = 0;
  std::map<uint64_t, std::vector<std::function<void()>>> held;

  bool holds(uint64_t n) const {
    return n > acked;
  }

  void hold(uint64_t n, std::function<void()> f) {
    held[n].push_back(std::move(f));
  }

  // Runs `f` once operation `n` is acknowledged (at once if it is).
  void after(uint64_t n, std::function<void()> f) {
    if (holds(n))
      hold(n, std::move(f));
    else
      f();
  }

  // Every operation up to `n` was acknowledged: their completions run.
  void ack(uint64_t n) {
    acked = std::max(acked, n);
    while (!held.empty() && held.begin()->first <= acked) {
      auto fs = std::move(held.begin()->second);
      held.erase(held.begin());
      for (auto& f : fs)
        f();
    }
  }
};

using gate_ptr = std::shared_ptr<replica_gate>;

} // namespace actorps
