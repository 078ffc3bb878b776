// SPDX-License-Identifier: BSD-3-Clause
// Three copies of a shard (replicas 3) at the message level: a primary, a
// middle copy and a last copy in one chain on the deterministic scheduler.
// The primary forwards to the middle copy, which runs what it gets and
// passes it on; nothing is answered before the last copy ran it. The test
// plays the workers and the coordinator (which pairs the copies, promotes
// them and is told when one is lost).
#include <utility>
#include <vector>

#include "caf/exit_reason.hpp"

#include "actors/shard/shard.hpp"

#include "tests/actors/fixture.hpp"

using namespace actorps;
using actorps::test::require_error;

namespace {

constexpr slice_id slice_a = make_slice_id(3, 0);

struct chain_fixture : test::deterministic_fixture {
  shard_actor primary;
  shard_actor middle;
  shard_actor last;

  explicit chain_fixture(bool sync = false) {
    primary = guard(spawn_shard(sys, test::shard_cfg(0, 2, sync)));
    auto bc = test::shard_cfg(0, 2, sync);
    bc.backup = true;
    middle = guard(spawn_shard(sys, bc));
    last = guard(spawn_shard(sys, bc));
    // The coordinator pairs each copy with the one before it.
    pair(middle, last);
    pair(primary, middle);
    expect_ok(primary, init_atom::value,
              slice_init{slice_a, floats{std::vector<float>{0, 0}}});
    optimizer_config opt;
    opt.name = "accumulate";
    expect_ok(primary, set_opt_atom::value, opt);
  }

  template <class... Ts>
  void expect_ok(const shard_actor& to, Ts... xs) {
    self->send(to, std::move(xs)...);
    run();
    REQUIRE(reply<caf::ok_atom>());
  }

  // `down` takes `up`'s forwards (its whole state first).
  void pair(const shard_actor& up, const shard_actor& down) {
    expect_ok(down, replica_atom::value, caf::actor_cast<caf::actor>(up),
              false);
    expect_ok(up, replica_atom::value, caf::actor_cast<caf::actor>(down), true);
  }

  void send_push(const shard_actor& to, uint32_t worker, uint64_t seq,
                 std::vector<float> g) {
    self->send(to, push_atom::value,
               slice_push{slice_a, worker, seq, floats{std::move(g)}});
  }

  caf::expected<std::vector<float>> pull(const shard_actor& from,
                                         uint32_t worker, uint64_t seq) {
    self->send(from, pull_atom::value, slice_pull{slice_a, worker, seq});
    run();
    auto r = reply<shared_floats>();
    if (!r)
      return r.error();
    return r->take();
  }

  // Worker `worker`'s push, answered.
  void push_ok(const shard_actor& to, uint32_t worker, uint64_t seq,
               std::vector<float> g) {
    send_push(to, worker, seq, std::move(g));
    run();
    REQUIRE(reply<caf::ok_atom>());
  }

  // `dead` dies, `heir` is promoted and answers worker 0's pull (sequence
  // number `seq`).
  std::vector<float> take_over(const shard_actor& dead, const shard_actor& heir,
                               uint64_t seq) {
    kill(dead);
    promote(heir);
    auto v = pull(heir, 0, seq);
    REQUIRE(v);
    return *v;
  }

  void kill(const shard_actor& x) {
    caf::anon_send_exit(x, caf::exit_reason::kill);
    run();
  }

  void promote(const shard_actor& x) {
    expect_ok(x, promote_atom::value);
  }
};

} // namespace

TEST_CASE("chain: a push is answered only once the last copy ran it, and "
          "the last copy takes over with every push answered") {
  chain_fixture f;
  f.send_push(f.primary, 0, 0, {1, 2});
  f.send_push(f.primary, 1, 0, {10, 20});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  REQUIRE(f.reply<caf::ok_atom>());
  // Before its promotion no copy serves anybody.
  for (auto* x : {&f.middle, &f.last}) {
    auto refused = require_error(f.pull(*x, 0, 1), errc::bad_config);
    CHECK(refused.find("is a backup") != std::string::npos);
  }
  // The primary and the middle copy die: the last one has both pushes and
  // the changes before them (the slice, the update rule).
  f.kill(f.primary);
  CHECK(f.take_over(f.middle, f.last, 1) == std::vector<float>{11, 22});
}

TEST_CASE("chain: while the last copy's fate is unknown, the primary's "
          "answer waits") {
  chain_fixture f;
  // The last copy dies: the middle one cannot pass the push on.
  f.kill(f.last);
  f.send_push(f.primary, 0, 0, {1, 2});
  f.run();
  // The middle copy tells the coordinator (the test), and until it
  // confirmed, neither the middle copy nor the primary answers.
  CHECK(f.take_backup_lost() == 0);
  CHECK(f.no_reply());
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  // The chain goes on with two copies.
  f.push_ok(f.primary, 0, 1, {4, 4});
  CHECK(f.take_over(f.primary, f.middle, 2) == std::vector<float>{5, 6});
}

TEST_CASE("chain: the promoted middle copy passes on what it runs, and "
          "answers a push sent again without applying it twice") {
  chain_fixture f;
  f.push_ok(f.primary, 0, 0, {1, 1});
  // Push 1 reaches the middle copy, but the primary dies before anybody
  // hears back: the worker never saw it answered.
  f.send_push(f.primary, 0, 1, {2, 2});
  f.sched.run_once();
  f.kill(f.primary);
  f.promote(f.middle);
  // The worker sends it again, and a new one, to the promoted copy.
  f.send_push(f.middle, 0, 1, {2, 2});
  f.send_push(f.middle, 0, 2, {4, 4});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  REQUIRE(f.reply<caf::ok_atom>());
  // That one dies too: the last copy holds what the worker saw answered,
  // each push once.
  CHECK(f.take_over(f.middle, f.last, 3) == std::vector<float>{7, 7});
}

TEST_CASE("chain: when the middle copy dies, the last one takes the "
          "primary's whole state and goes on behind it") {
  chain_fixture f{true};
  // Sync round 0 is complete on every copy; worker 0 starts round 1.
  f.send_push(f.primary, 0, 0, {1, 2});
  f.send_push(f.primary, 1, 0, {3, 4});
  f.send_push(f.primary, 0, 1, {5, 6});
  f.run();
  for (int i = 0; i < 3; ++i)
    REQUIRE(f.reply<caf::ok_atom>());
  f.kill(f.middle);
  // The coordinator tells the primary that its backup is gone and pairs it
  // with the last copy.
  f.expect_ok(f.primary, replica_atom::value, caf::actor{}, true);
  f.pair(f.primary, f.last);
  // Worker 1 completes round 1 through the primary, which then dies.
  f.push_ok(f.primary, 1, 1, {7, 8});
  CHECK(f.take_over(f.primary, f.last, 2) == std::vector<float>{16, 20});
}

TEST_CASE("chain: a middle copy takes forwards from its own primary only, "
          "and the last copy from the middle one only") {
  chain_fixture f;
  f.self->send(f.last, replicate_atom::value, replica_batch{});
  f.run();
  require_error(f.reply<caf::ok_atom>(), errc::unauthorized);
  f.self->send(f.middle, replicate_atom::value, replica_batch{});
  f.run();
  require_error(f.reply<caf::ok_atom>(), errc::unauthorized);
  optimizer_config opt;
  opt.name = "assign";
  f.self->send(f.last, set_opt_atom::value, opt);
  f.run();
  require_error(f.reply<caf::ok_atom>(), errc::unauthorized);
}
