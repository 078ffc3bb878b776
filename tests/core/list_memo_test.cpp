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
  list_memo<std::vector<int>> memo;
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
  list_memo<std::vector<int>> memo;
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
  list_memo<std::vector<int>> memo;
  auto small = names("s", list_memo<std::vector<int>>::min_size - 1);
  memo.keep(small, numbers(0, small.size()));
  CHECK(memo.find(small) == nullptr);
}

TEST_CASE("same_names: names of every length differ at every byte", "[core]") {
  using actorps::core::same_names;
  // Lengths around each way of comparing (a byte loop, two 4-byte words,
  // two 8-byte words, memcmp), one byte changed at each place in turn.
  for (std::size_t n = 0; n <= 40; ++n) {
    std::string name;
    for (std::size_t i = 0; i < n; ++i)
      name.push_back(static_cast<char>('a' + i % 26));
    std::vector<std::string> a{"x", name, "y"};
    auto b = a;
    INFO("length " << n);
    CHECK(same_names(a, b));
    for (std::size_t i = 0; i < n; ++i) {
      INFO("byte " << i);
      auto c = a;
      c[1][i] = static_cast<char>(c[1][i] ^ 0x20);
      CHECK_FALSE(same_names(a, c));
      CHECK_FALSE(same_names(c, a));
    }
    // A name one byte longer or shorter, equal over the shorter length.
    auto longer = a;
    longer[1].push_back('z');
    CHECK_FALSE(same_names(a, longer));
    if (n > 0) {
      auto shorter = a;
      shorter[1].pop_back();
      CHECK_FALSE(same_names(a, shorter));
    }
  }
  // Bytes that are not letters, zero bytes inside a name, and the lists'
  // lengths.
  std::vector<std::string> z{std::string("a\0b", 3), std::string(9, '\0')};
  auto z2 = z;
  CHECK(same_names(z, z2));
  z2[1][8] = '\x01';
  CHECK_FALSE(same_names(z, z2));
  CHECK_FALSE(same_names(z, {z[0]}));
  CHECK(same_names({}, {}));
}

TEST_CASE("list_memo: a shared list is found by its address or its names",
          "[core]") {
  using actorps::core::shared_names_ptr;
  list_memo<std::vector<int>> memo;
  shared_names_ptr a
    = std::make_shared<const std::vector<std::string>>(names("a", 16));
  memo.keep(a, numbers(0, 16));
  REQUIRE(memo.find(a) != nullptr);
  CHECK(*memo.find(a) == numbers(0, 16));
  CHECK(memo.names_of(memo.find(a)) == a);
  // The same names in a list of their own, shared or not.
  auto copy = std::make_shared<const std::vector<std::string>>(*a);
  REQUIRE(memo.find(copy) == memo.find(a));
  REQUIRE(memo.find(*a) == memo.find(a));
  // Kept from a plain list: a shared copy of it is returned and found.
  auto b = memo.keep(names("b", 20), numbers(100, 20));
  REQUIRE(b != nullptr);
  CHECK(*b == names("b", 20));
  CHECK(memo.find(b) != nullptr);
  CHECK(memo.names_of(memo.find(names("b", 20))) == b);
  // Other names: not found, null and short lists never.
  CHECK(
    memo.find(std::make_shared<const std::vector<std::string>>(names("c", 16)))
    == nullptr);
  CHECK(memo.find(shared_names_ptr{}) == nullptr);
  CHECK(memo.keep(names("s", 3), numbers(0, 3)) == nullptr);
  CHECK(memo.names_of(nullptr) == nullptr);
  memo.clear();
  CHECK(memo.find(a) == nullptr);
}

TEST_CASE("list_memo: a shared list found by its names is kept in place of "
          "the one that had them",
          "[core]") {
  using actorps::core::shared_names_ptr;
  list_memo<std::vector<int>> memo;
  auto make = [](const std::string& prefix, std::size_t n) {
    return std::make_shared<const std::vector<std::string>>(names(prefix, n));
  };
  shared_names_ptr a = make("a", 16);
  memo.keep(a, numbers(0, 16));
  auto* kept = memo.find(a);
  REQUIRE(kept != nullptr);
  // A list of the same names made apart: found, and kept from then on.
  auto again = make("a", 16);
  CHECK(memo.find_adopting(again) == kept);
  CHECK(memo.names_of(kept) == again);
  CHECK(memo.find_adopting(again) == kept);
  // The old list still names the same keys: found by its names.
  CHECK(memo.find(a) == kept);
  // Other names, null and short lists: not found, nothing adopted.
  CHECK(memo.find_adopting(make("b", 16)) == nullptr);
  CHECK(memo.find_adopting(shared_names_ptr{}) == nullptr);
  CHECK(memo.find_adopting(make("a", 3)) == nullptr);
  CHECK(memo.names_of(kept) == again);
  CHECK(*kept == numbers(0, 16));
}
