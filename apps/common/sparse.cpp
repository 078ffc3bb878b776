// SPDX-License-Identifier: BSD-3-Clause
#include "apps/common/sparse.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <boost/program_options.hpp>

#include "apps/common/cli.hpp"
#include "messages/errors.hpp"

namespace actorps::apps {

namespace {

// splitmix64: each draw depends on the seed and its place only.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A double in [0, 1) from 53 bits of `x`.
double unit(uint64_t x) {
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}

// log(1 + exp(-m)) without overflow.
double softplus_neg(double m) {
  return m > 0 ? std::log1p(std::exp(-m)) : -m + std::log1p(std::exp(m));
}

const std::string table = "sparse.w";

} // namespace

sparse_data::sparse_data(const sparse_options& opts)
  : opts_(opts), bound_(static_cast<float>(2.0 * std::sqrt(3.0 / opts.nnz))) {
  // nop
}

float sparse_data::planted(uint64_t feature) const {
  auto u = unit(mix(opts_.seed * 0x632be59bd9b4e019ULL ^ feature));
  return static_cast<float>(bound_ * (2.0 * u - 1.0));
}

void sparse_data::sample(uint64_t index, std::vector<uint64_t>& ids,
                         float& label) const {
  ids.resize(opts_.nnz);
  auto base = mix(opts_.seed ^ (index * 0xd1342543de82ef95ULL));
  double margin = 0;
  for (uint32_t j = 0; j < opts_.nnz; ++j) {
    auto u = unit(mix(base + j));
    auto id = static_cast<uint64_t>(std::pow(u, opts_.skew)
                                    * static_cast<double>(opts_.features));
    ids[j] = std::min(id, opts_.features - 1);
    margin += planted(ids[j]);
  }
  auto p = 1.0 / (1.0 + std::exp(-margin));
  label = unit(mix(base ^ 0x5851f42d4c957f2dULL)) < p ? 1.0f : 0.0f;
}

double log_loss(const std::vector<double>& margins,
                const std::vector<float>& labels) {
  double sum = 0;
  for (size_t i = 0; i < margins.size(); ++i)
    sum += softplus_neg(labels[i] > 0.5f ? margins[i] : -margins[i]);
  return margins.empty() ? 0.0 : sum / static_cast<double>(margins.size());
}

namespace {

// The samples of one step, their distinct features, and where each
// sample's features lie among them.
struct batch_rows {
  std::vector<uint64_t> rows;
  std::vector<uint32_t> uses;
  std::vector<float> labels;

  void fill(const sparse_data& data, uint64_t first, uint32_t n) {
    rows.clear();
    uses.clear();
    labels.resize(n);
    std::unordered_map<uint64_t, uint32_t> where;
    std::vector<uint64_t> ids;
    for (uint32_t i = 0; i < n; ++i) {
      data.sample(first + i, ids, labels[i]);
      for (auto id : ids) {
        auto [at, fresh]
          = where.try_emplace(id, static_cast<uint32_t>(rows.size()));
        if (fresh)
          rows.push_back(id);
        uses.push_back(at->second);
      }
    }
  }
};

} // namespace

std::string
run_sparse(kvstore& kv, const sparse_options& opts,
           const std::function<void(const sparse_report&)>& on_report) {
  auto rank = kv.rank();
  auto workers = kv.num_workers();
  auto fail = [&](const std::string& what, const caf::error& err) {
    return "rank " + std::to_string(rank) + ": " + what + ": " + render(err);
  };
  if (rank == 0) {
    optimizer_config ada;
    ada.name = "adagrad";
    ada.learning_rate = opts.learning_rate;
    // A sync round sums the workers' gradients: average them.
    ada.rescale_grad = kv.synchronous() ? 1.0f / static_cast<float>(workers)
                                        : 1.0f;
    if (auto err = kv.set_optimizer(ada))
      return fail("set_optimizer", err);
  }
  if (auto err = kv.init_table(table, opts.features, 1))
    return fail("init_table", err);
  if (auto err = kv.barrier())
    return fail("barrier", err);
  sparse_data data{opts};
  sparse_report report;
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now()
                                         - start)
      .count();
  };
  // Rank 0's measurement: the held-out loss of the model and the planted
  // weights, pulling the rows of 1000 samples at a time.
  auto evaluate = [&]() -> std::string {
    std::vector<double> margins;
    std::vector<double> planted;
    std::vector<float> labels;
    batch_rows b;
    for (uint32_t first = 0; first < opts.eval_samples; first += 1000) {
      auto n = std::min<uint32_t>(1000, opts.eval_samples - first);
      b.fill(data, sparse_data::held_out(first), n);
      Eigen::VectorXf w(static_cast<Eigen::Index>(b.rows.size()));
      auto t = kv.pull_rows(table, b.rows, w);
      if (!t)
        return fail("pull_rows", t.error());
      if (auto err = kv.wait(*t))
        return fail("pull_rows", err);
      for (uint32_t i = 0; i < n; ++i) {
        double m = 0;
        double p = 0;
        for (uint32_t j = 0; j < opts.nnz; ++j) {
          auto r = b.uses[i * opts.nnz + j];
          m += w[r];
          p += data.planted(b.rows[r]);
        }
        margins.push_back(m);
        planted.push_back(p);
      }
      labels.insert(labels.end(), b.labels.begin(), b.labels.end());
    }
    report.loss = log_loss(margins, labels);
    report.planted_loss = log_loss(planted, labels);
    return {};
  };
  batch_rows b;
  Eigen::VectorXf w;
  Eigen::VectorXf g;
  report.loss = std::numeric_limits<double>::quiet_NaN();
  report.planted_loss = report.loss;
  for (uint64_t step = 0; step < opts.steps; ++step) {
    // Worker r's samples of step s: disjoint from every other's.
    b.fill(data, (step * workers + rank) * opts.batch, opts.batch);
    auto n = static_cast<Eigen::Index>(b.rows.size());
    w.resize(n);
    auto t = kv.pull_rows(table, b.rows, w);
    if (!t)
      return fail("pull_rows", t.error());
    if (auto err = kv.wait(*t))
      return fail("pull_rows", err);
    // The mean log loss's gradient: (sigmoid(margin) - label) / batch on
    // each feature of each sample.
    g.setZero(n);
    for (uint32_t i = 0; i < opts.batch; ++i) {
      double m = 0;
      for (uint32_t j = 0; j < opts.nnz; ++j)
        m += w[b.uses[i * opts.nnz + j]];
      auto d = static_cast<float>((1.0 / (1.0 + std::exp(-m)) - b.labels[i])
                                  / opts.batch);
      for (uint32_t j = 0; j < opts.nnz; ++j)
        g[b.uses[i * opts.nnz + j]] += d;
    }
    if (auto err = kv.push_rows(table, b.rows, g))
      return fail("push_rows", err);
    report.rows += 2 * b.rows.size();
    report.bytes += 2 * b.rows.size() * (sizeof(uint64_t) + sizeof(float));
    report.step = step + 1;
    if (rank == 0 && opts.eval_every > 0 && report.step % opts.eval_every == 0
        && report.step < opts.steps) {
      if (auto e = evaluate(); !e.empty())
        return e;
      report.seconds = elapsed();
      on_report(report);
    }
  }
  if (auto err = kv.wait_all())
    return fail("push_rows", err);
  report.seconds = elapsed();
  // The loss of the finished model: every worker's pushes are in.
  if (auto err = kv.barrier())
    return fail("barrier", err);
  if (rank == 0) {
    if (auto e = evaluate(); !e.empty())
      return e;
  }
  on_report(report);
  return {};
}

} // namespace actorps::apps

namespace actorps::apps {

namespace po = boost::program_options;

namespace {

std::string shortest(float x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", double(x));
  return buf;
}

} // namespace

void add_sparse_options(po::options_description& desc, sparse_options& opts) {
  desc.add_options()(
    "features", po::value(&opts.features)->default_value(opts.features),
    "sparse job: rows of the weight table (features of the data set)")(
    "nnz", po::value(&opts.nnz)->default_value(opts.nnz),
    "sparse job: nonzero features per sample")(
    "skew", po::value(&opts.skew)->default_value(opts.skew),
    "sparse job: feature ids are features x u^skew, u uniform (1: uniform "
    "ids; larger: low ids more frequent)")(
    "steps", po::value(&opts.steps)->default_value(opts.steps),
    "sparse job: steps per worker")(
    "sparse-batch", po::value(&opts.batch)->default_value(opts.batch),
    "sparse job: samples per step and worker")(
    "sparse-lr",
    po::value(&opts.learning_rate)
      ->default_value(opts.learning_rate, shortest(opts.learning_rate)),
    "sparse job: AdaGrad's learning rate on the shards")(
    "eval-samples",
    po::value(&opts.eval_samples)->default_value(opts.eval_samples),
    "sparse job: held-out samples rank 0 measures the loss on")(
    "eval-every", po::value(&opts.eval_every)->default_value(opts.eval_every),
    "sparse job: measure the loss every N steps of rank 0 (0: at the end)")(
    "sparse-seed", po::value(&opts.seed)->default_value(opts.seed),
    "sparse job: seed of the data set and its planted weights");
}

std::optional<int> check(const std::string& app, const sparse_options& opts) {
  if (auto rc = check_range(app, "features", opts.features, 1,
                            uint64_t{1} << 34))
    return rc;
  if (auto rc = check_range(app, "nnz", opts.nnz, 1, 100000))
    return rc;
  if (!(opts.skew >= 1.0 && opts.skew <= 100.0))
    return fail(app, "--skew must be 1..100, got " + std::to_string(opts.skew),
                2);
  if (auto rc = check_range(app, "steps", opts.steps, 1, uint64_t{1} << 40))
    return rc;
  if (auto rc = check_range(app, "sparse-batch", opts.batch, 1, 1000000))
    return rc;
  if (auto rc = check_range(app, "eval-samples", opts.eval_samples, 1,
                            10000000))
    return rc;
  if (!(opts.learning_rate > 0.0f && std::isfinite(opts.learning_rate)))
    return fail(app, "--sparse-lr must be a positive number", 2);
  return std::nullopt;
}

std::string describe(const sparse_report& r) {
  char buf[256];
  auto secs = r.seconds > 0 ? r.seconds : 1e-9;
  if (std::isnan(r.loss))
    std::snprintf(buf, sizeof(buf),
                  "step %llu: %.0f rows/s, %.1f MB moved in %.1f s",
                  static_cast<unsigned long long>(r.step), r.rows / secs,
                  r.bytes / 1e6, r.seconds);
  else
    std::snprintf(buf, sizeof(buf),
                  "step %llu: held-out loss %.4f (planted weights %.4f, zero "
                  "model %.4f), %.0f rows/s, %.1f MB moved in %.1f s",
                  static_cast<unsigned long long>(r.step), r.loss,
                  r.planted_loss, std::log(2.0), r.rows / secs, r.bytes / 1e6,
                  r.seconds);
  return buf;
}

int run_sparse_local(const std::string& app, const std::string& type,
                     const store_options& store, const sparse_options& opts,
                     const std::string& csv) {
  if (auto e = prepare_output(csv); !e.empty())
    return fail(app, "--out: " + e, 2);
  std::printf("%s: sparse logistic regression, %llu features, %u nonzeros "
              "per sample (skew %g), %s store, %u workers, %u shards, batch "
              "%u, %llu steps per worker, AdaGrad lr %g\n",
              app.c_str(), static_cast<unsigned long long>(opts.features),
              opts.nnz, opts.skew, type.c_str(), store.num_workers,
              store.num_shards, opts.batch,
              static_cast<unsigned long long>(opts.steps),
              double(opts.learning_rate));
  std::fflush(stdout);
  auto kv = kvstore::create(type, store);
  if (!kv)
    return fail(app, render(kv.error()));
  std::vector<kvstore> handles;
  for (uint32_t r = 0; r < store.num_workers; ++r) {
    auto h = kv->worker(r);
    if (!h)
      return fail(app, render(h.error()));
    handles.push_back(std::move(*h));
  }
  std::mutex mtx;
  std::vector<sparse_report> lines;
  std::vector<sparse_report> last(store.num_workers);
  std::vector<std::string> errors(store.num_workers);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < store.num_workers; ++r)
    threads.emplace_back([&, r] {
      errors[r] = run_sparse(handles[r], opts, [&](const sparse_report& x) {
        std::lock_guard<std::mutex> guard{mtx};
        last[r] = x;
        if (r == 0) {
          lines.push_back(x);
          std::printf("%s\n", describe(x).c_str());
          std::fflush(stdout);
        }
      });
      if (!errors[r].empty()) {
        handles[r].set_barrier_before_exit(false);
        static_cast<void>(handles[r].close());
      }
    });
  for (auto& t : threads)
    t.join();
  for (auto& e : errors)
    if (!e.empty())
      return fail(app, e);
  double rows_per_s = 0;
  uint64_t bytes = 0;
  for (auto& x : last) {
    rows_per_s += x.seconds > 0 ? x.rows / x.seconds : 0;
    bytes += x.bytes;
  }
  std::printf("all workers: %.0f rows/s, %.1f MB moved\n", rows_per_s,
              bytes / 1e6);
  std::string text = "step,seconds,loss,planted_loss,rows,bytes\n";
  for (auto& x : lines) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%llu,%.3f,%.6f,%.6f,%llu,%llu\n",
                  static_cast<unsigned long long>(x.step), x.seconds, x.loss,
                  x.planted_loss, static_cast<unsigned long long>(x.rows),
                  static_cast<unsigned long long>(x.bytes));
    text += buf;
  }
  if (auto e = write_file_atomically(csv, text); !e.empty())
    return fail(app, e);
  std::printf("curve: %s\n", csv.c_str());
  return 0;
}

} // namespace actorps::apps
