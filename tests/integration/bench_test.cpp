// SPDX-License-Identifier: BSD-3-Clause
// actorps-bench, run as CI runs it: tiny sizes, local and dist.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "tests/integration/process.hpp"

using namespace std::chrono_literals;
using actorps::test::process;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos;
       pos = text.find(what, pos + 1))
    ++n;
  return n;
}

using json = nlohmann::json;

// The results of `doc` whose field `key` equals `value`.
size_t count_results(const json& doc, const char* key, const json& value) {
  size_t n = 0;
  for (const auto& r : doc.at("results"))
    if (r.contains(key) && r.at(key) == value)
      ++n;
  return n;
}

// The results that carry the field `key`.
size_t count_with(const json& doc, const char* key) {
  size_t n = 0;
  for (const auto& r : doc.at("results"))
    n += r.contains(key) ? 1 : 0;
  return n;
}

// The fused dist result for `name` with `workers` workers (null if none).
json dist_result(const json& doc, const std::string& name, int workers) {
  for (const auto& r : doc.at("results"))
    if (r.at("mode") == "dist" && r.at("case") == name
        && r.at("round") == "fused" && r.at("workers") == workers)
      return r;
  return nullptr;
}

// Runs actorps-bench with `args` and --json; its output and the JSON it
// wrote (REQUIREs a clean exit within 300 s).
std::pair<std::string, json> run_bench(std::vector<std::string> args,
                                       const std::string& name) {
  auto path = std::filesystem::temp_directory_path()
              / (name + "-" + std::to_string(::getpid()) + ".json");
  args.insert(args.begin(), ACTORPS_BENCH_BIN);
  args.push_back("--json");
  args.push_back(path.string());
  process bench{args};
  auto rc = bench.wait_exit(300s);
  INFO(bench.output());
  REQUIRE(rc == 0);
  std::ifstream in{path};
  REQUIRE(in);
  // The file must be valid JSON (json::parse throws otherwise).
  auto doc = json::parse(in);
  in.close();
  std::filesystem::remove(path);
  return {bench.output(), doc};
}

} // namespace

TEST_CASE("bench: the harness runs on tiny sizes, local and dist",
          "[integration][bench]") {
  auto [output, doc] = run_bench({"--quick"}, "actorps-bench");
  INFO(output);
  // (4 quick cases x 2 round kinds + 2 priority cases + 2 compressed
  // cases + 1 row case) x 2 modes x 2 worker counts, each checked by the
  // harness itself (every pulled value is the round's sum, or the small
  // key's value).
  CHECK(count_results(doc, "mode", "local") == 26);
  CHECK(count_results(doc, "mode", "dist") == 26);
  CHECK(count_results(doc, "workers", 2) == 26);
  CHECK(count_results(doc, "round", "rows") == 4);
  // ... and the server's peak memory of each dist run.
  REQUIRE(doc.at("server_memory").size() == 2);
  CHECK(doc.at("server_memory")[1].at("workers") == 2);
  CHECK(doc.at("server_memory")[0].at("peak_rss_mb").get<double>() > 0);
  CHECK(count(output, "dist server, ") == 3);
  // ... and while each dist case ran.
  CHECK(count_with(doc, "server_peak_rss_mb") == 26);
  CHECK(count(output, "dist server, peak RSS while each case ran") == 1);
  CHECK(count_results(doc, "round", "fused") == 24);
  // Bytes on the wire of every dist case but the priority ones: a 64 KB
  // push crosses whole, as 2 bytes a value under fp16, as 2 bits under
  // 2-bit (plus message headers); the pulls come back whole.
  CHECK(count_with(doc, "wire_sent_bytes_per_round") == 22);
  for (int w : {1, 2}) {
    INFO(w << " workers");
    auto plain = dist_result(doc, "64 KB", w);
    auto fp16 = dist_result(doc, "64 KB fp16", w);
    auto two_bit = dist_result(doc, "64 KB 2bit:1", w);
    REQUIRE(plain.is_object());
    REQUIRE(fp16.is_object());
    REQUIRE(two_bit.is_object());
    auto sent = [](const json& r) {
      return r.at("wire_sent_bytes_per_round").get<double>();
    };
    const double payload = 64 * 1024;
    CHECK(sent(plain) >= payload);
    CHECK(sent(fp16) >= payload / 2);
    CHECK(sent(fp16) < payload * 0.6);
    CHECK(sent(two_bit) >= payload / 16);
    CHECK(sent(two_bit) < payload * 0.1);
    CHECK(fp16.at("wire_received_bytes_per_round").get<double>() >= payload);
  }
  CHECK(count_results(doc, "round", "prio10") == 4);
  CHECK(count_results(doc, "backlog_bytes", 1048576) == 8);
  CHECK(doc.at("machine").contains("tcp_rtt_us"));
  // One TCP echo round, one BASP echo round and one broker round per
  // uncompressed payload size (4 KB, 64 KB, 10 x 256 and 100 x 1 floats,
  // 100 rows x 4 floats), the yardsticks of the uncompressed dist rounds.
  for (auto what : {"tcp_echo", "basp_echo", "broker_round"})
    CHECK(doc.at("machine").at(what).size() == 5);
  CHECK(count_with(doc, "fraction_of_tcp_echo") == 18);
  CHECK(count_with(doc, "fraction_of_basp_echo") == 18);
  CHECK(count_with(doc, "fraction_of_broker_round") == 18);
  for (const auto& r : doc.at("results"))
    CHECK(r.at("rounds_us").size() == doc.at("measured_rounds"));
  CHECK(count(output, "% of TCP echo") == 18);
  CHECK(count(output, "% of BASP echo") == 18);
  CHECK(count(output, "% of broker round") == 18);
  CHECK(count(output, "BASP echo rounds (") == 1);
  CHECK(count(output, "Broker rounds (") == 1);
  // The table names the machine's limits and every case.
  CHECK(output.find("loopback TCP") != std::string::npos);
  // 4 rows in the results and 4 in the server's memory table.
  CHECK(count(output, "dist   4 KB pull, 1 MB queued") == 8);
  CHECK(count(output, "sooner than prio0") == 4);
}

#ifdef ACTORPS_HAVE_UCX
TEST_CASE("bench: --transport ucx runs the dist cases over the UCX plane",
          "[integration][bench][ucx]") {
  auto [output, doc] = run_bench({"--quick", "--modes", "dist", "--transport",
                                  "caf,ucx", "--workers", "2", "--no-limits"},
                                 "actorps-bench-ucx");
  INFO(output);
  // Every quick case on both transports, each checked by the harness (the
  // pulled values are the round's sums), and the server's memory of each.
  CHECK(count_results(doc, "mode", "dist") == 13);
  CHECK(count_results(doc, "mode", "ucx") == 13);
  REQUIRE(doc.at("server_memory").size() == 2);
  CHECK(doc.at("server_memory")[0].at("mode") == "dist");
  CHECK(doc.at("server_memory")[1].at("mode") == "ucx");
  CHECK(count(output, "ucx server, 2 workers: peak RSS") == 1);
  // An unknown transport is refused before anything runs.
  process bad{{ACTORPS_BENCH_BIN, "--modes", "dist", "--transport", "rdma"}};
  CHECK(bad.wait_exit(60s) == 2);
  CHECK(bad.output().find("unknown transport 'rdma'") != std::string::npos);
}

TEST_CASE("bench: with the limits, ucx cases get ucx_perftest's figures",
          "[integration][bench][ucx]") {
  // .ci/setup.sh installs it with libucx-dev.
  INFO("ucx_perftest comes with Debian's ucx-utils");
  REQUIRE(::access("/usr/bin/ucx_perftest", X_OK) == 0);
  auto [output, doc] = run_bench(
    {"--quick", "--modes", "dist", "--transport", "ucx", "--sizes", "4K",
     "--many", "none", "--rows", "none", "--workers", "1", "--backlog", "0"},
    "actorps-bench-ucx-perftest");
  INFO(output);
  const auto& ucx = doc.at("machine").at("ucx_perftest");
  // One-way bandwidth at the case's size and the 4 KB latency, over TCP
  // and over shared memory.
  std::set<std::string> seen;
  for (const auto& f : ucx.at("tag_bw")) {
    CHECK(f.at("bytes") == 4096);
    CHECK(f.at("gbps").get<double>() > 0);
    seen.insert(f.at("transport").get<std::string>());
  }
  CHECK(seen == std::set<std::string>{"tcp", "shm"});
  REQUIRE(ucx.at("tag_lat_4k").size() == 2);
  for (const auto& l : ucx.at("tag_lat_4k"))
    CHECK(l.at("us").get<double>() > 0);
  CHECK(count(output, "ucx_perftest between two processes") == 1);
}
#endif

TEST_CASE("bench: --interleave runs the cases in turns, each checked",
          "[integration][bench]") {
  // A dense, a priority and a row case take turns round by round, local and
  // dist, 1 and 2 workers: each round still checks its values (a dense
  // round's sums, the small key's value, the rows' sums), so a round of one
  // case that met another's would fail the run.
  auto [output, doc]
    = run_bench({"--modes",       "local,dist",  "--workers", "1,2",
                 "--sizes",       "4K",          "--many",    "none",
                 "--rows",        "100x4x10",    "--backlog", "64K",
                 "--compression", "none",        "--round",   "split",
                 "--warmup",      "1",           "--rounds",  "4",
                 "--no-limits",   "--interleave"},
                "actorps-bench-interleave");
  INFO(output);
  // (4 KB split + a 4 KB pull behind a backlog at priority 10 and at 0 +
  // rows) x 2 modes x 2 worker counts, each with every measured round.
  CHECK(count_results(doc, "mode", "local") == 8);
  CHECK(count_results(doc, "mode", "dist") == 8);
  CHECK(count_results(doc, "round", "rows") == 4);
  for (const auto& r : doc.at("results"))
    CHECK(r.at("rounds_us").size() == 4);
  // No bytes on the wire or server memory per case: the cases overlapped.
  CHECK(count_with(doc, "wire_sent_bytes_per_round") == 0);
  CHECK(count_with(doc, "server_peak_rss_mb") == 0);
}

TEST_CASE("bench: none turns the one-key or many-key cases off",
          "[integration][bench]") {
  auto run = [](std::vector<std::string> extra) {
    std::vector<std::string> argv{
      ACTORPS_BENCH_BIN, "--modes", "local",         "--workers", "1",
      "--backlog",       "0",       "--compression", "none",      "--no-limits",
      "--warmup",        "0",       "--rounds",      "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = std::make_unique<process>(argv);
    auto rc = p->wait_exit(120s);
    return std::make_pair(rc, p->output());
  };
  auto [rc, out] = run({"--sizes", "4K", "--many", "none"});
  INFO(out);
  CHECK(rc == 0);
  // One row per round kind, of the one-key case only.
  CHECK(count(out, "\nlocal  ") == 2);
  CHECK(count(out, "\nlocal  4 KB ") == 2);
  auto [rc2, out2] = run({"--sizes", "none", "--many", "3x2"});
  INFO(out2);
  CHECK(rc2 == 0);
  CHECK(count(out2, "\nlocal  ") == 2);
  CHECK(count(out2, "\nlocal  3 keys x 2 floats ") == 2);
  auto [rc3, out3] = run({"--sizes", "none", "--many", "none"});
  INFO(out3);
  CHECK(rc3 == 2);
  CHECK(out3.find("no cases") != std::string::npos);
}
