// SPDX-License-Identifier: BSD-3-Clause
// actorps-server: hosts parameter shards of a distributed job.
#include <iostream>
#include <string>
#include <thread>

#include "apps/common/cli.hpp"
#include "messages/errors.hpp"
#include "runtime/network.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  const std::string app = "actorps-server";
  actorps::server_options opts;
  std::string config_file;
  std::string coordinator;
  long heartbeat_ms = 1000;
  long connection_timeout_ms = 10000;
  long timeout_ms = 30000;
  unsigned port = 0;
  opts.shards = std::max(1u, std::thread::hardware_concurrency());
  po::options_description desc{"Options"};
  std::string level_text;
  actorps::apps::add_common_options(desc, config_file);
  actorps::apps::add_log_option(desc, level_text);
  desc.add_options()("coordinator", po::value(&coordinator),
                     "the coordinator's host:port (required)")(
    "token", po::value(&opts.token)->default_value(""), "the job token")(
    "host", po::value(&opts.host)->default_value(opts.host),
    "address on which workers reach this server (it listens there)")(
    "port", po::value(&port)->default_value(port),
    "port for the workers' direct connections; 0 picks a free one")(
    "shards", po::value(&opts.shards)->default_value(opts.shards),
    "shard actors to host (default: one per core)")(
    "heartbeat-ms", po::value(&heartbeat_ms)->default_value(heartbeat_ms),
    "CAF heartbeat interval on each connection, in ms")(
    "connection-timeout-ms",
    po::value(&connection_timeout_ms)->default_value(connection_timeout_ms),
    "a connection silent this long is closed (0: never)")(
    "timeout-ms", po::value(&timeout_ms)->default_value(timeout_ms),
    "how long to wait for the coordinator's answers, in ms")(
    "threads", po::value(&opts.system.threads)->default_value(0),
    "scheduler threads (0: CAF's default)");
  po::variables_map vm;
  if (auto rc = actorps::apps::parse(
        argc, argv, desc, vm, app,
        "usage: actorps-server --coordinator HOST:PORT [options]\n"
        "Joins a distributed actorps job and hosts parameter shards until "
        "the coordinator ends the job."))
    return *rc;
  if (coordinator.empty())
    return actorps::apps::fail(app, "--coordinator HOST:PORT is required", 2);
  auto where = actorps::parse_endpoint(coordinator);
  if (!where)
    return actorps::apps::fail(
      app, "--coordinator: " + actorps::render(where.error()), 2);
  if (opts.shards == 0 || heartbeat_ms <= 0 || connection_timeout_ms < 0
      || timeout_ms <= 0)
    return actorps::apps::fail(app,
                               "--shards, --heartbeat-ms and "
                               "--timeout-ms must be > 0",
                               2);
  if (port > 65535)
    return actorps::apps::fail(app, "--port must be 0..65535", 2);
  auto level = actorps::apps::parse_log_level(level_text);
  if (!level)
    return actorps::apps::fail(app,
                               "--log-level must be error, info or "
                               "debug, got '"
                                 + level_text + "'",
                               2);
  if (*level >= actorps::apps::log_level::debug)
    opts.on_event = [&](const std::string& line) {
      std::cout << app << ": " << line << std::endl;
    };
  opts.port = static_cast<uint16_t>(port);
  opts.coordinator = *where;
  opts.timeout = std::chrono::milliseconds{timeout_ms};
  opts.system.heartbeat = std::chrono::milliseconds{heartbeat_ms};
  opts.system.connection_timeout
    = std::chrono::milliseconds{connection_timeout_ms};
  auto err = actorps::run_server(opts, [&](uint32_t rank) {
    if (*level >= actorps::apps::log_level::info)
      std::cout << app << ": server rank " << rank << " hosts " << opts.shards
                << " shards" << std::endl;
  });
  if (err)
    return actorps::apps::fail(app, actorps::render(err));
  if (*level >= actorps::apps::log_level::info)
    std::cout << app << ": job done" << std::endl;
  return 0;
}
