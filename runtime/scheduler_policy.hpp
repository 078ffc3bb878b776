// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string>

namespace actorps {

/// CAF's scheduler policy for an actorps actor system.
/// - `stealing`: work stealing (CAF's default); idle threads poll, then sleep
///   50 us at a time without being woken by new work.
/// - `sharing`: one shared queue; idle threads sleep until work arrives.
///   Measured with actorps-bench on 2 cores: a dist 4 KB push+pull round
///   of 315-466 us against 530-758 us with work stealing. In one process
///   (2 scheduler threads) local rounds of 1 worker took 0.65-0.85x as
///   long, but the training job (4 worker threads, 1 scheduler thread)
///   ran no faster: 30.2k samples/s against 32.0k (docs/benchmarks.md).
/// - `automatic`: sharing for systems with the network layer, stealing
///   otherwise.
enum class scheduler_policy : uint8_t { automatic, stealing, sharing };

/// "auto", "stealing" or "sharing".
std::string to_string(scheduler_policy x);

/// Parses the names of `to_string`; false (and `out` untouched) otherwise.
bool parse_scheduler_policy(const std::string& text, scheduler_policy& out);

} // namespace actorps
