// SPDX-License-Identifier: BSD-3-Clause
// Three copies (issue 23): with --replicas 3 each shard is held by a chain
// of a primary and two backups on three servers; two servers killed one
// after the other lose nothing acknowledged, and a server that joins after
// a death rebuilds the missing copies (real processes on 127.0.0.1).
#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/integration/dist_job.hpp"
#include "tests/integration/process.hpp"

using namespace actorps::test;

namespace {

// Waits until the job's status shows `backups` complete backups of every
// shard.
void wait_for_copies(const dist_job& job, size_t backups) {
  wait_for_status_if(job, [backups](const std::string& out) {
    auto j = nlohmann::json::parse(out, nullptr, false);
    if (j.is_discarded() || !j.contains("shards") || j["shards"].empty())
      return false;
    for (auto& c : j["shards"])
      if (c["backups"].size() != backups || c["backup_ready"] != true)
        return false;
    return true;
  });
}

void two_deaths(const std::string& transport, const std::string& mode) {
  INFO(transport << " " << mode);
  // Keys cut into slices of 500 floats over the three servers.
  dist_job job{mode,
               2,
               3,
               {"--transport", transport, "--replicas", "3", "--bigarray-bound",
                "500", "--slice-floats", "500"}};
  auto& a = job.add_server(1);
  auto& b = job.add_server(1);
  auto& c = job.add_server(1);
  wait_for_copies(job, 2);
  // At most one round every 2 ms, so that both deaths happen under load;
  // few slices, so that a round under the sanitizers takes little more.
  // Worker 0 holds after 1500 rounds until the test lets it go, after the
  // second death.
  auto& w = job.add_summing_workers("2000", {"--round-ms", "2"}, 1500);
  require_printed(job, w, "round 200\n", job_time);
  a.kill9();
  require_printed(job, *job.coordinator, "took over its shards", job_time);
  // Every shard is left with one complete backup: the ones whose second
  // copy died too, and those whose first copy died (their primary sent the
  // second its whole state).
  wait_for_copies(job, 1);
  auto moved = count_of(w.output(), "moved to its promoted backup");
  REQUIRE_FALSE(w.wait_exit(std::chrono::milliseconds{0}));
  b.kill9();
  w.send_line("go on");
  bool exact = true;
  for (auto& p : job.workers) {
    CHECK_EXIT(*p, 0, job_time);
    INFO(p->output());
    CHECK_THAT(p->output(), Catch::Contains("values exact"));
    exact = exact && p->output().find("values exact") != std::string::npos;
  }
  // (What the surviving server said, too, when a worker went wrong.)
  if (!exact)
    FAIL_CHECK("what every process printed:\n" << report(job));
  CHECK(count_of(w.output(), "moved to its promoted backup") > moved);
  CHECK_EXIT(*job.coordinator, 0, job_time);
  CHECK(count_of(job.coordinator->output(), "took over its shards") == 2);
  CHECK_EXIT(c, 0, job_time);
}

} // namespace

EACH_TRANSPORT_AND_MODE("dist: with --replicas 3 two servers killed one after "
                        "the other lose nothing acknowledged",
                        two_deaths)

TEST_CASE("dist: with --replicas 3 a server that joins after a death rebuilds "
          "the missing copies",
          "[integration]") {
  auto transport = TRANSPORT();
  INFO(transport);
  dist_job job{"dist_async",
               1,
               3,
               {"--transport", transport, "--replicas", "3", "--bigarray-bound",
                "100", "--slice-floats", "100"}};
  auto& a = job.add_server(1);
  auto& b = job.add_server(1);
  job.add_server(1);
  wait_for_copies(job, 2);
  // At most one round every 2 ms, so that the deaths and the rebuild
  // happen under load; small keys (9 slices), so that a round under the
  // sanitizers takes little more. The worker holds after 2500 rounds until
  // the test lets it go, after the last death.
  auto& w = job.add_worker({"--keys", "3", "--size", "300", "--rounds", "3000",
                            "--round-ms", "2", "--timeout-ms", "20000",
                            "--progress", "--hold-after-rounds", "2500"},
                           true);
  require_printed(job, w, "round 200\n", job_time);
  a.kill9();
  require_printed(job, *job.coordinator, "took over its shards", job_time);
  auto& rebuilder = job.add_server(1);
  require_printed(job, *job.coordinator, "rejoined", job_time);
  // It holds a copy of each of the 3 shards (each server's one), and every
  // shard has both backups again.
  CHECK_THAT(job.coordinator->output(),
             Catch::Contains("holds copies of 3 of 3 shards"));
  wait_for_copies(job, 2);
  // Two more deaths, one after the other (the rebuilt server last): the
  // job goes on.
  REQUIRE_FALSE(w.wait_exit(std::chrono::milliseconds{0}));
  b.kill9();
  wait_for_copies(job, 1);
  REQUIRE_FALSE(w.wait_exit(std::chrono::milliseconds{0}));
  rebuilder.kill9();
  w.send_line("go on");
  CHECK_EXIT(w, 0, job_time);
  INFO(w.output());
  CHECK_THAT(w.output(), Catch::Contains("values exact"));
  CHECK_EXIT(*job.coordinator, 0, job_time);
  CHECK(count_of(job.coordinator->output(), "took over its shards") >= 2);
}

TEST_CASE("dist: --replicas 3 needs three servers", "[integration]") {
  process c{{ACTORPS_COORDINATOR_BIN, "--workers", "1", "--servers", "2",
             "--replicas", "3"}};
  CHECK_EXIT(c, 2, job_time);
  CHECK_THAT(c.output(), Catch::Contains("--replicas 3 needs --servers 3"));
  process d{{ACTORPS_COORDINATOR_BIN, "--workers", "1", "--servers", "4",
             "--replicas", "4"}};
  CHECK_EXIT(d, 2, job_time);
  CHECK_THAT(d.output(), Catch::Contains("replicas"));
}
