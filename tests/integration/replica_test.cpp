// SPDX-License-Identifier: BSD-3-Clause
// Replicas (issue 23): with --replicas 2 a server killed mid-job is taken
// over by its backups on the other server, and the workers' exact sums hold
// (real processes on 127.0.0.1).
#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/integration/dist_job.hpp"
#include "tests/integration/process.hpp"

using namespace actorps::test;

namespace {

void takeover(const std::string& transport, const std::string& mode) {
  INFO(transport << " " << mode);
  // Keys cut into slices of 100 floats over both servers, each server's
  // backed up on the other.
  dist_job job{mode,
               2,
               2,
               {"--transport", transport, "--replicas", "2", "--bigarray-bound",
                "100", "--slice-floats", "100"}};
  auto& survivor = job.add_server(1);
  auto& doomed = job.add_server(1);
  auto& w = job.add_summing_workers(mode == "dist_sync" ? "600" : "2000");
  require_printed(job, w, "round 200\n", job_time);
  doomed.kill9();
  for (auto& p : job.workers) {
    CHECK_EXIT(*p, 0, job_time);
    INFO(p->output());
    CHECK_THAT(p->output(), Catch::Contains("values exact"));
    CHECK_THAT(p->output(), Catch::Contains("servers=1"));
    CHECK_THAT(p->output(), Catch::Contains("moved to its promoted backup"));
  }
  CHECK_EXIT(*job.coordinator, 0, job_time);
  // (Either server may have rank 0: they join at once.)
  CHECK_THAT(job.coordinator->output(),
             Catch::Matches("[^]*server [01] is down: its backups on server "
                            "[01] took over its shards; nothing they "
                            "acknowledged was lost[^]*"));
  CHECK_EXIT(survivor, 0, job_time);
  // Over UCX the forwards take the servers' planes, not CAF's connections.
  auto over_plane = std::string{"forwards to its backup over the data plane"};
  if (transport == "ucx")
    CHECK_THAT(survivor.output(), Catch::Contains(over_plane));
  else
    CHECK_THAT(survivor.output(), !Catch::Contains(over_plane));
}

} // namespace

EACH_TRANSPORT_AND_MODE("dist: with --replicas 2 a killed server's backups "
                        "take over and nothing acknowledged is lost",
                        takeover)

TEST_CASE("dist: with --replicas 2 a server killed while the worker inits its "
          "keys: the inits its backup took count as done",
          "[integration]") {
  dist_job job{"dist_async", 1, 2, {"--replicas", "2"}};
  job.add_server(1);
  auto& doomed = job.add_server(1);
  // The kill lands as the first keys are made, when a primary's first
  // forwards (and its link to the backup) are still slow to be answered:
  // an init the backup ran and the dead primary never answered is sent
  // again to the promoted backup, which holds its slice already (without
  // the worker's rule for that, 2 of 10 runs here failed with
  // already_initialized).
  auto& w = job.add_worker({"--keys", "500", "--size", "10", "--rounds", "20",
                            "--timeout-ms", "20000"});
  // Once the first key is registered.
  wait_for_status_if(job, [](const std::string& out) {
    auto at = out.find("\"keys\": ");
    return at != std::string::npos && out.compare(at + 8, 1, "0") != 0;
  });
  doomed.kill9();
  CHECK_EXIT(w, 0, job_time);
  CHECK_THAT(w.output(), Catch::Contains("values exact"));
  CHECK_THAT(w.output(), !Catch::Contains("already_initialized"));
  CHECK_EXIT(*job.coordinator, 0, job_time);
}

TEST_CASE("dist: with --replicas 2 a worker that starts while a server hangs "
          "goes on once its backups took over",
          "[integration]") {
  // SIGSTOP keeps the server's port open: the worker's first table names
  // it, its connection there fails only after the connection timeout, and
  // by then the coordinator has a newer table.
  dist_job job{"dist_async", 1, 2, with_quick_timeouts({"--replicas", "2"})};
  auto& a = job.add_server(1, quick_timeouts);
  auto& b = job.add_server(1, quick_timeouts);
  // Every shard paired with its backup (the routing is ready) first.
  wait_for_status(job, "\"shards_without_copy\": 0");
  b.stop();
  auto& w = job.add_worker(
    with_quick_timeouts({"--keys", "4", "--size", "100", "--rounds", "50",
                         "--timeout-ms", "20000"}));
  CHECK_EXIT(w, 0, job_time);
  CHECK_THAT(w.output(), Catch::Contains("values exact"));
  CHECK_EXIT(*job.coordinator, 0, job_time);
  CHECK_THAT(job.coordinator->output(), Catch::Contains("took over"));
  CHECK_EXIT(a, 0, job_time);
}

TEST_CASE("dist: --replicas needs two servers", "[integration]") {
  process c{{ACTORPS_COORDINATOR_BIN, "--workers", "1", "--servers", "1",
             "--replicas", "2"}};
  CHECK_EXIT(c, 2, job_time);
  CHECK_THAT(c.output(), Catch::Contains("--replicas 2 needs --servers 2"));
}

TEST_CASE("dist: with --replicas 2 a hung server is cut off and its backups "
          "take over (dist_ssp)",
          "[integration]") {
  // SIGSTOP keeps the server's connections open: only the heartbeat and
  // connection timeout tell that it hangs.
  auto transport = TRANSPORT();
  INFO(transport);
  dist_job job{"dist_ssp", 2, 2,
               with_quick_timeouts({"--transport", transport, "--replicas", "2",
                                    "--bigarray-bound", "100", "--slice-floats",
                                    "100"})};
  auto& a = job.add_server(1, quick_timeouts);
  auto& b = job.add_server(1, quick_timeouts);
  // Bounded staleness: each worker checks after every round that the
  // others' pushes up to the bound are in, and the exact sums at the end.
  auto args = with_quick_timeouts({"--keys", "4", "--size", "1000", "--rounds",
                                   "1500", "--timeout-ms", "20000"});
  auto& w = job.add_workers(2, args);
  require_printed(job, w, "round 200\n", job_time);
  b.stop();
  // Cut off after about the connection timeout, not a request timeout.
  CHECK(w.wait_for("moved to its promoted backup", 15s));
  for (auto& p : job.workers) {
    CHECK_EXIT(*p, 0, job_time);
    INFO(p->output());
    CHECK_THAT(p->output(), Catch::Contains("values exact"));
    CHECK_THAT(p->output(), Catch::Contains("moved to its promoted backup"));
  }
  CHECK_EXIT(*job.coordinator, 0, job_time);
  CHECK_THAT(job.coordinator->output(), Catch::Contains("took over"));
  CHECK_EXIT(a, 0, job_time);
}

namespace {

void rebuild(const std::string& transport, const std::string& mode) {
  INFO(transport << " " << mode);
  dist_job job{mode,
               2,
               2,
               {"--transport", transport, "--replicas", "2", "--bigarray-bound",
                "100", "--slice-floats", "100"}};
  auto& first_server = job.add_server(1);
  auto& second_server = job.add_server(1);
  // At most one round every 2 ms, so that the first kill and the rebuild
  // happen under load (pacing, not synchronization). Worker 0 holds after
  // round 1000 until the test lets it go: the second kill lands while the
  // job runs, however slow the machine. (Under the sanitizers a round takes
  // 60-80 ms: 2000 rounds before the hold came within a few seconds of the
  // wait below, and once over it.)
  auto& w = job.add_summing_workers("1500", {"--round-ms", "2"}, 1000);
  require_printed(job, w, "round 200\n", job_time);
  first_server.kill9();
  require_printed(job, *job.coordinator, "took over its shards", job_time);
  // A new server joins: every shard lives on the survivor, none has a copy.
  auto& rebuilder = job.add_server(1);
  require_printed(job, *job.coordinator, "rejoined", job_time);
  CHECK_THAT(job.coordinator->output(),
             Catch::Contains("holds copies of 2 of 2 shards"));
  // The survivor dies too while worker 0 holds (in sync mode worker 1
  // waits for it): the rebuilt copies take over, worker 0 goes on, and no
  // acknowledged push is lost.
  require_printed(job, w, "holds after 1000 of 1500 rounds\n", job_time);
  auto moved = count_of(w.output(), "moved to its promoted backup");
  REQUIRE_FALSE(w.wait_exit(std::chrono::milliseconds{0}));
  second_server.kill9();
  w.send_line("go on");
  for (auto& p : job.workers) {
    // (A worker that does not end in time shows the coordinator's and the
    // rebuilt server's logs.)
    if (!p->wait_exit(job_time)) {
      static_cast<void>(job.coordinator->wait_for("\n(never printed)", 1s));
      static_cast<void>(rebuilder.wait_for("\n(never printed)", 1s));
      INFO(job.coordinator->output());
      INFO(rebuilder.output());
      CHECK_EXIT(*p, 0, 1s);
    }
    CHECK_EXIT(*p, 0, job_time);
    INFO(p->output());
    CHECK_THAT(p->output(), Catch::Contains("values exact"));
  }
  CHECK(count_of(w.output(), "moved to its promoted backup") > moved);
  CHECK_EXIT(*job.coordinator, 0, job_time);
  CHECK(count_of(job.coordinator->output(), "took over its shards") >= 2);
  CHECK_EXIT(rebuilder, 0, job_time);
}

} // namespace

EACH_TRANSPORT_AND_MODE("dist: with --replicas 2 a server that joins after a "
                        "death rebuilds the missing copies, and the job "
                        "survives the other server's death too",
                        rebuild)
