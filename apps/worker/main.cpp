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

int main(int argc, char** argv) {
  const std::string app = "actorps-worker";
  actorps::store_options store;
  actorps::apps::synthetic_options job;
  std::string config_file;
  std::string mode = "dist_sync";
  std::string job_name = "synthetic";
  long heartbeat_ms = 1000;
  long connection_timeout_ms = 10000;
  long timeout_ms = 60000;
  po::options_description desc{"Options"};
  std::string level_text;
  actorps::apps::add_common_options(desc, config_file);
  actorps::apps::add_log_option(desc, level_text);
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
    "heartbeat-ms", po::value(&heartbeat_ms)->default_value(heartbeat_ms),
    "CAF heartbeat interval on each connection, in ms")(
    "connection-timeout-ms",
    po::value(&connection_timeout_ms)->default_value(connection_timeout_ms),
    "a connection silent this long is closed (0: never)")(
    "timeout-ms", po::value(&timeout_ms)->default_value(timeout_ms),
    "bound on every push, pull and control call, in ms");
  po::variables_map vm;
  if (auto rc = actorps::apps::parse(
        argc, argv, desc, vm, app,
        "usage: actorps-worker --coordinator HOST:PORT [options]\n"
        "Joins a distributed actorps job as one worker and runs a job."))
    return *rc;
  if (store.coordinator.empty())
    return actorps::apps::fail(app, "--coordinator HOST:PORT is required", 2);
  if (auto where = actorps::parse_endpoint(store.coordinator); !where)
    return actorps::apps::fail(
      app, "--coordinator: " + actorps::render(where.error()), 2);
  if (mode != "dist_sync" && mode != "dist_async")
    return actorps::apps::fail(app,
                               "--mode must be dist_sync or dist_async, "
                               "got '"
                                 + mode + "'",
                               2);
  if (job_name != "synthetic")
    return actorps::apps::fail(
      app, "--job: unknown job '" + job_name + "' (expected synthetic)", 2);
  if (job.keys == 0 || job.size == 0 || job.rounds == 0 || heartbeat_ms <= 0
      || connection_timeout_ms < 0 || timeout_ms <= 0)
    return actorps::apps::fail(app,
                               "--keys, --size, --rounds, --heartbeat-ms "
                               "and --timeout-ms must be > 0",
                               2);
  auto level = actorps::apps::parse_log_level(level_text);
  if (!level)
    return actorps::apps::fail(app,
                               "--log-level must be error, info or "
                               "debug, got '"
                                 + level_text + "'",
                               2);
  auto info = *level >= actorps::apps::log_level::info;
  store.timeout = std::chrono::milliseconds{timeout_ms};
  store.heartbeat = std::chrono::milliseconds{heartbeat_ms};
  store.connection_timeout = std::chrono::milliseconds{connection_timeout_ms};
  auto kv = actorps::kvstore::create(mode, store);
  if (!kv)
    return actorps::apps::fail(app, actorps::render(kv.error()));
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
    return actorps::apps::fail(app, problem, 3);
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
    return actorps::apps::fail(app, "close: " + actorps::render(err), 3);
  return 0;
}
