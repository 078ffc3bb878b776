// SPDX-License-Identifier: BSD-3-Clause
// actorps-worker: one worker process of a distributed job.
#include <iostream>
#include <sstream>
#include <string>

#include "apps/common/cli.hpp"
#include "apps/common/synthetic.hpp"
#include "messages/errors.hpp"
#include "runtime/kvstore.hpp"
#include "runtime/network.hpp"

namespace po = boost::program_options;
namespace cli = actorps::apps;

int main(int argc, char** argv) {
  const std::string app = "actorps-worker";
  actorps::store_options store;
  actorps::apps::synthetic_options job;
  cli::network_flags net;
  std::string config_file;
  std::string mode = "dist_sync";
  std::string job_name = "synthetic";
  long connect_timeout_ms = 5000;
  long timeout_ms = 60000;
  po::options_description desc{"Options"};
  cli::add_common_options(desc, config_file);
  desc.add_options()("coordinator", po::value(&store.coordinator),
                     "the coordinator's host:port (required)")(
    "token", po::value(&store.token)->default_value(""),
    "the job token")("mode", po::value(&mode)->default_value(mode),
                     "dist_sync or dist_async (must match the coordinator's)")(
    "job", po::value(&job_name)->default_value(job_name),
    "the job to run: synthetic (exact-sum check)")(
    "keys", po::value(&job.keys)->default_value(job.keys),
    "synthetic: number of keys")("size",
                                 po::value(&job.size)->default_value(job.size),
                                 "synthetic: floats per key")(
    "rounds", po::value(&job.rounds)->default_value(job.rounds),
    "synthetic: push+pull rounds")("progress", po::bool_switch(&job.progress),
                                   "synthetic: print a line after every round")(
    "tolerate-deaths", po::bool_switch(&job.tolerate_deaths),
    "synthetic: skip the value checks (other workers may be killed)")(
    "connect-timeout-ms",
    po::value(&connect_timeout_ms)->default_value(connect_timeout_ms),
    "how long to keep trying to reach the coordinator, in ms")(
    "timeout-ms", po::value(&timeout_ms)->default_value(timeout_ms),
    "bound on every push, pull and control call, in ms");
  cli::add_network_options(desc, net);
  po::variables_map vm;
  if (auto rc = cli::parse(
        argc, argv, desc, vm, app,
        "usage: actorps-worker --coordinator HOST:PORT [options]\n"
        "Joins a distributed actorps job as one worker and runs a job."))
    return *rc;
  if (auto rc = cli::check(app, net))
    return *rc;
  if (store.coordinator.empty())
    return cli::fail(app, "--coordinator HOST:PORT is required", 2);
  if (auto where = actorps::parse_endpoint(store.coordinator); !where)
    return cli::fail(app, "--coordinator: " + actorps::render(where.error()),
                     2);
  if (mode != "dist_sync" && mode != "dist_async")
    return cli::fail(
      app, "--mode must be dist_sync or dist_async, got '" + mode + "'", 2);
  if (job_name != "synthetic")
    return cli::fail(
      app, "--job: unknown job '" + job_name + "' (expected synthetic)", 2);
  if (job.keys == 0 || job.size == 0 || job.rounds == 0 || timeout_ms <= 0)
    return cli::fail(app,
                     "--keys, --size, --rounds and --timeout-ms must be "
                     "> 0",
                     2);
  store.connect_timeout
    = std::chrono::milliseconds{std::max(connect_timeout_ms, 0L)};
  auto info = net.level >= cli::log_level::info;
  store.timeout = std::chrono::milliseconds{timeout_ms};
  store.heartbeat = net.heartbeat();
  store.connection_timeout = net.connection_timeout();
  auto kv = actorps::kvstore::create(mode, store);
  if (!kv)
    return cli::fail(app, actorps::render(kv.error()));
  kv->set_barrier_before_exit(!job.tolerate_deaths);
  if (info)
    std::cout << app << ": rank " << kv->rank() << " of " << kv->num_workers()
              << " (" << mode << ")" << std::endl;
  std::ostringstream quiet;
  auto problem = actorps::apps::run_synthetic(*kv, job,
                                              info ? std::cout : quiet);
  if (!problem.empty()) {
    // Leave at once: waiting for the others at the exit barrier would hold
    // them in sync rounds that need this worker's pushes.
    kv->set_barrier_before_exit(false);
    static_cast<void>(kv->close());
    return cli::fail(app, problem, 3);
  }
  auto dead_workers = kv->num_dead_node(4);
  auto dead_servers = kv->num_dead_node(2);
  if (info)
    std::cout << app << ": rank " << kv->rank() << ": all "
              << (job.tolerate_deaths ? "rounds done" : "values exact")
              << "; num_dead_node: workers="
              << (dead_workers ? std::to_string(*dead_workers) : "?")
              << " servers="
              << (dead_servers ? std::to_string(*dead_servers) : "?")
              << std::endl;
  if (auto err = kv->close())
    return cli::fail(app, "close: " + actorps::render(err), 3);
  return 0;
}
