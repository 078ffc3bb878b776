// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace actorps::core {

/// Below this many floats in all, `split_in_two` runs everything on the
/// calling thread: starting a thread costs tens of microseconds, about what
/// a second core saves on copying 8 MB.
constexpr uint64_t parallel_min_floats = uint64_t{1} << 21;

/// Runs `fn(i)` once for every i in [0, weights.size()). When the weights
/// sum to at least `min_total` and there are at least two, the indices are
/// cut into two runs of about equal weight: a helper thread takes the
/// second while the calling thread runs the first; otherwise the calling
/// thread runs all. Used for the copies in and out of a store's
/// handle, which are the only passes over the data in a local store and
/// which one core cannot do at memory speed (measured: one 64 MB memcpy
/// 7.1-9.2 ms on one thread, 5.2-6.1 ms on two). `fn` must be safe to run
/// on two threads for distinct indices and must not throw. Falls back to
/// one thread if no thread can be started. Returns true if two threads ran.
bool split_in_two(const std::vector<uint64_t>& weights, uint64_t min_total,
                  const std::function<void(std::size_t)>& fn);

} // namespace actorps::core
