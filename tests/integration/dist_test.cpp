// SPDX-License-Identifier: BSD-3-Clause
// Distributed jobs of real processes on 127.0.0.1 (ports picked at run time).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <unistd.h>

#include "tests/core/temp_dir.hpp"
#include "tests/integration/dist_job.hpp"
#include "tests/integration/process.hpp"

using namespace std::chrono_literals;
using actorps::test::process;

using namespace actorps::test;

namespace {

// Checks a per-step CSV: steps 1, 2, ... in order, `epochs` epochs of
// `per_epoch` steps each, a finite loss and wall time that never goes back.
void check_steps(const std::string& path, unsigned epochs,
                 unsigned long per_epoch) {
  std::ifstream csv{path};
  std::string line;
  REQUIRE(std::getline(csv, line));
  CHECK(line == "step,epoch,train_loss,seconds");
  unsigned long step = 0;
  double last_time = 0;
  while (std::getline(csv, line)) {
    ++step;
    unsigned long s = 0;
    unsigned e = 0;
    double loss = 0;
    double t = 0;
    INFO(line);
    REQUIRE(std::sscanf(line.c_str(), "%lu,%u,%lf,%lf", &s, &e, &loss, &t)
            == 4);
    CHECK(s == step);
    CHECK(e == (step - 1) / per_epoch + 1);
    CHECK(std::isfinite(loss));
    CHECK(t >= last_time);
    last_time = t;
  }
  CHECK(step == epochs * per_epoch);
}

} // namespace

TEST_CASE("dist: coordinator, 2 servers and 3 workers compute exact sums",
          "[integration]") {
  auto mode = GENERATE(as<std::string>{}, "dist_sync", "dist_async",
                       "dist_ssp");
  auto transport = TRANSPORT();
  INFO(mode << " " << transport);
  // A small slicing bound, so the 5000-float keys are cut over all 4 shards.
  std::vector<std::string> flags{"--bigarray-bound", "1000", "--transport",
                                 transport};
  if (mode == "dist_ssp")
    flags.insert(flags.end(), {"--staleness", "1"});
  dist_job job{mode, 3, 2, flags};
  // One server's shards on threads of their own (the default), the other's
  // on CAF's scheduler.
  job.add_server();
  job.add_server(2, {"--shard-threads", "false"});
  // Rank 0 (whichever worker that is) exports the weights at its end.
  actorps::test::temp_dir tmp;
  auto exported = tmp.path() + "/weights.safetensors";
  for (int i = 0; i < 3; ++i)
    job.add_worker({"--keys", "3", "--size", "5000", "--rounds", "20",
                    "--export", exported});
  std::set<std::string> ranks;
  for (auto& w : job.workers) {
    CHECK_EXIT(*w, 0, job_time);
    auto& out = w->output();
    INFO(out);
    CHECK(out.find("all values exact") != std::string::npos);
    // Every worker read W arrivals right after the barrier.
    CHECK(out.find("barrier held all 3 workers") != std::string::npos);
    CHECK(out.find("num_dead_node: workers=0 servers=0") != std::string::npos);
    auto at = out.find("rank ");
    REQUIRE(at != std::string::npos);
    ranks.insert(out.substr(at, out.find(' ', at + 5) - at));
  }
  CHECK(ranks == std::set<std::string>{"rank 0", "rank 1", "rank 2"});
  // A safetensors file: its 8-byte header length, a header naming 3 keys
  // of 5000 floats (and the job's 1-float "arrivals"), then their bytes.
  std::ifstream in{exported, std::ios::binary};
  std::string file{std::istreambuf_iterator<char>{in}, {}};
  REQUIRE(file.size() > 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(file[i]);
  CHECK(file.size() == 8 + n + (3 * 5000 + 1) * sizeof(float));
  auto header = file.substr(8, n);
  size_t keys = 0;
  for (auto at = header.find("\"shape\":[5000]"); at != std::string::npos;
       at = header.find("\"shape\":[5000]", at + 1))
    ++keys;
  CHECK(keys == 3);
  for (auto& s : job.servers)
    CHECK_EXIT(*s, 0, job_time);
  CHECK_EXIT(*job.coordinator, 0, job_time);
  CHECK(job.coordinator->output().find("job done") != std::string::npos);
}

#ifdef ACTORPS_HAVE_UCX
TEST_CASE("dist: a server that holds at most 1 MB of pushes received still "
          "sums 3 workers' large pushes exactly (ucx)",
          "[integration]") {
  // Each 1.2 MB push arrives by rendezvous and alone exceeds the server's
  // bound: the server takes them one at a time, the others waiting in
  // their workers, in both modes.
  auto mode = GENERATE(as<std::string>{}, "dist_sync", "dist_async");
  INFO(mode);
  dist_job job{mode, 3, 1, {"--transport", "ucx"}};
  job.add_server(1, {"--inflight-mb", "1"});
  for (int i = 0; i < 3; ++i)
    job.add_worker({"--keys", "2", "--size", "300000", "--rounds", "4"});
  for (auto& w : job.workers) {
    CHECK_EXIT(*w, 0, job_time);
    INFO(w->output());
    CHECK(w->output().find("all values exact") != std::string::npos);
  }
  for (auto& s : job.servers)
    CHECK_EXIT(*s, 0, job_time);
  CHECK_EXIT(*job.coordinator, 0, job_time);
}
#endif

TEST_CASE("dist: a worker with --hold-after-rounds waits for a line on its "
          "standard input",
          "[integration]") {
  dist_job job{"dist_async", 1, 1};
  job.add_server();
  auto& w = job.add_worker({"--keys", "1", "--size", "10", "--rounds", "3",
                            "--progress", "--hold-after-rounds", "1"},
                           true);
  REQUIRE(w.wait_for("holds after 1 of 3 rounds\n", job_time));
  // Two more tiny rounds take milliseconds: it would have ended by now.
  CHECK_FALSE(w.wait_exit(std::chrono::milliseconds{500}));
  CHECK(w.output().find("round 1\n") == std::string::npos);
  w.send_line("");
  CHECK_EXIT(w, 0, job_time);
  INFO(w.output());
  CHECK(w.output().find("round 2\n") != std::string::npos);
  CHECK(w.output().find("all values exact") != std::string::npos);
  CHECK_EXIT(*job.coordinator, 0, job_time);
  // Only up to --rounds.
  process bad{{ACTORPS_WORKER_BIN, "--coordinator", "127.0.0.1:1", "--rounds",
               "3", "--hold-after-rounds", "4"}};
  CHECK_EXIT(bad, 2, job_time);
  CHECK_THAT(bad.output(),
             Catch::Contains("--hold-after-rounds must be 0..3, got 4"));
}

TEST_CASE("dist: compressed pushes cross between processes",
          "[integration][compression]") {
  // fp16 keeps the job's small integer gradients exactly, so the sums stay
  // exact; 2-bit is lossy, so its run is checked for completing only.
  auto codec = GENERATE(as<std::string>{}, "fp16", "2bit:1");
  auto transport = TRANSPORT();
  INFO(transport);
  dist_job job{
    "dist_sync", 2, 1, {"--bigarray-bound", "1000", "--transport", transport}};
  job.add_server();
  for (int i = 0; i < 2; ++i)
    job.add_worker({"--keys", "2", "--size", "3000", "--rounds", "10",
                    "--compression", codec});
  for (auto& w : job.workers) {
    CHECK_EXIT(*w, 0, job_time);
    auto& out = w->output();
    INFO(out);
    CHECK(out.find("barrier held all 2 workers") != std::string::npos);
    CHECK(out.find(codec == "fp16" ? "all values exact" : "all rounds done")
          != std::string::npos);
  }
  CHECK_EXIT(*job.servers[0], 0, job_time);
  CHECK_EXIT(*job.coordinator, 0, job_time);
}

TEST_CASE("dist: a worker killed mid-job is dropped and the others finish",
          "[integration]") {
  auto transport = TRANSPORT();
  INFO(transport);
  dist_job job{
    "dist_sync", 3, 1, {"--log-level", "debug", "--transport", transport}};
  job.add_server();
  std::vector<std::string> args{"--keys",
                                "2",
                                "--size",
                                "1000",
                                "--rounds",
                                "300",
                                "--tolerate-deaths",
                                "--timeout-ms",
                                "15000"};
  job.add_worker(args);
  job.add_worker(args);
  auto victim_args = args;
  victim_args.push_back("--progress");
  auto& victim = job.add_worker(victim_args);
  REQUIRE(victim.wait_for("round 5\n", job_time));
  victim.kill9();
  auto killed = std::chrono::steady_clock::now();
  for (size_t i = 0; i < 2; ++i) {
    CHECK_EXIT(*job.workers[i], 0, job_time);
    auto& out = job.workers[i]->output();
    INFO(out);
    CHECK(out.find("all rounds done") != std::string::npos);
    CHECK(out.find("num_dead_node: workers=1 servers=0") != std::string::npos);
  }
  // The survivors did not wait for the dead worker to time out anywhere.
  CHECK(std::chrono::steady_clock::now() - killed < 60s);
  CHECK_EXIT(*job.servers[0], 0, job_time);
  // The job ended, but not cleanly: the coordinator says so and exits 3.
  CHECK_EXIT(*job.coordinator, 3, job_time);
  CHECK(job.coordinator->output().find("0 of 3 workers failed, 1 went down")
        != std::string::npos);
  // With --log-level debug the coordinator says who went down.
  CHECK(job.coordinator->output().find("is down") != std::string::npos);
}

namespace {

// The workers of the replacement tests: rounds that outlast a death and a
// rejoin, progress lines to wait for.
std::vector<std::string> replacement_args() {
  return {"--keys",
          "2",
          "--size",
          "1000",
          "--rounds",
          "300",
          "--tolerate-deaths",
          "--timeout-ms",
          "30000",
          "--progress"};
}

// Starts workers with `args` until one gets dead rank `rank` of `of`: each
// is refused with `refusal` while the coordinator has not seen the death.
process& rejoin(dist_job& job, const std::vector<std::string>& args,
                const std::string& rank, const std::string& of,
                const std::string& refusal) {
  auto deadline = std::chrono::steady_clock::now() + job_time;
  for (;;) {
    auto& w = job.add_worker(args);
    if (w.wait_for("rank " + rank + " of " + of, startup))
      return w;
    // (Once a worker stayed silent for the whole wait in a clean-clone CI
    // run: its end and the coordinator's log say where it hung.)
    if (w.output().find(refusal) == std::string::npos) {
      static_cast<void>(w.wait_exit(job_time));
      static_cast<void>(job.coordinator->wait_for("\n(never printed)", 1s));
    }
    INFO(w.output());
    INFO(job.coordinator->output());
    REQUIRE(w.output().find(refusal) != std::string::npos);
    REQUIRE(std::chrono::steady_clock::now() < deadline);
  }
}

} // namespace

TEST_CASE("dist: a new worker takes a dead worker's place", "[integration]") {
  // Async: the replacement's own barriers meet the survivor's next ones
  // (barriers count arrivals); see the README for sync jobs.
  dist_job job{"dist_async", 2, 1, {"--log-level", "debug"}};
  job.add_server();
  auto args = replacement_args();
  // The survivor holds before its last barrier until the replacement has
  // joined: had it ended first, so would the job, and the replacement would
  // find no coordinator (seen once under the sanitizers, whose process
  // starts are slow).
  auto first_args = args;
  first_args.insert(first_args.end(), {"--hold-after-rounds", "300"});
  auto& first = job.add_worker(first_args, true);
  REQUIRE(first.wait_for(" of 2 (", startup));
  auto& victim = job.add_worker(args);
  REQUIRE(victim.wait_for("round 5\n", job_time));
  std::smatch m;
  REQUIRE(
    std::regex_search(victim.output(), m, std::regex{R"(rank (\d) of 2)"}));
  auto rank = m[1].str();
  victim.kill9();
  // The job is full: a new worker gets the dead one's rank, once the
  // coordinator saw it die, and both finish.
  auto& replacement = rejoin(job, args, rank, "2", "none of them died");
  first.send_line("");
  CHECK_EXIT(replacement, 0, job_time);
  CHECK(replacement.output().find("all rounds done") != std::string::npos);
  CHECK_EXIT(first, 0, job_time);
  CHECK_EXIT(*job.servers[0], 0, job_time);
  // Replaced, the dead worker is not counted as lost: the job ends cleanly.
  CHECK_EXIT(*job.coordinator, 0, job_time);
  CHECK(job.coordinator->output().find("was replaced") != std::string::npos);
}

TEST_CASE("dist: a worker started with --rank takes that dead worker's place",
          "[integration]") {
  dist_job job{"dist_async", 3, 1};
  job.add_server();
  // Rounds enough for the survivors to outlast the refused tries and the
  // rejoin (process starts are slow under the sanitizers); progress lines
  // from the victim only (nobody reads the others' output before they end:
  // a full pipe would stop them).
  auto args = replacement_args();
  *std::find(args.begin(), args.end(), "300") = "3000";
  args.erase(std::find(args.begin(), args.end(), "--progress"));
  auto victim_args = args;
  victim_args.push_back("--progress");
  auto with_rank = [&](const std::string& r) {
    auto xs = args;
    xs.insert(xs.end(), {"--rank", r});
    return xs;
  };
  auto& first = job.add_worker(args);
  REQUIRE(first.wait_for(" of 3 (", startup));
  // A rank is named only to take a dead worker's place.
  auto& early = job.add_worker(with_rank("1"));
  CHECK_EXIT(early, 1, job_time);
  CHECK_THAT(early.output(), Catch::Contains("still waits for 2 of its 3"));
  auto& second = job.add_worker(args);
  auto& victim = job.add_worker(victim_args);
  REQUIRE(victim.wait_for("round 5\n", job_time));
  std::smatch m;
  REQUIRE(
    std::regex_search(victim.output(), m, std::regex{R"(rank (\d) of 3)"}));
  auto rank = m[1].str();
  REQUIRE(second.wait_for(" of 3 (", startup));
  REQUIRE(
    std::regex_search(second.output(), m, std::regex{R"(rank (\d) of 3)"}));
  auto alive = m[1].str();
  for (auto& [r, why] : std::vector<std::pair<std::string, std::string>>{
         {"0", "rank 0 is not replaced"},
         {"3", "the job has 3 workers (ranks 0..2)"},
         {alive, "rank " + alive + " is alive"}}) {
    auto& w = job.add_worker(with_rank(r));
    CHECK_EXIT(w, 1, job_time);
    CHECK_THAT(w.output(), Catch::Contains(why));
  }
  victim.kill9();
  // Named, the dead rank is taken once the coordinator saw it die.
  auto& replacement = rejoin(job, with_rank(rank), rank, "3", "is alive");
  CHECK_EXIT(replacement, 0, job_time);
  CHECK_EXIT(first, 0, job_time);
  CHECK_EXIT(second, 0, job_time);
  CHECK_EXIT(*job.coordinator, 0, job_time);
}

TEST_CASE("dist: a hung worker is cut off after the connection timeout",
          "[integration]") {
  // SIGSTOP keeps the worker's connections open, so only the heartbeat and
  // connection timeout can tell that it hangs.
  const std::vector<std::string> net{"--heartbeat-ms", "100",
                                     "--connection-timeout-ms", "3000"};
  auto with_net = [&](std::vector<std::string> xs) {
    xs.insert(xs.end(), net.begin(), net.end());
    return xs;
  };
  auto transport = TRANSPORT();
  INFO(transport);
  dist_job job{"dist_sync", 3, 1, with_net({"--transport", transport})};
  job.servers.push_back(std::make_unique<process>(std::vector<std::string>{
    ACTORPS_SERVER_BIN, "--coordinator", job.address, "--token", token(),
    "--shards", "2", "--heartbeat-ms", "100", "--connection-timeout-ms",
    "3000"}));
  auto args = with_net({"--keys", "2", "--size", "1000", "--rounds", "300",
                        "--tolerate-deaths", "--timeout-ms", "30000"});
  job.add_worker(args);
  job.add_worker(args);
  args.push_back("--progress");
  auto& victim = job.add_worker(args);
  require_printed(job, victim, "round 5\n", job_time);
  victim.stop();
  auto stopped = std::chrono::steady_clock::now();
  for (size_t i = 0; i < 2; ++i) {
    auto rc = job.workers[i]->wait_exit(job_time);
    INFO(report(job));
    REQUIRE(rc);
    CHECK(*rc == 0);
    CHECK(job.workers[i]->output().find("num_dead_node: workers=1")
          != std::string::npos);
  }
  // Cut off after about the connection timeout, not a request timeout.
  CHECK(std::chrono::steady_clock::now() - stopped < 20s);
}

TEST_CASE("dist: a killed or hung coordinator fails the workers' calls at "
          "once",
          "[integration]") {
  // SIGSTOP keeps its connections open: only the heartbeat and connection
  // timeout tell.
  auto how = GENERATE(as<std::string>{}, "kill", "stop");
  INFO(how);
  const std::vector<std::string> net{"--heartbeat-ms", "100",
                                     "--connection-timeout-ms", "3000"};
  auto with_net = [&](std::vector<std::string> xs) {
    xs.insert(xs.end(), net.begin(), net.end());
    return xs;
  };
  dist_job job{"dist_async", 2, 1, net};
  job.add_server(2, net);
  // One worker finishes its rounds and waits at the final barrier for the
  // other, which runs on.
  auto& waiting = job.add_worker(
    with_net({"--keys", "2", "--size", "100", "--rounds", "3", "--progress"}));
  auto& busy = job.add_worker(with_net(
    {"--keys", "2", "--size", "100", "--rounds", "1000000000", "--progress"}));
  require_printed(job, waiting, "round 2\n", job_time);
  require_printed(job, busy, "round 3\n", job_time);
  if (how == "kill")
    job.coordinator->kill9();
  else
    job.coordinator->stop();
  auto lost = std::chrono::steady_clock::now();
  for (auto* w : {&waiting, &busy}) {
    CHECK_EXIT(*w, 3, 30s);
    INFO(w->output());
    CHECK(w->output().find("dead_node") != std::string::npos);
  }
  INFO(waiting.output());
  CHECK(waiting.output().find("lost the coordinator") != std::string::npos);
  // The server ends too, saying why.
  CHECK_EXIT(*job.servers[0], 3, 30s);
  CHECK(job.servers[0]->output().find("lost the coordinator")
        != std::string::npos);
  // At once (or after the connection timeout), not after the barrier's
  // timeout (10 minutes).
  CHECK(std::chrono::steady_clock::now() - lost < 15s);
}

TEST_CASE("dist: a killed server fails the workers' calls with a clear error",
          "[integration]") {
  auto transport = TRANSPORT();
  INFO(transport);
  dist_job job{"dist_sync", 2, 2, {"--transport", transport}};
  job.add_server(1);
  auto& doomed = job.add_server(1);
  std::vector<std::string> args{
    "--keys",  "4",          "--size",       "1000", "--rounds",
    "1000000", "--progress", "--timeout-ms", "20000"};
  job.add_worker(args);
  job.add_worker(args);
  REQUIRE(job.workers[0]->wait_for("round 3\n", job_time));
  doomed.kill9();
  auto killed = std::chrono::steady_clock::now();
  for (auto& w : job.workers) {
    CHECK_EXIT(*w, 3, 60s);
    INFO(w->output());
    CHECK(w->output().find("dead_node") != std::string::npos);
  }
  // Well before the 20 s request timeout: the workers saw the server go down.
  CHECK(std::chrono::steady_clock::now() - killed < 15s);
  // The workers closed (they left), the server was lost: exit 3.
  CHECK_EXIT(*job.coordinator, 3, job_time);
  CHECK(job.coordinator->output().find("2 of 2 workers failed")
        != std::string::npos);
}

TEST_CASE("dist: a job over mutual TLS computes exact sums, and nodes "
          "without a job certificate are refused",
          "[integration]") {
  actorps::test::temp_dir dir;
  auto job_ca = dir.path() + "/job";
  auto other_ca = dir.path() + "/other";
  REQUIRE(std::system(("bash " ACTORPS_MAKE_TLS " " + job_ca
                       + " coordinator server w0 w1 >/dev/null")
                        .c_str())
          == 0);
  REQUIRE(std::system(
            ("bash " ACTORPS_MAKE_TLS " " + other_ca + " intruder >/dev/null")
              .c_str())
          == 0);
  auto tls = [](const std::string& at, const std::string& name,
                const std::string& ca) {
    return std::vector<std::string>{"--tls-cert", at + "/" + name + ".pem",
                                    "--tls-key",  at + "/" + name + ".key",
                                    "--tls-ca",   ca + "/ca.pem"};
  };
  dist_job job{"dist_sync", 2, 1, tls(job_ca, "coordinator", job_ca)};
  // Under TLS the default transport is CAF's (UCX encrypts nothing).
  CHECK(job.coordinator->output().find("(dist_sync over caf, ")
        != std::string::npos);
  // Refused before they reach any actor: a plain node, and nodes holding
  // another CA's certificate.
  std::vector<std::vector<std::string>> intruders{
    {}, tls(other_ca, "intruder", other_ca), tls(other_ca, "intruder", job_ca)};
  for (auto& flags : intruders) {
    flags.push_back("--connect-timeout-ms");
    flags.push_back("300");
    auto& w = job.add_worker(flags);
    auto rc = w.wait_exit(job_time);
    INFO(w.output());
    REQUIRE(rc);
    CHECK(*rc != 0);
    // A plain node with the token fails the proof TLS does not speak.
    CHECK((w.output().find("cannot reach the coordinator") != std::string::npos
           || w.output().find("refused this node") != std::string::npos));
  }
  job.workers.clear();
  job.add_server(2, tls(job_ca, "server", job_ca));
  for (auto name : {"w0", "w1"}) {
    auto flags = tls(job_ca, name, job_ca);
    for (auto x : {"--keys", "3", "--size", "5000", "--rounds", "10"})
      flags.push_back(x);
    job.add_worker(flags);
  }
  for (auto& w : job.workers) {
    CHECK_EXIT(*w, 0, job_time);
    CHECK(w->output().find("all values exact") != std::string::npos);
  }
  CHECK_EXIT(*job.servers[0], 0, job_time);
  CHECK_EXIT(*job.coordinator, 0, job_time);
}

TEST_CASE("dist: a server listens on --bind and gives workers --host",
          "[integration]") {
  dist_job job{"dist_async", 1, 1};
  // It listens on 127.0.0.2 but tells workers 127.0.0.1, where nothing
  // listens: the worker says which address failed.
  job.add_server(1, {"--host", "127.0.0.1", "--bind", "127.0.0.2"});
  auto& w = job.add_worker({"--rounds", "1", "--size", "10"});
  auto rc = w.wait_exit(job_time);
  INFO(w.output());
  REQUIRE(rc);
  CHECK(*rc != 0);
  CHECK(w.output().find("cannot reach the server at 127.0.0.1:")
        != std::string::npos);
  // The coordinator takes --bind as the same as --host, never both.
  process coord{{ACTORPS_COORDINATOR_BIN, "--bind", "127.0.0.2", "--port", "0",
                 "--token", token()}};
  CHECK(coord.wait_for("127.0.0.2:", startup));
  process both{{ACTORPS_COORDINATOR_BIN, "--bind", "127.0.0.2", "--host",
                "127.0.0.1", "--token", token()}};
  CHECK_EXIT(both, 2, startup);
  CHECK(both.output().find("not both") != std::string::npos);
}

TEST_CASE("dist: a wrong token, mode or transport is refused, a worker "
          "without a mode takes the job's",
          "[integration]") {
  auto transport = TRANSPORT();
  INFO(transport);
  dist_job job{"dist_async", 1, 1, {"--transport", transport}};
  process intruder{{ACTORPS_WORKER_BIN, "--coordinator", job.address, "--token",
                    "not-the-token", "--mode", "dist_async"}};
  CHECK_EXIT(intruder, 1, startup);
  CHECK(intruder.output().find("unauthorized") != std::string::npos);
  process wrong_mode{{ACTORPS_WORKER_BIN, "--coordinator", job.address,
                      "--token", token(), "--mode", "dist_sync"}};
  CHECK_EXIT(wrong_mode, 1, startup);
  CHECK(wrong_mode.output().find("dist_async") != std::string::npos);
  auto other = std::string{transport == "ucx" ? "caf" : "ucx"};
  process wrong_transport{{ACTORPS_WORKER_BIN, "--coordinator", job.address,
                           "--token", token(), "--transport", other}};
  CHECK_EXIT(wrong_transport, 1, startup);
  CHECK(wrong_transport.output().find("travel over " + transport
                                      + ", the node asked for " + other)
        != std::string::npos);
  job.add_server();
  // No --mode: the worker takes the job's; its own --transport matches.
  process w{{ACTORPS_WORKER_BIN, "--coordinator", job.address, "--token",
             token(), "--rounds", "5", "--size", "100", "--transport",
             transport}};
  CHECK_EXIT(w, 0, job_time);
  CHECK(w.output().find("(dist_async)") != std::string::npos);
  CHECK_EXIT(*job.coordinator, 0, job_time);
}

TEST_CASE("dist: the coordinator writes a port file and says whom it waits "
          "for",
          "[integration]") {
  auto dir = std::filesystem::temp_directory_path()
             / ("actorps-port-" + std::to_string(::getpid()));
  auto port_file = dir / "sub" / "coordinator.port";
  std::filesystem::create_directories(port_file.parent_path());
  std::ofstream{port_file} << "1\n"; // left by an earlier run
  process coord{{ACTORPS_COORDINATOR_BIN, "--host", "127.0.0.1", "--port", "0",
                 "--token", token(), "--workers", "2", "--servers", "1",
                 "--port-file", port_file.string(), "--status-interval-ms",
                 "100"}};
  REQUIRE(coord.wait_for("waiting for 2 of 2 workers (joined: none) and 1 "
                         "of 1 servers (joined: none)",
                         startup));
  // The file was written before the listening line was printed.
  std::string port;
  std::ifstream{port_file} >> port;
  INFO(coord.output());
  REQUIRE(port != "1");
  auto address = "127.0.0.1:" + port;
  CHECK(coord.output().find("listening on " + address + " ")
        != std::string::npos);
  // The others read the token from an owner-only file.
  auto token_file = (dir / "token").string();
  std::ofstream{token_file} << token() << "\n";
  std::filesystem::permissions(token_file,
                               std::filesystem::perms::owner_read
                                 | std::filesystem::perms::owner_write);
  process server{
    {ACTORPS_SERVER_BIN, "--coordinator", address, "--token-file", token_file}};
  process w0{{ACTORPS_WORKER_BIN, "--coordinator", address, "--token-file",
              token_file, "--rounds", "3", "--size", "10"}};
  CHECK(coord.wait_for("waiting for 1 of 2 workers (joined: 0)", startup));
  process w1{{ACTORPS_WORKER_BIN, "--coordinator", address, "--token", token(),
              "--rounds", "3", "--size", "10"}};
  CHECK(coord.wait_for("all 2 workers and 1 servers joined", startup));
  CHECK_EXIT(w0, 0, job_time);
  CHECK_EXIT(w1, 0, job_time);
  CHECK_EXIT(coord, 0, job_time);
  std::filesystem::remove_all(dir);
}

TEST_CASE("dist: with --server-token-file the job token alone joins no server",
          "[integration]") {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path()
             / ("actorps-server-token-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto port_file = (dir / "port").string();
  auto server_token = (dir / "server-token").string();
  std::ofstream{server_token} << "servers-" << token() << "\n";
  fs::permissions(server_token, fs::perms::owner_read | fs::perms::owner_write);
  process coord{{ACTORPS_COORDINATOR_BIN, "--host", "127.0.0.1", "--port", "0",
                 "--token", token(), "--server-token-file", server_token,
                 "--workers", "1", "--servers", "1", "--port-file", port_file}};
  REQUIRE(coord.wait_for("listening on", startup));
  std::string port;
  std::ifstream{port_file} >> port;
  auto address = "127.0.0.1:" + port;
  // A holder of the job token (a worker's) is refused as a server.
  process intruder{
    {ACTORPS_SERVER_BIN, "--coordinator", address, "--token", token()}};
  CHECK_EXIT(intruder, 1, job_time);
  CHECK_THAT(intruder.output(), Catch::Contains("wrong server token"));
  process server{{ACTORPS_SERVER_BIN, "--coordinator", address, "--token",
                  token(), "--server-token-file", server_token}};
  process worker{{ACTORPS_WORKER_BIN, "--coordinator", address, "--token",
                  token(), "--rounds", "3", "--size", "10"}};
  CHECK_EXIT(worker, 0, job_time);
  CHECK_EXIT(server, 0, job_time);
  CHECK_EXIT(coord, 0, job_time);
  fs::remove_all(dir);
}

TEST_CASE("dist: an unreachable coordinator fails fast with a clear message",
          "[integration]") {
  auto address = "127.0.0.1:" + std::to_string(actorps::test::unused_port());
  auto started = std::chrono::steady_clock::now();
  process worker{{ACTORPS_WORKER_BIN, "--coordinator", address}};
  process server{{ACTORPS_SERVER_BIN, "--coordinator", address}};
  CHECK_EXIT(worker, 1, 10s);
  CHECK_EXIT(server, 1, 10s);
  CHECK(std::chrono::steady_clock::now() - started < 10s);
  CHECK(worker.output().find("cannot reach the coordinator at " + address)
        != std::string::npos);
  CHECK(server.output().find("cannot reach the coordinator at " + address)
        != std::string::npos);
}

#ifdef ACTORPS_HAVE_UCX
TEST_CASE("dist: a node whose plane settings are bad fails before it joins, "
          "and the job goes on without it",
          "[integration]") {
  dist_job job{"dist_async", 1, 1, {"--transport", "ucx"}};
  auto bad = [&](const char* bin) {
    return std::vector<std::string>{"/usr/bin/env",
                                    "ACTORPS_UCX_SEGMENT_MB=lots",
                                    bin,
                                    "--coordinator",
                                    job.address,
                                    "--token",
                                    token()};
  };
  process server{bad(ACTORPS_SERVER_BIN)};
  process worker{bad(ACTORPS_WORKER_BIN)};
  CHECK_EXIT(server, 1, startup);
  CHECK_EXIT(worker, 1, startup);
  CHECK(server.output().find("ACTORPS_UCX_SEGMENT_MB") != std::string::npos);
  CHECK(worker.output().find("ACTORPS_UCX_SEGMENT_MB") != std::string::npos);
  // Neither took a place in the job: it still waits for its server and its
  // worker, and ends well with good ones.
  job.add_server();
  auto& w = job.add_worker({"--rounds", "5", "--size", "100"});
  CHECK_EXIT(w, 0, job_time);
  CHECK_EXIT(*job.coordinator, 0, job_time);
}
#endif

TEST_CASE("dist: the apps explain bad flags and read config files",
          "[integration]") {
  SECTION("--help") {
    for (auto bin :
         {ACTORPS_COORDINATOR_BIN, ACTORPS_SERVER_BIN, ACTORPS_WORKER_BIN}) {
      process p{{bin, "--help"}};
      CHECK_EXIT(p, 0, startup);
      CHECK(p.output().find("usage:") != std::string::npos);
      CHECK(p.output().find("--config") != std::string::npos);
    }
  }
  SECTION("bad flags and values exit 2 with one line") {
    process a{{ACTORPS_SERVER_BIN, "--bogus"}};
    CHECK_EXIT(a, 2, startup);
    CHECK(a.output().find("bogus") != std::string::npos);
    process b{{ACTORPS_COORDINATOR_BIN, "--mode", "fast"}};
    CHECK_EXIT(b, 2, startup);
    process c{{ACTORPS_WORKER_BIN, "--coordinator", "no-port-here"}};
    CHECK_EXIT(c, 2, startup);
    CHECK(c.output().find("host:port") != std::string::npos);
    process d{{ACTORPS_WORKER_BIN}};
    CHECK_EXIT(d, 2, startup);
    process e{{ACTORPS_WORKER_BIN, "--config", "/nonexistent/actorps.ini"}};
    CHECK_EXIT(e, 2, startup);
    CHECK(e.output().find("/nonexistent/actorps.ini") != std::string::npos);
    process f{{ACTORPS_SERVER_BIN, "--scheduler", "fifo"}};
    CHECK_EXIT(f, 2, startup);
    CHECK(f.output().find("--scheduler") != std::string::npos);
    process g{{ACTORPS_WORKER_BIN, "--coordinator", "127.0.0.1:1", "--job",
               "mnist", "--lr-schedule", "step"}};
    CHECK_EXIT(g, 2, startup);
    CHECK(g.output().find("--lr-schedule") != std::string::npos);
    process h{{ACTORPS_COORDINATOR_BIN, "--slice-floats", "0"}};
    CHECK_EXIT(h, 2, startup);
    CHECK(h.output().find("--slice-floats") != std::string::npos);
    process i{{ACTORPS_WORKER_BIN, "--coordinator", "127.0.0.1:1",
               "--compression", "2bit:0"}};
    CHECK_EXIT(i, 2, startup);
    CHECK(i.output().find("--compression") != std::string::npos);
  }
  SECTION("counts, ranges, stray words, folders and token files") {
    auto expect = [](std::vector<std::string> argv, const std::string& says) {
      process p{std::move(argv)};
      CHECK_EXIT(p, 2, startup);
      CHECK(p.output().find(says) != std::string::npos);
    };
    expect({ACTORPS_SERVER_BIN, "--shards", "-1"}, "--shards");
    expect({ACTORPS_SERVER_BIN, "--shard-threads", "maybe"}, "shard-threads");
    expect({ACTORPS_SERVER_BIN, "--inflight-mb", "2000000"}, "--inflight-mb");
    expect({ACTORPS_SERVER_BIN, "--inflight-mb", "-1"}, "inflight-mb");
    expect({ACTORPS_COORDINATOR_BIN, "--workers", "-1"}, "--workers");
    expect({ACTORPS_COORDINATOR_BIN, "--workers", "0"},
           "--workers must be 1..");
    expect({ACTORPS_COORDINATOR_BIN, "--threads", "100000"}, "--threads");
    expect({ACTORPS_TRAIN_BIN, "--threads", "100000"}, "--threads");
    expect({ACTORPS_TRAIN_BIN, "--scheduler", "fifo"}, "--scheduler");
    expect({ACTORPS_COORDINATOR_BIN, "dist_sync"}, "'dist_sync'");
    expect({ACTORPS_COORDINATOR_BIN, "--config", "/tmp"}, "regular file");
    expect({ACTORPS_WORKER_BIN, "--coordinator", "127.0.0.1:1", "--size",
            "99999999999"},
           "--size");
    namespace fs = std::filesystem;
    auto loose = fs::temp_directory_path()
                 / ("actorps-loose-" + std::to_string(::getpid()));
    std::ofstream{loose} << token();
    fs::permissions(loose, fs::perms::owner_read | fs::perms::group_read
                             | fs::perms::others_read);
    expect({ACTORPS_SERVER_BIN, "--coordinator", "127.0.0.1:1", "--token-file",
            loose.string()},
           "chmod 600");
    expect({ACTORPS_COORDINATOR_BIN, "--workers", "1", "--servers", "1",
            "--server-token-file", loose.string()},
           "--server-token-file: ");
    fs::remove(loose);
    auto out = fs::temp_directory_path()
               / ("actorps-out-" + std::to_string(::getpid()));
    std::ofstream{out} << "a file, not a folder";
    expect({ACTORPS_TRAIN_BIN, "--out", out.string()}, "--out");
    fs::remove(out);
    expect({ACTORPS_COORDINATOR_BIN, "--workers", "1", "--servers", "1",
            "--transport", "rdma"},
           "--transport must be caf, ucx or auto, got 'rdma'");
    expect({ACTORPS_WORKER_BIN, "--coordinator", "127.0.0.1:1", "--transport",
            "auto"},
           "--transport must be caf or ucx, got 'auto'");
  }
  SECTION("a config file sets the same options as the flags") {
    auto path = "/tmp/actorps-coordinator-" + std::to_string(::getpid())
                + ".ini";
    {
      std::ofstream f{path};
      f << "host = 127.0.0.1\nport = 0\nworkers = 7\nservers = 5\n"
           "mode = dist_async\n";
    }
    process p{{ACTORPS_COORDINATOR_BIN, "--config", path}};
    CHECK(p.wait_for("5 servers)", startup));
    CHECK(p.output().find("(dist_async over ") != std::string::npos);
    CHECK(p.output().find(", 7 workers, 5 servers)") != std::string::npos);
    p.kill9();
    ::unlink(path.c_str());
  }
}

TEST_CASE("dist: log lines carry UTC time, role and rank, also in "
          "--log-file",
          "[integration]") {
  actorps::test::temp_dir tmp;
  auto log = tmp.path() + "/worker.log";
  dist_job job{"dist_sync", 1, 1};
  job.add_server();
  auto& w = job.add_worker(
    {"--keys", "1", "--size", "10", "--rounds", "2", "--log-file", log});
  CHECK_EXIT(w, 0, job_time);
  CHECK_EXIT(*job.servers[0], 0, job_time);
  CHECK_EXIT(*job.coordinator, 0, job_time);
  const std::string stamp = R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z )";
  auto has = [&](const std::string& text, const std::string& line) {
    return std::regex_search(text, std::regex{"(^|\n)" + stamp + line});
  };
  INFO(w.output());
  CHECK(has(w.output(), R"(worker\[0\] rank 0 of 1 \(dist_sync\))"));
  CHECK(has(w.output(), R"(worker\[0\] rank 0: all values exact)"));
  CHECK(has(job.servers[0]->output(), R"(server\[0\] server rank 0 hosts)"));
  CHECK(has(job.coordinator->output(), R"(coordinator listening on 127)"));
  CHECK(has(job.coordinator->output(), R"(coordinator job done)"));
  // The file holds the same lines.
  std::ifstream in{log};
  std::string file{std::istreambuf_iterator<char>{in}, {}};
  CHECK(has(file, R"(worker\[0\] rank 0 of 1 \(dist_sync\))"));
  CHECK(has(file, R"(worker\[0\] rank 0: all values exact)"));
  // A log file that cannot be opened (its folder is a file) is refused
  // before anything runs.
  std::ofstream{tmp.path() + "/plain"} << "x";
  process bad{{ACTORPS_WORKER_BIN, "--coordinator", job.address, "--log-file",
               tmp.path() + "/plain/x.log"}};
  CHECK_EXIT(bad, 2, startup);
  CHECK(bad.output().find("--log-file") != std::string::npos);
}

TEST_CASE("dist: the mnist job shows its progress and rank 0 keeps the "
          "curves",
          "[integration]") {
  actorps::test::temp_dir tmp;
  dist_job job{"dist_sync", 2, 1};
  job.add_server();
  for (int i = 0; i < 2; ++i)
    job.add_worker({"--job", "mnist", "--epochs", "2", "--limit-train", "1024",
                    "--limit-test", "200", "--out",
                    tmp.path() + "/w" + std::to_string(i)});
  int writers = 0;
  for (int i = 0; i < 2; ++i) {
    auto& w = *job.workers[i];
    CHECK_EXIT(w, 0, job_time);
    auto& out = w.output();
    INFO(out);
    if (out.find("rank 0 of 2") == std::string::npos) {
      // Rank 1 trains silently and writes no curves.
      CHECK(out.find("done: loss") == std::string::npos);
      continue;
    }
    ++writers;
    CHECK(out.find("epoch  2/2 done: loss ") != std::string::npos);
    CHECK(out.find("ETA ") != std::string::npos);
    std::ifstream csv{tmp.path() + "/w" + std::to_string(i) + "/dist_sync.csv"};
    std::string line;
    int rows = 0;
    while (std::getline(csv, line))
      ++rows;
    CHECK(rows == 3); // the header and one line per epoch
    // One line per step of rank 0, as many as its progress counted.
    std::smatch m;
    REQUIRE(std::regex_search(out, m, std::regex{R"(step (\d+)/\1 )"}));
    check_steps(tmp.path() + "/w" + std::to_string(i) + "/dist_sync-steps.csv",
                2, std::stoul(m[1]));
  }
  CHECK(writers == 1);
}

TEST_CASE("train: the app trains on Fashion-MNIST samples end to end",
          "[integration]") {
  auto out = "/tmp/actorps-train-" + std::to_string(::getpid());
  process p{{ACTORPS_TRAIN_BIN, "--epochs", "2", "--limit-train", "2048",
             "--limit-test", "500", "--batch", "32", "--out", out}};
  CHECK_EXIT(p, 0, job_time);
  auto& text = p.output();
  // The loss of epoch 2 is below that of epoch 1.
  auto loss_of = [&](const std::string& epoch) {
    auto at = text.find("epoch  " + epoch + "/2 done: loss ");
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(at + 22));
  };
  CHECK(loss_of("2") < loss_of("1"));
  CHECK(text.find("test accuracy") != std::string::npos);
  // Progress lines (not a terminal: plain) with the step, the time spent
  // and the time left; the last of an epoch is at its last step.
  std::smatch m;
  REQUIRE(std::regex_search(
    text, m,
    std::regex{R"(100%  step (\d+)/(\d+) .*elapsed \d+:\d\d  ETA \d+:\d\d)"}));
  CHECK(m[1] == m[2]);
  std::ifstream csv{out + "/async.csv"};
  std::string line;
  int rows = 0;
  while (std::getline(csv, line))
    ++rows;
  CHECK(rows == 3);
  check_steps(out + "/async-steps.csv", 2, std::stoul(m[2]));
  CHECK(std::ifstream{out + "/async.svg"}.good());
  std::filesystem::remove_all(out);
}
