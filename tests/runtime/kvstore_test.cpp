// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/kvstore.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <unistd.h>

#include "core/parallel.hpp"
#include "messages/errors.hpp"

using namespace actorps;

namespace {

store_options local_options(uint32_t workers, uint32_t shards = 2) {
  store_options opts;
  opts.num_workers = workers;
  opts.num_shards = shards;
  opts.threads = 2;
  opts.timeout = std::chrono::milliseconds{30000};
  opts.barrier_timeout = std::chrono::milliseconds{60000};
  return opts;
}

kvstore make_store(const std::string& type, const store_options& opts) {
  auto kv = kvstore::create(type, opts);
  if (!kv)
    FAIL(render(kv.error()));
  return std::move(*kv);
}

std::vector<kvstore> handles(kvstore& kv) {
  std::vector<kvstore> result;
  for (uint32_t r = 0; r < kv.num_workers(); ++r) {
    auto h = kv.worker(r);
    REQUIRE(h);
    result.push_back(std::move(*h));
  }
  return result;
}

void require_ok(const caf::error& err) {
  INFO(render(err));
  REQUIRE(!err);
}

void require_code(const caf::error& err, errc code) {
  INFO(render(err));
  REQUIRE(code_of(err) == code);
}

// Runs `f(handle)` on one thread per worker; returns the first failure.
template <class F>
std::string run_workers(std::vector<kvstore>& hs, F f) {
  std::vector<std::string> errors(hs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < hs.size(); ++i)
    threads.emplace_back([&, i] { errors[i] = f(hs[i]); });
  for (auto& t : threads)
    t.join();
  for (auto& e : errors)
    if (!e.empty())
      return e;
  return {};
}

// One round of a worker: pushes `v` to `key`, pulls the key into `out` and
// waits. Returns an error text or an empty string.
std::string push_then_pull(kvstore& h, const std::string& key,
                           const Eigen::VectorXf& v, Eigen::VectorXf& out) {
  if (auto e = h.push(key, v))
    return render(e);
  auto t = h.pull(key, out);
  if (!t)
    return render(t.error());
  if (auto e = h.wait(*t))
    return render(e);
  return {};
}

std::string temp_path(const std::string& name) {
  return "/tmp/actorps-test-" + std::to_string(::getpid()) + "-" + name;
}

} // namespace

TEST_CASE("kvstore: an interrupted wait ends early and leaves the handle "
          "usable",
          "[integration]") {
  std::atomic<bool> stop{false};
  store_options o;
  o.num_workers = 2;
  o.barrier_timeout = std::chrono::seconds{120};
  o.interrupted = [&] { return stop.load(); };
  auto kv = kvstore::create("local", o);
  REQUIRE(kv);
  Eigen::VectorXf w = Eigen::VectorXf::Constant(3, 1.0f);
  REQUIRE_FALSE(kv->init("w", w));
  // Worker 1 never arrives: only the interruption ends the barrier.
  std::promise<caf::error> result;
  auto started = std::chrono::steady_clock::now();
  std::thread waiter{[&] { result.set_value(kv->barrier()); }};
  stop = true;
  auto fut = result.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds{30}) == std::future_status::ready);
  waiter.join();
  auto err = fut.get();
  INFO(render(err));
  CHECK(code_of(err) == errc::interrupted);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds{30});
  // The handle goes on: a push and a pull work.
  stop = false;
  REQUIRE_FALSE(kv->push("w", Eigen::VectorXf::Constant(3, 5.0f)));
  Eigen::VectorXf out(3);
  auto t = kv->pull("w", out);
  REQUIRE(t);
  REQUIRE_FALSE(kv->wait(*t));
  CHECK(out.isApprox(Eigen::VectorXf::Constant(3, 5.0f)));
  kv->set_barrier_before_exit(false);
  CHECK_FALSE(kv->close());
}

TEST_CASE("kvstore: a pull sees every earlier push of the same worker",
          "[integration]") {
  auto type = GENERATE(as<std::string>{}, "local_async", "local_sync");
  auto kv = make_store(type, local_options(1));
  Eigen::VectorXf zero = Eigen::VectorXf::Zero(5);
  require_ok(kv.init("k", zero));
  // 200 pushes and pulls issued without waiting, with mixed priorities: the
  // i-th pull must see exactly the i-th push (no optimizer: value = push).
  std::mt19937 rng{42};
  std::vector<Eigen::VectorXf> outs(200, Eigen::VectorXf(5));
  std::vector<pull_ticket> tickets;
  for (int i = 0; i < 200; ++i) {
    Eigen::VectorXf v = Eigen::VectorXf::Constant(5, static_cast<float>(i));
    auto prio = static_cast<int>(rng() % 3);
    require_ok(kv.push("k", v, prio));
    auto t = kv.pull("k", outs[i], static_cast<int>(rng() % 3));
    REQUIRE(t);
    tickets.push_back(*t);
  }
  require_ok(kv.wait_all());
  for (int i = 0; i < 200; ++i) {
    INFO("pull " << i);
    CHECK((outs[i].array() == static_cast<float>(i)).all());
  }
}

TEST_CASE("kvstore: 8 workers x 1000 pushes lose no update", "[integration]") {
  auto type = GENERATE(as<std::string>{}, "local_async", "local_sync");
  auto kv = make_store(type, local_options(8));
  optimizer_config acc;
  acc.name = "accumulate";
  require_ok(kv.set_optimizer(acc));
  auto hs = handles(kv);
  auto err = run_workers(hs, [](kvstore& h) -> std::string {
    Eigen::VectorXf zero = Eigen::VectorXf::Zero(3);
    if (auto e = h.init("sum", zero))
      return render(e);
    Eigen::VectorXf one = Eigen::VectorXf::Constant(3, h.rank() + 1.0f);
    for (int i = 0; i < 1000; ++i)
      if (auto e = h.push("sum", one, i % 2))
        return render(e);
    if (auto e = h.barrier())
      return render(e);
    return {};
  });
  REQUIRE(err.empty());
  Eigen::VectorXf out(3);
  auto t = kv.pull("sum", out);
  REQUIRE(t);
  require_ok(kv.wait(*t));
  // sum over ranks of (rank + 1) * 1000 = 36 * 1000.
  CHECK((out.array() == 36000.0f).all());
}

TEST_CASE("kvstore: a sync round's pull sees exactly that round's sum",
          "[integration]") {
  auto kv = make_store("local_sync", local_options(4, 3));
  auto hs = handles(kv);
  auto err = run_workers(hs, [](kvstore& h) -> std::string {
    Eigen::VectorXf zero = Eigen::VectorXf::Zero(4);
    if (auto e = h.init("w", zero))
      return render(e);
    Eigen::VectorXf out(4);
    for (int r = 0; r < 50; ++r) {
      Eigen::VectorXf v
        = Eigen::VectorXf::Constant(4, (h.rank() + 1.0f) * (r + 1.0f));
      if (auto e = push_then_pull(h, "w", v, out); !e.empty())
        return e;
      // No optimizer: the value is the round's merged push,
      // sum over 4 ranks of (rank + 1) * (r + 1) = 10 * (r + 1).
      if (!(out.array() == 10.0f * (r + 1.0f)).all())
        return "rank " + std::to_string(h.rank()) + " round "
               + std::to_string(r) + " saw " + std::to_string(out[0]);
    }
    return {};
  });
  CHECK(err.empty());
  INFO(err);
}

TEST_CASE("kvstore: a tensor above the slicing bound round-trips exactly",
          "[integration]") {
  auto opts = local_options(2, 4);
  opts.bigarray_bound = 1000;
  auto kv = make_store("local_async", opts);
  Eigen::VectorXf big = Eigen::VectorXf::LinSpaced(10007, -3.0f, 11.0f);
  require_ok(kv.init("big", big, {1, 10007}));
  auto shape = kv.shape("big");
  REQUIRE(shape);
  CHECK(*shape == std::vector<uint64_t>{1, 10007});
  auto other = kv.worker(1);
  REQUIRE(other);
  Eigen::VectorXf a(10007);
  Eigen::VectorXf b(10007);
  auto t = other->pull("big", {a, b});
  REQUIRE(t);
  require_ok(other->wait(*t));
  CHECK(a == big);
  CHECK(b == big);
  // Push the sum of two device gradients; the stored value is their sum.
  Eigen::VectorXf g1 = Eigen::VectorXf::Constant(10007, 0.25f);
  Eigen::VectorXf g2 = Eigen::VectorXf::LinSpaced(10007, 0.0f, 1.0f);
  require_ok(other->push("big", {g1, g2}, 5));
  t = other->pull("big", a);
  REQUIRE(t);
  require_ok(other->wait(*t));
  CHECK(a == (g1 + g2));
}

TEST_CASE("kvstore: push_pull and several-key calls", "[integration]") {
  auto type = GENERATE(as<std::string>{}, "local_async", "local_sync");
  auto opts = local_options(1, 3);
  opts.bigarray_bound = 100;
  auto kv = make_store(type, opts);
  // Five small keys and one sliced over the three shards.
  std::vector<std::string> keys{"a", "b", "c", "d", "e", "big"};
  std::vector<Eigen::VectorXf> values;
  for (size_t k = 0; k < keys.size(); ++k) {
    auto n = keys[k] == "big" ? 1000 : 3;
    values.push_back(Eigen::VectorXf::LinSpaced(n, k * 10.0f, k * 10.0f + 1));
    require_ok(kv.init(keys[k], Eigen::VectorXf::Zero(n)));
  }
  std::vector<Eigen::Ref<const Eigen::VectorXf>> in(values.begin(),
                                                    values.end());
  std::vector<Eigen::VectorXf> outs;
  for (auto& v : values)
    outs.push_back(Eigen::VectorXf::Zero(v.size()));
  std::vector<Eigen::Ref<Eigen::VectorXf>> out(outs.begin(), outs.end());
  SECTION("push_many then pull_many") {
    require_ok(kv.push_many(keys, in, 3));
    auto t = kv.pull_many(keys, out);
    REQUIRE(t);
    require_ok(kv.wait(*t));
    for (size_t k = 0; k < keys.size(); ++k)
      CHECK(outs[k] == values[k]);
  }
  SECTION("push_pull_many returns what its pushes produced") {
    auto t = kv.push_pull_many(keys, in, out);
    REQUIRE(t);
    require_ok(kv.wait(*t));
    for (size_t k = 0; k < keys.size(); ++k)
      CHECK(outs[k] == values[k]);
  }
  SECTION("push_pull on one key, ordered with single pushes and pulls") {
    Eigen::VectorXf one = Eigen::VectorXf::Constant(1000, 1.0f);
    Eigen::VectorXf two = Eigen::VectorXf::Constant(1000, 2.0f);
    Eigen::VectorXf first(1000);
    Eigen::VectorXf second(1000);
    require_ok(kv.push("big", one));
    auto t1 = kv.push_pull("big", two, first, 4);
    REQUIRE(t1);
    auto t2 = kv.pull("big", second);
    REQUIRE(t2);
    require_ok(kv.wait(*t2));
    CHECK(first == two);
    CHECK(second == two);
  }
  SECTION("mismatched lists and sizes are refused before anything is sent") {
    require_code(kv.push_many(keys, {values[0]}), errc::shape_mismatch);
    require_code(kv.push_many({}, {}), errc::bad_config);
    std::vector<Eigen::Ref<Eigen::VectorXf>> swapped{out[5], out[0]};
    auto t = kv.pull_many({"a", "big"}, swapped);
    REQUIRE_FALSE(t);
    require_code(t.error(), errc::shape_mismatch);
    auto u = kv.push_pull_many({"a", "nope"}, {values[0], values[1]},
                               {out[0], out[1]});
    REQUIRE_FALSE(u);
    require_code(u.error(), errc::unknown_key);
    // Nothing was pushed.
    auto p = kv.pull_many({"a"}, {out[0]});
    REQUIRE(p);
    require_ok(kv.wait(*p));
    CHECK(outs[0] == Eigen::VectorXf::Zero(3));
  }
}

TEST_CASE("kvstore: a sync push_pull sees its round's sum", "[integration]") {
  auto kv = make_store("local_sync", local_options(3, 2));
  auto hs = handles(kv);
  auto err = run_workers(hs, [](kvstore& h) -> std::string {
    std::vector<std::string> keys{"x", "y"};
    for (auto& k : keys)
      if (auto e = h.init(k, Eigen::VectorXf::Zero(2)))
        return render(e);
    Eigen::VectorXf x(2);
    Eigen::VectorXf y(2);
    for (int r = 0; r < 30; ++r) {
      Eigen::VectorXf v = Eigen::VectorXf::Constant(2, h.rank() + 1.0f + r);
      auto t = h.push_pull_many(keys, {v, v}, {x, y});
      if (!t)
        return render(t.error());
      if (auto e = h.wait(*t))
        return render(e);
      // Sum over 3 ranks of (rank + 1 + r) = 6 + 3r.
      auto want = 6.0f + 3.0f * r;
      if (!(x.array() == want).all() || !(y.array() == want).all())
        return "rank " + std::to_string(h.rank()) + " round "
               + std::to_string(r) + " saw " + std::to_string(x[0]);
    }
    return {};
  });
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("kvstore: small slices round-trip; bad slice sizes are refused",
          "[integration]") {
  auto opts = local_options(1, 2);
  opts.bigarray_bound = 100;
  opts.slice_floats = 64;
  auto kv = make_store("local_sync", opts);
  Eigen::VectorXf big = Eigen::VectorXf::LinSpaced(1000, -1.0f, 1.0f);
  require_ok(kv.init("big", big));
  Eigen::VectorXf out(1000);
  auto t = kv.push_pull("big", big, out);
  REQUIRE(t);
  require_ok(kv.wait(*t));
  CHECK(out == big);
  for (uint64_t bad : {uint64_t{0}, (uint64_t{1} << 25) + 1}) {
    opts.slice_floats = bad;
    auto refused = kvstore::create("local", opts);
    REQUIRE_FALSE(refused);
    CHECK(code_of(refused.error()) == errc::bad_config);
    CHECK(render(refused.error()).find("slice_floats") != std::string::npos);
  }
}

TEST_CASE("kvstore: slices above the batch bound travel in buffers of their "
          "own",
          "[integration]") {
  auto type = GENERATE(as<std::string>{}, "local_async", "local_sync");
  auto opts = local_options(1, 2);
  opts.bigarray_bound = 1000;
  opts.slice_floats = 100000;
  auto kv = make_store(type, opts);
  // "big": slices above the worker's batch bound (2^16 floats), between two
  // small keys whose floats are packed together: three slices, or 26 of
  // them, which the handle copies in and out on two threads.
  const Eigen::Index n
    = GENERATE(Eigen::Index{250000},
               static_cast<Eigen::Index>(core::parallel_min_floats) + 400003);
  std::vector<std::string> keys{"a", "big", "b"};
  std::vector<Eigen::VectorXf> values{
    Eigen::VectorXf::LinSpaced(5, 1.0f, 5.0f),
    Eigen::VectorXf::LinSpaced(n, -7.0f, 9.0f),
    Eigen::VectorXf::LinSpaced(3, 20.0f, 22.0f)};
  for (size_t k = 0; k < keys.size(); ++k)
    require_ok(kv.init(keys[k], Eigen::VectorXf::Zero(values[k].size())));
  std::vector<Eigen::VectorXf> outs;
  for (auto& v : values)
    outs.push_back(Eigen::VectorXf::Zero(v.size()));
  std::vector<Eigen::Ref<const Eigen::VectorXf>> in(values.begin(),
                                                    values.end());
  std::vector<Eigen::Ref<Eigen::VectorXf>> out(outs.begin(), outs.end());
  auto t = kv.push_pull_many(keys, in, out);
  REQUIRE(t);
  require_ok(kv.wait(*t));
  for (size_t k = 0; k < keys.size(); ++k)
    CHECK(outs[k] == values[k]);
  // The sum of two device gradients, then a pull into two outputs.
  Eigen::VectorXf g = Eigen::VectorXf::Constant(n, 0.5f);
  require_ok(kv.push("big", {values[1], g}));
  Eigen::VectorXf x(n);
  Eigen::VectorXf y(n);
  auto u = kv.pull("big", {x, y});
  REQUIRE(u);
  require_ok(kv.wait(*u));
  CHECK(x == values[1] + g);
  CHECK(y == x);
  // The caller's buffers were only read.
  CHECK(g == Eigen::VectorXf::Constant(n, 0.5f));
}

TEST_CASE("kvstore: wait_only waits for one pull, not the backlog before it",
          "[integration][priority]") {
  auto opts = local_options(1, 2);
  opts.bigarray_bound = 1000;
  opts.slice_floats = 1000;
  // One request in flight per shard: the pushes queue up in the worker.
  opts.max_bytes_in_flight = 4;
  auto kv = make_store("local_async", opts);
  const Eigen::Index n = 100000;
  require_ok(kv.init("big", Eigen::VectorXf::Zero(n)));
  require_ok(kv.init("small", Eigen::VectorXf::Constant(4, 3.0f)));
  Eigen::VectorXf g = Eigen::VectorXf::LinSpaced(n, 0.0f, 1.0f);
  require_ok(kv.push("big", g));
  Eigen::VectorXf small(4);
  auto t = kv.pull("small", small, 10);
  REQUIRE(t);
  require_ok(kv.wait_only(*t));
  CHECK(small == Eigen::VectorXf::Constant(4, 3.0f));
  // Waiting again is harmless; the push still completes.
  require_ok(kv.wait_only(*t));
  require_ok(kv.wait_all());
  Eigen::VectorXf big(n);
  auto u = kv.pull("big", big);
  REQUIRE(u);
  require_ok(kv.wait_only(*u));
  CHECK(big == g);
}

TEST_CASE("kvstore: save and load restore training bit for bit",
          "[integration]") {
  auto opts = local_options(1, 3);
  opts.bigarray_bound = 64;
  optimizer_config adam;
  adam.name = "adam";
  adam.learning_rate = 0.01f;
  adam.weight_decay = 0.001f;
  std::mt19937 rng{7};
  std::normal_distribution<float> dist;
  auto random_vec = [&](Eigen::Index n) {
    Eigen::VectorXf v(n);
    for (Eigen::Index i = 0; i < n; ++i)
      v[i] = dist(rng);
    return v;
  };
  Eigen::VectorXf w0 = random_vec(300);
  Eigen::VectorXf b0 = random_vec(7);
  std::vector<Eigen::VectorXf> grads;
  for (int i = 0; i < 4; ++i)
    grads.push_back(random_vec(300));
  auto path = temp_path("adam.ckpt");
  Eigen::VectorXf expected(300);
  {
    auto kv = make_store("local_async", opts);
    require_ok(kv.set_optimizer(adam));
    require_ok(kv.init("w", w0));
    require_ok(kv.init("b", b0));
    for (int i = 0; i < 3; ++i)
      require_ok(kv.push("w", grads[i]));
    require_ok(kv.save_optimizer_states(path));
    require_ok(kv.push("w", grads[3]));
    auto t = kv.pull("w", expected);
    REQUIRE(t);
    require_ok(kv.wait(*t));
  }
  // Loads the file into a fresh store, pushes the fourth gradient and checks
  // both keys against the saved store's run.
  auto continue_in = [&](const store_options& o) {
    auto kv = make_store("local_async", o);
    require_ok(kv.init("w", Eigen::VectorXf::Zero(300)));
    require_ok(kv.init("b", Eigen::VectorXf::Zero(7)));
    require_ok(kv.load_checkpoint(path));
    require_ok(kv.push("w", grads[3]));
    Eigen::VectorXf got(300);
    Eigen::VectorXf bias(7);
    auto t = kv.pull("w", got);
    REQUIRE(t);
    auto tb = kv.pull("b", bias);
    REQUIRE(tb);
    require_ok(kv.wait_all());
    CHECK(std::memcmp(got.data(), expected.data(), 300 * sizeof(float)) == 0);
    CHECK(bias == b0);
  };
  SECTION("a fresh store continues exactly where the saved one was") {
    continue_in(opts);
  }
  SECTION("a store sliced otherwise continues exactly too") {
    // Other shards and slice size: the saved slices are cut anew on load.
    auto other = local_options(1, 2);
    other.bigarray_bound = 64;
    other.slice_floats = 70;
    continue_in(other);
  }
  SECTION("a corrupted file is refused with checkpoint_corrupt") {
    std::fstream f{path, std::ios::in | std::ios::out | std::ios::binary};
    f.seekp(100);
    f.put('\x5a');
    f.close();
    auto kv = make_store("local_async", opts);
    require_ok(kv.init("w", Eigen::VectorXf::Zero(300)));
    require_ok(kv.init("b", Eigen::VectorXf::Zero(7)));
    auto err = kv.load_optimizer_states(path);
    require_code(err, errc::checkpoint_corrupt);
    CHECK(render(err).find(path) != std::string::npos);
  }
  SECTION("a store with other shapes is refused") {
    auto kv = make_store("local_async", opts);
    require_ok(kv.init("w", Eigen::VectorXf::Zero(301)));
    require_ok(kv.init("b", Eigen::VectorXf::Zero(7)));
    require_code(kv.load_optimizer_states(path), errc::checkpoint_mismatch);
  }
  SECTION("a missing file is refused with checkpoint_io") {
    auto kv = make_store("local_async", opts);
    require_code(kv.load_optimizer_states(path + ".missing"),
                 errc::checkpoint_io);
  }
  std::remove(path.c_str());
}

TEST_CASE("kvstore: 2-bit compression's error feedback loses no gradient",
          "[integration][compression]") {
  auto opts = local_options(2, 2);
  opts.compression = compression{codec::two_bit, 0.5f};
  auto kv = make_store("local_sync", opts);
  auto hs = handles(kv);
  optimizer_config acc;
  acc.name = "accumulate";
  require_ok(hs[0].set_optimizer(acc));
  // Each worker pushes 0.375 a round. With threshold 0.5 it sends 0, 0.5,
  // 0.5, 0.5 (residuals 0.375, 0.25, 0.125, 0), then again: after every
  // fourth round all of its gradient has arrived.
  const float sent[8] = {0, 0.5f, 1, 1.5f, 1.5f, 2, 2.5f, 3};
  auto err = run_workers(hs, [&](kvstore& h) -> std::string {
    if (auto e = h.init("w", Eigen::VectorXf::Zero(5)))
      return render(e);
    Eigen::VectorXf out(5);
    for (int r = 0; r < 8; ++r) {
      auto e = push_then_pull(h, "w", Eigen::VectorXf::Constant(5, 0.375f),
                              out);
      if (!e.empty())
        return e;
      if (!(out.array() == 2 * sent[r]).all())
        return "round " + std::to_string(r) + ": " + std::to_string(out[0])
               + " instead of " + std::to_string(2 * sent[r]);
    }
    return {};
  });
  CHECK(err.empty());
  INFO(err);
}

TEST_CASE("kvstore: compression per key, and its errors",
          "[integration][compression]") {
  SECTION("a bad threshold in the options is refused at create") {
    auto opts = local_options(1);
    opts.compression = compression{codec::two_bit, 0.0f};
    auto kv = kvstore::create("local", opts);
    REQUIRE_FALSE(kv);
    require_code(kv.error(), errc::bad_config);
    CHECK(render(kv.error()).find("threshold") != std::string::npos);
  }
  auto kv = make_store("local", local_options(1));
  require_ok(kv.set_gradient_compression("h", compression{codec::fp16}));
  require_ok(kv.init("h", Eigen::VectorXf::Zero(2)));
  require_ok(kv.init("f", Eigen::VectorXf::Zero(2)));
  Eigen::VectorXf v(2);
  v << 1.00390625f, -2.0f;
  require_ok(kv.push("h", v));
  require_ok(kv.push("f", v));
  Eigen::VectorXf h(2), f(2);
  auto th = kv.pull("h", h);
  auto tf = kv.pull("f", f);
  REQUIRE(th);
  REQUIRE(tf);
  require_ok(kv.wait_all());
  // Only "h" is compressed: fp16 drops 1.00390625's lower half.
  CHECK(h[0] == 1.0f);
  CHECK(h[1] == -2.0f);
  CHECK(f[0] == 1.00390625f);
  require_code(kv.set_gradient_compression(compression{codec::two_bit, -1}),
               errc::bad_config);
  require_ok(kv.close());
  require_code(kv.set_gradient_compression(compression{}), errc::closed);
}

TEST_CASE("kvstore: misuse gives clear errors", "[integration]") {
  SECTION("unknown store type and bad options") {
    auto kv = kvstore::create("dist_magic");
    REQUIRE_FALSE(kv);
    CHECK(code_of(kv.error()) == errc::bad_config);
    CHECK(render(kv.error()).find("dist_magic") != std::string::npos);
    auto opts = local_options(0);
    CHECK(code_of(kvstore::create("local", opts).error()) == errc::bad_config);
  }
  auto kv = make_store("local", local_options(2));
  require_ok(kv.init("k", Eigen::VectorXf::Zero(4)));
  SECTION("pull into a wrong-sized output") {
    Eigen::VectorXf out(3);
    auto t = kv.pull("k", out);
    REQUIRE_FALSE(t);
    CHECK(code_of(t.error()) == errc::shape_mismatch);
    CHECK(render(t.error()).find("'k'") != std::string::npos);
  }
  SECTION("push of a wrong size or to an unknown key") {
    require_code(kv.push("k", Eigen::VectorXf::Zero(5)), errc::shape_mismatch);
    require_code(kv.push("nokey", Eigen::VectorXf::Zero(5)), errc::unknown_key);
  }
  SECTION("init with a shape that does not fit") {
    require_code(kv.init("m", Eigen::VectorXf::Zero(5), {2, 2}),
                 errc::shape_mismatch);
  }
  SECTION("init twice") {
    require_code(kv.init("k", Eigen::VectorXf::Zero(4)),
                 errc::already_initialized);
  }
  SECTION("bad optimizer") {
    optimizer_config bad;
    bad.name = "sgd";
    bad.momentum = 1.5f;
    require_code(kv.set_optimizer(bad), errc::bad_optimizer);
  }
  SECTION("worker rank out of range") {
    auto h = kv.worker(2);
    REQUIRE_FALSE(h);
    CHECK(code_of(h.error()) == errc::bad_config);
  }
  SECTION("close does not write into outputs nobody waited for") {
    auto out = std::make_unique<Eigen::VectorXf>(4);
    out->setConstant(7);
    auto t = kv.pull("k", *out);
    REQUIRE(t);
    // The caller gives up on the pull (e.g. after an error elsewhere) and
    // frees the output; ASan would flag a write into it.
    out.reset();
    require_ok(kv.close());
  }
  SECTION("every call after close") {
    require_ok(kv.close());
    CHECK(kv.closed());
    require_ok(kv.close());
    Eigen::VectorXf out(4);
    require_code(kv.push("k", out), errc::closed);
    auto t = kv.pull("k", out);
    REQUIRE_FALSE(t);
    CHECK(code_of(t.error()) == errc::closed);
    require_code(kv.wait_all(), errc::closed);
    require_code(kv.barrier(), errc::closed);
    require_code(kv.init("x", out), errc::closed);
    require_code(kv.save_optimizer_states(temp_path("closed")), errc::closed);
  }
}

TEST_CASE("kvstore: a worker that closes early does not stall sync rounds",
          "[integration]") {
  auto kv = make_store("local_sync", local_options(2));
  auto other = kv.worker(1);
  REQUIRE(other);
  require_ok(kv.init("k", Eigen::VectorXf::Zero(2)));
  require_ok(other->close());
  // Rank 0 is now the only live worker: each round is its push alone.
  Eigen::VectorXf out(2);
  for (int r = 1; r <= 5; ++r) {
    require_ok(kv.push("k", Eigen::VectorXf::Constant(2, float(r))));
    auto t = kv.pull("k", out);
    REQUIRE(t);
    require_ok(kv.wait(*t));
    CHECK((out.array() == float(r)).all());
  }
  require_ok(kv.barrier());
}

TEST_CASE("kvstore: a sync pull that can never complete times out clearly",
          "[integration]") {
  auto opts = local_options(2);
  opts.timeout = std::chrono::milliseconds{300};
  auto kv = make_store("local_sync", opts);
  require_ok(kv.init("k", Eigen::VectorXf::Zero(2)));
  // Rank 1 never pushes, so round 0 never completes and the pull of rank 0
  // cannot be answered: the call must fail with a timeout, not hang.
  require_ok(kv.push("k", Eigen::VectorXf::Ones(2)));
  Eigen::VectorXf out(2);
  auto t = kv.pull("k", out);
  REQUIRE(t);
  auto err = kv.wait(*t);
  require_code(err, errc::timeout);
  CHECK(render(err).find("no reply within") != std::string::npos);
}

TEST_CASE("kvstore: rank and num_workers describe the store", "[integration]") {
  auto kv = make_store("local_sync", local_options(3));
  CHECK(kv.type() == "local_sync");
  CHECK(kv.synchronous());
  CHECK_FALSE(make_store("local", local_options(1)).synchronous());
  CHECK(kv.rank() == 0);
  CHECK(kv.num_workers() == 3);
  auto h = kv.worker(2);
  REQUIRE(h);
  CHECK(h->rank() == 2);
  CHECK(h->num_workers() == 3);
}

TEST_CASE("kvstore: MXNet's device store names are the same stores",
          "[integration]") {
  for (std::string name : {"device", "local_update_cpu", "local_allreduce_cpu",
                           "local_allreduce_device"}) {
    INFO(name);
    auto kv = make_store(name, local_options(1));
    CHECK(kv.type() == name);
    CHECK_FALSE(kv.synchronous());
    require_ok(kv.init("w", Eigen::VectorXf::Ones(4)));
    require_ok(kv.push("w", Eigen::VectorXf::Constant(4, 3.0f)));
    Eigen::VectorXf out(4);
    auto t = kv.pull("w", out);
    REQUIRE(t);
    require_ok(kv.wait(*t));
    // No optimizer: a push assigns.
    CHECK(out == Eigen::VectorXf::Constant(4, 3.0f));
  }
  // dist_device_sync is dist_sync: it needs a coordinator like it.
  for (std::string name : {"dist_device_sync", "dist_sync_device"}) {
    INFO(name);
    auto kv = kvstore::create(name, local_options(1));
    REQUIRE_FALSE(kv);
    CHECK(render(kv.error()).find("coordinator") != std::string::npos);
  }
  auto gpu = kvstore::create("nccl", local_options(1));
  REQUIRE_FALSE(gpu);
  CHECK(code_of(gpu.error()) == errc::bad_config);
  CHECK(render(gpu.error()).find("host memory") != std::string::npos);
}

TEST_CASE("kvstore: a key named twice in one call is merged, as MXNet",
          "[integration]") {
  // 3 floats make a small key; 300000 a sliced one (several slices, some
  // alone, with a small bigarray bound).
  auto n = GENERATE(as<Eigen::Index>{}, 3, 300000);
  auto opts = local_options(1, 3);
  opts.bigarray_bound = 100000;
  opts.slice_floats = 50000;
  Eigen::VectorXf a = Eigen::VectorXf::LinSpaced(n, 1.0f, 2.0f);
  Eigen::VectorXf b = Eigen::VectorXf::Constant(n, 0.25f);
  Eigen::VectorXf z = Eigen::VectorXf::Constant(n, 5.0f);
  SECTION("push_many sums the values of a repeated key into one push") {
    auto kv = make_store("local_async", opts);
    require_ok(kv.init("w", Eigen::VectorXf::Zero(n)));
    require_ok(kv.init("v", Eigen::VectorXf::Zero(n)));
    require_ok(kv.push_many({"w", "v", "w"}, {a, z, b}));
    Eigen::VectorXf w(n);
    Eigen::VectorXf v(n);
    auto t = kv.pull_many({"w", "v"}, {w, v});
    REQUIRE(t);
    require_ok(kv.wait(*t));
    CHECK(w.isApprox(a + b));
    CHECK(v == z);
  }
  SECTION("with an optimizer, a repeated key is updated once") {
    auto kv = make_store("local_async", opts);
    optimizer_config adam;
    adam.name = "adam";
    adam.learning_rate = 0.1f;
    require_ok(kv.set_optimizer(adam));
    require_ok(kv.init("w", Eigen::VectorXf::Zero(n)));
    require_ok(kv.push_many({"w", "w"}, {a, b}));
    Eigen::VectorXf w(n);
    auto t = kv.pull("w", w);
    REQUIRE(t);
    require_ok(kv.wait(*t));
    // One Adam step from zero state moves every weight by -lr * g / (|g| +
    // eps) with bias correction: about -0.1 whatever the gradient. Two steps
    // would move it by about -0.2.
    CHECK((w.array() + 0.1f).abs().maxCoeff() < 1e-3f);
  }
  SECTION("pull_many and push_pull_many fill every output of a repeated key") {
    auto kv = make_store("local_async", opts);
    require_ok(kv.init("w", a));
    Eigen::VectorXf o1(n);
    Eigen::VectorXf o2(n);
    auto t = kv.pull_many({"w", "w"}, {o1, o2});
    REQUIRE(t);
    require_ok(kv.wait(*t));
    CHECK(o1 == a);
    CHECK(o2 == a);
    o1.setZero();
    o2.setZero();
    t = kv.push_pull_many({"w", "w"}, {a, b}, {o1, o2});
    REQUIRE(t);
    require_ok(kv.wait(*t));
    CHECK(o1.isApprox(a + b));
    CHECK(o2 == o1);
  }
}

TEST_CASE("kvstore: a long key list named again is checked again when one "
          "name changes",
          "[integration]") {
  // Lists of 16 names and more are found again by their names (the facade
  // and the worker keep the last ones they resolved).
  auto kv = make_store("local_async", local_options(1, 3));
  std::vector<std::string> keys;
  for (int i = 0; i < 20; ++i) {
    keys.push_back("k" + std::to_string(i));
    require_ok(kv.init(keys.back(), Eigen::VectorXf::Zero(2)));
  }
  require_ok(kv.init_table("table", 4, 2));
  auto values = [](const std::vector<std::string>& ks, float base) {
    std::vector<Eigen::VectorXf> out;
    for (std::size_t i = 0; i < ks.size(); ++i)
      out.push_back(Eigen::VectorXf::Constant(2, base + static_cast<float>(i)));
    return out;
  };
  auto pull_all = [&](const std::vector<std::string>& ks) {
    std::vector<Eigen::VectorXf> outs(ks.size(), Eigen::VectorXf::Zero(2));
    std::vector<Eigen::Ref<Eigen::VectorXf>> refs(outs.begin(), outs.end());
    auto t = kv.pull_many(ks, refs);
    REQUIRE(t);
    require_ok(kv.wait(*t));
    return outs;
  };
  auto push_all = [&](const std::vector<std::string>& ks,
                      const std::vector<Eigen::VectorXf>& vs) {
    std::vector<Eigen::Ref<const Eigen::VectorXf>> refs(vs.begin(), vs.end());
    return kv.push_many(ks, refs);
  };
  // The same list three times: each push lands on its own keys.
  for (float base : {10.0f, 20.0f, 30.0f}) {
    require_ok(push_all(keys, values(keys, base)));
    auto got = pull_all(keys);
    for (std::size_t i = 0; i < keys.size(); ++i)
      CHECK(got[i]
            == Eigen::VectorXf::Constant(2, base + static_cast<float>(i)));
  }
  // The last name replaced by the first: its values are summed into one
  // push and both outputs get the key's value.
  auto repeated = keys;
  repeated.back() = keys.front();
  require_ok(push_all(repeated, values(repeated, 100.0f)));
  auto got = pull_all(repeated);
  CHECK(got.front() == Eigen::VectorXf::Constant(2, 100.0f + 119.0f));
  CHECK(got.back() == got.front());
  CHECK(pull_all(keys).back() == Eigen::VectorXf::Constant(2, 49.0f));
  // An unknown name, then a row table, in place of the last one: refused.
  auto unknown = keys;
  unknown.back() = "nope";
  require_code(push_all(unknown, values(unknown, 0.0f)), errc::unknown_key);
  auto table = keys;
  table.back() = "table";
  require_code(push_all(table, values(table, 0.0f)), errc::shape_mismatch);
  // The list as it was still works.
  require_ok(push_all(keys, values(keys, 50.0f)));
  CHECK(pull_all(keys).front() == Eigen::VectorXf::Constant(2, 50.0f));
}

TEST_CASE("kvstore: a repeated key counts once in a sync round",
          "[integration]") {
  auto kv = make_store("local_sync", local_options(2, 2));
  auto hs = handles(kv);
  auto err = run_workers(hs, [](kvstore& h) -> std::string {
    if (auto e = h.init("w", Eigen::VectorXf::Zero(4)))
      return render(e);
    Eigen::VectorXf out(4);
    for (int r = 0; r < 5; ++r) {
      // Rank 0 pushes 1 and 2 for "w" in one call, rank 1 pushes 10: the
      // round's sum is 13 (MXNet merges rank 0's two values first).
      caf::error e;
      if (h.rank() == 0)
        e = h.push_many({"w", "w"}, {Eigen::VectorXf::Constant(4, 1.0f),
                                     Eigen::VectorXf::Constant(4, 2.0f)});
      else
        e = h.push("w", Eigen::VectorXf::Constant(4, 10.0f));
      if (e)
        return render(e);
      auto t = h.pull("w", out);
      if (!t)
        return render(t.error());
      if (auto e2 = h.wait(*t))
        return render(e2);
      if (!(out.array() == 13.0f).all())
        return "rank " + std::to_string(h.rank()) + " round "
               + std::to_string(r) + " saw " + std::to_string(out[0]);
    }
    return {};
  });
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("kvstore: commands reach the embedder's handler on every shard",
          "[integration]") {
  auto opts = local_options(1, 3);
  std::mutex mtx;
  std::vector<std::pair<int32_t, std::string>> seen;
  opts.on_command = [&](int32_t head, const std::string& body) -> caf::error {
    std::lock_guard<std::mutex> guard{mtx};
    seen.emplace_back(head, body);
    if (body == "refuse")
      return make_error(errc::bad_config, "refused: " + body);
    return caf::none;
  };
  auto kv = make_store("local_async", opts);
  require_ok(kv.send_command_to_servers(7, "hello"));
  {
    std::lock_guard<std::mutex> guard{mtx};
    REQUIRE(seen.size() == 3);
    for (auto& [head, body] : seen) {
      CHECK(head == 7);
      CHECK(body == "hello");
    }
  }
  auto err = kv.send_command_to_servers(8, "refuse");
  require_code(err, errc::bad_config);
  CHECK_THAT(render(err), Catch::Contains("refused: refuse"));
  // Head 0 still sets the optimizer, without the handler. (The refused
  // command's fan-out answered at the first refusal: the other shards'
  // handler calls may still come in, with head 8.)
  require_ok(kv.send_command_to_servers(0, "name=sgd,learning_rate=0.5"));
  {
    std::lock_guard<std::mutex> guard{mtx};
    for (auto& [head, body] : seen)
      CHECK(head != 0);
  }
  require_ok(kv.init("w", Eigen::VectorXf::Ones(2)));
  require_ok(kv.push("w", Eigen::VectorXf::Constant(2, 1.0f)));
  Eigen::VectorXf w(2);
  auto t = kv.pull("w", w);
  REQUIRE(t);
  require_ok(kv.wait(*t));
  CHECK((w.array() == 0.5f).all());
}

TEST_CASE("kvstore: without a handler, commands other than 0 are refused",
          "[integration]") {
  auto kv = make_store("local_async", local_options(1, 2));
  auto err = kv.send_command_to_servers(7, "x");
  require_code(err, errc::bad_config);
  CHECK_THAT(render(err), Catch::Contains("no handler for command head 7"));
}

TEST_CASE("kvstore: node ids follow ps-lite's numbering", "[integration]") {
  CHECK(coordinator_node_id == 1);
  CHECK(server_node_id(0) == 8);
  CHECK(server_node_id(3) == 14);
  CHECK(worker_node_id(0) == 9);
  CHECK(worker_node_id(2) == 13);
  // Node ids and groups never collide: groups are below 8.
  CHECK((role::coordinator | role::server | role::worker) < 8);
}

TEST_CASE("kvstore: local_ssp bounds how stale a pull may be and sums "
          "exactly",
          "[integration]") {
  // 3 workers push 1, 2 and 3 per step (accumulate): a step of everyone
  // adds 6. With bound s, the pull after a worker's k-th push sees every
  // worker's first k - s pushes at least, and never more than all of them.
  auto s = GENERATE(0u, 1u, 3u, 1000000u);
  INFO("staleness " << s);
  store_options o;
  o.num_workers = 3;
  o.num_shards = 2;
  o.staleness = s;
  auto kv = kvstore::create("local_ssp", o);
  REQUIRE(kv);
  CHECK(kv->type() == "local_ssp");
  CHECK_FALSE(kv->synchronous());
  optimizer_config acc;
  acc.name = "accumulate";
  require_ok(kv->set_optimizer(acc));
  require_ok(kv->init("w", Eigen::VectorXf::Zero(4)));
  auto hs = handles(*kv);
  constexpr int steps = 40;
  std::vector<std::vector<float>> seen(3);
  auto problem = run_workers(hs, [&](kvstore& h) -> std::string {
    Eigen::VectorXf g = Eigen::VectorXf::Constant(4, float(h.rank() + 1));
    Eigen::VectorXf out(4);
    for (int k = 1; k <= steps; ++k) {
      if (auto e = push_then_pull(h, "w", g, out); !e.empty())
        return e;
      seen[h.rank()].push_back(out[0]);
    }
    if (auto e = h.barrier())
      return render(e);
    return {};
  });
  REQUIRE(problem.empty());
  for (uint32_t r = 0; r < 3; ++r)
    for (int k = 1; k <= steps; ++k) {
      INFO("rank " << r << " step " << k);
      auto got = seen[r][size_t(k - 1)];
      auto floor = k > int(s) ? 6.0f * float(k - int(s)) : 0.0f;
      CHECK(got >= floor);
      CHECK(got <= 6.0f * steps);
      // Its own pushes so far are always in.
      CHECK(got >= float(r + 1) * float(k));
    }
  Eigen::VectorXf out(4);
  auto t = hs[0].pull("w", out);
  REQUIRE(t);
  require_ok(hs[0].wait(*t));
  CHECK(out == Eigen::VectorXf::Constant(4, 6.0f * steps));
}
