// SPDX-License-Identifier: BSD-3-Clause
#include <atomic>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/parallel.hpp"

using actorps::core::split_in_two;

namespace {

// Which thread ran each index, and how often each ran.
struct record {
  std::vector<std::thread::id> by;
  std::vector<std::atomic<int>> runs;

  explicit record(size_t n) : by(n), runs(n) {
  }

  void operator()(size_t i) {
    by[i] = std::this_thread::get_id();
    ++runs[i];
  }
};

} // namespace

TEST_CASE("split_in_two: two runs of about equal weight, each index once",
          "[core][parallel]") {
  auto me = std::this_thread::get_id();
  SECTION("equal weights are cut in the middle") {
    std::vector<uint64_t> w{5, 5, 5, 5, 5, 5};
    record r{w.size()};
    CHECK(split_in_two(w, 30, [&](size_t i) { r(i); }));
    for (size_t i = 0; i < w.size(); ++i) {
      CHECK(r.runs[i] == 1);
      if (i < 3)
        CHECK(r.by[i] == me);
      else
        CHECK(r.by[i] != me);
    }
  }
  SECTION("a light first index still gets the heavy one a thread of its own") {
    std::vector<uint64_t> w{1, 10};
    record r{w.size()};
    CHECK(split_in_two(w, 0, [&](size_t i) { r(i); }));
    CHECK(r.runs[0] == 1);
    CHECK(r.runs[1] == 1);
    CHECK(r.by[0] == me);
    CHECK(r.by[1] != me);
  }
  SECTION("uneven weights: the cut that balances best") {
    std::vector<uint64_t> w{8, 1, 1, 1, 1, 4};
    record r{w.size()};
    CHECK(split_in_two(w, 0, [&](size_t i) { r(i); }));
    // 8 | 1+1+1+1+4 = 8: the cut after the first index.
    CHECK(r.by[0] == me);
    for (size_t i = 1; i < w.size(); ++i) {
      CHECK(r.runs[i] == 1);
      CHECK(r.by[i] != me);
    }
  }
}

TEST_CASE("split_in_two: small or single jobs stay on the calling thread",
          "[core][parallel]") {
  auto me = std::this_thread::get_id();
  auto all_here = [&](const std::vector<uint64_t>& w, uint64_t min_total) {
    record r{w.size()};
    bool two = split_in_two(w, min_total, [&](size_t i) { r(i); });
    for (size_t i = 0; i < w.size(); ++i)
      if (r.runs[i] != 1 || r.by[i] != me)
        return false;
    return !two;
  };
  CHECK(all_here({4, 4, 4}, 13));
  CHECK(all_here({100}, 0));
  CHECK(all_here({}, 0));
}
