// SPDX-License-Identifier: BSD-3-Clause
// Replicas at the message level: a primary shard and its backup in one
// process on the deterministic scheduler; the test plays the workers and
// the coordinator (which pairs them and promotes the backup).
#include <utility>
#include <vector>

#include "caf/exit_reason.hpp"

#include "actors/shard/shard.hpp"

#include "tests/actors/fixture.hpp"

using namespace actorps;
using actorps::test::require_error;

namespace {

constexpr slice_id slice_a = make_slice_id(3, 0);

struct replica_fixture : test::deterministic_fixture {
  shard_actor primary;
  shard_actor backup;

  // `rule`: the update rule, set on the primary once paired (the default
  // "accumulate" makes the value the sum of every push applied).
  explicit replica_fixture(bool sync = false, const char* rule = "accumulate") {
    primary = guard(spawn_shard(sys, test::shard_cfg(0, 2, sync)));
    auto bc = test::shard_cfg(0, 2, sync);
    bc.backup = true;
    backup = guard(spawn_shard(sys, bc));
    self->send(backup, replica_atom::value,
               caf::actor_cast<caf::actor>(primary), false);
    run();
    REQUIRE(reply<caf::ok_atom>());
    self->send(primary, replica_atom::value,
               caf::actor_cast<caf::actor>(backup), true);
    run();
    REQUIRE(reply<caf::ok_atom>());
    self->send(primary, init_atom::value,
               slice_init{slice_a, floats{std::vector<float>{0, 0}}});
    run();
    REQUIRE(reply<caf::ok_atom>());
    optimizer_config opt;
    opt.name = rule;
    self->send(primary, set_opt_atom::value, opt);
    run();
    REQUIRE(reply<caf::ok_atom>());
  }

  void send_push(const shard_actor& to, uint32_t worker, uint64_t seq,
                 std::vector<float> g) {
    self->send(to, push_atom::value,
               slice_push{slice_a, worker, seq, floats{std::move(g)}});
  }

  void send_pull(const shard_actor& to, uint32_t worker, uint64_t seq) {
    self->send(to, pull_atom::value, slice_pull{slice_a, worker, seq});
  }

  // Sync: worker 0 pushes {1, 2} into round 0 and pulls (sequence number
  // 1), which waits for the round.
  void pull_waiting_for_round() {
    send_push(primary, 0, 0, {1, 2});
    run();
    REQUIRE(reply<caf::ok_atom>());
    send_pull(primary, 0, 1);
    run();
    CHECK(no_reply());
  }

  // The primary dies, the backup is promoted; worker `worker`'s pull
  // (sequence number `seq`) reads what it holds.
  caf::expected<std::vector<float>> takeover(uint32_t worker, uint64_t seq) {
    kill_primary();
    run();
    promote();
    send_pull(backup, worker, seq);
    run();
    return pulled();
  }

  // Takes an `ok` and a pulled value, in either order: whether the `ok`
  // came, and the value.
  std::pair<bool, std::vector<float>> ok_and_value() {
    std::vector<float> value;
    bool acked = false;
    for (int i = 0; i < 2; ++i)
      self->receive([&](caf::ok_atom) { acked = true; },
                    [&](shared_floats& x) { value = x.take(); },
                    [&](caf::error& err) { FAIL(render(err)); },
                    caf::after(std::chrono::seconds(0)) >> [] {});
    return {acked, value};
  }

  caf::expected<std::vector<float>> pulled() {
    auto r = reply<shared_floats>();
    if (!r)
      return r.error();
    return r->take();
  }

  void promote() {
    self->send(backup, promote_atom::value);
    run();
    REQUIRE(reply<caf::ok_atom>());
  }

  // The primary's process dies: an exit that nothing handles.
  void kill_primary() {
    caf::anon_send_exit(primary, caf::exit_reason::kill);
  }
};

} // namespace

TEST_CASE("a push completes only once the backup ran it") {
  replica_fixture f;
  f.send_push(f.primary, 0, 0, {1, 2});
  // The primary runs it and forwards it; the worker hears nothing yet.
  f.sched.run_once();
  CHECK(f.no_reply());
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.send_push(f.primary, 1, 0, {10, 20});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  // Before its promotion the backup serves nobody.
  f.send_pull(f.backup, 0, 1);
  f.run();
  auto refused = require_error(f.pulled(), errc::bad_config);
  CHECK(refused.find("is a backup") != std::string::npos);
  auto v = f.takeover(0, 1);
  REQUIRE(v);
  CHECK(*v == std::vector<float>{11, 22});
}

TEST_CASE("a promoted backup answers what is sent again without applying it "
          "twice") {
  replica_fixture f;
  f.send_push(f.primary, 0, 0, {1, 1});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  // Push 1 reaches the backup, but the primary dies before it hears back:
  // the worker never saw it acknowledged.
  f.send_push(f.primary, 0, 1, {2, 2});
  f.sched.run_once();
  f.kill_primary();
  f.run();
  // Push 2 never left the worker's queue for the primary in time.
  f.promote();
  // The worker sends both again, in order, to the promoted backup.
  f.send_push(f.backup, 0, 1, {2, 2});
  f.send_push(f.backup, 0, 2, {4, 4});
  f.run();
  auto first = f.reply<caf::ok_atom>();
  auto second = f.reply<caf::ok_atom>();
  REQUIRE(first);
  REQUIRE(second);
  f.send_pull(f.backup, 0, 3);
  f.run();
  auto v = f.pulled();
  REQUIRE(v);
  // 1 + 2 + 4: push 1 once, though the backup got it twice.
  CHECK(*v == std::vector<float>{7, 7});
}

TEST_CASE("a pull the primary answered before it died leaves no gap") {
  replica_fixture f;
  f.send_push(f.primary, 0, 0, {1, 1});
  f.send_pull(f.primary, 0, 1);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  REQUIRE(f.pulled());
  f.kill_primary();
  f.run();
  f.promote();
  // The worker's next operation is number 2: the backup knows 1 was used.
  f.send_push(f.backup, 0, 2, {5, 5});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.send_pull(f.backup, 0, 3);
  f.run();
  auto v = f.pulled();
  REQUIRE(v);
  CHECK(*v == std::vector<float>{6, 6});
}

TEST_CASE("sync: a pull sent again to the promoted backup waits for its "
          "round") {
  replica_fixture f{true};
  // Worker 0's pull waits for round 0 on the primary, which dies.
  f.pull_waiting_for_round();
  f.kill_primary();
  f.run();
  f.promote();
  f.send_pull(f.backup, 0, 1);
  f.run();
  CHECK(f.no_reply());
  // Worker 1's push completes the round on the backup.
  f.send_push(f.backup, 1, 0, {10, 20});
  f.run();
  auto [acked, value] = f.ok_and_value();
  CHECK(acked);
  CHECK(value == std::vector<float>{11, 22});
}

TEST_CASE("sync: a round that a change of the live workers completes is "
          "answered only once the backup ran the change") {
  replica_fixture f{true};
  // Worker 0's pull waits for round 0, which worker 1 never joins.
  f.pull_waiting_for_round();
  // The coordinator declares worker 1 dead: the primary completes the
  // round, but neither the pull nor the change is answered before the
  // backup ran the change (a promoted backup would lack the round).
  f.self->send(f.primary, workers_atom::value, std::vector<uint32_t>{0});
  f.sched.run_once();
  CHECK(f.no_reply());
  f.run();
  auto [acked, value] = f.ok_and_value();
  CHECK(acked);
  CHECK(value == std::vector<float>{1, 2});
  // The backup completed the round too.
  auto v = f.takeover(0, 2);
  REQUIRE(v);
  CHECK(*v == std::vector<float>{1, 2});
}

TEST_CASE("a primary ignores a down message about its backup that the backup "
          "did not send") {
  replica_fixture f;
  // Forged: from the test, not from the backup (or its proxy).
  f.self->send(caf::actor_cast<caf::actor>(f.primary),
               caf::down_msg{f.backup.address(), caf::exit_reason::kill});
  f.run();
  // The primary told nobody that its backup is gone...
  CHECK(f.no_reply());
  // ...and still holds a push's answer until the backup ran it.
  f.send_push(f.primary, 0, 0, {1, 2});
  f.sched.run_once();
  CHECK(f.no_reply());
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
}

TEST_CASE("the backup runs changes in the primary's order") {
  replica_fixture f{false, "assign"};
  optimizer_config opt;
  opt.name = "accumulate";
  f.self->send(f.primary, set_opt_atom::value, opt);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.send_push(f.primary, 0, 0, {1, 1});
  f.send_push(f.primary, 0, 1, {2, 2});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  REQUIRE(f.reply<caf::ok_atom>());
  // Worker 1 leaves; its push afterwards is refused on both.
  f.self->send(f.primary, workers_atom::value, std::vector<uint32_t>{0});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.send_push(f.primary, 1, 0, {100, 100});
  f.run();
  require_error(f.reply<caf::ok_atom>(), errc::dead_node);
  f.kill_primary();
  f.run();
  f.promote();
  f.send_pull(f.backup, 0, 2);
  f.run();
  auto v = f.pulled();
  REQUIRE(v);
  // accumulate: 0 + 1 + 2, not "assign" (2), and nothing of worker 1.
  CHECK(*v == std::vector<float>{3, 3});
}

TEST_CASE("a standby backup takes changes from its primary only") {
  replica_fixture f;
  optimizer_config opt;
  opt.name = "accumulate";
  f.self->send(f.backup, set_opt_atom::value, opt);
  f.run();
  require_error(f.reply<caf::ok_atom>(), errc::unauthorized);
  f.self->send(f.backup, init_atom::value,
               slice_init{make_slice_id(4, 0), floats{std::vector<float>{1}}});
  f.run();
  require_error(f.reply<caf::ok_atom>(), errc::unauthorized);
  f.self->send(f.backup, replicate_atom::value, replica_batch{});
  f.run();
  require_error(f.reply<caf::ok_atom>(), errc::unauthorized);
}

TEST_CASE("a primary whose backup is gone tells who paired them, then goes "
          "on alone") {
  replica_fixture f;
  caf::anon_send_exit(f.backup, caf::exit_reason::kill);
  f.run();
  f.send_push(f.primary, 0, 0, {1, 2});
  f.run();
  // The push is answered only once the pairer (the coordinator; here the
  // test) knows: it must not promote the lost backup.
  uint32_t told = 99;
  f.self->receive(
    [&](replica_atom, uint32_t shard) {
      told = shard;
      return caf::ok_atom::value;
    },
    caf::after(std::chrono::seconds(0)) >> [] {});
  CHECK(told == 0);
  CHECK(f.no_reply());
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.send_pull(f.primary, 0, 1);
  f.run();
  auto v = f.pulled();
  REQUIRE(v);
  CHECK(*v == std::vector<float>{1, 2});
}
