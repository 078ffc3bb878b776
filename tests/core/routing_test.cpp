// SPDX-License-Identifier: BSD-3-Clause
#include "core/routing.hpp"

#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

using actorps::core::moved_shards;

namespace {

// Handles as numbers: a worker's, and a table's of another type.
bool same(int mine, long theirs) {
  return mine == theirs;
}

std::vector<uint32_t> moved(const std::vector<int>& current,
                            const std::vector<long>& table, uint64_t version,
                            uint64_t adopted) {
  return moved_shards(current, table, version, adopted, same);
}

} // namespace

TEST_CASE("routing: a table moves the shards whose handles changed", "[core]") {
  // Shard 1's server died; its backup (handle 21) took over in version 4.
  std::vector<int> worker{10, 11, 12};
  CHECK(moved(worker, {10, 21, 12}, 4, 3) == std::vector<uint32_t>{1});
  // Two shards moved in one table.
  CHECK(moved(worker, {30, 21, 12}, 5, 3) == std::vector<uint32_t>{0, 1});
  // Nothing changed: nothing moves.
  CHECK(moved(worker, {10, 11, 12}, 4, 3).empty());
}

TEST_CASE("routing: the same table adopted twice moves nothing the second "
          "time",
          "[core]") {
  // A second death while the first answer's servers were reached: the
  // coordinator answers the second request with the same table, and both
  // answers come back. The first moved shard 1; the second must not move
  // it again (the requests sent to 21 since are in flight to a live shard).
  std::vector<int> worker{10, 11, 12};
  auto first = moved(worker, {10, 21, 12}, 4, 3);
  REQUIRE(first == std::vector<uint32_t>{1});
  worker[1] = 21;
  CHECK(moved(worker, {10, 21, 12}, 4, 4).empty());
}

TEST_CASE("routing: an older table that comes after a newer one moves "
          "nothing",
          "[core]") {
  // Version 5 (shard 1 on 21, shard 2 on 32) was adopted first; version 4
  // (shard 1 on 21, shard 2 still on its dead 12) comes late: shard 2 must
  // not move back.
  std::vector<int> worker{10, 21, 32};
  CHECK(moved(worker, {10, 21, 12}, 4, 5).empty());
  // A table of the adopted version still moves a shard that differs (the
  // worker was configured with it and never moved).
  CHECK(moved(worker, {10, 21, 33}, 5, 5) == std::vector<uint32_t>{2});
}
