// SPDX-License-Identifier: BSD-3-Clause
#include <catch2/catch.hpp>

#include "core/join_tally.hpp"
#include "core/node_ids.hpp"

using actorps::core::join_tally;
namespace role = actorps::role;

TEST_CASE("join_tally: says whom the job still waits for", "[core]") {
  join_tally t{2, 1};
  CHECK_FALSE(t.complete());
  CHECK(t.describe()
        == "waiting for 2 of 2 workers (joined: none) and 1 of 1 servers "
           "(joined: none)");
  CHECK_FALSE(t.add(role::worker, 1));
  CHECK(t.describe()
        == "waiting for 1 of 2 workers (joined: 1) and 1 of 1 servers "
           "(joined: none)");
  CHECK_FALSE(t.add(role::server, 0));
  CHECK(t.describe() == "waiting for 1 of 2 workers (joined: 1)");
  SECTION("the last join completes the set, once") {
    CHECK(t.add(role::worker, 0));
    CHECK(t.complete());
    CHECK(t.describe() == "all 2 workers and 1 servers joined");
    CHECK_FALSE(t.add(role::worker, 0));
  }
  SECTION("a rank twice, out of range or of another role counts nothing") {
    CHECK_FALSE(t.add(role::worker, 1));
    CHECK_FALSE(t.add(role::worker, 2));
    CHECK_FALSE(t.add(role::coordinator, 0));
    CHECK_FALSE(t.complete());
  }
}

TEST_CASE("join_tally: only servers missing", "[core]") {
  join_tally t{1, 2};
  t.add(role::worker, 0);
  t.add(role::server, 1);
  CHECK(t.describe() == "waiting for 1 of 2 servers (joined: 1)");
}
