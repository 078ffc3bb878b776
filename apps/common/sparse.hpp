// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

#include "runtime/kvstore.hpp"

/// The sparse job: logistic regression on a synthetic sparse data set with a
/// planted solution, the workload parameter servers were made for (a huge
/// weight vector of which each step touches a few thousand entries). The
/// weights are one row table of `features` rows of 1 float; a step pulls
/// the rows its batch names (`pull_rows`), computes the log loss's gradient
/// and pushes it back by row (`push_rows`); the shards update only those
/// rows (lazy AdaGrad, each row with its own state).
namespace actorps::apps {

struct sparse_options {
  /// Rows of the weight table (features of the data set).
  uint64_t features = 10'000'000;
  /// Nonzero features per sample (each of value 1; a feature drawn twice
  /// counts twice).
  uint32_t nnz = 100;
  /// Feature ids are floor(features * u^skew) for u uniform in [0, 1): 1
  /// draws them uniformly, larger values favour low ids (as real sparse
  /// data favours frequent features).
  double skew = 8.0;
  uint32_t batch = 100;
  /// Steps per worker.
  uint64_t steps = 500;
  /// Held-out samples the loss is measured on (by rank 0).
  uint32_t eval_samples = 10000;
  /// Measure the loss every this many steps of rank 0 (0: at the end only).
  uint64_t eval_every = 0;
  /// AdaGrad's learning rate on the shards.
  float learning_rate = 0.02f;
  uint64_t seed = 1;
};

/// The data set: a planted weight per feature, uniform in [-a, a] with
/// a = 2 sqrt(3 / nnz) (a sample's margin then has a standard deviation of
/// about 2), and sample i's label drawn from sigmoid(planted margin), all
/// from `seed` and the place alone: every process sees the same data.
class sparse_data {
public:
  explicit sparse_data(const sparse_options& opts);

  float planted(uint64_t feature) const;

  /// The features of sample `index` (`nnz` ids) and its label (0 or 1).
  void sample(uint64_t index, std::vector<uint64_t>& ids, float& label) const;

  /// Index of held-out sample `i`: never one a worker trains on.
  static uint64_t held_out(uint64_t i) {
    return (uint64_t{1} << 62) + i;
  }

private:
  sparse_options opts_;
  float bound_;
};

/// Mean log loss of a model whose margins are `margins`, against `labels`.
double log_loss(const std::vector<double>& margins,
                const std::vector<float>& labels);

/// One measurement of the sparse job.
struct sparse_report {
  uint64_t step = 0;
  double seconds = 0;
  /// Mean log loss on the held-out samples: the model's, the planted
  /// weights' (the best a model can expect), and the zero model's (ln 2).
  double loss = 0;
  double planted_loss = 0;
  /// This worker's traffic so far: rows pulled and pushed (distinct rows
  /// per step), and the bytes of their ids and values.
  uint64_t rows = 0;
  uint64_t bytes = 0;
};

/// Runs the job on one worker handle (collective: every worker of the store
/// runs it); `on_report` gets rank 0's measurements (every `eval_every`
/// steps and at the end) and every worker's last one. Returns an empty
/// string or what went wrong.
std::string
run_sparse(kvstore& kv, const sparse_options& opts,
           const std::function<void(const sparse_report&)>& on_report);

/// The sparse job's flags (--features, --nnz, --skew, --steps,
/// --sparse-batch, --sparse-lr, --eval-samples, --eval-every, --sparse-seed)
/// and their checks (exit code 2 with the flag's name and range).
void add_sparse_options(boost::program_options::options_description& desc,
                        sparse_options& opts);
std::optional<int> check(const std::string& app, const sparse_options& opts);

/// One line for a measurement: step, loss against the planted and the zero
/// model's, rows/s, bytes moved.
std::string describe(const sparse_report& r);

/// The job in one process: `workers` threads through a local store of
/// `type` ("local_async", ...), rank 0's measurements printed and written
/// to `csv` (step, seconds, loss, planted_loss, rows, bytes), and a
/// summary with every worker's rows/s. Returns the app's exit code.
int run_sparse_local(const std::string& app, const std::string& type,
                     const store_options& store, const sparse_options& opts,
                     const std::string& csv);

} // namespace actorps::apps
