// SPDX-License-Identifier: BSD-3-Clause
// actorps-server: hosts parameter shards of a distributed job.
#include <iostream>
#include <string>
#include <thread>

#include "apps/common/cli.hpp"
#include "messages/errors.hpp"
#include "runtime/network.hpp"

namespace po = boost::program_options;
namespace cli = actorps::apps;

namespace {

const std::string app = "actorps-server";

int run(int argc, char** argv) {
  actorps::server_options opts;
  cli::network_flags net;
  std::string config_file;
  std::string coordinator;
  unsigned port = 0;
  // (In MB: a wrong suffix cannot go unnoticed.)
  unsigned inflight_mb
    = static_cast<unsigned>(actorps::default_server_inflight_bytes >> 20);
  long connect_timeout_ms = 5000;
  long timeout_ms = 30000;
  opts.shards = std::max(1u, std::thread::hardware_concurrency());
  po::options_description desc{"Options"};
  cli::add_common_options(desc, config_file);
  desc.add_options()("coordinator", po::value(&coordinator),
                     "the coordinator's host:port (required)")(
    "host", po::value(&opts.host)->default_value(opts.host),
    "address on which workers reach this server (it listens there unless "
    "--bind says otherwise)")(
    "bind", po::value(&opts.bind),
    "address to listen on, if not --host (0.0.0.0: every interface, e.g. "
    "when workers reach this host through a forwarded address)")(
    "port", po::value(&port)->default_value(port),
    "port for the workers' direct connections; 0 picks a free one")(
    "shards", po::value(&opts.shards)->default_value(opts.shards),
    "shard actors to host (default: one per core)")(
    "shard-threads",
    po::value(&opts.shard_threads)->default_value(opts.shard_threads),
    "each shard on a thread of its own (less freed memory kept by the "
    "allocator with several workers; faster rounds of large values and of "
    "many keys); false: on the scheduler's threads (--threads), where over "
    "ucx the data plane's thread runs a shard for a request it receives "
    "(faster rounds of small values)")(
    "inflight-mb", po::value(&inflight_mb)->default_value(inflight_mb),
    "UCX transport: most MB of workers' large pushes the server holds "
    "received and not yet applied, over all workers (further ones wait in "
    "their workers); bounds its memory with many workers. 0: no bound");
  cli::add_timeout_options(desc, connect_timeout_ms, timeout_ms,
                           "how long to wait for the coordinator's answers, "
                           "in ms");
  cli::add_threads_option(desc, opts.system.threads);
  cli::token_flags tok;
  cli::add_token_options(desc, tok);
  std::string server_token_file;
  cli::add_server_token_option(desc, server_token_file);
  cli::add_network_options(desc, net);
  cli::add_metrics_options(desc, opts.metrics);
  po::variables_map vm;
  if (auto rc = cli::parse(
        argc, argv, desc, vm, app,
        "usage: actorps-server --coordinator HOST:PORT [options]\n"
        "Joins a distributed actorps job and hosts parameter shards until "
        "the coordinator ends the job.\n"
        "Exit codes: 0 the coordinator ended the job; 1 an error (cannot "
        "join, cannot listen, ...); 2 bad flags or files; 3 the coordinator "
        "was lost (died, or stopped answering heartbeats)."))
    return *rc;
  if (auto rc = cli::check(app, net))
    return *rc;
  if (auto rc = cli::resolve_token(app, tok, opts.token))
    return *rc;
  if (auto rc = cli::resolve_server_token(app, server_token_file,
                                          opts.server_token))
    return *rc;
  if (auto rc = cli::check_metrics(app, opts.metrics, !opts.token.empty()))
    return *rc;
  opts.on_metrics = [&opts](uint16_t p) {
    cli::log_info("metrics: http://" + opts.metrics.host + ":"
                  + std::to_string(p) + "/metrics");
  };
  if (auto rc = cli::check_range(app, "shards", opts.shards, 1,
                                 cli::max_shards))
    return *rc;
  if (auto rc = cli::check_threads(app, opts.system.threads))
    return *rc;
  if (auto rc = cli::check_range(app, "inflight-mb", inflight_mb, 0u, 1u << 20))
    return *rc;
  if (coordinator.empty())
    return cli::fail(app, "--coordinator HOST:PORT is required", 2);
  auto where = actorps::parse_endpoint(coordinator);
  if (!where)
    return cli::fail(app, "--coordinator: " + actorps::render(where.error()),
                     2);
  if (opts.shards == 0 || port > 65535 || timeout_ms <= 0)
    return cli::fail(app,
                     "--shards and --timeout-ms must be > 0, --port "
                     "0..65535",
                     2);
  opts.port = static_cast<uint16_t>(port);
  opts.inflight_bytes = std::size_t{inflight_mb} << 20;
  opts.connect_timeout
    = std::chrono::milliseconds{std::max(connect_timeout_ms, 0L)};
  opts.coordinator = *where;
  opts.timeout = std::chrono::milliseconds{timeout_ms};
  cli::apply_network(net, opts.system);
  if (auto w = cli::exposure_warning(opts.listen_address(), !opts.token.empty(),
                                     opts.system.tls.enabled());
      !w.empty())
    cli::log_error(w);
  opts.on_event = cli::event_printer(app, net);
  // This process ends with its job: UCX's teardown is left to the exit.
  actorps::leave_ucx_to_exit();
  bool joined = false;
  auto err = actorps::run_server(opts, [&](uint32_t rank) {
    joined = true;
    cli::set_log_rank(rank);
    cli::log_info("server rank " + std::to_string(rank) + " hosts "
                  + std::to_string(opts.shards) + " shards");
  });
  // 3: the job ran and the coordinator was lost (1: it never joined).
  if (err && joined && actorps::code_of(err) == actorps::errc::dead_node)
    return cli::fail(app, actorps::render(err), 3);
  return cli::finish(app, net, err ? actorps::render(err) : std::string{});
}

} // namespace

int main(int argc, char** argv) {
  return cli::guarded_main(app, [&] { return run(argc, argv); });
}
