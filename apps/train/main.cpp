// SPDX-License-Identifier: BSD-3-Clause
// actorps-train: data-parallel training of a Fashion-MNIST MLP through a
// local actorps store, or in one process without it (--baseline).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "apps/common/cli.hpp"
#include "apps/common/curves.hpp"
#include "apps/common/mnist.hpp"
#include "apps/common/progress.hpp"
#include "apps/common/sparse.hpp"
#include "apps/common/train.hpp"
#include "messages/errors.hpp"
#include "runtime/kvstore.hpp"

namespace po = boost::program_options;
namespace cli = actorps::apps;

namespace {

const std::string app = "actorps-train";

int run(int argc, char** argv) {
  cli::train_options train;
  actorps::store_options store;
  store.num_workers = 4;
  std::string config_file;
  std::string data_dir = cli::default_data_dir;
  std::string mode = "async";
  std::string job = "mnist";
  actorps::apps::sparse_options sparse;
  std::string out_dir = "out";
  bool baseline = false;
  long limit_train = 0;
  long limit_test = 0;
  po::options_description desc{"Options"};
  cli::add_common_options(desc, config_file);
  desc.add_options()("job", po::value(&job)->default_value(job),
                     "mnist (an MLP on Fashion-MNIST) or sparse (logistic "
                     "regression on a synthetic sparse data set with a "
                     "planted solution, its weights a row table)")(
    "data", po::value(&data_dir)->default_value(data_dir),
    "folder with the four Fashion-MNIST idx .gz files")(
    "workers", po::value(&store.num_workers)->default_value(4),
    "worker threads (each trains on its shard of the data)")(
    "shards", po::value(&store.num_shards)->default_value(2),
    "shard actors")("mode", po::value(&mode)->default_value(mode),
                    "async, sync or ssp (bounded staleness, see --staleness)")(
    "staleness", po::value(&store.staleness)->default_value(store.staleness),
    "ssp: a worker's pull of a layer waits until every worker pushed that "
    "layer at least (its own pushes - staleness) times (0..1000000)")(
    "baseline", po::bool_switch(&baseline),
    "train in one process without a parameter server, for comparison")(
    "limit-train", po::value(&limit_train)->default_value(0),
    "use only the first N training samples (0: all)")(
    "limit-test", po::value(&limit_test)->default_value(0),
    "use only the first N test samples (0: all)")(
    "out", po::value(&out_dir)->default_value(out_dir),
    "folder for the curves (CSV and SVG)");
  cli::add_threads_option(desc, store.threads,
                          "actor-system scheduler threads (0: the cores the "
                          "training threads leave, at least 1)");
  std::string scheduler_text = "auto";
  cli::add_scheduler_option(desc, scheduler_text,
                            "CAF scheduler policy of the store's actor "
                            "system: auto (= stealing in one process), "
                            "sharing or stealing");
  cli::add_train_options(desc, train);
  std::string export_path;
  cli::add_export_option(desc, export_path, "worker 0");
  cli::add_sparse_options(desc, sparse);
  std::string compression_text;
  cli::add_compression_option(desc, compression_text);
  po::variables_map vm;
  if (auto rc = cli::parse(
        argc, argv, desc, vm, app,
        "usage: actorps-train [options]\n"
        "Trains an MLP 784-256-128-10 on Fashion-MNIST, data-parallel through "
        "a local actorps store (or --baseline in one process), and writes "
        "the loss and accuracy curves; or, with --job sparse, a sparse "
        "logistic regression whose weights are a row table."))
    return *rc;
  if (mode != "async" && mode != "sync" && mode != "ssp")
    return cli::fail(
      app, "--mode must be async, sync or ssp, got '" + mode + "'", 2);
  if (auto rc = cli::check_range(app, "staleness", store.staleness, 0, 1000000))
    return *rc;
  if (job != "mnist" && job != "sparse")
    return cli::fail(app, "--job must be mnist or sparse, got '" + job + "'",
                     2);
  if (job == "sparse" && (baseline || !export_path.empty()))
    return cli::fail(app, "--job sparse takes neither --baseline nor --export",
                     2);
  if (auto rc = cli::check(app, sparse))
    return *rc;
  if (auto rc = cli::check(app, train))
    return *rc;
  if (auto rc = cli::resolve_resume(app, train))
    return *rc;
  if (!train.resume.empty() && baseline)
    return cli::fail(app, "--resume needs a store (not --baseline)", 2);
  if (!train.resume.empty())
    std::printf("resuming from %s\n", train.resume.c_str());
  if (auto rc = cli::check_compression(app, compression_text,
                                       store.compression))
    return *rc;
  if (auto rc = cli::check_range(app, "workers", store.num_workers, 1, 256))
    return *rc;
  if (auto rc = cli::check_range(app, "shards", store.num_shards, 1,
                                 cli::max_shards))
    return *rc;
  if (auto rc = cli::check_threads(app, store.threads))
    return *rc;
  if (auto rc = cli::check_scheduler(app, scheduler_text, store.scheduler))
    return *rc;
  if (limit_train < 0 || limit_test < 0)
    return cli::fail(app, "--limit-train and --limit-test must be >= 0", 2);
  if (store.threads == 0) {
    // The training threads keep the cores busy; more scheduler threads than
    // cores left only contend with them (measured on 2 cores, 4 workers:
    // 1 thread 38k samples/s, CAF's default of 4 threads 20k-35k).
    auto cores = std::max(1u, std::thread::hardware_concurrency());
    store.threads = cores > store.num_workers ? cores - store.num_workers : 1;
  }
  auto type = mode == "sync"  ? "local_sync"
              : mode == "ssp" ? "local_ssp"
                              : "local_async";
  if (job == "sparse")
    return cli::run_sparse_local(app, type, store, sparse,
                                 out_dir + "/sparse-" + mode + ".csv");
  // The output folder before the run, not after it: a bad --out fails
  // at once instead of after the training.
  const std::string stem = out_dir + "/" + (baseline ? "baseline" : mode);
  if (auto e = cli::prepare_output(stem + ".csv"); !e.empty())
    return cli::fail(app, "--out: " + e, 2);
  if (baseline && !export_path.empty())
    return cli::fail(app, "--export needs a store (not --baseline)", 2);
  if (auto rc = cli::check_export(app, export_path))
    return *rc;
  cli::dataset train_set;
  cli::dataset test_set;
  if (auto st = cli::load_split(data_dir, "train", train_set); !st.ok())
    return cli::fail(app, st.message);
  if (auto st = cli::load_split(data_dir, "t10k", test_set); !st.ok())
    return cli::fail(app, st.message);
  auto limit = [](cli::dataset& d, long n) {
    if (n > 0 && n < d.size()) {
      d.images.conservativeResize(Eigen::NoChange, n);
      d.labels.resize(static_cast<size_t>(n));
    }
  };
  limit(train_set, limit_train);
  limit(test_set, limit_test);
  std::string what
    = baseline ? "single-process baseline (no parameter server)"
               : std::string{type} + " store, "
                   + (mode == "ssp"
                        ? "staleness " + std::to_string(store.staleness) + ", "
                        : std::string{})
                   + std::to_string(store.num_workers) + " workers, "
                   + std::to_string(store.num_shards) + " shards";
  auto server = cli::server_optimizer(train, mode == "sync", store.num_workers,
                                      static_cast<uint64_t>(train_set.size()));
  std::string note;
  if (!baseline && mode != "sync") {
    char buf[96];
    std::snprintf(buf, sizeof(buf),
                  " (on the shards: momentum %g, asynchrony adds its own)",
                  double(server.momentum));
    note = buf;
  }
  std::printf("actorps-train: Fashion-MNIST MLP 784-256-128-10, %lld train / "
              "%lld test samples, %s, batch %u, SGD lr %g (%s) momentum "
              "%g%s\n",
              static_cast<long long>(train_set.size()),
              static_cast<long long>(test_set.size()), what.c_str(),
              train.batch, double(train.learning_rate),
              train.lr_schedule.c_str(), double(train.momentum), note.c_str());
  cli::progress_printer printer{train.epochs};
  std::vector<cli::epoch_report> reports;
  std::mutex mtx;
  cli::train_callbacks cb;
  cb.on_progress = [&](const cli::progress& p) { printer.update(p); };
  cli::step_csv step_log{stem + "-steps.csv"};
  if (!step_log.error().empty())
    return cli::fail(app, "--out: " + step_log.error(), 2);
  cb.on_step = [&](const cli::step_report& r) { step_log.add(r); };
  cb.on_epoch = [&](const cli::epoch_report& r) {
    std::lock_guard<std::mutex> guard{mtx};
    reports.push_back(r);
    printer.epoch_done(r);
  };
  auto start = std::chrono::steady_clock::now();
  std::vector<std::string> errors;
  if (baseline) {
    errors.push_back(cli::train_baseline(train_set, test_set, train, cb));
  } else {
    auto kv = actorps::kvstore::create(type, store);
    if (!kv)
      return cli::fail(app, actorps::render(kv.error()));
    std::vector<actorps::kvstore> handles;
    for (uint32_t r = 0; r < store.num_workers; ++r) {
      auto h = kv->worker(r);
      if (!h)
        return cli::fail(app, actorps::render(h.error()));
      handles.push_back(std::move(*h));
    }
    errors.resize(store.num_workers);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < store.num_workers; ++r)
      threads.emplace_back([&, r] {
        errors[r] = cli::train_worker(handles[r], train_set, test_set, train,
                                      r == 0 ? cb : cli::train_callbacks{});
        if (!errors[r].empty()) {
          // Let the others go on (or fail) without waiting for this one.
          handles[r].set_barrier_before_exit(false);
          static_cast<void>(handles[r].close());
        }
      });
    for (auto& t : threads)
      t.join();
    bool ok = std::all_of(errors.begin(), errors.end(),
                          [](const std::string& e) { return e.empty(); });
    if (ok && !export_path.empty()) {
      if (auto err = handles[0].export_weights(export_path))
        return cli::fail(app, "--export: " + actorps::render(err));
      std::printf("weights: %s\n", export_path.c_str());
    }
  }
  for (auto& e : errors)
    if (!e.empty())
      return cli::fail(app, e);
  auto total
    = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  std::printf("total time %.1f s\n", total);
  if (auto e = cli::write_csv(stem + ".csv", reports); !e.empty())
    return cli::fail(app, e);
  if (auto e = step_log.close(); !e.empty())
    return cli::fail(app, e);
  if (auto e = cli::write_svg(stem + ".svg", "actorps-train: " + what, reports);
      !e.empty())
    return cli::fail(app, e);
  std::printf("curves: %s.csv (per epoch), %s-steps.csv (per step) and "
              "%s.svg\n",
              stem.c_str(), stem.c_str(), stem.c_str());
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  return cli::guarded_main(app, [&] { return run(argc, argv); });
}
