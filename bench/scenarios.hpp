// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// The workloads: a case's rounds on one kvstore handle, local mode (every
// worker in this process) and the dist roles the harness starts as child
// processes (bench/dist.hpp).

#include <string>
#include <vector>

#include <sys/types.h>

#include "bench/cases.hpp"
#include "bench/report.hpp"
#include "runtime/system_options.hpp"

namespace actorps::bench {

/// The job token of the harness's dist jobs.
inline constexpr const char* job_token = "actorps-bench";

/// Runs every case in local mode with `workers` workers (threads of this
/// process) and `shards` shards; adds the results. An error text or empty.
std::string run_local(const std::vector<bench_case>& cases, uint32_t workers,
                      uint32_t shards, const tuning& tune,
                      const system_options& sys, const round_plan& plan,
                      std::vector<result>& results);

/// The coordinator role: prints "port N" once it listens, runs the job
/// with its tensor bytes over `transport` ("caf" or "ucx").
int role_coordinator(uint32_t workers, uint64_t slice_floats,
                     const std::string& transport, const system_options& sys);

/// The server role: hosts `shards` shards (each on a thread of its own
/// with `tune.shard_threads`, holding at most `tune.server_inflight` bytes
/// of large pushes received); prints "peak_rss_kb N" at exit.
int role_server(const std::string& coordinator, uint32_t shards,
                const tuning& tune, const system_options& sys);

/// The worker role: runs the encoded cases. Rank 0 prints "result INDEX T1
/// T2 ..." (seconds) per case, "wire INDEX SENT RECEIVED" (bytes per round)
/// and, with a `server_pid`, "memory INDEX KB": the server's peak RSS from
/// the case's start to its end.
int role_worker(const std::string& coordinator, const std::string& cases_text,
                const round_plan& plan, const tuning& tune,
                const system_options& sys, pid_t server_pid);

} // namespace actorps::bench
