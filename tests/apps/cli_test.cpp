// SPDX-License-Identifier: BSD-3-Clause
// The command-line rules every app shares (apps/common/cli).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "apps/common/cli.hpp"
#include "tests/core/temp_dir.hpp"

using namespace actorps::apps;
namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

// Writes `text` to `name` in `dir` with permissions `mode`.
std::string write_file(const fs::path& dir, const std::string& name,
                       const std::string& text, mode_t mode) {
  auto p = (dir / name).string();
  std::ofstream{p} << text;
  ::chmod(p.c_str(), mode);
  return p;
}

// Parses `args` against --count (unsigned), --level (int) and --config.
struct parse_result {
  std::optional<int> rc;
  unsigned count = 7;
  int level = 0;
};

parse_result parse_args(std::vector<std::string> args) {
  parse_result out;
  std::string config;
  po::options_description d{"t"};
  add_common_options(d, config);
  d.add_options()("count", po::value(&out.count)->default_value(7),
                  "")("level", po::value(&out.level)->default_value(0), "");
  args.insert(args.begin(), "app");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  po::variables_map vm;
  out.rc = parse(static_cast<int>(argv.size()), argv.data(), d, vm, "app",
                 "usage");
  return out;
}

} // namespace

TEST_CASE("cli: flags are parsed strictly", "[apps]") {
  SECTION("a good line") {
    auto r = parse_args({"--count", "3", "--level", "-2"});
    CHECK_FALSE(r.rc);
    CHECK(r.count == 3);
    CHECK(r.level == -2); // signed options keep their sign
  }
  SECTION("a negative count is refused, not wrapped around") {
    CHECK(parse_args({"--count", "-1"}).rc == 2);
    CHECK(parse_args({"--count=-5"}).rc == 2);
  }
  SECTION("stray words are refused") {
    CHECK(parse_args({"--count", "3", "oops"}).rc == 2);
    CHECK(parse_args({"oops"}).rc == 2);
  }
  SECTION("--config must be a regular file; its values follow the rules") {
    actorps::test::temp_dir tmp;
    const fs::path dir{tmp.path()};
    CHECK(parse_args({"--config", dir.string()}).rc == 2);
    CHECK(parse_args({"--config", (dir / "missing").string()}).rc == 2);
    auto good = write_file(dir, "good.ini", "count = 4\n", 0600);
    auto r = parse_args({"--config", good});
    CHECK_FALSE(r.rc);
    CHECK(r.count == 4);
    auto bad = write_file(dir, "bad.ini", "count = -4\n", 0600);
    CHECK(parse_args({"--config", bad}).rc == 2);
    auto huge = write_file(dir, "huge.ini", std::string(2 << 20, '#'), 0600);
    CHECK(parse_args({"--config", huge}).rc == 2);
  }
  SECTION("Boost's error placeholders are refused before Boost loops on "
          "them (found by fuzzing)") {
    actorps::test::temp_dir tmp;
    auto looping = write_file(tmp.path(), "loop.ini", "count = %value%\n",
                              0600);
    CHECK(parse_args({"--config", looping}).rc == 2);
    CHECK(parse_args({"--count", "%canonical_option%"}).rc == 2);
    // A line without '=' is quoted in Boost's error through the same loop.
    auto bad_line = write_file(tmp.path(), "line.ini",
                               "# a\ntutut %invalid_line% on\n", 0600);
    CHECK(parse_args({"--config", bad_line}).rc == 2);
  }
}

TEST_CASE("cli: ranges name the flag", "[apps]") {
  CHECK_FALSE(check_range("app", "workers", 1, 1, 4));
  CHECK_FALSE(check_range("app", "workers", 4, 1, 4));
  CHECK(check_range("app", "workers", 0, 1, 4) == 2);
  CHECK(check_range("app", "workers", 5, 1, 4) == 2);
}

TEST_CASE("cli: listening beyond loopback without a token is warned of",
          "[apps]") {
  CHECK(is_loopback("127.0.0.1"));
  CHECK(is_loopback("127.1.2.3"));
  CHECK(is_loopback("::1"));
  CHECK(is_loopback("localhost"));
  CHECK_FALSE(is_loopback(""));
  CHECK_FALSE(is_loopback("0.0.0.0"));
  CHECK_FALSE(is_loopback("10.0.0.1"));
  CHECK(exposure_warning("127.0.0.1", false, false).empty());
  CHECK(exposure_warning("10.0.0.1", true, true).empty());
  CHECK(exposure_warning("10.0.0.1", false, true).empty());
  CHECK_THAT(exposure_warning("10.0.0.1", false, false),
             Catch::Contains("10.0.0.1")
               && Catch::Contains("without a job token"));
  CHECK_THAT(exposure_warning("10.0.0.1", true, false),
             Catch::Contains("clear text") && Catch::Contains("--tls-cert"));
  CHECK_THAT(exposure_warning("", false, false),
             Catch::Contains("every interface"));
}

TEST_CASE("cli: no exception escapes an app's main", "[apps]") {
  CHECK(guarded_main("app", [] { return 0; }) == 0);
  CHECK(guarded_main("app", [] { return 3; }) == 3);
  CHECK(guarded_main("app", []() -> int { throw std::runtime_error{"x"}; })
        == 1);
  CHECK(guarded_main("app", []() -> int { throw 42; }) == 1);
}

TEST_CASE("cli: the token comes from an owner-only file, the environment or "
          "the flag",
          "[apps]") {
  actorps::test::temp_dir tmp;
  const fs::path dir{tmp.path()};
  std::string out;
  SECTION("an owner-only file, one line") {
    auto p = write_file(dir, "tok", "s3cret\n", 0600);
    CHECK(read_token_file(p, out).empty());
    CHECK(out == "s3cret");
    auto ro = write_file(dir, "tok-ro", "s3cret", 0400);
    CHECK(read_token_file(ro, out).empty());
  }
  SECTION("refused: readable by others, a folder, empty, two lines, huge") {
    CHECK_FALSE(read_token_file(write_file(dir, "g", "s", 0640), out).empty());
    CHECK_FALSE(read_token_file(write_file(dir, "o", "s", 0604), out).empty());
    CHECK_FALSE(read_token_file(dir.string(), out).empty());
    CHECK_FALSE(read_token_file(write_file(dir, "e", "\n", 0600), out).empty());
    CHECK_FALSE(
      read_token_file(write_file(dir, "two", "a\nb\n", 0600), out).empty());
    CHECK_FALSE(
      read_token_file(write_file(dir, "big", std::string(5000, 'x'), 0600), out)
        .empty());
    CHECK_FALSE(read_token_file((dir / "none").string(), out).empty());
  }
  SECTION("precedence: file, then flag, then ACTORPS_TOKEN") {
    ::setenv("ACTORPS_TOKEN", "from-env", 1);
    token_flags flags;
    CHECK_FALSE(resolve_token("app", flags, out));
    CHECK(out == "from-env");
    flags.token = "from-flag";
    CHECK_FALSE(resolve_token("app", flags, out));
    CHECK(out == "from-flag");
    flags.token.clear();
    flags.file = write_file(dir, "tok", "from-file", 0600);
    CHECK_FALSE(resolve_token("app", flags, out));
    CHECK(out == "from-file");
    flags.token = "from-flag";
    CHECK(resolve_token("app", flags, out) == 2); // both given
    ::unsetenv("ACTORPS_TOKEN");
  }
}
