// SPDX-License-Identifier: BSD-3-Clause
// The training app's small pieces: its curves, its output checks and the
// optimizer it asks the shards for.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "apps/common/cli.hpp"
#include "apps/common/curves.hpp"
#include "apps/common/train.hpp"
#include "tests/core/temp_dir.hpp"

using namespace actorps;
using namespace actorps::apps;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in{p};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The (cx, cy) of every <circle> in `svg`.
std::vector<std::pair<double, double>> markers(const std::string& svg) {
  std::regex circle{R"re(<circle cx="([-0-9.e+]+)" cy="([-0-9.e+]+)")re"};
  std::vector<std::pair<double, double>> out;
  for (auto it = std::sregex_iterator{svg.begin(), svg.end(), circle};
       it != std::sregex_iterator{}; ++it)
    out.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  return out;
}

} // namespace

TEST_CASE("curves: every epoch gets a marker, one epoch included", "[apps]") {
  actorps::test::temp_dir tmp;
  const fs::path dir{tmp.path()};
  auto file = (dir / "c.svg").string();
  SECTION("one epoch: one visible point per chart, inside its box") {
    std::vector<epoch_report> rs{{1, 0.8, 0.7, 1000, 2}};
    REQUIRE(write_svg(file, "t", rs).empty());
    auto ms = markers(slurp(file));
    REQUIRE(ms.size() == 2);
    for (auto [x, y] : ms) {
      // The box is 320 x 200 (w - pad by h - pad).
      CHECK(x > 0);
      CHECK(x < 320);
      CHECK(y >= 0);
      CHECK(y <= 200);
    }
  }
  SECTION("three epochs: three markers per chart, left to right") {
    std::vector<epoch_report> rs{
      {1, 0.9, 0.6, 1000, 2}, {2, 0.7, 0.7, 1000, 2}, {3, 0.5, 0.8, 1000, 2}};
    REQUIRE(write_svg(file, "t", rs).empty());
    auto ms = markers(slurp(file));
    REQUIRE(ms.size() == 6);
    CHECK(ms[0].first < ms[1].first);
    CHECK(ms[1].first < ms[2].first);
    // Falling loss: lower on the chart is larger y.
    CHECK(ms[0].second < ms[2].second);
  }
}

TEST_CASE("curves: the CSV has a line per epoch", "[apps]") {
  actorps::test::temp_dir tmp;
  const fs::path dir{tmp.path()};
  auto file = (dir / "c.csv").string();
  REQUIRE(
    write_csv(file, {{1, 0.5, 0.8, 10, 1}, {2, 0.25, 0.9, 10, 1}}).empty());
  auto text = slurp(file);
  CHECK(text.rfind("epoch,train_loss,test_accuracy", 0) == 0);
  CHECK(text.find("\n2,0.25,0.9,") != std::string::npos);
}

TEST_CASE("cli: an output path is checked before the run", "[apps]") {
  actorps::test::temp_dir tmp;
  const fs::path dir{tmp.path()};
  SECTION("a new folder is created and no file is left behind") {
    auto file = dir / "a" / "b" / "out.csv";
    CHECK(prepare_output(file.string()).empty());
    CHECK(fs::is_directory(file.parent_path()));
    CHECK_FALSE(fs::exists(file));
  }
  SECTION("an existing file is left as it was") {
    auto file = dir / "out.csv";
    std::ofstream{file} << "old";
    CHECK(prepare_output(file.string()).empty());
    CHECK(slurp(file) == "old");
  }
  SECTION("a folder where the file should go, or a file as the folder") {
    fs::create_directories(dir / "out.csv");
    CHECK_FALSE(prepare_output((dir / "out.csv").string()).empty());
    std::ofstream{dir / "plain"} << "x";
    CHECK_FALSE(prepare_output((dir / "plain" / "f.csv").string()).empty());
  }
}

TEST_CASE("train: async shards run the derived momentum unless told",
          "[apps]") {
  train_options opts;
  opts.momentum = 0.9f;
  SECTION("derived: 1 - W (1 - momentum), at least 0") {
    CHECK(server_optimizer(opts, false, 4, 1000).momentum
          == Approx(0.6f).epsilon(1e-6));
    CHECK(server_optimizer(opts, false, 20, 1000).momentum == 0.0f);
  }
  SECTION("--server-momentum wins") {
    opts.server_momentum = 0.85f;
    CHECK(server_optimizer(opts, false, 4, 1000).momentum == 0.85f);
    opts.server_momentum = 0.0f;
    CHECK(server_optimizer(opts, false, 4, 1000).momentum == 0.0f);
  }
  SECTION("sync stores keep the momentum asked for") {
    CHECK(server_optimizer(opts, true, 4, 1000).momentum == 0.9f);
  }
  SECTION("out-of-range values are refused") {
    opts.server_momentum = 1.0f;
    CHECK(check("t", opts) == 2);
    opts.server_momentum = -0.5f;
    CHECK(check("t", opts) == 2);
    opts.server_momentum = 0.5f;
    CHECK_FALSE(check("t", opts));
  }
}
