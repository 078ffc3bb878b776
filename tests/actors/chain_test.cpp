// SPDX-License-Identifier: BSD-3-Clause
// Three copies of a shard (replicas 3) at the message level: a primary, a
// middle copy and a last copy in one chain on the deterministic scheduler.
// The primary forwards to the middle copy, which runs what it gets and
// passes it on; nothing is answered before the last copy ran it. The test
// plays the workers and the coordinator (which pairs the copies, promotes
// them and is told when one is lost).
#include <map>
#include <memory>
#include <string>
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

namespace {

// A server's replica link that knows the connections of two servers' planes
// (by the addresses the coordinator names) and sends nothing.
struct two_servers : replica_link {
  static constexpr uint64_t from_a = 7;
  static constexpr uint64_t from_b = 9;

  uint64_t open(const std::string&) override {
    return 0;
  }
  uint64_t source(const std::string& address) override {
    return address == "plane a" ? from_a : address == "plane b" ? from_b : 0;
  }
  void send(uint64_t, uint32_t, uint64_t, replica_batch&&,
            const caf::actor&) override {
  }
  void send(uint64_t, uint32_t, uint64_t, const caf::message&,
            const caf::actor&) override {
  }
  void forget(uint64_t, uint32_t) override {
  }
};

// What a copy answered to the forwards that came over the plane, by
// request id: none (ok) or the error.
struct link_answers : reply_sink {
  std::map<uint64_t, caf::expected<caf::ok_atom>> got;

  void ok(uint64_t, uint64_t request) override {
    got.insert_or_assign(request, caf::ok_atom::value);
  }
  void value(uint64_t, uint64_t request, const shared_floats&) override {
    got.insert_or_assign(request, make_error(errc::bad_config, "a value"));
  }
  void parts(uint64_t, uint64_t request, float_parts&&) override {
    got.insert_or_assign(request, make_error(errc::bad_config, "parts"));
  }
  void fail(uint64_t, uint64_t request, const caf::error& err) override {
    got.insert_or_assign(request, err);
  }
};

} // namespace

TEST_CASE("chain: a copy paired anew takes forwards only over the connection "
          "of the server the coordinator named, not a late one of the copy "
          "cut before it") {
  test::deterministic_fixture f;
  auto cfg = test::shard_cfg(0, 2, false);
  cfg.backup = true;
  cfg.link = std::make_shared<two_servers>();
  auto copy = f.guard(spawn_shard(f.sys, cfg));
  // Stand-ins for the copies before it (only their handles count here).
  auto on_a = f.guard(spawn_shard(f.sys, cfg));
  auto on_b = f.guard(spawn_shard(f.sys, cfg));
  auto sink = std::make_shared<link_answers>();
  auto pair_with = [&](const shard_actor& up, std::string address) {
    f.self->send(copy, replica_atom::value, caf::actor_cast<caf::actor>(up),
                 false, std::move(address));
    f.run();
    REQUIRE(f.reply<caf::ok_atom>());
  };
  auto forward = [&](uint64_t from, uint64_t number, uint64_t request) {
    caf::anon_send(copy, replicate_atom::value, number, replica_batch{},
                   plane_reply{sink, from, request, nullptr, {}});
    f.run();
    REQUIRE(sink->got.count(request) == 1);
    return sink->got.at(request);
  };
  // Its upstream lives on server a; server b's forwards are refused.
  pair_with(on_a, "plane a");
  require_error(forward(two_servers::from_b, 1, 1), errc::unauthorized);
  CHECK(forward(two_servers::from_a, 1, 2));
  CHECK(forward(two_servers::from_a, 2, 3));
  // A forward for a turn that is never coming is not held for it.
  require_error(forward(two_servers::from_a, 3 + (1 << 20), 7),
                errc::bad_config);
  // The copy on a is cut (for a timeout: its server lives on) and this one
  // paired with the copy on b, whose forwards are numbered from 1. The cut
  // copy's last forward, still on its way, arrives first: refused, and
  // the new upstream's first forward is taken.
  pair_with(on_b, "plane b");
  require_error(forward(two_servers::from_a, 1, 4), errc::unauthorized);
  CHECK(forward(two_servers::from_b, 1, 5));
  CHECK(forward(two_servers::from_b, 2, 6));
}
