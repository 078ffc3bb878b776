// SPDX-License-Identifier: BSD-3-Clause
// Row-sparse tables in a distributed job (coordinator and server threads
// of this process, talking over loopback as separate processes do), over
// each transport (rows travel over the job's: CAF or the UCX plane), async
// and sync, rows of an fp16 key packed.
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "messages/control.hpp"
#include "messages/errors.hpp"
#include "runtime/kvstore.hpp"
#include "runtime/network.hpp"
#include "tests/runtime/job_threads.hpp"

using namespace actorps;
using namespace std::chrono_literals;

TEST_CASE("tables: a dist job pushes and pulls rows over 2 servers",
          "[integration]") {
  auto carrier = GENERATE(as<uint8_t>{}, transport::caf, transport::ucx);
  auto sync = GENERATE(false, true);
  if (carrier == transport::ucx && !built_with_ucx())
    return;
  INFO("transport " << int{carrier} << (sync ? ", sync" : ", async"));
  const char* type = sync ? "dist_sync" : "dist_async";
  // What fp16 keeps of 1/3: its upper 16 bits (the rows of key "half"
  // cross packed).
  const float third = 1.0f / 3.0f;
  uint32_t bits = 0;
  std::memcpy(&bits, &third, sizeof(bits));
  bits &= 0xFFFF0000u;
  float third_fp16 = 0;
  std::memcpy(&third_fp16, &bits, sizeof(bits));
  REQUIRE(third_fp16 != third);
  const std::string tok = "tok-tables";
  coordinator_options co;
  co.token = tok;
  co.num_workers = 2;
  co.num_servers = 2;
  co.sync = sync;
  co.transport = carrier;
  test::coordinator_thread coordinator{co};
  std::vector<std::thread> servers;
  std::vector<caf::error> server_errs(2);
  for (int i = 0; i < 2; ++i)
    servers.emplace_back([&, i] {
      server_options so;
      so.coordinator = endpoint{"127.0.0.1", coordinator.port()};
      so.token = tok;
      so.shards = 2;
      server_errs[i] = run_server(so, [](uint32_t) {});
    });
  store_options o;
  o.coordinator = "127.0.0.1:" + std::to_string(coordinator.port());
  o.token = tok;
  // Worker 1 in a thread of its own: init_table is collective.
  auto other = std::async(std::launch::async, [&]() -> caf::error {
    auto kv = kvstore::create(type, o);
    if (!kv)
      return kv.error();
    if (auto err = kv->init_table("emb", 1000, 4))
      return err;
    if (auto err = kv->set_gradient_compression("half", {codec::fp16}))
      return err;
    if (auto err = kv->init_table("half", 10, 2))
      return err;
    Eigen::VectorXf g = Eigen::VectorXf::Ones(8);
    if (auto err = kv->push_rows("emb", {999, 5}, g))
      return err;
    if (auto err = kv->push_rows("half", {3},
                                 Eigen::VectorXf::Constant(2, third)))
      return err;
    if (auto err = kv->wait_all())
      return err;
    if (auto err = kv->barrier())
      return err;
    return kv->close();
  });
  auto kv = kvstore::create(type, o);
  if (!kv)
    FAIL_CHECK(render(kv.error()));
  REQUIRE(kv);
  CHECK(kv->transport() == (carrier == transport::ucx ? "ucx" : "caf"));
  optimizer_config acc;
  acc.name = "accumulate";
  REQUIRE_FALSE(kv->set_optimizer(acc));
  REQUIRE_FALSE(kv->init_table("emb", 1000, 4));
  REQUIRE_FALSE(kv->set_gradient_compression("half", {codec::fp16}));
  REQUIRE_FALSE(kv->init_table("half", 10, 2));
  Eigen::VectorXf g(8);
  g << 1, 2, 3, 4, 10, 20, 30, 40;
  // Sync: one round per table, each worker's push counted on every shard.
  REQUIRE_FALSE(kv->push_rows("emb", {5, 6}, g));
  REQUIRE_FALSE(
    kv->push_rows("half", {2}, Eigen::VectorXf::Constant(2, third)));
  REQUIRE_FALSE(kv->wait_all());
  REQUIRE_FALSE(kv->barrier());
  // Rows 5, 6 and 999 sit on three different shards of the 4.
  Eigen::VectorXf out(16);
  auto t = kv->pull_rows("emb", {999, 5, 6, 7}, out);
  REQUIRE(t);
  REQUIRE_FALSE(kv->wait(*t));
  std::vector<float> got(out.data(), out.data() + out.size());
  CHECK(
    got
    == std::vector<float>{1, 1, 1, 1, 2, 3, 4, 5, 10, 20, 30, 40, 0, 0, 0, 0});
  Eigen::VectorXf halves(4);
  auto th = kv->pull_rows("half", {2, 3}, halves);
  REQUIRE(th);
  REQUIRE_FALSE(kv->wait(*th));
  CHECK(std::vector<float>(halves.data(), halves.data() + 4)
        == std::vector<float>(4, third_fp16));
  Eigen::VectorXf one(4);
  auto bad = kv->pull_rows("emb", {1000}, one);
  if (bad)
    CHECK(code_of(kv->wait(*bad)) == errc::unknown_key);
  else
    CHECK(code_of(bad.error()) == errc::unknown_key);
  auto other_err = other.get();
  INFO(render(other_err));
  CHECK_FALSE(other_err);
  CHECK_FALSE(kv->close());
  CHECK_FALSE(coordinator.join());
  for (auto& s : servers)
    s.join();
  CHECK_FALSE(server_errs[0]);
  CHECK_FALSE(server_errs[1]);
}
