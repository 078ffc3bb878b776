// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <string>
#include <vector>

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
  /// Rounds over loopback TCP between two processes, the yardstick of a
  /// dist push+pull round: `bytes` go out, the peer reads all of them, then
  /// sends as many back (store and forward, no work in between). Median µs
  /// per round, for each size asked for.
  struct echo {
    size_t bytes = 0;
    double round_us = 0;
  };
  std::vector<echo> echoes;

  /// The same rounds through CAF's network layer alone (measured by
  /// actorps-bench itself, not by `measure_limits`): a `floats` of `bytes`
  /// sent to an actor in another process that answers with it, BASP
  /// serializing and deserializing it each way, as actorps's own messages.
  /// A dist round's distance from it is what actorps itself adds above the
  /// network layer its design prescribes.
  std::vector<echo> basp_echoes;

  /// Broker rounds (measured by actorps-bench itself, see
  /// bench/broker_round.hpp): the least work a summing push+pull round can
  /// do through CAF 0.17's network layer, raw bytes between two io brokers,
  /// no actor in between. Median µs per round, for each size.
  std::vector<echo> broker_rounds;

  /// ucx_perftest between two processes (bench/ucx_perftest.hpp): for each
  /// transport set ("tcp", "shm"), one-way tag_bw per size (GB/s, UCX's
  /// overall figure) and tag_lat at 4 KB (us one-way, median).
  struct ucx_figure {
    std::string transport;
    size_t bytes = 0;
    double gbps = 0;
  };
  std::vector<ucx_figure> ucx_bandwidth;
  struct ucx_latency {
    std::string transport;
    double us = 0;
  };
  std::vector<ucx_latency> ucx_latency_4k;

  /// The echo round of `bytes`, µs; 0 if it was not measured.
  double echo_us(size_t bytes) const {
    return find(echoes, bytes);
  }

  /// The BASP echo round of `bytes`, µs; 0 if it was not measured.
  double basp_echo_us(size_t bytes) const {
    return find(basp_echoes, bytes);
  }

  /// The broker round of `bytes`, µs; 0 if it was not measured.
  double broker_round_us(size_t bytes) const {
    return find(broker_rounds, bytes);
  }

private:
  static double find(const std::vector<echo>& xs, size_t bytes) {
    for (const auto& e : xs)
      if (e.bytes == bytes)
        return e.round_us;
    return 0;
  }
};

/// How much work each measurement does: `quick` for CI (about a second in
/// all), otherwise enough for stable medians (a few seconds).
struct limits_options {
  bool quick = false;
  /// Sizes of the echo rounds to measure, bytes each way.
  std::vector<size_t> echo_sizes;
};

/// Measures the limits. Returns an error text, or an empty string.
std::string measure_limits(const limits_options& opts, machine_limits& out);

} // namespace actorps::bench
