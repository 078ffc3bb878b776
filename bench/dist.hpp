// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// The harness side of dist mode, CAF-free: it starts this program again as
// child processes in their roles (--role ..., bench/scenarios.hpp and
// bench/yardsticks.hpp), reads what they print and gathers the figures.

#include <chrono>
#include <string>
#include <vector>

#include "bench/cases.hpp"
#include "bench/limits.hpp"
#include "bench/report.hpp"
#include "runtime/system_options.hpp"

namespace actorps::bench {

// What one pair of yardstick processes measures: a server role, a client
// role that prints "TAG BYTES MEDIAN_US" per size, and where the figures go.
struct yardstick {
  const char* who;
  const char* server_role;
  const char* client_role;
  const char* tag;
  std::vector<machine_limits::echo> machine_limits::*out;
};

inline const yardstick basp_echo{"the BASP echo", "basp-echo", "basp-client",
                                 "basp", &machine_limits::basp_echoes};
inline const yardstick broker_round{"the broker round", "broker-server",
                                    "broker-client", "broker",
                                    &machine_limits::broker_rounds};

/// Measures a round of every size in `sizes` with the server and client
/// processes of `what`, run as the dist roles are; adds them to `limits`.
/// An error text or an empty string.
std::string
run_yardstick(const yardstick& what, const std::vector<size_t>& sizes,
              const system_options& sys, const round_plan& plan,
              std::chrono::milliseconds timeout, machine_limits& limits);

/// Runs every case in dist mode: a coordinator, a server with `shards`
/// shards and `workers` worker processes on 127.0.0.1, the job's tensor
/// bytes over `transport` ("caf" or "ucx"); adds the results (mode "dist"
/// or "ucx") and the server's memory. An error text or an empty string.
std::string run_dist(const std::vector<bench_case>& cases, uint32_t workers,
                     uint32_t shards, const std::string& transport,
                     const tuning& tune, const system_options& sys,
                     const round_plan& plan, std::chrono::milliseconds timeout,
                     std::vector<result>& results,
                     std::vector<server_memory>& memory);

} // namespace actorps::bench
