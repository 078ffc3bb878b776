// SPDX-License-Identifier: BSD-3-Clause
// The pool of large float buffers: a large block let go of is taken by the
// next request that fits, from any thread; small blocks and blocks past the
// pool's room are freed; a shared buffer goes back when its last holder lets
// go of it.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/float_pool.hpp"
#include "core/values.hpp"

using namespace actorps;

namespace {

constexpr std::size_t large = core::pooled_min_bytes / sizeof(float);

} // namespace

TEST_CASE("float_pool: a large block given back is the next one taken",
          "[core]") {
  core::drain_pool();
  auto x = core::take_floats(2 * large);
  REQUIRE(x.size() == 2 * large);
  x[0] = 1.5f;
  const auto* where = x.data();
  core::give_floats(x);
  CHECK(x.empty());
  CHECK(x.capacity() == 0);
  auto before = core::pool_stats();
  CHECK(before.held_blocks == 1);
  CHECK(before.held_bytes >= 2 * large * sizeof(float));
  SECTION("the same size") {
    auto y = core::take_floats(2 * large);
    CHECK(y.data() == where);
    CHECK(y.size() == 2 * large);
  }
  SECTION("a smaller size that the block holds, as a copy") {
    std::vector<float> src(large + 3, 2.0f);
    auto y = core::copy_floats(src.data(), src.size());
    CHECK(y.data() == where);
    CHECK(y == src);
  }
  SECTION("a larger size grows into the block's room only if it fits") {
    auto y = core::take_floats(3 * large);
    CHECK(y.data() != where);
    CHECK(y.size() == 3 * large);
    CHECK(core::pool_stats().held_blocks == 1);
  }
  SECTION("a size far smaller leaves the block for a better fit") {
    auto y = core::take_floats(large / 2);
    CHECK(y.data() != where);
    CHECK(core::pool_stats().held_blocks == 1);
  }
  auto after = core::pool_stats();
  CHECK(after.reused >= before.reused);
  core::drain_pool();
  CHECK(core::pool_stats().held_bytes == 0);
}

TEST_CASE("float_pool: small blocks are freed, and the pool's room is bounded",
          "[core]") {
  core::drain_pool();
  std::vector<float> small(large / 4, 1.0f);
  core::give_floats(small);
  CHECK(small.capacity() == 0);
  CHECK(core::pool_stats().held_blocks == 0);
  // Blocks of twice the smallest pooled size asked for, then given back,
  // until past the room: the pool never holds more.
  constexpr std::size_t block = 2 * large;
  auto fits = core::pool_max_bytes / (block * sizeof(float));
  REQUIRE(fits >= 1);
  std::vector<std::vector<float>> xs;
  for (std::size_t i = 0; i < fits + 3; ++i)
    xs.push_back(core::take_floats(block));
  for (auto& x : xs) {
    core::give_floats(x);
    CHECK(x.capacity() == 0);
  }
  auto st = core::pool_stats();
  CHECK(st.held_blocks == fits);
  CHECK(st.held_bytes <= core::pool_max_bytes);
  core::drain_pool();
}

TEST_CASE("float_pool: a block nobody asked for is freed", "[core]") {
  core::drain_pool();
  std::vector<float> x(2 * large, 1.0f);
  core::give_floats(x);
  CHECK(x.capacity() == 0);
  CHECK(core::pool_stats().held_blocks == 0);
  // Asked for once: one block given back is kept, the next is not.
  auto y = core::take_floats(2 * large);
  std::vector<float> z(2 * large, 1.0f);
  core::give_floats(y);
  core::give_floats(z);
  CHECK(core::pool_stats().held_blocks == 1);
  core::drain_pool();
}

TEST_CASE("float_pool: a block not taken for a while is freed", "[core]") {
  core::drain_pool();
  auto a = core::take_floats(large);
  core::give_floats(a);
  REQUIRE(core::pool_stats().held_blocks == 1);
  // Takes and gives of blocks too large for it: the first block ages out.
  for (uint64_t i = 0; i < core::pool_max_age; ++i) {
    auto b = core::take_floats(4 * large);
    core::give_floats(b);
  }
  auto st = core::pool_stats();
  CHECK(st.held_blocks == 1);
  CHECK(st.held_bytes == 4 * large * sizeof(float));
  core::drain_pool();
}

TEST_CASE("float_pool: a trim frees the blocks given before its cut",
          "[core]") {
  core::drain_pool();
  auto a = core::take_floats(large);
  core::give_floats(a);
  REQUIRE(core::pool_stats().held_blocks == 1);
  core::trim_pool(std::chrono::hours{1});
  CHECK(core::pool_stats().held_blocks == 1);
  core::trim_pool(std::chrono::nanoseconds{0});
  CHECK(core::pool_stats().held_blocks == 0);
  CHECK(core::pool_stats().held_bytes == 0);
  core::drain_pool();
}

TEST_CASE("float_pool: a block given on one thread is taken on another",
          "[core]") {
  core::drain_pool();
  const float* where = nullptr;
  std::thread giver{[&where] {
    auto x = core::take_floats(large);
    where = x.data();
    core::give_floats(x);
  }};
  giver.join();
  auto y = core::take_floats(large);
  CHECK(y.data() == where);
  core::drain_pool();
}

TEST_CASE("float_pool: a large shared buffer goes back when its last holder "
          "lets go",
          "[core]") {
  core::drain_pool();
  auto x = core::take_floats(large);
  std::fill(x.begin(), x.end(), 3.0f);
  const auto* where = x.data();
  {
    shared_floats a{std::move(x)};
    auto b = a;
    a = shared_floats{};
    CHECK(core::pool_stats().held_blocks == 0);
    CHECK(b.data() == where);
    CHECK(b.vec()[large - 1] == 3.0f);
  }
  CHECK(core::pool_stats().held_blocks == 1);
  SECTION("a buffer taken out of it is not given back twice") {
    shared_floats c{core::take_floats(large)};
    CHECK(c.data() == where);
    auto v = c.take();
    CHECK(v.data() == where);
    CHECK(core::pool_stats().held_blocks == 0);
  }
  SECTION("copy on write leaves the old block to its other holder") {
    shared_floats c{core::take_floats(large)};
    auto d = c;
    c.mutate()[0] = 7.0f;
    CHECK(c.data() != d.data());
    CHECK(d.data() == where);
  }
  core::drain_pool();
}
