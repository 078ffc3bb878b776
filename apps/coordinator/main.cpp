// SPDX-License-Identifier: BSD-3-Clause
// actorps-coordinator: the coordinator process of a distributed job.
#include <filesystem>
#include <iostream>
#include <string>

#include "apps/common/cli.hpp"
#include "core/layout.hpp"
#include "messages/control.hpp"
#include "messages/errors.hpp"
#include "runtime/network.hpp"

namespace po = boost::program_options;
namespace cli = actorps::apps;

namespace {

const std::string app = "actorps-coordinator";

int run(int argc, char** argv) {
  actorps::coordinator_options opts;
  cli::network_flags net;
  std::string config_file;
  std::string mode = "dist_sync";
  uint64_t staleness = 2;
  unsigned port = 0;
  long timeout_ms = 60000;
  long status_ms = 5000;
  std::string port_file;
  double checkpoint_every_s = 60;
  double recovery_s = 0;
  po::options_description desc{"Options"};
  cli::add_common_options(desc, config_file);
  std::string bind;
  std::string transport = "auto";
  desc.add_options()("host", po::value(&opts.host)->default_value(opts.host),
                     "address to listen on (\"\" for every interface)")(
    "bind", po::value(&bind),
    "the same as --host (the name the servers use for where they listen); "
    "give one of the two")(
    "port", po::value(&port)->default_value(port),
    "port to listen on; 0 picks a free one (printed at start)")(
    "checkpoint-dir", po::value(&opts.checkpoint_dir),
    "periodic checkpoints into this folder: at the first barrier after "
    "--checkpoint-every seconds, with every worker waiting there, every "
    "shard's state is written as checkpoint-N.actorps (N: the barrier's "
    "number), atomically; the newest --checkpoint-keep stay. A worker "
    "resumes with --resume DIR")(
    "checkpoint-every",
    po::value(&checkpoint_every_s)->default_value(checkpoint_every_s),
    "seconds between checkpoints (0: at every barrier)")(
    "checkpoint-keep",
    po::value(&opts.checkpoint_keep)->default_value(opts.checkpoint_keep),
    "checkpoints kept (1..1000)")(
    "recovery-timeout", po::value(&recovery_s)->default_value(recovery_s),
    "seconds after a server died during which a new actorps-server may "
    "take its place, restored from the newest checkpoint of "
    "--checkpoint-dir (which it needs); the workers' calls to the dead "
    "server wait for it that long and are then sent to the replacement. "
    "Updates applied after that checkpoint are lost (dist_sync and dist_ssp: "
    "the replacement's rounds and clocks go on from the workers'). 0: a "
    "dead server fails those calls at once")(
    "replicas", po::value(&opts.replicas)->default_value(opts.replicas),
    "copies of every slice: 1, 2 or 3 (each server's shards are backed up "
    "on the next server, and with 3 also on the one after it, in a chain: "
    "every copy applies a push before it is acknowledged; when a server "
    "dies, its backups take over and the job goes on with nothing "
    "acknowledged lost, with 3 also after a second death; needs as many "
    "--servers)")(
    "port-file", po::value(&port_file),
    "once listening, write the port (digits and a newline) to this file, "
    "atomically: a script may wait for the file and read it")(
    "status-interval-ms", po::value(&status_ms)->default_value(status_ms),
    "while servers or workers are missing, say whom the job waits for this "
    "often (0: never)")("mode", po::value(&mode)->default_value(mode),
                        "dist_sync, dist_async or dist_ssp (bounded "
                        "staleness, see --staleness)")(
    "staleness", po::value(&staleness)->default_value(staleness),
    "dist_ssp: a worker's pull of a key waits until every live worker "
    "pushed that key at least (its own pushes - staleness) times; 0 waits "
    "as BSP does, a large bound never waits (0..1000000)")(
    "workers", po::value(&opts.num_workers)->default_value(opts.num_workers),
    "number of workers of the job")(
    "servers", po::value(&opts.num_servers)->default_value(opts.num_servers),
    "number of servers of the job")(
    "bigarray-bound",
    po::value(&opts.bigarray_bound)->default_value(opts.bigarray_bound),
    "keys with at least this many floats are sliced over all shards")(
    "slice-floats",
    po::value(&opts.slice_floats)->default_value(opts.slice_floats),
    "largest slice of a sliced key, in floats (1..33554432)")(
    "timeout-ms", po::value(&timeout_ms)->default_value(timeout_ms),
    "timeout of the coordinator's requests to shards, in ms")(
    "transport", po::value(&transport)->default_value(transport),
    "what carries tensor bytes between workers and servers: caf (CAF's "
    "connections, with TLS when set), ucx (the UCX data plane: shared "
    "memory on one host, TCP or RDMA between hosts; unencrypted) or auto "
    "(ucx when built with UCX and no TLS is set, else caf); every node "
    "follows the coordinator");
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
        "usage: actorps-coordinator --workers W --servers S [options]\n"
        "Runs the coordinator of a distributed actorps job and prints the "
        "address it listens on; exits once every worker is done.\n"
        "Exit codes: 0 every node finished; 1 an error before the job ran "
        "(cannot listen, ...); 2 bad flags or files; 3 the job ended with "
        "nodes lost (a worker down before it closed, a server down before "
        "the end)."))
    return *rc;
  if (auto rc = cli::check(app, net))
    return *rc;
  if (vm.count("bind")) {
    if (!vm["host"].defaulted())
      return cli::fail(app, "give --bind or --host, not both", 2);
    opts.host = bind;
  }
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
  if (auto rc = cli::check_range(app, "workers", opts.num_workers, 1,
                                 cli::max_workers))
    return *rc;
  if (auto rc = cli::check_range(app, "servers", opts.num_servers, 1,
                                 cli::max_servers))
    return *rc;
  if (auto rc = cli::check_threads(app, opts.system.threads))
    return *rc;
  if (transport != "caf" && transport != "ucx" && transport != "auto")
    return cli::fail(
      app, "--transport must be caf, ucx or auto, got '" + transport + "'", 2);
  if (transport == "ucx" && !actorps::built_with_ucx())
    return cli::fail(app,
                     "--transport ucx: this build has no UCX (Debian: "
                     "libucx-dev, then rebuild)",
                     2);
  opts.transport = transport == "ucx" ? actorps::transport::ucx
                   : transport == "caf"
                     ? actorps::transport::caf
                     : actorps::default_transport(net.tls.enabled());
  transport = opts.transport == actorps::transport::ucx ? "ucx" : "caf";
  if (mode != "dist_sync" && mode != "dist_async" && mode != "dist_ssp")
    return cli::fail(app,
                     "--mode must be dist_sync, dist_async or dist_ssp, got '"
                       + mode + "'",
                     2);
  if (auto rc = cli::check_range(app, "staleness", staleness, 0, 1000000))
    return *rc;
  if (!(checkpoint_every_s >= 0 && checkpoint_every_s <= 1e7))
    return cli::fail(app, "--checkpoint-every must be 0..1e7 seconds", 2);
  if (auto rc = cli::check_range(app, "checkpoint-keep", opts.checkpoint_keep,
                                 1, 1000))
    return *rc;
  if (!opts.checkpoint_dir.empty())
    if (auto e = cli::prepare_output(opts.checkpoint_dir + "/probe");
        !e.empty())
      return cli::fail(app, "--checkpoint-dir: " + e, 2);
  opts.checkpoint_every = std::chrono::milliseconds{
    static_cast<long long>(checkpoint_every_s * 1000)};
  if (auto rc = cli::check_range(app, "replicas", opts.replicas, 1, 3))
    return *rc;
  if (opts.replicas > 1 && opts.num_servers < opts.replicas)
    return cli::fail(app,
                     "--replicas " + std::to_string(opts.replicas)
                       + " needs --servers " + std::to_string(opts.replicas)
                       + " or more (each copy of a shard lives on a server "
                         "of its own)",
                     2);
  if (!(recovery_s >= 0 && recovery_s <= 1e6))
    return cli::fail(app, "--recovery-timeout must be 0..1e6 seconds", 2);
  if (recovery_s > 0 && opts.checkpoint_dir.empty())
    return cli::fail(app,
                     "--recovery-timeout needs --checkpoint-dir (a "
                     "replacement server is restored from its newest "
                     "checkpoint)",
                     2);
  opts.recovery_timeout
    = std::chrono::milliseconds{static_cast<long long>(recovery_s * 1000)};
  opts.on_recovery = [](const std::string& line, bool ok) {
    if (ok)
      cli::log_info(line);
    else
      cli::log_error(line);
  };
  opts.on_checkpoint = [](const std::string& line, bool ok) {
    if (ok)
      cli::log_info(line);
    else
      cli::log_error(line);
  };
  if (port > 65535 || timeout_ms <= 0 || status_ms < 0)
    return cli::fail(app,
                     "--port must be 0..65535, --timeout-ms > 0 and "
                     "--status-interval-ms >= 0",
                     2);
  if (!port_file.empty()) {
    if (auto e = cli::prepare_output(port_file); !e.empty())
      return cli::fail(app, "--port-file: " + e, 2);
    // A file left by an earlier run must not pass for this one's.
    std::error_code ec;
    std::filesystem::remove(port_file, ec);
  }
  if (opts.bigarray_bound == 0 || opts.slice_floats == 0
      || opts.slice_floats > actorps::core::max_slice_floats)
    return cli::fail(app,
                     "--bigarray-bound must be > 0 and --slice-floats 1.."
                       + std::to_string(actorps::core::max_slice_floats),
                     2);
  opts.port = static_cast<uint16_t>(port);
  opts.sync = mode == "dist_sync";
  if (mode == "dist_ssp")
    opts.staleness = static_cast<int32_t>(staleness);
  opts.timeout = std::chrono::milliseconds{timeout_ms};
  cli::apply_network(net, opts.system);
  if (auto w = cli::exposure_warning(opts.host, !opts.token.empty(),
                                     opts.system.tls.enabled());
      !w.empty())
    cli::log_error(w);
  opts.on_event = cli::event_printer(app, net);
  opts.status_interval = std::chrono::milliseconds{status_ms};
  if (net.level >= cli::log_level::info)
    opts.on_status = [&](const std::string& line) { cli::log_info(line); };
  auto err = actorps::run_coordinator(opts, [&](uint16_t p) {
    if (!port_file.empty())
      if (auto e = cli::write_file_atomically(port_file,
                                              std::to_string(p) + "\n");
          !e.empty())
        cli::log_error("--port-file: " + e);
    // Printed at every log level: scripts read the port from it.
    cli::log_always("listening on " + (opts.host.empty() ? "*" : opts.host)
                    + ":" + std::to_string(p) + " (" + mode + " over "
                    + transport + ", " + std::to_string(opts.num_workers)
                    + " workers, " + std::to_string(opts.num_servers)
                    + " servers)");
  });
  // 3: the job ran, but nodes were lost (as a worker whose job failed).
  if (err && actorps::code_of(err) == actorps::errc::dead_node)
    return cli::fail(app, actorps::render(err), 3);
  return cli::finish(app, net, err ? actorps::render(err) : std::string{});
}

} // namespace

int main(int argc, char** argv) {
  return cli::guarded_main(app, [&] { return run(argc, argv); });
}
