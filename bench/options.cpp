// SPDX-License-Identifier: BSD-3-Clause
#include "bench/options.hpp"

#include "apps/common/cli.hpp"
#include "core/layout.hpp"

namespace po = boost::program_options;
namespace cli = actorps::apps;

namespace actorps::bench {

namespace {

constexpr const char* app = "actorps-bench";

void add_run_options(po::options_description& desc, bench_options& o,
                     std::string& max_inflight, std::string& server_inflight,
                     std::string& scheduler) {
  desc.add_options()("modes", po::value(&o.modes)->default_value(o.modes),
                     "local, dist or both (comma-separated)")(
    "sizes", po::value(&o.sizes)->default_value(o.sizes),
    "one-key cases: sizes in bytes (K, M suffixes; none: no such cases)")(
    "many", po::value(&o.many)->default_value(o.many),
    "many-key cases: KEYSxFLOATS, comma-separated (none: no such cases)")(
    "rows", po::value(&o.rows)->default_value(o.rows),
    "row-table cases: ROWSxDIMxBATCH, comma-separated, e.g. "
    "10000000x16x1000: a table of ROWS rows of DIM floats, each round a "
    "push_rows then a pull_rows of BATCH random rows (compare with --sizes "
    "of BATCH x DIM x 4 bytes; none: no such cases)")(
    "round", po::value(&o.round_kinds)->default_value(o.round_kinds),
    "round kinds, comma-separated: fused (one push_pull request per round) "
    "and/or split (a push request, wait, a pull request, wait)")(
    "backlog", po::value(&o.backlog)->default_value(o.backlog),
    "priority cases: the latency of a 4 KB pull at priority 10, and at "
    "priority 0, issued right after a push of this size at priority 0 (0: "
    "no priority cases)")(
    "compression",
    po::value(&o.compressed.codecs)->default_value(o.compressed.codecs),
    "compressed cases: codecs, comma-separated (fp16, 2bit, "
    "2bit:THRESHOLD; none: no such cases); one fused case per codec and "
    "--compressed-sizes entry, with bytes on the wire per round")(
    "compressed-sizes",
    po::value(&o.compressed.sizes)->default_value(o.compressed.sizes),
    "compressed cases: sizes of the one key, comma-separated")(
    "transport", po::value(&o.transports)->default_value(o.transports),
    "dist: how tensor bytes travel between the processes, comma-separated: "
    "caf (CAF's connections) and/or ucx (the UCX data plane; UCX_TLS picks "
    "its transports); each runs the dist cases, shown as mode dist or ucx")(
    "workers", po::value(&o.workers_text)->default_value(o.workers_text),
    "worker counts to run, comma-separated")(
    "shards", po::value(&o.shards)->default_value(o.shards),
    "shards (local: in the process; dist: in the one server process)")(
    "slice-floats",
    po::value(&o.tune.slice_floats)->default_value(o.tune.slice_floats),
    "largest slice of a sliced key, in floats")(
    "max-inflight", po::value(&max_inflight)->default_value(max_inflight),
    "per shard, bytes a worker keeps in flight before further requests wait "
    "in it, by priority (K, M suffixes)")(
    "warmup", po::value(&o.plan.warmup)->default_value(o.plan.warmup),
    "warm-up rounds per case (not measured)")(
    "rounds", po::value(&o.plan.rounds)->default_value(o.plan.rounds),
    "measured rounds per case")(
    "interleave", po::bool_switch(&o.plan.interleave),
    "the cases of each mode, transport and worker count take turns round by "
    "round (round 0 of each, then round 1, ...) instead of running one after "
    "the other, so that a busy machine slows them alike: for comparing cases "
    "(their ratio); no wire bytes or server memory per case then");
  cli::add_threads_option(desc, o.sys.threads,
                          "scheduler threads of every actor system (0: CAF's "
                          "default)");
  desc.add_options()(
    "scheduler", po::value(&scheduler)->default_value(scheduler),
    "CAF scheduler policy of every actor system: auto (sharing with the "
    "network, else work stealing), sharing or stealing")(
    "shard-threads",
    po::value(&o.tune.shard_threads)->default_value(o.tune.shard_threads),
    "dist servers run each shard on a thread of its own (actorps-server's "
    "default); false: on the scheduler's threads")(
    "server-inflight",
    po::value(&server_inflight)->default_value(server_inflight),
    "dist servers over ucx: bytes of workers' large pushes a server holds "
    "received and not yet applied (actorps-server --inflight-mb; a multiple "
    "of 1M; 0: no bound)")(
    "quick", po::bool_switch(&o.quick),
    "tiny sizes and few rounds (CI): --sizes 4K,64K --many 10x256,100x1 "
    "--rows 100000x4x100 "
    "--backlog 1M --compressed-sizes 64K --warmup 1 --rounds 3, quick "
    "limits")("no-limits", po::bool_switch(&o.no_limits),
              "skip measuring memcpy and loopback TCP")(
    "json", po::value(&o.json_path), "also write the results as JSON here")(
    "tls", po::value(&o.tls_dir),
    "dist: every connection over mutual TLS with DIR/ca.pem, DIR/node.pem "
    "and DIR/node.key (make them with: actorps-make-tls DIR node)")(
    "timeout-s", po::value(&o.timeout_s)->default_value(o.timeout_s),
    "dist: bound on each process's silence and exit, in seconds");
}

void add_role_options(po::options_description& hidden, bench_options& o) {
  hidden.add_options()("role", po::value(&o.role),
                       "coordinator|server|worker|basp-echo|basp-client|"
                       "broker-server|broker-client")(
    "coordinator", po::value(&o.coordinator),
    "host:port")("cases", po::value(&o.cases_text), "encoded cases")(
    "bench-workers", po::value(&o.bench_workers)->default_value(1),
    "workers of the job")("job-transport", po::value(&o.transport),
                          "the coordinator's job transport")(
    "server-pid", po::value(&o.server_pid),
    "the server process, whose peak RSS a worker "
    "measures per case");
}

// --quick: tiny sizes and few rounds, where the user gave none.
void apply_quick(const po::variables_map& vm, bench_options& o) {
  auto unset = [&](const char* name) { return vm[name].defaulted(); };
  if (unset("sizes"))
    o.sizes = "4K,64K";
  if (unset("many"))
    o.many = "10x256,100x1";
  if (unset("rows"))
    o.rows = "100000x4x100";
  if (unset("warmup"))
    o.plan.warmup = 1;
  if (unset("rounds"))
    o.plan.rounds = 3;
  if (unset("backlog"))
    o.backlog = "1M";
  if (unset("compressed-sizes"))
    o.compressed.sizes = "64K";
}

} // namespace

std::optional<int> parse_options(int argc, char** argv, bench_options& out) {
  std::string config_file;
  std::string max_inflight = std::to_string(out.tune.max_inflight);
  std::string server_inflight
    = out.tune.server_inflight == 0
        ? std::string{"0"}
        : std::to_string(out.tune.server_inflight >> 20) + "M";
  std::string scheduler = "auto";
  po::options_description desc{"Options"};
  cli::add_common_options(desc, config_file);
  add_run_options(desc, out, max_inflight, server_inflight, scheduler);
  po::options_description hidden{"Roles (started by the harness itself)"};
  add_role_options(hidden, out);
  po::options_description all;
  all.add(desc).add(hidden);
  po::variables_map vm;
  if (auto rc = cli::parse(
        argc, argv, all, vm, app,
        "usage: actorps-bench [options]\n"
        "Measures push+pull rounds (split: push every key, wait, pull every "
        "key, wait; fused: push_pull every key, wait; the shards sum the "
        "pushes of a round, no optimizer) in local "
        "mode (one process) and dist mode (coordinator, server and worker "
        "processes on 127.0.0.1), next to this machine's memcpy and loopback "
        "TCP limits. Prints a table; --json writes the figures."))
    return rc;
  if (!parse_scheduler_policy(scheduler, out.sys.scheduler))
    return cli::fail(app,
                     "--scheduler: expected auto, sharing or stealing, got '"
                       + scheduler + "'",
                     2);
  if (!parse_size(max_inflight, out.tune.max_inflight))
    return cli::fail(app,
                     "--max-inflight: '" + max_inflight
                       + "' is not a size such as 8M (a multiple of 4 bytes)",
                     2);
  if (server_inflight == "0")
    out.tune.server_inflight = 0;
  else if (!parse_size(server_inflight, out.tune.server_inflight)
           || out.tune.server_inflight % (1 << 20) != 0)
    return cli::fail(app,
                     "--server-inflight: '" + server_inflight
                       + "' is not a size such as 8M (a multiple of 1M)",
                     2);
  if (!out.tls_dir.empty()) {
    out.sys.tls = tls_files{out.tls_dir + "/node.pem",
                            out.tls_dir + "/node.key", out.tls_dir + "/ca.pem"};
    if (auto text = tls_problem(out.sys.tls); !text.empty())
      return cli::fail(app, "--tls " + out.tls_dir + ": " + text, 2);
  }
  if (out.quick)
    apply_quick(vm, out);
  return std::nullopt;
}

std::string plan_run(bench_options& o) {
  if (auto e = make_cases(o.sizes, o.many, o.round_kinds, o.backlog,
                          o.compressed, o.cases);
      !e.empty())
    return e;
  if (auto e = add_row_cases(o.rows, o.cases); !e.empty())
    return e;
  if (o.cases.empty())
    return "no cases: give --sizes, --many and/or --rows";
  for (const auto& w : split(o.workers_text, ',')) {
    uint64_t n = 0;
    if (!parse_count(w, n) || w.size() > 3 || n == 0)
      return "--workers: '" + w + "' is not a count from 1";
    o.worker_counts.push_back(static_cast<uint32_t>(n));
  }
  for (const auto& m : split(o.modes, ',')) {
    if (m == "local")
      o.local = true;
    else if (m == "dist")
      o.dist = true;
    else
      return "--modes: unknown mode '" + m + "'";
  }
  for (const auto& t : split(o.transports, ',')) {
    if (t != "caf" && t != "ucx")
      return "--transport: unknown transport '" + t + "' (caf or ucx)";
#ifndef ACTORPS_HAVE_UCX
    if (t == "ucx")
      return "--transport ucx needs a build with UCX (Debian: libucx-dev)";
#endif
    o.dist_transports.push_back(t);
  }
  if (o.dist && o.dist_transports.empty())
    return "--transport: need caf and/or ucx";
  if (o.shards > cli::max_shards || o.sys.threads > cli::max_threads)
    return "--shards must be 1.." + std::to_string(cli::max_shards)
           + " and --threads 0.." + std::to_string(cli::max_threads);
  if (!o.json_path.empty())
    if (auto e = cli::prepare_output(o.json_path); !e.empty())
      return "--json: " + e;
  if (o.worker_counts.empty() || (!o.local && !o.dist) || o.plan.rounds == 0
      || o.shards == 0 || o.timeout_s <= 0 || o.tune.slice_floats == 0
      || o.tune.slice_floats > core::max_slice_floats)
    return "need at least one worker count and mode, --rounds, --shards and "
           "--timeout-s > 0, --slice-floats 1.."
           + std::to_string(core::max_slice_floats);
  return {};
}

} // namespace actorps::bench
