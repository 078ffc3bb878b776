// SPDX-License-Identifier: BSD-3-Clause
// actorps-status: one table (or JSON) of a running distributed job.
#include <cstdio>
#include <iostream>
#include <string>

#include "apps/common/cli.hpp"
#include "core/status.hpp"
#include "messages/errors.hpp"
#include "runtime/metrics.hpp"
#include "runtime/network.hpp"

namespace po = boost::program_options;
namespace cli = actorps::apps;

namespace {

const std::string app = "actorps-status";

int run(int argc, char** argv) {
  actorps::status_options opts;
  cli::network_flags net;
  std::string config_file;
  std::string coordinator;
  bool json = false;
  bool password = false;
  long timeout_ms = 10000;
  po::options_description desc{"Options"};
  cli::add_common_options(desc, config_file);
  desc.add_options()("coordinator", po::value(&coordinator),
                     "the coordinator's host:port (required)")(
    "json", po::bool_switch(&json), "print one JSON object instead of tables")(
    "metrics-password", po::bool_switch(&password),
    "print the password of the job's /metrics endpoints (derived from the "
    "token; basic auth, any user name) and exit")(
    "timeout-ms", po::value(&timeout_ms)->default_value(timeout_ms),
    "how long to try reaching the coordinator and to wait for its answer");
  cli::token_flags tok;
  cli::add_token_options(desc, tok);
  cli::add_network_options(desc, net);
  po::variables_map vm;
  if (auto rc = cli::parse(
        argc, argv, desc, vm, app,
        "usage: actorps-status --coordinator HOST:PORT [--json] [options]\n"
        "Shows a running distributed job: its mode, the workers and servers "
        "that joined (address, rank, last heartbeat, alive / left / dead), "
        "the open barrier and whom it waits for, what each server holds and "
        "how many pushes, pulls and bytes each worker moved. It joins as an "
        "observer: it takes no rank and never holds the job up.\n"
        "Exit codes: 0 shown; 1 the coordinator cannot be reached or "
        "refused; 2 bad flags."))
    return *rc;
  if (auto rc = cli::check(app, net))
    return *rc;
  if (auto rc = cli::resolve_token(app, tok, opts.token))
    return *rc;
  if (password) {
    if (opts.token.empty())
      return cli::fail(app,
                       "--metrics-password needs the job's token "
                       "(--token-file or ACTORPS_TOKEN)",
                       2);
    std::printf("%s\n", actorps::metrics_password(opts.token).c_str());
    return 0;
  }
  if (coordinator.empty())
    return cli::fail(app, "--coordinator HOST:PORT is required", 2);
  auto where = actorps::parse_endpoint(coordinator);
  if (!where)
    return cli::fail(app, "--coordinator: " + actorps::render(where.error()),
                     2);
  if (timeout_ms <= 0)
    return cli::fail(app, "--timeout-ms must be > 0", 2);
  opts.coordinator = *where;
  opts.timeout = std::chrono::milliseconds{timeout_ms};
  cli::apply_network(net, opts.system);
  auto status = actorps::query_status(opts);
  if (!status)
    return cli::fail(app, actorps::render(status.error()), 1);
  auto text = json ? actorps::status_json(*status) + "\n"
                   : actorps::format_status(*status);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  return cli::guarded_main(app, [&] { return run(argc, argv); });
}
