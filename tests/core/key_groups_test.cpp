// SPDX-License-Identifier: BSD-3-Clause
#include "core/key_groups.hpp"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

using actorps::errc;
using actorps::float_parts;
using actorps::float_piece;
using actorps::shared_floats;
using namespace actorps::core;

TEST_CASE("key_groups: each key once, in first-seen order", "[core]") {
  auto g = group_keys({"b", "a", "b", "c", "a"});
  CHECK(g.unique == std::vector<std::string>{"b", "a", "c"});
  CHECK(g.index == std::vector<uint32_t>{0, 1, 0, 2, 1});
  CHECK(g.repeated());
  CHECK_FALSE(group_keys({"x", "y"}).repeated());
}

TEST_CASE("key_groups: sum_groups adds the values of a repeated key",
          "[core]") {
  // Keys b (2 floats) and a (1 float); the call names b, a, b.
  auto g = group_keys({"b", "a", "b"});
  std::vector<uint64_t> sizes{2, 1};
  float_parts data;
  data.append(shared_floats{{1.0f, 2.0f, 7.0f}});
  data.append(shared_floats{{10.0f, 20.0f}});
  float_parts out;
  REQUIRE(sum_groups(g, sizes, data, out).ok());
  CHECK(out.flatten() == std::vector<float>{11.0f, 22.0f, 7.0f});
  SECTION("a payload of another size is refused") {
    float_parts short_data{std::vector<float>{1.0f, 2.0f}};
    auto st = sum_groups(g, sizes, short_data, out);
    CHECK(st.code == errc::shape_mismatch);
    CHECK(st.message.find("5 floats") != std::string::npos);
  }
}

TEST_CASE("key_groups: expand_groups gives every place its key's value",
          "[core]") {
  auto g = group_keys({"b", "a", "b"});
  std::vector<uint64_t> sizes{2, 1};
  // The pulled value of b then a, as pieces in any order and buffers.
  float_parts x;
  x.size = 3;
  x.buffers.push_back(shared_floats{{9.0f}});
  x.buffers.push_back(shared_floats{{4.0f, 5.0f}});
  x.pieces.push_back(float_piece{0, 0, 2, 1});
  x.pieces.push_back(float_piece{1, 0, 0, 2});
  const float* b_data = x.buffers[1].data();
  auto out = expand_groups(g, sizes, std::move(x));
  REQUIRE(out.size == 5);
  REQUIRE(out.valid(false));
  CHECK(out.flatten() == std::vector<float>{4.0f, 5.0f, 9.0f, 4.0f, 5.0f});
  // Shared, not copied.
  for (auto& p : out.pieces)
    if (p.length == 2)
      CHECK(out.buffers[p.buffer].data() == b_data);
}

TEST_CASE("key_groups: expand_groups cuts pieces that span several keys",
          "[core]") {
  // Keys c (3 floats), a (1), b (2); the call names a, c, b, a, c. The
  // pulled value c a b comes as one piece (a gather of many short keys),
  // or cut inside c and across a and b.
  auto g = group_keys({"a", "c", "b", "a", "c"});
  REQUIRE(g.unique == std::vector<std::string>{"a", "c", "b"});
  std::vector<uint64_t> sizes{1, 3, 2};
  std::vector<float> want{1, 2, 3, 4, 5, 6, 1, 2, 3, 4};
  SECTION("one piece") {
    float_parts x{std::vector<float>{1, 2, 3, 4, 5, 6}};
    auto out = expand_groups(g, sizes, std::move(x));
    REQUIRE(out.valid(false));
    CHECK(out.flatten() == want);
  }
  SECTION("cut inside a key and across two") {
    float_parts x;
    x.size = 6;
    x.buffers.push_back(shared_floats{{0, 1, 2}});
    x.buffers.push_back(shared_floats{{3, 4, 5, 6}});
    x.pieces.push_back(float_piece{1, 1, 2, 3});
    x.pieces.push_back(float_piece{0, 1, 0, 2});
    x.pieces.push_back(float_piece{1, 0, 5, 1});
    auto out = expand_groups(g, sizes, std::move(x));
    REQUIRE(out.valid(false));
    CHECK(out.flatten() == std::vector<float>{1, 2, 4, 5, 6, 3, 1, 2, 4, 5});
  }
}
