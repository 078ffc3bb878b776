// SPDX-License-Identifier: BSD-3-Clause
// Replacement servers (issue 23): a server killed mid-job is replaced by a
// new process restored from the newest checkpoint, and the workers' calls
// go on (real processes on 127.0.0.1).
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/checkpoint.hpp"
#include "core/checkpoint_dir.hpp"
#include "tests/core/temp_dir.hpp"
#include "tests/integration/dist_job.hpp"
#include "tests/integration/process.hpp"

using namespace actorps::test;

namespace {

// The kill comes at round 300; 1500 leave the replacement a long run
// after it. (3000 took over the two minutes a worker's exit is waited for
// under the sanitizers on a loaded machine: seen in clean-clone CI, the
// worker at round 2274 and still going.)
constexpr uint32_t rounds = 1500;

// The records of the newest checkpoint in `dir`.
actorps::state_snapshot newest_checkpoint(const std::string& dir) {
  std::string path;
  REQUIRE(actorps::core::latest_checkpoint(dir, path).ok());
  std::vector<char> bytes;
  REQUIRE(actorps::core::read_file(path, bytes).ok());
  actorps::state_snapshot snap;
  REQUIRE(actorps::core::decode_checkpoint(bytes, snap).ok());
  return snap;
}

void replaced(const std::string& transport, const std::string& mode) {
  // Two workers: rank r pushes r + 1, so a round adds 3.
  INFO(transport << " " << mode);
  auto workers = 2;
  auto per_round = 3.0f;
  temp_dir tmp;
  auto dir = tmp.path() + "/ckpt";
  // Keys cut into slices of 100 floats over both servers.
  dist_job job{mode,
               workers,
               2,
               {"--transport", transport, "--checkpoint-dir", dir,
                "--checkpoint-every", "0", "--recovery-timeout", "60",
                "--bigarray-bound", "100", "--slice-floats", "100"}};
  job.add_server(1);
  auto& doomed = job.add_server(1);
  // Pushes of 1 into every float of 4 keys per round (accumulate): a slice
  // holds the number of its pushes that were applied.
  std::vector<std::string> args{"--keys",
                                "4",
                                "--size",
                                "1000",
                                "--rounds",
                                std::to_string(rounds),
                                "--tolerate-deaths",
                                "--timeout-ms",
                                "20000"};
  auto& w = job.add_workers(workers, args);
  require_printed(job, w, "round 300\n", job_time);
  doomed.kill9();
  require_printed(job, *job.coordinator, "waiting up to 60000 ms", job_time);
  // A replacement must run as many shards as the dead server.
  auto& wrong = job.add_server(2);
  CHECK_EXIT(wrong, 1, job_time);
  CHECK_THAT(wrong.output(), Catch::Contains("start it with --shards 1"));
  job.add_server(1);
  for (auto& p : job.workers) {
    CHECK_EXIT(*p, 0, job_time);
    INFO(p->output());
    CHECK_THAT(p->output(), Catch::Contains("all rounds done"));
    CHECK_THAT(p->output(), Catch::Contains("moved to its replacement server"));
  }
  CHECK_EXIT(*job.coordinator, 0, job_time);
  CHECK_THAT(
    job.coordinator->output(),
    Catch::Contains("was replaced by a new process, restored from " + dir));
  CHECK_EXIT(*job.servers[0], 0, job_time);
  CHECK_EXIT(*job.servers[3], 0, job_time);
  // The last checkpoint (at the final barrier) holds every slice. Those of
  // the surviving server got every push; those of the replaced one lost
  // exactly the pushes the dead server had applied after the checkpoint it
  // was restored from (at least the 301 rounds seen before the kill), and
  // got every other push once. In dist_sync and dist_ssp the replacement
  // counted the pushes it lost as contributions of nothing (so its rounds
  // and clocks went on from the workers'), else the job would hang.
  auto snap = newest_checkpoint(dir);
  size_t whole = 0;
  size_t restored = 0;
  for (auto& rec : snap.slices) {
    if (rec.key.rfind("key", 0) != 0)
      continue;
    INFO(rec.key << " part " << rec.part);
    REQUIRE_FALSE(rec.value.data.empty());
    auto v = rec.value.data.front();
    CHECK(std::all_of(rec.value.data.begin(), rec.value.data.end(),
                      [v](float x) { return x == v; }));
    CHECK(v == static_cast<float>(static_cast<uint32_t>(v)));
    if (v == rounds * per_round) {
      ++whole;
    } else {
      ++restored;
      CHECK(v >= 1.0f);
      CHECK(v <= rounds * per_round - 301);
    }
  }
  CHECK(whole > 0);
  CHECK(restored > 0);
  CHECK(whole + restored == 40);
}

} // namespace

JOB_CASE("dist: a killed server is replaced from the newest checkpoint and "
         "the workers' calls go on",
         replaced, "caf", "dist_async")
UCX_JOB_CASE("dist: a killed server is replaced from the newest checkpoint "
             "and the workers' calls go on",
             replaced, "dist_async")
JOB_CASE("dist: a killed server is replaced from the newest checkpoint and "
         "the workers' calls go on",
         replaced, "caf", "dist_sync")
UCX_JOB_CASE("dist: a killed server is replaced from the newest checkpoint "
             "and the workers' calls go on",
             replaced, "dist_sync")
JOB_CASE("dist: a killed server is replaced from the newest checkpoint and "
         "the workers' calls go on",
         replaced, "caf", "dist_ssp")

TEST_CASE("dist: without a replacement in time the workers' calls fail, and "
          "a job without --recovery-timeout takes none",
          "[integration]") {
  temp_dir tmp;
  SECTION("recovery timeout") {
    dist_job job{"dist_async",
                 1,
                 2,
                 {"--checkpoint-dir", tmp.path(), "--checkpoint-every", "0",
                  "--recovery-timeout", "2"}};
    job.add_server(1);
    auto& doomed = job.add_server(1);
    auto& w
      = job.add_worker({"--keys", "4", "--size", "10", "--rounds", "1000000",
                        "--progress", "--timeout-ms", "20000"});
    require_printed(job, w, "round 3\n", job_time);
    doomed.kill9();
    auto killed = std::chrono::steady_clock::now();
    CHECK_EXIT(w, 3, job_time);
    CHECK_THAT(w.output(), Catch::Contains("was not replaced"));
    CHECK_THAT(w.output(), Catch::Contains("is down and was not replaced ("));
    CHECK_THAT(w.output(), Catch::Contains("dead_node"));
    // After the 2 s recovery timeout, not the 20 s request timeout.
    CHECK(std::chrono::steady_clock::now() - killed < 15s);
    CHECK_EXIT(*job.coordinator, 3, job_time);
    CHECK_THAT(job.coordinator->output(), Catch::Contains("was not replaced"));
  }
  SECTION("no recovery") {
    // A full job whose coordinator replaces no server refuses another,
    // saying what would make it take one.
    dist_job job{"dist_async", 1, 1};
    REQUIRE(job.add_server(1).wait_for("hosts 1 shards", job_time));
    auto& late = job.add_server(1);
    CHECK_EXIT(late, 1, job_time);
    CHECK_THAT(late.output(), Catch::Contains("--recovery-timeout"));
  }
}

#ifdef ACTORPS_HAVE_UCX
TEST_CASE("dist: a worker killed in the middle of large pushes over UCX takes "
          "no server down",
          "[integration]") {
  // With cross-memory attach between the processes of one host, UCX 1.13
  // aborts a server that was reading a dead worker's push (seen in 4 of 8
  // runs); by default the plane does without it.
  dist_job job{"dist_async", 2, 1, {"--transport", "ucx"}};
  auto& server = job.add_server(2);
  std::vector<std::string> args{"--keys",   "2",  "--size",           "4000000",
                                "--rounds", "60", "--tolerate-deaths"};
  // The victim dies at whatever point of its rounds it is when the
  // survivor finished its tenth.
  auto survivor_args = args;
  survivor_args.push_back("--progress");
  auto& survivor = job.add_worker(survivor_args);
  auto& victim = job.add_worker(args);
  require_printed(job, survivor, "round 10\n", job_time);
  victim.kill9();
  // The survivor's rounds go on to the end, and the server ends with the
  // job, not before.
  CHECK_EXIT(survivor, 0, job_time);
  CHECK_THAT(survivor.output(), Catch::Contains("all rounds done"));
  CHECK_EXIT(server, 0, job_time);
  // A worker went down before it finished: the coordinator says so.
  CHECK_EXIT(*job.coordinator, 3, job_time);
}
#endif
