// SPDX-License-Identifier: BSD-3-Clause
// actorps-bench: push+pull round throughput and latency of actorps, locally
// and across processes on loopback, beside this machine's own limits.
//
// The harness in files by concern: options.hpp (the command line),
// cases.hpp (what a run measures), scenarios.hpp (the rounds, local mode and
// the dist roles), dist.hpp (the child processes of dist mode and the
// yardsticks), yardsticks.hpp and broker_round.hpp (the CAF-only
// yardsticks), limits.hpp (memcpy and loopback TCP), report.hpp (table and
// JSON).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "apps/common/cli.hpp"
#include "bench/broker_round.hpp"
#include "bench/dist.hpp"
#include "bench/limits.hpp"
#include "bench/options.hpp"
#include "bench/report.hpp"
#include "bench/scenarios.hpp"
#include "bench/ucx_perftest.hpp"
#include "bench/yardsticks.hpp"

namespace cli = actorps::apps;
using namespace actorps::bench;

namespace {

constexpr const char* app = "actorps-bench";

// Runs the role of a child process the harness started.
int run_role(const bench_options& o) {
  const auto timeout = std::chrono::seconds{o.timeout_s};
  if (o.role == "coordinator")
    return role_coordinator(o.bench_workers, o.tune.slice_floats, o.transport,
                            o.sys);
  if (o.role == "server")
    return role_server(o.coordinator, o.shards, o.tune, o.sys);
  if (o.role == "worker")
    return role_worker(o.coordinator, o.cases_text, o.plan, o.tune, o.sys,
                       o.server_pid);
  if (o.role == "basp-echo")
    return role_basp_echo(o.sys, timeout);
  if (o.role == "basp-client")
    return role_basp_client(o.coordinator, o.sizes, o.plan, o.sys, timeout);
  if (o.role == "broker-server")
    return role_broker_server(o.sys, timeout);
  if (o.role == "broker-client")
    return run_broker_client(o.coordinator, o.sizes, o.plan, o.sys, timeout);
  return cli::fail(app, "--role: unknown role '" + o.role + "'", 2);
}

// Measures memcpy and loopback TCP, and in dist mode the yardsticks at the
// sizes of the uncompressed cases. An error text or an empty string.
std::string measure_machine(const bench_options& o, machine_limits& limits) {
  // Before any actor system exists: the socket measurements fork.
  std::fprintf(stderr, "measuring this machine's limits...\n");
  limits_options lo{o.quick, {}};
  if (o.dist)
    for (const auto& c : o.cases)
      if (!c.priority_case() && c.comp.kind == actorps::codec::none)
        lo.echo_sizes.push_back(c.payload_bytes());
  if (auto e = measure_limits(lo, limits); !e.empty())
    return "measuring the machine's limits: " + e;
  if (!o.dist)
    return {};
  std::vector<size_t> sizes;
  for (const auto& e : limits.echoes)
    sizes.push_back(e.bytes);
  for (const auto* y : {&basp_echo, &broker_round}) {
    std::fprintf(stderr, "measuring %s...\n", y->who);
    if (auto e = run_yardstick(*y, sizes, o.sys, o.plan,
                               std::chrono::seconds{o.timeout_s}, limits);
        !e.empty())
      return "measuring " + std::string{y->who} + ": " + e;
  }
  // The UCX plane's ceiling, when UCX cases run.
  if (std::find(o.dist_transports.begin(), o.dist_transports.end(), "ucx")
      != o.dist_transports.end()) {
    std::fprintf(stderr, "measuring ucx_perftest...\n");
    if (auto e = measure_ucx_perftest(sizes, o.quick, limits,
                                      std::chrono::seconds{o.timeout_s});
        !e.empty())
      return e;
  }
  return {};
}

} // namespace

int run(int argc, char** argv) {
  bench_options o;
  if (auto rc = parse_options(argc, argv, o))
    return *rc;
  if (!o.role.empty())
    return run_role(o);
  if (auto e = plan_run(o); !e.empty())
    return cli::fail(app, e, 2);
  machine_limits limits;
  if (!o.no_limits)
    if (auto e = measure_machine(o, limits); !e.empty())
      return cli::fail(app, e);
  std::vector<result> results;
  std::vector<server_memory> memory;
  for (auto w : o.worker_counts) {
    auto workers = std::to_string(w) + " workers: ";
    if (o.local)
      if (auto e = run_local(o.cases, w, o.shards, o.tune, o.sys, o.plan,
                             results);
          !e.empty())
        return cli::fail(app, "local, " + workers + e);
    if (o.dist)
      for (const auto& t : o.dist_transports)
        if (auto e = run_dist(o.cases, w, o.shards, t, o.tune, o.sys, o.plan,
                              std::chrono::seconds{o.timeout_s}, results,
                              memory);
            !e.empty())
          return cli::fail(app, "dist (" + t + "), " + workers + e);
  }
  print_table(results, limits, !o.no_limits);
  print_memory(results, memory);
  if (!o.json_path.empty()) {
    std::ofstream out{o.json_path};
    write_json(out, results, memory, limits, !o.no_limits, o.plan, o.shards);
    out.close();
    if (!out)
      return cli::fail(app, "cannot write " + o.json_path);
    std::printf("\nwrote %s\n", o.json_path.c_str());
  }
  return 0;
}

int main(int argc, char** argv) {
  return cli::guarded_main(app, [&] { return run(argc, argv); });
}
