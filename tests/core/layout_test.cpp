// SPDX-License-Identifier: BSD-3-Clause
#include "core/layout.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

using actorps::slice_range;
namespace core = actorps::core;

namespace {

// Checks the invariants every layout has: parts numbered in order, contiguous
// and covering [0, size), lengths differing by at most one with the longer
// parts first, and part i on shard (first + i) % num_shards.
void check_layout(const std::vector<slice_range>& layout, uint64_t size,
                  uint32_t num_shards) {
  REQUIRE_FALSE(layout.empty());
  uint64_t offset = 0;
  const uint64_t first_length = layout.front().length;
  const uint32_t first_shard = layout.front().shard;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    INFO("part " << i);
    const auto& r = layout[i];
    CHECK(r.part == i);
    CHECK(r.offset == offset);
    CHECK(r.length > 0);
    CHECK(r.length <= first_length);
    CHECK(first_length - r.length <= 1);
    if (i > 0)
      CHECK(r.length <= layout[i - 1].length);
    CHECK(r.shard < num_shards);
    CHECK(r.shard == (first_shard + i) % num_shards);
    offset += r.length;
  }
  CHECK(offset == size);
}

// The published FNV-1a 64 hashes of some strings, followed by splitmix64's
// finalizer: pins the hash, which must never change between releases because
// layouts and checkpoints of running jobs depend on it.
uint64_t splitmix_finalizer(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

} // namespace

TEST_CASE("layout: key_hash is FNV-1a 64 with a final mix", "[core]") {
  SECTION("published FNV-1a values") {
    CHECK(core::key_hash("") == splitmix_finalizer(0xcbf29ce484222325ull));
    CHECK(core::key_hash("a") == splitmix_finalizer(0xaf63dc4c8601ec8cull));
    CHECK(core::key_hash("foobar")
          == splitmix_finalizer(0x85944171f73967e8ull));
  }
  SECTION("every byte counts, including NUL and high bytes") {
    using namespace std::string_literals;
    CHECK(core::key_hash("a\0b"s) != core::key_hash("ab"));
    CHECK(core::key_hash("\xff") != core::key_hash("\x7f"));
  }
}

TEST_CASE("layout: jump_hash", "[core]") {
  SECTION("one bucket maps everything to 0") {
    for (uint64_t h = 0; h < 1000; ++h)
      CHECK(core::jump_hash(h * 0x9e3779b97f4a7c15ull, 1) == 0);
  }
  SECTION("results lie in [0, buckets)") {
    for (uint32_t buckets : {2u, 3u, 7u, 100u, 65537u, 0xFFFFFFFFu}) {
      for (uint64_t i = 0; i < 500; ++i) {
        auto h = core::key_hash("k" + std::to_string(i));
        CHECK(core::jump_hash(h, buckets) < buckets);
      }
    }
    CHECK(core::jump_hash(~uint64_t{0}, 0xFFFFFFFFu) < 0xFFFFFFFFu);
  }
  SECTION("growing from 4 to 5 buckets moves keys only into bucket 4") {
    int moved = 0;
    for (uint64_t i = 0; i < 10000; ++i) {
      auto h = core::key_hash("key" + std::to_string(i));
      auto before = core::jump_hash(h, 4);
      auto after = core::jump_hash(h, 5);
      if (before != after) {
        CHECK(after == 4);
        ++moved;
      }
    }
    // About a fifth of the keys should move: 2000 expected.
    CHECK(moved > 1500);
    CHECK(moved < 2500);
  }
  SECTION("deterministic") {
    auto h = core::key_hash("weights");
    CHECK(core::jump_hash(h, 17) == core::jump_hash(h, 17));
  }
}

TEST_CASE("layout: small keys live whole on one shard", "[core]") {
  SECTION("one part covering the key") {
    auto layout = core::make_layout("fc1.bias", 256, 4);
    REQUIRE(layout.size() == 1);
    CHECK(layout[0].part == 0);
    CHECK(layout[0].offset == 0);
    CHECK(layout[0].length == 256);
    CHECK(layout[0].shard < 4);
    CHECK(layout[0].shard == core::jump_hash(core::key_hash("fc1.bias"), 4));
  }
  SECTION("deterministic across calls") {
    auto a = core::make_layout("embedding", 1000, 8);
    auto b = core::make_layout("embedding", 1000, 8);
    REQUIRE(a.size() == 1);
    REQUIRE(b.size() == 1);
    CHECK(a[0].shard == b[0].shard);
  }
  SECTION("just below the bound") {
    auto layout = core::make_layout("w", 99, 4, 100);
    REQUIRE(layout.size() == 1);
    CHECK(layout[0].length == 99);
  }
  SECTION("a single shard") {
    auto layout = core::make_layout("w", 10, 1);
    REQUIRE(layout.size() == 1);
    CHECK(layout[0].shard == 0);
  }
}

TEST_CASE("layout: big keys are sliced over all shards", "[core]") {
  SECTION("at the bound: one part per shard") {
    auto layout = core::make_layout("w", 100, 4, 100);
    REQUIRE(layout.size() == 4);
    check_layout(layout, 100, 4);
  }
  SECTION("uneven sizes: longer parts first") {
    const uint64_t size = core::default_bigarray_bound + 3;
    auto layout = core::make_layout("conv1.weight", size, 4);
    REQUIRE(layout.size() == 4);
    check_layout(layout, size, 4);
    CHECK(layout[0].length == layout[3].length + 1);
    CHECK(layout[2].length == layout[0].length);
  }
  SECTION("every shard gets a part") {
    for (uint32_t shards : {1u, 2u, 3u, 5u, 16u}) {
      auto layout = core::make_layout("fc2.weight", 1000, shards, 512);
      REQUIRE(layout.size() == shards);
      check_layout(layout, 1000, shards);
      std::set<uint32_t> used;
      for (const auto& r : layout)
        used.insert(r.shard);
      CHECK(used.size() == shards);
    }
  }
  SECTION("more parts than shards beyond num_shards * default_slice_floats") {
    // Only the layout is computed; nothing of this size is allocated.
    const uint64_t size = 4 * core::default_slice_floats + 1;
    auto layout = core::make_layout("huge", size, 4);
    REQUIRE(layout.size() == 5);
    check_layout(layout, size, 4);
    for (const auto& r : layout)
      CHECK(r.length <= core::default_slice_floats);
  }
  SECTION("exactly num_shards * default_slice_floats needs no extra part") {
    const uint64_t size = 4 * core::default_slice_floats;
    auto layout = core::make_layout("huge", size, 4);
    REQUIRE(layout.size() == 4);
    check_layout(layout, size, 4);
    for (const auto& r : layout)
      CHECK(r.length == core::default_slice_floats);
  }
  SECTION("many parts on few shards") {
    const uint64_t size = 10 * core::default_slice_floats + 7;
    auto layout = core::make_layout("huge", size, 3);
    REQUIRE(layout.size() == 11);
    check_layout(layout, size, 3);
    for (const auto& r : layout)
      CHECK(r.length <= core::default_slice_floats);
  }
  SECTION("a configured slice size bounds every part") {
    auto layout = core::make_layout("w", 1000, 2, 100, 64);
    REQUIRE(layout.size() == 16);
    check_layout(layout, 1000, 2);
    for (const auto& r : layout)
      CHECK(r.length <= 64);
    // Parts alternate between the shards.
    CHECK(layout[0].shard != layout[1].shard);
    CHECK(layout[0].shard == layout[2].shard);
  }
  SECTION("big keys do not all start on the same shard") {
    std::set<uint32_t> first_shards;
    for (int i = 0; i < 64; ++i) {
      auto layout = core::make_layout("big" + std::to_string(i), 1000, 4, 100);
      first_shards.insert(layout.front().shard);
    }
    CHECK(first_shards.size() == 4);
  }
  SECTION("fewer floats than shards: no empty parts") {
    auto layout = core::make_layout("tiny", 3, 8, 1);
    REQUIRE(layout.size() == 3);
    check_layout(layout, 3, 8);
  }
}

TEST_CASE("layout: small keys spread evenly", "[core]") {
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 1000; ++i) {
    auto layout = core::make_layout("key" + std::to_string(i), 10, 4);
    REQUIRE(layout.size() == 1);
    ++counts.at(layout[0].shard);
  }
  for (std::size_t s = 0; s < counts.size(); ++s) {
    INFO("shard " << s << " holds " << counts[s] << " keys");
    CHECK(counts[s] >= 150);
    CHECK(counts[s] <= 350);
  }
}

TEST_CASE("layout: shapes", "[core]") {
  SECTION("shape_size") {
    CHECK(core::shape_size({}) == 1);
    CHECK(core::shape_size({7}) == 7);
    CHECK(core::shape_size({256, 784}) == 200704);
    CHECK(core::shape_size({3, 0, 5}) == 0);
  }
  SECTION("shape_string") {
    CHECK(core::shape_string({}) == "[]");
    CHECK(core::shape_string({7}) == "[7]");
    CHECK(core::shape_string({256, 784}) == "[256,784]");
    CHECK(core::shape_string({~uint64_t{0}}) == "[18446744073709551615]");
  }
}
