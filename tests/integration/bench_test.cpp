// SPDX-License-Identifier: BSD-3-Clause
// actorps-bench, run as CI runs it: tiny sizes, local and dist.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
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

// The JSON line of the dist result for `name` with `workers` workers (the
// harness writes one result a line).
std::string dist_line(const std::string& json, const std::string& name,
                      int workers) {
  std::istringstream in{json};
  std::string line;
  while (std::getline(in, line))
    if (line.find("\"mode\": \"dist\"") != std::string::npos
        && line.find("\"case\": \"" + name + "\"") != std::string::npos
        && line.find("\"round\": \"fused\"") != std::string::npos
        && line.find("\"workers\": " + std::to_string(workers))
             != std::string::npos)
      return line;
  return {};
}

// The number after `"key": ` in `line`; -1 if absent.
double number_after(const std::string& line, const std::string& key) {
  auto at = line.find("\"" + key + "\": ");
  if (at == std::string::npos)
    return -1;
  return std::strtod(line.c_str() + at + key.size() + 4, nullptr);
}

} // namespace

TEST_CASE("bench: the harness runs on tiny sizes, local and dist",
          "[integration][bench]") {
  auto json = std::filesystem::temp_directory_path()
              / ("actorps-bench-" + std::to_string(::getpid()) + ".json");
  process bench{{ACTORPS_BENCH_BIN, "--quick", "--json", json.string()}};
  auto rc = bench.wait_exit(300s);
  INFO(bench.output());
  REQUIRE(rc == 0);
  std::ifstream in{json};
  REQUIRE(in);
  std::stringstream buf;
  buf << in.rdbuf();
  auto text = buf.str();
  std::filesystem::remove(json);
  // (4 quick cases x 2 round kinds + 2 priority cases + 2 compressed
  // cases) x 2 modes x 2 worker counts, each checked by the harness itself
  // (every pulled value is the round's sum, or the small key's value).
  CHECK(count(text, "\"mode\": \"local\"") == 24);
  CHECK(count(text, "\"mode\": \"dist\"") == 24);
  // ... and the server's peak memory of each dist run.
  CHECK(count(text, "\"workers\": 2") == 24 + 1);
  CHECK(count(text, "\"peak_rss_mb\"") == 2);
  CHECK(count(bench.output(), "dist server, ") == 3);
  // ... and while each dist case ran.
  CHECK(count(text, "\"server_peak_rss_mb\"") == 24);
  CHECK(count(bench.output(), "dist server, peak RSS while each case ran")
        == 1);
  CHECK(count(text, "\"round\": \"fused\"") == 24);
  // Bytes on the wire of every dist case but the priority ones: a 64 KB
  // push crosses whole, as 2 bytes a value under fp16, as 2 bits under
  // 2-bit (plus message headers); the pulls come back whole.
  CHECK(count(text, "\"wire_sent_bytes_per_round\"") == 20);
  for (int w : {1, 2}) {
    INFO(w << " workers");
    auto plain = dist_line(text, "64 KB", w);
    auto fp16 = dist_line(text, "64 KB fp16", w);
    auto two_bit = dist_line(text, "64 KB 2bit:1", w);
    const double payload = 64 * 1024;
    CHECK(number_after(plain, "wire_sent_bytes_per_round") >= payload);
    CHECK(number_after(fp16, "wire_sent_bytes_per_round") >= payload / 2);
    CHECK(number_after(fp16, "wire_sent_bytes_per_round") < payload * 0.6);
    CHECK(number_after(two_bit, "wire_sent_bytes_per_round") >= payload / 16);
    CHECK(number_after(two_bit, "wire_sent_bytes_per_round") < payload * 0.1);
    CHECK(number_after(fp16, "wire_received_bytes_per_round") >= payload);
  }
  CHECK(count(text, "\"round\": \"prio10\"") == 4);
  CHECK(count(text, "\"backlog_bytes\": 1048576") == 8);
  CHECK(text.find("\"tcp_rtt_us\"") != std::string::npos);
  // One TCP echo round, one BASP echo round and one broker round per
  // uncompressed payload size (4 KB, 64 KB, 10 x 256 and 100 x 1 floats),
  // the yardsticks of the uncompressed dist rounds.
  CHECK(count(text, "{\"bytes\": ") == 12);
  CHECK(count(text, "\"fraction_of_tcp_echo\"") == 16);
  CHECK(count(text, "\"fraction_of_basp_echo\"") == 16);
  CHECK(count(text, "\"fraction_of_broker_round\"") == 16);
  CHECK(count(bench.output(), "% of TCP echo") == 16);
  CHECK(count(bench.output(), "% of BASP echo") == 16);
  CHECK(count(bench.output(), "% of broker round") == 16);
  CHECK(count(bench.output(), "BASP echo rounds (") == 1);
  CHECK(count(bench.output(), "Broker rounds (") == 1);
  // The table names the machine's limits and every case.
  CHECK(bench.output().find("loopback TCP") != std::string::npos);
  CHECK(count(bench.output(), "dist   4 KB pull, 1 MB queued") == 4);
  CHECK(count(bench.output(), "sooner than prio0") == 4);
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
