// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <string>

/// This machine's own limits, measured with plain system calls (no CAF), as
/// the yardsticks of actorps-bench. Call before any thread exists: the
/// socket measurements fork.
namespace actorps::bench {

struct machine_limits {
  /// Single-thread memcpy of 64 MB buffers, GB/s (1e9 bytes), median.
  double memcpy_gbps = 0;
  /// One TCP stream over loopback between two processes, GB/s, median.
  double tcp_gbps = 0;
  /// Round trip of 64 bytes over loopback TCP between two processes, µs,
  /// median of single round trips.
  double tcp_rtt_us = 0;
};

/// How much work each measurement does: `quick` for CI (about a second in
/// all), otherwise enough for stable medians (a few seconds).
struct limits_options {
  bool quick = false;
};

/// Measures the three limits. Returns an error text, or an empty string.
std::string measure_limits(const limits_options& opts, machine_limits& out);

} // namespace actorps::bench
