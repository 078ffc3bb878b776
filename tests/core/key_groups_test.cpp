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
