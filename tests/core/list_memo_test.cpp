// SPDX-License-Identifier: BSD-3-Clause
#include "core/list_memo.hpp"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

using actorps::core::list_memo;

namespace {

std::vector<std::string> names(const std::string& prefix, std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(prefix + std::to_string(i));
  return out;
}

std::vector<int> numbers(int from, std::size_t n) {
  std::vector<int> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(from + static_cast<int>(i));
  return out;
}

} // namespace

TEST_CASE("list_memo: a list kept is found again only if every name matches",
          "[core]") {
  list_memo<int> memo;
  auto a = names("k", 20);
  CHECK(memo.find(a) == nullptr);
  memo.keep(a, numbers(0, 20));
  auto* found = memo.find(a);
  REQUIRE(found != nullptr);
  CHECK(*found == numbers(0, 20));
  // One name changed, one missing, one more, the order changed: not found.
  auto changed = a;
  changed[19] = "other";
  CHECK(memo.find(changed) == nullptr);
  auto shorter = a;
  shorter.pop_back();
  CHECK(memo.find(shorter) == nullptr);
  auto longer = a;
  longer.push_back("k20");
  CHECK(memo.find(longer) == nullptr);
  auto swapped = a;
  std::swap(swapped[0], swapped[1]);
  CHECK(memo.find(swapped) == nullptr);
}

TEST_CASE("list_memo: two lists alternate, a third drops the older one",
          "[core]") {
  list_memo<int> memo;
  auto a = names("a", 16);
  auto b = names("b", 32);
  auto c = names("c", 16);
  memo.keep(a, numbers(0, 16));
  memo.keep(b, numbers(100, 32));
  REQUIRE(memo.find(a) != nullptr);
  REQUIRE(memo.find(b) != nullptr);
  CHECK(*memo.find(a) == numbers(0, 16));
  CHECK(*memo.find(b) == numbers(100, 32));
  memo.keep(c, numbers(200, 16));
  CHECK(memo.find(a) == nullptr);
  REQUIRE(memo.find(b) != nullptr);
  REQUIRE(memo.find(c) != nullptr);
  CHECK(*memo.find(c) == numbers(200, 16));
  memo.clear();
  CHECK(memo.find(b) == nullptr);
  CHECK(memo.find(c) == nullptr);
}

TEST_CASE("list_memo: short lists are not kept", "[core]") {
  list_memo<int> memo;
  auto small = names("s", list_memo<int>::min_size - 1);
  memo.keep(small, numbers(0, small.size()));
  CHECK(memo.find(small) == nullptr);
}
