// SPDX-License-Identifier: BSD-3-Clause
// Update rules of a local store as MXNet's: load_optimizer_states (the
// states come back, the weights stay) against load_checkpoint (everything
// comes back), dump_optimizer, and the store's own rule (_set_updater).
#include "runtime/kvstore.hpp"

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <unistd.h>

#include "messages/errors.hpp"

using namespace actorps;

namespace {

store_options options(uint32_t workers = 1) {
  store_options opts;
  opts.num_workers = workers;
  opts.num_shards = 2;
  opts.threads = 2;
  opts.bigarray_bound = 64;
  opts.slice_floats = 40;
  opts.timeout = std::chrono::milliseconds{30000};
  opts.barrier_timeout = std::chrono::milliseconds{30000};
  return opts;
}

kvstore make_store(const std::string& type = "local_async",
                   uint32_t workers = 1) {
  auto kv = kvstore::create(type, options(workers));
  if (!kv)
    FAIL(render(kv.error()));
  return std::move(*kv);
}

void require_ok(const caf::error& err) {
  INFO(render(err));
  REQUIRE(!err);
}

Eigen::VectorXf pulled(kvstore& kv, const std::string& key, Eigen::Index n) {
  Eigen::VectorXf out(n);
  auto t = kv.pull(key, out);
  REQUIRE(t);
  require_ok(kv.wait(*t));
  return out;
}

optimizer_config momentum_sgd(float lr) {
  optimizer_config x;
  x.name = "sgd";
  x.learning_rate = lr;
  x.momentum = 0.9f;
  return x;
}

Eigen::VectorXf ramp(Eigen::Index n, float scale) {
  Eigen::VectorXf v(n);
  for (Eigen::Index i = 0; i < n; ++i)
    v[i] = scale * static_cast<float>((i % 7) - 3);
  return v;
}

bool near(const Eigen::VectorXf& a, const Eigen::VectorXf& b) {
  return (a - b).cwiseAbs().maxCoeff() <= 1e-5f;
}

std::string temp_path(const std::string& name) {
  return "/tmp/actorps-test-" + std::to_string(::getpid()) + "-" + name;
}

// What the rule saw: floats per key name.
struct seen {
  std::mutex mtx;
  std::map<std::string, size_t> floats;

  core::update_rule doubling() {
    return [this](const std::string& key, const float* grad, float* weight,
                  std::size_t n) {
      {
        std::lock_guard<std::mutex> guard{mtx};
        floats[key] += n;
      }
      for (std::size_t i = 0; i < n; ++i)
        weight[i] += 2.0f * grad[i];
    };
  }
};

} // namespace

TEST_CASE("kvstore: load_optimizer_states brings the optimizer states back "
          "and leaves the weights\\, as MXNet; load_checkpoint brings both",
          "[integration]") {
  // 100 floats: sliced over both shards (bound 64, slices of 40).
  constexpr Eigen::Index n = 100;
  Eigen::VectorXf w0 = ramp(n, 0.5f);
  Eigen::VectorXf g1 = ramp(n, 1.0f);
  Eigen::VectorXf g2 = ramp(n, -0.25f) + Eigen::VectorXf::Constant(n, 0.125f);
  Eigen::VectorXf g3 = ramp(n, 2.0f);
  Eigen::VectorXf g4 = Eigen::VectorXf::LinSpaced(n, -1.0f, 1.0f);
  auto path = temp_path("states.ckpt");
  auto dumped = temp_path("states-dumped.ckpt");
  // A store trains two steps with momentum, is saved (weights w2, momentum
  // m2), trains a third (w3, m3).
  Eigen::VectorXf w2;
  Eigen::VectorXf w3;
  auto kv = make_store();
  require_ok(kv.set_optimizer(momentum_sgd(0.1f)));
  require_ok(kv.init("w", w0));
  require_ok(kv.push("w", g1));
  require_ok(kv.push("w", g2));
  w2 = pulled(kv, "w", n);
  require_ok(kv.save_optimizer_states(path));
  require_ok(kv.save_optimizer_states(dumped, true));
  require_ok(kv.push("w", g3));
  w3 = pulled(kv, "w", n);
  REQUIRE(!near(w2, w3));
  // What one step of g4 does from the saved state: w2 -> w2 + (0.9 m2 -
  // 0.1 g4), in a store that loads the whole checkpoint.
  Eigen::VectorXf step_from_saved;
  {
    auto other = make_store();
    require_ok(other.init("w", Eigen::VectorXf::Zero(n)));
    require_ok(other.load_checkpoint(path));
    CHECK(pulled(other, "w", n) == w2);
    require_ok(other.push("w", g4));
    step_from_saved = pulled(other, "w", n) - w2;
  }
  SECTION("the weights stay; the next step uses the saved momentum") {
    require_ok(kv.load_optimizer_states(path));
    CHECK(pulled(kv, "w", n) == w3);
    require_ok(kv.push("w", g4));
    auto w4 = pulled(kv, "w", n);
    CHECK(near(w4, w3 + step_from_saved));
    // Neither the saved weights nor the momentum of three steps.
    CHECK(!near(w4, w2 + step_from_saved));
    auto carried_on = make_store();
    require_ok(carried_on.set_optimizer(momentum_sgd(0.1f)));
    require_ok(carried_on.init("w", w0));
    for (auto* g : {&g1, &g2, &g3, &g4})
      require_ok(carried_on.push("w", *g));
    CHECK(!near(w4, pulled(carried_on, "w", n)));
  }
  SECTION("a store with no optimizer set takes the file's") {
    auto fresh = make_store();
    require_ok(fresh.init("w", w3));
    require_ok(fresh.load_optimizer_states(path));
    CHECK(pulled(fresh, "w", n) == w3);
    require_ok(fresh.push("w", g4));
    CHECK(near(pulled(fresh, "w", n), w3 + step_from_saved));
  }
  SECTION("a store's own settings stay unless the file was saved with "
          "dump_optimizer") {
    // Learning rate 0.5 here, 0.1 in the file: the step differs by
    // 0.4 g4 between the two.
    auto slower = make_store();
    require_ok(slower.set_optimizer(momentum_sgd(0.5f)));
    require_ok(slower.init("w", w3));
    require_ok(slower.load_optimizer_states(path));
    require_ok(slower.push("w", g4));
    CHECK(near(pulled(slower, "w", n), w3 + step_from_saved - 0.4f * g4));
    auto taken = make_store();
    require_ok(taken.set_optimizer(momentum_sgd(0.5f)));
    require_ok(taken.init("w", w3));
    require_ok(taken.load_optimizer_states(dumped));
    require_ok(taken.push("w", g4));
    CHECK(near(pulled(taken, "w", n), w3 + step_from_saved));
  }
  SECTION("a store with another kind of optimizer is refused and unchanged") {
    optimizer_config adam;
    adam.name = "adam";
    auto other = make_store();
    require_ok(other.set_optimizer(adam));
    require_ok(other.init("w", w3));
    require_ok(other.push("w", g4));
    auto before = pulled(other, "w", n);
    auto err = other.load_optimizer_states(path);
    INFO(render(err));
    CHECK(code_of(err) == errc::checkpoint_mismatch);
    CHECK(render(err).find("'adam'") != std::string::npos);
    CHECK(pulled(other, "w", n) == before);
    // load_checkpoint takes the file's optimizer whatever the store's.
    require_ok(other.load_checkpoint(path));
    CHECK(pulled(other, "w", n) == w2);
  }
  std::remove(path.c_str());
  std::remove(dumped.c_str());
}

TEST_CASE("kvstore: set_updater runs the store's own rule on every push, "
          "by key name\\, slice by slice",
          "[integration]") {
  auto kv = make_store("local");
  // 100 floats: three slices over both shards; 5 floats: whole on one.
  Eigen::VectorXf big = Eigen::VectorXf::LinSpaced(100, -1.0f, 1.0f);
  Eigen::VectorXf small = Eigen::VectorXf::Constant(5, 3.0f);
  require_ok(kv.init("big", big));
  require_ok(kv.init("small", small));
  seen s;
  require_ok(kv.set_updater(s.doubling()));
  Eigen::VectorXf g = Eigen::VectorXf::LinSpaced(100, 0.5f, 2.0f);
  require_ok(kv.push("big", g));
  require_ok(kv.push("small", Eigen::VectorXf::Ones(5)));
  CHECK(pulled(kv, "big", 100) == big + 2.0f * g);
  CHECK(pulled(kv, "small", 5) == Eigen::VectorXf::Constant(5, 5.0f));
  {
    std::lock_guard<std::mutex> guard{s.mtx};
    CHECK(s.floats
          == std::map<std::string, size_t>{{"big", 100}, {"small", 5}});
  }
  SECTION("set_optimizer ends the rule") {
    optimizer_config sgd;
    sgd.name = "sgd";
    sgd.learning_rate = 1.0f;
    require_ok(kv.set_optimizer(sgd));
    require_ok(kv.push("small", Eigen::VectorXf::Ones(5)));
    CHECK(pulled(kv, "small", 5) == Eigen::VectorXf::Constant(5, 4.0f));
  }
  SECTION("the last handle to close ends the rule and what it holds") {
    auto held = std::make_shared<int>(1);
    std::weak_ptr<int> watch = held;
    require_ok(kv.set_updater(
      [held](const std::string&, const float*, float*, std::size_t) {}));
    held.reset();
    CHECK_FALSE(watch.expired());
    require_ok(kv.close());
    CHECK(watch.expired());
  }
  SECTION("an empty rule gives the optimizer back") {
    require_ok(kv.set_updater({}));
    // No optimizer set: a push assigns.
    require_ok(kv.push("small", Eigen::VectorXf::Constant(5, 9.0f)));
    CHECK(pulled(kv, "small", 5) == Eigen::VectorXf::Constant(5, 9.0f));
  }
}

TEST_CASE("kvstore: set_updater sees a sync round's sum once, and a table's "
          "pushed rows only",
          "[integration]") {
  SECTION("sync rounds") {
    auto kv = make_store("local_sync", 2);
    require_ok(kv.init("w", Eigen::VectorXf::Zero(3)));
    seen s;
    require_ok(kv.set_updater(s.doubling()));
    std::vector<kvstore> hs;
    for (uint32_t r = 0; r < 2; ++r) {
      auto h = kv.worker(r);
      REQUIRE(h);
      hs.push_back(std::move(*h));
    }
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        if (auto err = hs[r].push("w", Eigen::VectorXf::Constant(3, r + 1.0f)))
          errors[r] = render(err);
        else if (auto e2 = hs[r].wait_all())
          errors[r] = render(e2);
      });
    for (auto& t : threads)
      t.join();
    CHECK(errors == std::vector<std::string>(2));
    // Once, with the round's sum 1 + 2.
    CHECK(pulled(hs[0], "w", 3) == Eigen::VectorXf::Constant(3, 6.0f));
    std::lock_guard<std::mutex> guard{s.mtx};
    CHECK(s.floats["w"] == 3);
  }
  SECTION("row tables") {
    auto kv = make_store("local");
    require_ok(kv.init_table("t", 6, 2, table_fill{}));
    seen s;
    require_ok(kv.set_updater(s.doubling()));
    Eigen::VectorXf g(4);
    g << 1.0f, 2.0f, 3.0f, 4.0f;
    require_ok(kv.push_rows("t", {4, 1}, g));
    require_ok(kv.wait_all());
    Eigen::VectorXf rows(12);
    auto t = kv.pull_rows("t", {0, 1, 2, 3, 4, 5}, rows);
    REQUIRE(t);
    require_ok(kv.wait(*t));
    Eigen::VectorXf want = Eigen::VectorXf::Zero(12);
    want.segment(2, 2) << 6.0f, 8.0f;
    want.segment(8, 2) << 2.0f, 4.0f;
    CHECK(rows == want);
    std::lock_guard<std::mutex> guard{s.mtx};
    CHECK(s.floats["t"] == 4);
  }
}

TEST_CASE("kvstore: DJL's init and update: the optimizer runs once on the sum "
          "of every device's and worker's gradient, every copy gets the "
          "result",
          "[integration]") {
  auto kv = make_store("local_sync", 2);
  optimizer_config sgd;
  sgd.name = "sgd";
  sgd.learning_rate = 0.5f;
  require_ok(kv.set_optimizer(sgd));
  std::vector<kvstore> hs;
  for (uint32_t r = 0; r < 2; ++r) {
    auto h = kv.worker(r);
    REQUIRE(h);
    hs.push_back(std::move(*h));
  }
  // 100 floats: sliced over both shards (options(): slices of 40).
  const Eigen::Index n = 100;
  Eigen::VectorXf start = ramp(n, 1.0f);
  std::vector<std::string> errors(2);
  std::vector<Eigen::VectorXf> first(2, Eigen::VectorXf(n));
  std::vector<Eigen::VectorXf> second(2, Eigen::VectorXf(n));
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto& h = hs[r];
      // Two devices' copies of the initial value.
      if (auto err = h.init("w", {start, start})) {
        errors[r] = render(err);
        return;
      }
      // Device d of rank r computed the gradient (r + 1) * (d + 1).
      Eigen::VectorXf g0 = Eigen::VectorXf::Constant(n, r + 1.0f);
      Eigen::VectorXf g1 = Eigen::VectorXf::Constant(n, 2.0f * (r + 1.0f));
      if (auto err = h.update("w", {g0, g1}, {first[r], second[r]}))
        errors[r] = render(err);
    });
  for (auto& t : threads)
    t.join();
  CHECK(errors == std::vector<std::string>(2));
  // The round's gradient: (1 + 2) from rank 0 and (2 + 4) from rank 1.
  Eigen::VectorXf want = start - Eigen::VectorXf::Constant(n, 0.5f * 9.0f);
  for (uint32_t r = 0; r < 2; ++r) {
    CHECK(near(first[r], want));
    CHECK(second[r] == first[r]);
  }
  CHECK(near(pulled(hs[0], "w", n), want));
  // Bad copies and outputs are refused before anything is pushed.
  Eigen::VectorXf short_copy(n - 1);
  CHECK(code_of(kv.init("v", {start, short_copy})) == errc::shape_mismatch);
  Eigen::VectorXf ones = Eigen::VectorXf::Ones(n);
  CHECK(code_of(hs[0].update("w", {ones}, {})) == errc::shape_mismatch);
  CHECK(code_of(hs[0].update("w", {ones}, {short_copy}))
        == errc::shape_mismatch);
  CHECK(code_of(hs[0].update("nope", {ones}, {first[0]})) == errc::unknown_key);
  CHECK(near(pulled(hs[0], "w", n), want));
}
