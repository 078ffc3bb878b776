// SPDX-License-Identifier: BSD-3-Clause
// Large tables on transparent huge pages: the helpers give the values asked
// for, and a large block is advised (the kernel marks its mapping `hg`).
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/huge_pages.hpp"

using namespace actorps;

namespace {

// The VmFlags of the mapping holding `p` in /proc/self/smaps ("" when not
// found).
std::string vm_flags_at(const void* p) {
  auto at = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream in{"/proc/self/smaps"};
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    auto dash = line.find('-');
    auto space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos && dash < space
        && line.find_first_not_of("0123456789abcdef") == dash) {
      auto lo = std::stoull(line.substr(0, dash), nullptr, 16);
      auto hi = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr,
                            16);
      inside = lo <= at && at < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0)
      return line.substr(8);
  }
  return {};
}

bool kernel_has_thp() {
  std::ifstream in{"/sys/kernel/mm/transparent_hugepage/enabled"};
  std::string mode;
  std::getline(in, mode);
  return mode.find("[always]") != std::string::npos
         || mode.find("[madvise]") != std::string::npos;
}

bool has_flag(const std::string& flags, const std::string& flag) {
  std::istringstream in{flags};
  std::string f;
  while (in >> f)
    if (f == flag)
      return true;
  return false;
}

} // namespace

TEST_CASE("assign_large gives n copies of the fill, small or large",
          "[huge_pages]") {
  const std::size_t large = core::huge_page_min_bytes / sizeof(float) + 1000;
  for (std::size_t n : {std::size_t{0}, std::size_t{7}, large}) {
    std::vector<float> v(3, -1.0f);
    core::assign_large(v, n, 2.5f);
    REQUIRE(v.size() == n);
    std::size_t off = 0;
    for (auto x : v)
      off += x != 2.5f;
    CHECK(off == 0);
  }
  auto steps = core::large_vector(large, uint64_t{9});
  REQUIRE(steps.size() == large);
  CHECK(steps.front() == 9);
  CHECK(steps.back() == 9);
}

TEST_CASE("large_copy copies every value", "[huge_pages]") {
  const std::size_t n = core::huge_page_min_bytes / sizeof(float) + 3;
  std::vector<float> src(n);
  for (std::size_t i = 0; i < n; ++i)
    src[i] = static_cast<float>(i % 1000) - 0.5f;
  auto copy = core::large_copy(src.data(), src.size());
  CHECK(copy == src);
  auto few = core::large_copy(src.data() + 5, 4);
  CHECK(few == std::vector<float>(src.begin() + 5, src.begin() + 9));
}

TEST_CASE("a large block is advised for huge pages, a small one is not",
          "[huge_pages]") {
  if (!kernel_has_thp())
    SUCCEED("transparent huge pages are off here");
  else {
    const std::size_t n = 4 * core::huge_page_min_bytes / sizeof(float);
    auto v = core::large_vector(n, 1.0f);
    auto flags = vm_flags_at(v.data() + n / 2);
    INFO("VmFlags of the block: " << flags);
    CHECK(has_flag(flags, "hg"));
    // Advising nothing, or less than the threshold, changes nothing.
    core::advise_huge_pages(nullptr, n * sizeof(float));
    std::vector<float> small(1000, 3.0f);
    core::advise_huge_pages(small.data(), small.size() * sizeof(float));
    CHECK(small == std::vector<float>(1000, 3.0f));
  }
}
