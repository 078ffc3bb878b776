// SPDX-License-Identifier: BSD-3-Clause
// actorps-coordinator: the coordinator process of a distributed job.
#include <iostream>
#include <string>

#include "apps/common/cli.hpp"
#include "messages/errors.hpp"
#include "runtime/network.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  const std::string app = "actorps-coordinator";
  actorps::coordinator_options opts;
  std::string config_file;
  std::string mode = "dist_sync";
  unsigned port = 0;
  long heartbeat_ms = 1000;
  long connection_timeout_ms = 10000;
  long timeout_ms = 60000;
  po::options_description desc{"Options"};
  std::string level_text;
  actorps::apps::add_common_options(desc, config_file);
  actorps::apps::add_log_option(desc, level_text);
  desc.add_options()("host", po::value(&opts.host)->default_value(opts.host),
                     "address to listen on (\"\" for every interface)")(
    "port", po::value(&port)->default_value(port),
    "port to listen on; 0 picks a free one (printed at start)")(
    "token", po::value(&opts.token)->default_value(""),
    "job token every server and worker must present")(
    "mode", po::value(&mode)->default_value(mode), "dist_sync or dist_async")(
    "workers", po::value(&opts.num_workers)->default_value(opts.num_workers),
    "number of workers of the job")(
    "servers", po::value(&opts.num_servers)->default_value(opts.num_servers),
    "number of servers of the job")(
    "bigarray-bound",
    po::value(&opts.bigarray_bound)->default_value(opts.bigarray_bound),
    "keys with at least this many floats are sliced over all shards")(
    "heartbeat-ms", po::value(&heartbeat_ms)->default_value(heartbeat_ms),
    "heartbeat interval of every node, in ms")(
    "connection-timeout-ms",
    po::value(&connection_timeout_ms)->default_value(connection_timeout_ms),
    "a connection silent this long is closed and its node counts as dead "
    "(0: never; keep it above the transfer time of the largest message)")(
    "timeout-ms", po::value(&timeout_ms)->default_value(timeout_ms),
    "timeout of the coordinator's requests to shards, in ms")(
    "threads", po::value(&opts.system.threads)->default_value(0),
    "scheduler threads (0: CAF's default)");
  po::variables_map vm;
  if (auto rc = actorps::apps::parse(
        argc, argv, desc, vm, app,
        "usage: actorps-coordinator --workers W --servers S [options]\n"
        "Runs the coordinator of a distributed actorps job and prints the "
        "address it listens on; exits once every worker is done."))
    return *rc;
  if (mode != "dist_sync" && mode != "dist_async")
    return actorps::apps::fail(app,
                               "--mode must be dist_sync or dist_async, "
                               "got '"
                                 + mode + "'",
                               2);
  if (port > 65535)
    return actorps::apps::fail(app, "--port must be 0..65535", 2);
  if (heartbeat_ms <= 0 || connection_timeout_ms < 0 || timeout_ms <= 0)
    return actorps::apps::fail(app,
                               "--heartbeat-ms and --timeout-ms must be "
                               "> 0, --connection-timeout-ms >= 0",
                               2);
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
  opts.sync = mode == "dist_sync";
  opts.timeout = std::chrono::milliseconds{timeout_ms};
  opts.system.heartbeat = std::chrono::milliseconds{heartbeat_ms};
  opts.system.connection_timeout
    = std::chrono::milliseconds{connection_timeout_ms};
  auto err = actorps::run_coordinator(opts, [&](uint16_t p) {
    std::cout << app << ": listening on "
              << (opts.host.empty() ? "*" : opts.host) << ":" << p << " ("
              << mode << ", " << opts.num_workers << " workers, "
              << opts.num_servers << " servers)" << std::endl;
  });
  if (err)
    return actorps::apps::fail(app, actorps::render(err));
  if (*level >= actorps::apps::log_level::info)
    std::cout << app << ": job done" << std::endl;
  return 0;
}
