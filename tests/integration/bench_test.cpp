// SPDX-License-Identifier: BSD-3-Clause
// actorps-bench, run as CI runs it: tiny sizes, local and dist.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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
  // (4 quick cases x 2 round kinds + 2 priority cases) x 2 modes x 2 worker
  // counts, each checked by the harness itself (every pulled value is the
  // round's sum, or the small key's value).
  CHECK(count(text, "\"mode\": \"local\"") == 20);
  CHECK(count(text, "\"mode\": \"dist\"") == 20);
  // ... and the server's peak memory of each dist run.
  CHECK(count(text, "\"workers\": 2") == 20 + 1);
  CHECK(count(text, "\"peak_rss_mb\"") == 2);
  CHECK(count(bench.output(), "dist server, ") == 2);
  CHECK(count(text, "\"round\": \"fused\"") == 16);
  CHECK(count(text, "\"round\": \"prio10\"") == 4);
  CHECK(count(text, "\"backlog_bytes\": 1048576") == 8);
  CHECK(text.find("\"tcp_rtt_us\"") != std::string::npos);
  // The table names the machine's limits and every case.
  CHECK(bench.output().find("loopback TCP") != std::string::npos);
  CHECK(count(bench.output(), "dist   4 KB pull, 1 MB queued") == 4);
  CHECK(count(bench.output(), "sooner than prio0") == 4);
}
