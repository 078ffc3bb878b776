// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// actorps-bench's command line: what a run measures (cases, modes, worker
// counts, rounds) and the hidden options of the roles the harness starts as
// its own child processes. CAF-free.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "bench/cases.hpp"
#include "runtime/system_options.hpp"

namespace actorps::bench {

struct bench_options {
  // What to measure, as given.
  std::string modes = "local,dist";
  std::string sizes = "4K,256K,4M,64M";
  std::string many = "1000x1024,10000x1";
  // Row cases: ROWSxDIMxBATCH, comma-separated.
  std::string rows = "none";
  std::string workers_text = "1,2";
  // Dist: the data transports to run, comma-separated (caf, ucx).
  std::string transports = "caf";
  std::string round_kinds = "fused,split";
  std::string backlog = "256M";
  compressed_cases compressed{"fp16,2bit:1", "4M,64M"};
  uint32_t shards = 2;
  tuning tune;
  system_options sys;
  round_plan plan;
  long timeout_s = 600;
  bool quick = false;
  bool no_limits = false;
  std::string json_path;
  // --tls DIR: sets sys.tls to DIR's node certificate (dist only).
  std::string tls_dir;

  // What to measure, as `plan_run` makes of it.
  std::vector<bench_case> cases;
  std::vector<uint32_t> worker_counts;
  std::vector<std::string> dist_transports;
  bool local = false;
  bool dist = false;

  // A child process's role and its arguments (empty: the harness).
  std::string role;
  std::string coordinator;
  std::string cases_text;
  uint32_t bench_workers = 1;
  // The coordinator's job transport: "caf" or "ucx".
  std::string transport = "caf";
  pid_t server_pid = 0;
};

/// Parses the command line (and --config file) into `out`: an exit code
/// when the program should stop here (--help, a bad option), else nothing.
std::optional<int> parse_options(int argc, char** argv, bench_options& out);

/// The harness's run from the parsed options: --quick's sizes, the cases,
/// the worker counts and the modes. An error text or an empty string.
std::string plan_run(bench_options& opts);

} // namespace actorps::bench
