// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// A distributed job of real processes on 127.0.0.1 for the integration
// tests: a coordinator, plus the servers and workers a test adds.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <unistd.h>

#include "tests/integration/process.hpp"

namespace actorps::test {

using namespace std::chrono_literals;

inline constexpr auto startup = 30s;
inline constexpr auto job_time = 120s;

inline std::string token() {
  return "tok-" + std::to_string(::getpid());
}

// A coordinator plus the servers and workers a test adds.
struct dist_job {
  std::unique_ptr<process> coordinator;
  std::string address;
  std::vector<std::unique_ptr<process>> servers;
  std::vector<std::unique_ptr<process>> workers;
  std::string mode;

  dist_job(std::string job_mode, int num_workers, int num_servers,
           std::vector<std::string> extra = {})
    : mode(std::move(job_mode)) {
    std::vector<std::string> argv{ACTORPS_COORDINATOR_BIN,
                                  "--host",
                                  "127.0.0.1",
                                  "--port",
                                  "0",
                                  "--token",
                                  token(),
                                  "--mode",
                                  mode,
                                  "--workers",
                                  std::to_string(num_workers),
                                  "--servers",
                                  std::to_string(num_servers)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    coordinator = std::make_unique<process>(argv);
    REQUIRE(coordinator->wait_for(")", startup));
    INFO(coordinator->output());
    auto& out = coordinator->output();
    auto at = out.find("127.0.0.1:");
    REQUIRE(at != std::string::npos);
    auto end = out.find(' ', at);
    address = out.substr(at, end - at);
  }

  process& add_server(int shards = 2, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{
      ACTORPS_SERVER_BIN, "--coordinator",       address, "--token", token(),
      "--shards",         std::to_string(shards)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    servers.push_back(std::make_unique<process>(argv));
    return *servers.back();
  }

  // (`stdin_pipe`: see process.)
  process& add_worker(std::vector<std::string> extra = {},
                      bool stdin_pipe = false) {
    std::vector<std::string> argv{ACTORPS_WORKER_BIN,
                                  "--coordinator",
                                  address,
                                  "--token",
                                  token(),
                                  "--mode",
                                  mode};
    argv.insert(argv.end(), extra.begin(), extra.end());
    workers.push_back(std::make_unique<process>(argv, stdin_pipe));
    return *workers.back();
  }

  // `n` workers with the same `args`; the first also says where it is
  // (only one: nobody reads the others' output before they end, and a full
  // pipe would stop them). Returns the first, which also takes
  // `first_extra` and, with `first_stdin_pipe`, reads a pipe (see process).
  process& add_workers(int n, const std::vector<std::string>& args,
                       const std::vector<std::string>& first_extra = {},
                       bool first_stdin_pipe = false) {
    auto first = args;
    first.push_back("--progress");
    first.insert(first.end(), first_extra.begin(), first_extra.end());
    auto& w = add_worker(first, first_stdin_pipe);
    for (int i = 1; i < n; ++i)
      add_worker(args);
    return w;
  }

  // 2 workers of the synthetic job on 4 keys of 1000 floats for `rounds`
  // rounds, which check their sums themselves (rank r pushes r + 1 into
  // every float of every key per round, accumulated; in sync mode after
  // every round too): a lost or doubled push fails them. Returns the first,
  // which says where it is. `extra`: more flags for both. With
  // `hold_after` > 0 the first holds after that many rounds until the test
  // sends it a line (`process::send_line`): it cannot end before, whenever
  // the test gets there.
  process& add_summing_workers(const std::string& rounds,
                               std::vector<std::string> extra = {},
                               uint32_t hold_after = 0) {
    std::vector<std::string> args{"--keys",   "4",    "--size",       "1000",
                                  "--rounds", rounds, "--timeout-ms", "20000"};
    args.insert(args.end(), extra.begin(), extra.end());
    if (hold_after == 0)
      return add_workers(2, args);
    return add_workers(
      2, args, {"--hold-after-rounds", std::to_string(hold_after)}, true);
  }
};

// What every process of `job` printed so far, each under its name.
inline std::string report(dist_job& job) {
  std::string out = "-- coordinator:\n" + job.coordinator->drained();
  for (size_t i = 0; i < job.servers.size(); ++i)
    out += "\n-- server " + std::to_string(i) + ":\n"
           + job.servers[i]->drained();
  for (size_t i = 0; i < job.workers.size(); ++i)
    out += "\n-- worker " + std::to_string(i) + ":\n"
           + job.workers[i]->drained();
  return out;
}

// REQUIREs that `p` prints `text` within `timeout`. On failure the message
// holds what every process of `job` printed, so that a wait that failed in
// CI can be understood from its log alone.
inline void require_printed(dist_job& job, process& p, const std::string& text,
                            std::chrono::milliseconds timeout) {
  if (p.wait_for(text, timeout))
    return;
  FAIL("no \"" << text << "\" within " << timeout.count() << " ms\n"
               << report(job));
}

// Heartbeats every 100 ms and a 3 s connection timeout: a hung process
// (SIGSTOP keeps its connections open) is cut off within seconds.
inline const std::vector<std::string> quick_timeouts{
  "--heartbeat-ms", "100", "--connection-timeout-ms", "3000"};

inline std::vector<std::string>
with_quick_timeouts(std::vector<std::string> xs) {
  xs.insert(xs.end(), quick_timeouts.begin(), quick_timeouts.end());
  return xs;
}

// Runs `actorps-status --json` on `job` until `ready` holds of its output;
// REQUIREs that it does within `timeout`.
template <class Pred>
void wait_for_status_if(const dist_job& job, Pred ready,
                        std::chrono::milliseconds timeout = job_time) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    process status{{ACTORPS_STATUS_BIN, "--coordinator", job.address, "--token",
                    token(), "--json"}};
    REQUIRE(status.wait_exit(30s));
    if (ready(status.output()))
      return;
    INFO(status.output());
    REQUIRE(std::chrono::steady_clock::now() < deadline);
  }
}

// The same until the output contains `text`.
inline void wait_for_status(const dist_job& job, const std::string& text) {
  wait_for_status_if(job, [&text](const std::string& out) {
    return out.find(text) != std::string::npos;
  });
}

// Each transport the build has, for the tests that run on every one.
#ifdef ACTORPS_HAVE_UCX
#  define TRANSPORT() GENERATE(as<std::string>{}, "caf", "ucx")
#else
#  define TRANSPORT()                                                          \
    std::string {                                                              \
      "caf"                                                                    \
    }
#endif

// A test case per transport and mode, each `body(transport, mode)`: under
// the sanitizers one job takes up to a minute, and ctest's timeout counts
// per test case.
#define JOB_CASE(name, body, transport, mode)                                  \
  TEST_CASE(name " (" transport ", " mode ")", "[integration]") {              \
    body(transport, mode);                                                     \
  }
#ifdef ACTORPS_HAVE_UCX
#  define UCX_JOB_CASE(name, body, mode) JOB_CASE(name, body, "ucx", mode)
#else
#  define UCX_JOB_CASE(name, body, mode)
#endif

// The same per transport, in dist_async and dist_sync.
#define EACH_TRANSPORT_AND_MODE(name, body)                                    \
  JOB_CASE(name, body, "caf", "dist_async")                                    \
  JOB_CASE(name, body, "caf", "dist_sync")                                     \
  UCX_JOB_CASE(name, body, "dist_async")                                       \
  UCX_JOB_CASE(name, body, "dist_sync")

// How often `what` occurs in `text`.
inline std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1))
    ++n;
  return n;
}

// Waits for `p` to exit and checks its code, showing its output on failure.
#define CHECK_EXIT(p, code, timeout)                                           \
  do {                                                                         \
    auto rc_ = (p).wait_exit(timeout);                                         \
    INFO((p).output());                                                        \
    REQUIRE(rc_);                                                              \
    CHECK(*rc_ == (code));                                                     \
  } while (false)

} // namespace actorps::test
