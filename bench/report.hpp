// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// What a benchmark run found, and how it is shown: the table, the server's
// memory and the JSON file. CAF-free.

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "bench/cases.hpp"
#include "bench/limits.hpp"

namespace actorps::bench {

/// The measured rounds of one case in one mode with one worker count.
struct result {
  std::string mode; // "local", "dist" (over CAF) or "ucx" (dist over UCX)
  bench_case what;
  uint32_t workers = 1;
  std::vector<double> times; // seconds per round
  // Dist: bytes rank 0's process sent and received per round (-1: unknown).
  double wire_sent = -1;
  double wire_received = -1;
  // Dist: the server's peak RSS while this case ran, and the weights it held
  // then (this case's keys and every earlier case's), MB (-1: unknown).
  double server_peak_mb = -1;
  double server_weights_mb = -1;

  double median() const {
    auto xs = times;
    std::sort(xs.begin(), xs.end());
    return xs[(xs.size() - 1) / 2];
  }

  double min() const {
    return *std::min_element(times.begin(), times.end());
  }

  double max() const {
    return *std::max_element(times.begin(), times.end());
  }

  /// One-direction payload per round over the median round time, GB/s.
  double gbps() const {
    return static_cast<double>(what.payload_bytes()) / median() / 1e9;
  }
};

// The bound on a server's peak RSS: 1.3 x (weights + optimizer
// state) + 50 MB.
inline double rss_bound_mb(double weights_mb) {
  return 1.3 * weights_mb + 50;
}

// The server process of one dist run: its peak RSS and the weights it held
// (every case's keys; "assign" keeps no optimizer state).
struct server_memory {
  std::string mode; // "dist" or "ucx"
  uint32_t workers = 1;
  double peak_mb = 0;
  double weights_mb = 0;

  double bound_mb() const {
    return rss_bound_mb(weights_mb);
  }
};

/// Prints the machine's limits (when `limits`) and a line per result.
void print_table(const std::vector<result>& results, const machine_limits& m,
                 bool limits);

/// Prints the server's peak RSS per dist case, then per dist run.
void print_memory(const std::vector<result>& results,
                  const std::vector<server_memory>& memory);

/// Writes every figure as JSON.
void write_json(std::ostream& out, const std::vector<result>& results,
                const std::vector<server_memory>& memory,
                const machine_limits& m, bool limits, const round_plan& plan,
                uint32_t shards);

} // namespace actorps::bench
