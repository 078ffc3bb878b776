// SPDX-License-Identifier: BSD-3-Clause
// actorps-status against a job of real processes: a missing worker, a dead
// one, and the barrier they hold up.
#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/integration/dist_job.hpp"
#include "tests/integration/process.hpp"

using namespace actorps::test;
using nlohmann::json;

namespace {

// Runs actorps-status on `job` with `extra` flags: its exit code and output.
std::pair<int, std::string> status(const dist_job& job,
                                   std::vector<std::string> extra = {}) {
  std::vector<std::string> argv{ACTORPS_STATUS_BIN, "--coordinator",
                                job.address, "--token", token()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  process p{argv};
  auto rc = p.wait_exit(30s);
  INFO(p.output());
  REQUIRE(rc);
  return {*rc, p.output()};
}

// Asks for the JSON status until `ready` holds of it (bounded by `limit`).
template <class Pred>
json status_when(const dist_job& job, Pred ready,
                 std::chrono::seconds limit = 60s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto [rc, out] = status(job, {"--json"});
    INFO(out);
    REQUIRE(rc == 0);
    auto j = json::parse(out);
    if (ready(j))
      return j;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
  }
}

} // namespace

TEST_CASE("status: a job with a missing worker and a dead one",
          "[integration]") {
  dist_job job{"dist_sync", 3, 1};
  job.add_server();
  std::vector<std::string> args{"--timeout-ms", "120000", "--tolerate-deaths"};
  auto& first = job.add_worker(args);
  REQUIRE(first.wait_for("rank 0 of 3", startup));
  auto& second = job.add_worker(args);
  REQUIRE(second.wait_for("rank 1 of 3", startup));
  // Both wait at the job's first barrier for rank 2, which never comes.
  status_when(job, [](const json& j) {
    return j["barrier"]["open"] == true
           && j["barrier"]["waits_for"] == json::array({2});
  });
  second.kill9();
  auto j = status_when(job, [](const json& j) { return j["dead_nodes"] == 1; });
  INFO(j.dump(2));
  CHECK(j["mode"] == "dist_sync");
  CHECK(j["num_workers"] == 3);
  CHECK(j["workers_joined"] == 2);
  CHECK(j["missing_workers"] == json::array({2}));
  CHECK(j["missing_servers"] == json::array());
  int alive = 0;
  for (auto& n : j["nodes"]) {
    CHECK(n["address"].get<std::string>().rfind("127.0.0.1:", 0) == 0);
    if (n["role"] == "worker" && n["rank"] == 1)
      CHECK(n["state"] == "dead");
    else
      alive += n["state"] == "alive";
  }
  CHECK(alive == 2);
  // The dead worker no longer holds the barrier up; the missing one does.
  CHECK(j["barrier"]["waits_for"] == json::array({2}));
  REQUIRE(j["servers"].size() == 1);
  CHECK(j["servers"][0]["answered"] == true);
  CHECK(j["servers"][0]["bytes_held"].get<uint64_t>() > 0);
  CHECK(j["workers"].size() == 3);
  // The table says the same for people.
  auto [rc, table] = status(job);
  INFO(table);
  CHECK(rc == 0);
  CHECK_THAT(table, Catch::Contains("workers: 2 of 3 joined (missing ranks: 2)")
                      && Catch::Contains("dead")
                      && Catch::Contains("barrier: open, waits for ranks 2"));
  // The status took no rank: the third worker still gets rank 2, and the job
  // ends (without the dead worker) once it arrives.
  auto& third = job.add_worker(args);
  REQUIRE(third.wait_for("rank 2 of 3", startup));
  CHECK_EXIT(first, 0, job_time);
  CHECK_EXIT(third, 0, job_time);
}

TEST_CASE("status: bad flags, a wrong token and no coordinator fail clearly",
          "[integration]") {
  process no_flags{{ACTORPS_STATUS_BIN}};
  CHECK_EXIT(no_flags, 2, 30s);
  CHECK_THAT(no_flags.output(), Catch::Contains("--coordinator"));
  process nobody{{ACTORPS_STATUS_BIN, "--coordinator",
                  "127.0.0.1:" + std::to_string(unused_port()), "--timeout-ms",
                  "500"}};
  CHECK_EXIT(nobody, 1, 30s);
  CHECK_THAT(nobody.output(), Catch::Contains("cannot reach the coordinator"));
  dist_job job{"dist_async", 1, 1};
  process wrong{
    {ACTORPS_STATUS_BIN, "--coordinator", job.address, "--token", "guess"}};
  CHECK_EXIT(wrong, 1, 30s);
  CHECK_THAT(wrong.output(), Catch::Contains("refused"));
  process pw{{ACTORPS_STATUS_BIN, "--metrics-password", "--token", token()}};
  CHECK_EXIT(pw, 0, 30s);
  CHECK(pw.output().size() == 65); // 64 hex digits and a newline
}

TEST_CASE("status: a replicas job shows where each shard's copies are, "
          "through a server's death and a rebuild",
          "[integration]") {
  dist_job job{"dist_async", 1, 2, {"--replicas", "2"}};
  job.add_server(1);
  auto& doomed = job.add_server(1);
  job.add_worker({"--keys", "4", "--size", "1000", "--rounds", "100000000",
                  "--timeout-ms", "20000"});
  // Once paired, each server's shard is backed up on the other.
  auto j = status_when(job, [](const json& j) {
    return j["replicas"] == 2 && j["shards"].size() == 2
           && j["shards_without_copy"] == 0;
  });
  INFO(j.dump(2));
  for (auto& c : j["shards"]) {
    CHECK(c["backup_ready"] == true);
    CHECK(c["backup"] != c["primary"]);
  }
  CHECK(j["shards"][0]["primary"] != j["shards"][1]["primary"]);
  // (Either server may have rank 0: the survivor's is read back below.)
  // The worker in its rounds (its start and inits are other tests' part).
  status_when(job, [](const json& j) {
    return j["workers"].size() == 1 && j["workers"][0]["pushes"] > 0;
  });
  doomed.kill9();
  // Its shard's backup took over: both shards on the survivor, neither with
  // a copy; the survivor's counters cover both.
  j = status_when(job, [](const json& j) {
    return j["shards_without_copy"] == 2
           && j["shards"][0]["primary"] == j["shards"][1]["primary"];
  });
  INFO(j.dump(2));
  auto survivor = j["shards"][0]["primary"].get<uint32_t>();
  for (auto& c : j["shards"])
    CHECK(c["backup"].is_null());
  REQUIRE(j["servers"].size() == 2);
  CHECK(j["servers"][survivor]["shards"] == 2);
  CHECK(j["servers"][survivor]["answered"] == true);
  CHECK(j["servers"][1 - survivor]["shards"] == 0);
  auto [rc, table] = status(job);
  INFO(table);
  CHECK(rc == 0);
  CHECK_THAT(table,
             Catch::Contains("2 of 2 shards without every backup complete"));
  // A new server takes the dead rank and holds a copy of both again.
  job.add_server(1);
  j = status_when(job,
                  [](const json& j) { return j["shards_without_copy"] == 0; });
  INFO(j.dump(2));
  for (auto& c : j["shards"]) {
    CHECK(c["primary"] == survivor);
    CHECK(c["backup"] == 1 - survivor);
  }
}
