// SPDX-License-Identifier: BSD-3-Clause
// actorps-worker: one worker process of a distributed job.
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>

#include "apps/common/cli.hpp"
#include "apps/common/curves.hpp"
#include "apps/common/mnist.hpp"
#include "apps/common/progress.hpp"
#include "apps/common/sparse.hpp"
#include "apps/common/synthetic.hpp"
#include "apps/common/train.hpp"
#include "messages/errors.hpp"
#include "runtime/kvstore.hpp"
#include "runtime/network.hpp"

namespace po = boost::program_options;
namespace cli = actorps::apps;

namespace {

const std::string app = "actorps-worker";

int run(int argc, char** argv) {
  actorps::store_options store;
  actorps::apps::synthetic_options job;
  actorps::apps::sparse_options sparse;
  cli::network_flags net;
  std::string config_file;
  std::string mode = "job";
  std::string job_name = "synthetic";
  actorps::apps::train_options train;
  std::string data_dir = actorps::apps::default_data_dir;
  long limit_train = 0;
  long limit_test = 0;
  std::string out_dir = "out";
  long connect_timeout_ms = 5000;
  long timeout_ms = 60000;
  // (Unset: the lowest long, which nobody types.)
  long rank = std::numeric_limits<long>::min();
  po::options_description desc{"Options"};
  cli::add_common_options(desc, config_file);
  desc.add_options()("coordinator", po::value(&store.coordinator),
                     "the coordinator's host:port (required)")(
    "rank", po::value(&rank),
    "take the place of this dead worker rank in a job whose workers all "
    "joined (not 0: rank 0 writes every key's first value); without it a "
    "worker joining a full job takes the lowest dead rank")(
    "mode", po::value(&mode)->default_value(mode),
    "dist_sync, dist_async or dist_ssp (must match the coordinator's), or job: "
    "whichever the coordinator runs")(
    "job", po::value(&job_name)->default_value(job_name),
    "the job to run: synthetic (exact-sum check), mnist (the Fashion-MNIST "
    "training job of actorps-train) or sparse (actorps-train's sparse "
    "logistic regression on a row table)")(
    "data", po::value(&data_dir)->default_value(data_dir),
    "mnist: folder with the four Fashion-MNIST idx .gz files")(
    "limit-train", po::value(&limit_train)->default_value(0),
    "mnist: use only the first N training samples (0: all)")(
    "limit-test", po::value(&limit_test)->default_value(0),
    "mnist: use only the first N test samples (0: all)")(
    "out", po::value(&out_dir)->default_value(out_dir),
    "mnist: rank 0 writes its loss and accuracy curves here (MODE.csv and "
    "MODE.svg, as actorps-train)")(
    "keys", po::value(&job.keys)->default_value(job.keys),
    "synthetic: number of keys")("size",
                                 po::value(&job.size)->default_value(job.size),
                                 "synthetic: floats per key")(
    "rounds", po::value(&job.rounds)->default_value(job.rounds),
    "synthetic: push+pull rounds")("progress", po::bool_switch(&job.progress),
                                   "synthetic: print a line after every round")(
    "round-ms", po::value(&job.round_ms)->default_value(job.round_ms),
    "synthetic: least time in ms between the starts of two rounds (a steady "
    "load; 0: as fast as it goes)")(
    "hold-after-rounds", po::value(&job.hold_after)->default_value(0),
    "synthetic: after N rounds (0: never), print \"rank R holds after N of M "
    "rounds\" and wait for a line on standard input, or its end, before going "
    "on")("tolerate-deaths", po::bool_switch(&job.tolerate_deaths),
          "synthetic: skip the value checks (other workers may be killed)")(
    "transport", po::value(&store.transport),
    "caf or ucx: what must carry tensor bytes to the servers (the join is "
    "refused if the coordinator chose the other); default: the job's");
  cli::add_timeout_options(desc, connect_timeout_ms, timeout_ms,
                           "bound on every push, pull and control call, in "
                           "ms");
  cli::add_network_options(desc, net);
  cli::add_metrics_options(desc, store.metrics);
  cli::token_flags tok;
  cli::add_token_options(desc, tok);
  cli::add_train_options(desc, train, "mnist: ");
  std::string export_path;
  cli::add_export_option(desc, export_path, "rank 0");
  cli::add_sparse_options(desc, sparse);
  std::string compression_text;
  cli::add_compression_option(desc, compression_text);
  po::variables_map vm;
  if (auto rc = cli::parse(
        argc, argv, desc, vm, app,
        "usage: actorps-worker --coordinator HOST:PORT [options]\n"
        "Joins a distributed actorps job as one worker and runs a job.\n"
        "Exit codes: 0 the job finished (and its checks held); 1 an error "
        "before it ran (cannot join, ...); 2 bad flags or files; 3 the job "
        "failed (a call failed: a dead server or coordinator, a timeout, a "
        "check)."))
    return *rc;
  if (auto rc = cli::check(app, net))
    return *rc;
  if (auto rc = cli::resolve_token(app, tok, store.token))
    return *rc;
  if (auto rc = cli::check_metrics(app, store.metrics, !store.token.empty()))
    return *rc;
  if (auto rc = cli::check_range(app, "keys", job.keys, 1, 1000000))
    return *rc;
  if (auto rc = cli::check_range(app, "size", job.size, 1, uint64_t{1} << 30))
    return *rc;
  if (auto rc = cli::check_range(app, "rounds", job.rounds, 1, 1000000000))
    return *rc;
  if (auto rc = cli::check_range(app, "round-ms", job.round_ms, 0, 3600000))
    return *rc;
  if (auto rc = cli::check_range(app, "hold-after-rounds", job.hold_after, 0,
                                 job.rounds))
    return *rc;
  if (rank != std::numeric_limits<long>::min()) {
    if (rank < 0 || rank >= static_cast<long>(cli::max_workers))
      return cli::fail(app,
                       "--rank must be 0.."
                         + std::to_string(cli::max_workers - 1) + ", got "
                         + std::to_string(rank),
                       2);
    store.rank = static_cast<uint32_t>(rank);
  }
  if (store.coordinator.empty())
    return cli::fail(app, "--coordinator HOST:PORT is required", 2);
  if (auto where = actorps::parse_endpoint(store.coordinator); !where)
    return cli::fail(app, "--coordinator: " + actorps::render(where.error()),
                     2);
  if (mode != "dist_sync" && mode != "dist_async" && mode != "dist_ssp"
      && mode != "job")
    return cli::fail(
      app,
      "--mode must be dist_sync, dist_async, dist_ssp or job, got '" + mode
        + "'",
      2);
  if (!store.transport.empty() && store.transport != "caf"
      && store.transport != "ucx")
    return cli::fail(
      app, "--transport must be caf or ucx, got '" + store.transport + "'", 2);
  if (job_name != "synthetic" && job_name != "mnist" && job_name != "sparse")
    return cli::fail(app,
                     "--job: unknown job '" + job_name
                       + "' (expected synthetic, mnist or sparse)",
                     2);
  if (auto rc = cli::check(app, sparse))
    return *rc;
  if (auto rc = cli::check(app, train))
    return *rc;
  if (auto rc = cli::resolve_resume(app, train))
    return *rc;
  if (!train.resume.empty() && job_name != "mnist")
    return cli::fail(app, "--resume needs --job mnist", 2);
  if (auto rc = cli::check_compression(app, compression_text,
                                       store.compression))
    return *rc;
  // 2-bit pushes are lossy: the synthetic job's exact sums cannot hold
  // (fp16 keeps its small integers exactly).
  job.check_values = store.compression.kind != actorps::codec::two_bit;
  if (limit_train < 0 || limit_test < 0)
    return cli::fail(app, "--limit-train and --limit-test must be >= 0", 2);
  actorps::apps::dataset train_set;
  actorps::apps::dataset test_set;
  if (job_name == "mnist") {
    // Checked before the run, as actorps-train does (the rank is known only
    // after the join: every worker checks).
    if (auto e = cli::prepare_output(out_dir + "/curves.csv"); !e.empty())
      return cli::fail(app, "--out: " + e, 2);
    for (auto [split, set, limit] :
         {std::tuple{"train", &train_set, limit_train},
          std::tuple{"t10k", &test_set, limit_test}}) {
      if (auto st = actorps::apps::load_split(data_dir, split, *set); !st.ok())
        return cli::fail(app, st.message);
      if (limit > 0 && limit < set->size()) {
        set->images.conservativeResize(Eigen::NoChange, limit);
        set->labels.resize(static_cast<size_t>(limit));
      }
    }
  }
  if (timeout_ms <= 0)
    return cli::fail(app, "--timeout-ms must be > 0", 2);
  if (auto rc = cli::check_export(app, export_path))
    return *rc;
  store.connect_timeout
    = std::chrono::milliseconds{std::max(connect_timeout_ms, 0L)};
  auto info = net.level >= cli::log_level::info;
  store.timeout = std::chrono::milliseconds{timeout_ms};
  cli::apply_network(net, store);
  // This process ends with its job: UCX's teardown is left to the exit.
  actorps::leave_ucx_to_exit();
  auto kv = actorps::kvstore::create(mode == "job" ? "dist" : mode, store);
  if (!kv)
    return cli::fail(app, actorps::render(kv.error()));
  kv->set_barrier_before_exit(!job.tolerate_deaths);
  cli::set_log_rank(kv->rank());
  if (kv->metrics_port() != 0)
    cli::log_info("metrics: http://" + store.metrics.host + ":"
                  + std::to_string(kv->metrics_port()) + "/metrics");
  if (info)
    cli::log_stream() << "rank " << kv->rank() << " of " << kv->num_workers()
                      << " (" << kv->type() << ")" << std::endl;
  std::ostringstream quiet;
  std::string problem;
  if (job_name == "mnist") {
    // Rank 0 shows the run as actorps-train does and keeps its curves.
    cli::progress_printer printer{train.epochs, cli::log_info};
    std::vector<actorps::apps::epoch_report> reports;
    actorps::apps::train_callbacks cb;
    if (info)
      cb.on_progress = [&](const actorps::apps::progress& p) {
        printer.update(p);
      };
    cb.on_epoch = [&](const actorps::apps::epoch_report& r) {
      reports.push_back(r);
      if (info)
        printer.epoch_done(r);
    };
    auto stem = out_dir + "/" + kv->type();
    std::unique_ptr<cli::step_csv> step_log;
    if (kv->rank() == 0) {
      step_log = std::make_unique<cli::step_csv>(stem + "-steps.csv");
      cb.on_step = [&](const actorps::apps::step_report& r) {
        step_log->add(r);
      };
    }
    if (kv->rank() == 0 && !train.resume.empty() && info)
      cli::log_info("resuming from " + train.resume);
    problem = actorps::apps::train_worker(*kv, train_set, test_set, train, cb);
    if (problem.empty() && kv->rank() == 0) {
      auto e = cli::write_csv(stem + ".csv", reports);
      if (e.empty())
        e = step_log->close();
      if (e.empty())
        e = cli::write_svg(stem + ".svg", app + ": " + kv->type(), reports);
      if (!e.empty())
        problem = "--out: " + e;
      if (problem.empty() && info)
        cli::log_stream() << "curves: " << stem << ".csv (per epoch), " << stem
                          << "-steps.csv (per step) and " << stem << ".svg"
                          << std::endl;
    }
    if (problem.empty() && info)
      cli::log_stream() << "rank " << kv->rank() << ": training done"
                        << std::endl;
  } else if (job_name == "sparse") {
    problem = actorps::apps::run_sparse(
      *kv, sparse, [&](const actorps::apps::sparse_report& r) {
        if (info)
          cli::log_stream() << "rank " << kv->rank() << ": "
                            << actorps::apps::describe(r) << std::endl;
      });
  } else {
    problem = actorps::apps::run_synthetic(*kv, job,
                                           info ? cli::log_stream() : quiet);
  }
  if (!problem.empty()) {
    // Leave at once (waiting for the others at the exit barrier would hold
    // them in sync rounds that need this worker's pushes), telling the
    // coordinator why.
    static_cast<void>(kv->close_failed(problem));
    return cli::fail(app, problem, 3);
  }
  if (!export_path.empty() && kv->rank() == 0) {
    // Rank 0's view once its own job ended (in async mode the others may
    // still be pushing).
    if (auto err = kv->export_weights(export_path)) {
      static_cast<void>(kv->close_failed("export: " + actorps::render(err)));
      return cli::fail(app, "--export: " + actorps::render(err), 3);
    }
    if (info)
      cli::log_stream() << "rank 0: weights written to " << export_path
                        << std::endl;
  }
  if (job_name != "synthetic") {
    if (auto err = kv->close())
      return cli::fail(app, "close: " + actorps::render(err), 3);
    return 0;
  }
  auto dead_workers = kv->num_dead_node(actorps::role::worker);
  auto dead_servers = kv->num_dead_node(actorps::role::server);
  if (info)
    cli::log_stream() << "rank " << kv->rank() << ": all "
                      << (job.tolerate_deaths || !job.check_values
                            ? "rounds done"
                            : "values exact")
                      << "; num_dead_node: workers="
                      << (dead_workers ? std::to_string(*dead_workers) : "?")
                      << " servers="
                      << (dead_servers ? std::to_string(*dead_servers) : "?")
                      << std::endl;
  if (auto err = kv->close())
    return cli::fail(app, "close: " + actorps::render(err), 3);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  return cli::guarded_main(app, [&] { return run(argc, argv); });
}
