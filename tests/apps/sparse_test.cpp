// SPDX-License-Identifier: BSD-3-Clause
// The sparse job: its data set and a short run whose held-out loss falls.
#include "apps/common/sparse.hpp"

#include <cmath>
#include <future>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "messages/errors.hpp"

using namespace actorps;
using namespace actorps::apps;

namespace {

sparse_options small() {
  sparse_options o;
  o.features = 2000;
  o.nnz = 20;
  o.skew = 2.0;
  o.batch = 50;
  o.steps = 300;
  o.eval_samples = 2000;
  o.learning_rate = 0.1f;
  return o;
}

// Runs the job on every worker of a local store of `type`; rank 0's last
// report.
sparse_report run_job(const std::string& type, const sparse_options& opts) {
  store_options o;
  o.num_workers = 2;
  o.num_shards = 3;
  auto kv = kvstore::create(type, o);
  REQUIRE(kv);
  auto w1 = kv->worker(1);
  REQUIRE(w1);
  sparse_report last;
  auto other = std::async(std::launch::async, [&] {
    return run_sparse(*w1, opts, [](const sparse_report&) {});
  });
  auto mine = run_sparse(*kv, opts, [&](const sparse_report& r) { last = r; });
  CHECK(mine.empty());
  CHECK(other.get().empty());
  return last;
}

} // namespace

TEST_CASE("sparse: the data set is the same for every reader, its labels "
          "follow the planted weights",
          "[apps]") {
  auto opts = small();
  sparse_data a{opts};
  sparse_data b{opts};
  std::vector<uint64_t> ids_a;
  std::vector<uint64_t> ids_b;
  float label_a = 0;
  float label_b = 0;
  std::vector<double> planted;
  std::vector<double> zero;
  std::vector<float> labels;
  double ones = 0;
  for (uint64_t i = 0; i < 4000; ++i) {
    a.sample(sparse_data::held_out(i), ids_a, label_a);
    b.sample(sparse_data::held_out(i), ids_b, label_b);
    REQUIRE(ids_a == ids_b);
    REQUIRE(label_a == label_b);
    REQUIRE(ids_a.size() == opts.nnz);
    double m = 0;
    for (auto id : ids_a) {
      REQUIRE(id < opts.features);
      m += a.planted(id);
    }
    planted.push_back(m);
    zero.push_back(0);
    labels.push_back(label_a);
    ones += label_a;
  }
  // Both labels are common, and the planted weights predict them far
  // better than a coin.
  CHECK(ones > 1000);
  CHECK(ones < 3000);
  CHECK(std::abs(log_loss(zero, labels) - std::log(2.0)) < 1e-12);
  CHECK(log_loss(planted, labels) < 0.8 * std::log(2.0));
  // Another seed, other data.
  auto other = opts;
  other.seed = 2;
  sparse_data c{other};
  c.sample(sparse_data::held_out(0), ids_b, label_b);
  a.sample(sparse_data::held_out(0), ids_a, label_a);
  CHECK(ids_a != ids_b);
}

TEST_CASE("sparse: a short run's held-out loss falls, async and sync",
          "[apps]") {
  auto opts = small();
  for (auto type : {"local_async", "local_sync"}) {
    INFO(type);
    auto r = run_job(type, opts);
    CHECK(r.step == opts.steps);
    INFO("loss " << r.loss << ", planted " << r.planted_loss);
    // From ln 2 (the zero model) most of the way to the planted weights'.
    CHECK(r.loss < std::log(2.0) - 0.5 * (std::log(2.0) - r.planted_loss));
    CHECK(r.loss > r.planted_loss - 0.05);
    // Every step pulled and pushed its distinct rows: at most nnz x batch.
    CHECK(r.rows > 0);
    CHECK(r.rows <= 2 * opts.steps * opts.batch * opts.nnz);
    CHECK(r.bytes == r.rows * (sizeof(uint64_t) + sizeof(float)));
  }
}
