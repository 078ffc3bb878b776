// SPDX-License-Identifier: BSD-3-Clause
// Replicas at the message level: a primary shard and its backup in one
// process on the deterministic scheduler; the test plays the workers and
// the coordinator (which pairs them and promotes the backup).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "caf/event_based_actor.hpp"
#include "caf/exit_reason.hpp"
#include "caf/system_messages.hpp"

#include "actors/shard/shard.hpp"
#include "core/optimizer.hpp"

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

  // A backup of its own whose primary the test plays.
  shard_actor backup_of_test(bool sync) {
    auto bc = test::shard_cfg(0, 2, sync);
    bc.backup = true;
    auto b = guard(spawn_shard(sys, bc));
    self->send(b, replica_atom::value, caf::actor_cast<caf::actor>(self),
               false);
    run();
    REQUIRE(reply<caf::ok_atom>());
    return b;
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

namespace {

// A data plane's sink: the requests answered ok, and those failed.
struct plane_oks : reply_sink {
  std::map<uint64_t, int> oks;
  std::map<uint64_t, caf::error> failed;

  void ok(uint64_t, uint64_t request) override {
    ++oks[request];
  }
  void value(uint64_t, uint64_t, const shared_floats&) override {
  }
  void parts(uint64_t, uint64_t, float_parts&&) override {
  }
  void fail(uint64_t, uint64_t request, const caf::error& err) override {
    failed[request] = err;
  }
};

// A replica_link that keeps what it is given to send, answered by the test.
struct kept_link : replica_link {
  static constexpr uint64_t peer = 5;
  std::vector<uint64_t> numbers;
  std::vector<replica_batch> batches;
  // Whether it keeps the batches (else it lets go of them at once, as a
  // send that copied them into its segment), and each operation's values
  // as sent.
  bool keep = true;
  std::vector<std::vector<float>> sent;

  uint64_t open(const std::string&) override {
    return peer;
  }
  uint64_t source(const std::string&) override {
    return 0;
  }
  void send(uint64_t, uint32_t, uint64_t number, replica_batch&& ops,
            const caf::actor&) override {
    numbers.push_back(number);
    for (auto& op : ops.ops)
      sent.push_back(op.shared.empty() ? op.values.data
                                       : std::vector<float>(
                                         op.shared.data(),
                                         op.shared.data() + op.shared.size()));
    if (keep)
      batches.push_back(std::move(ops));
  }
  void send(uint64_t, uint32_t, uint64_t number, const caf::message&,
            const caf::actor&) override {
    numbers.push_back(number);
  }
  void forget(uint64_t, uint32_t) override {
  }
};

// A primary (async, "accumulate" unless `rule` is empty) paired with a
// backup behind a kept_link; the test answers for the backup.
struct link_primary {
  test::deterministic_fixture& f;
  std::shared_ptr<kept_link> link = std::make_shared<kept_link>();
  shard_actor primary;
  std::size_t acked = 0;

  link_primary(test::deterministic_fixture& fx, std::size_t n,
               const char* rule = "accumulate")
    : f(fx) {
    auto cfg = test::shard_cfg(0, 2, false);
    cfg.link = link;
    primary = f.guard(spawn_shard(f.sys, cfg));
    auto stand_in = f.guard(spawn_shard(f.sys, cfg));
    f.self->send(primary, replica_atom::value,
                 caf::actor_cast<caf::actor>(stand_in), true,
                 std::string{"plane b"});
    f.run();
    answer_all();
    REQUIRE(f.reply<caf::ok_atom>());
    f.self->send(primary, init_atom::value,
                 slice_init{slice_a, floats{std::vector<float>(n)}});
    f.run();
    answer_all();
    REQUIRE(f.reply<caf::ok_atom>());
    if (*rule != 0) {
      optimizer_config opt;
      opt.name = rule;
      f.self->send(primary, set_opt_atom::value, opt);
      f.run();
      answer_all();
      REQUIRE(f.reply<caf::ok_atom>());
    }
    link->batches.clear();
    link->sent.clear();
  }

  // The backup answers every forward sent so far.
  void answer_all() {
    for (; acked < link->numbers.size(); ++acked) {
      replica_ack a;
      a.peer = kept_link::peer;
      a.number = link->numbers[acked];
      caf::anon_send(primary, replicate_atom::value, a);
    }
    f.run();
  }

  // Worker 0's pull number `seq`, answered once the backup knows of it.
  std::vector<float> pull(uint64_t seq) {
    f.self->send(primary, pull_atom::value, slice_pull{slice_a, 0, seq});
    f.run();
    answer_all();
    auto v = f.reply<shared_floats>();
    REQUIRE(v);
    return v->vec();
  }
};

} // namespace

TEST_CASE("a push read where it lies in the worker's segment goes to the "
          "backup from there") {
  // Memory of someone else's (a worker's segment) holding the pushes.
  auto memory
    = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 10, 20});
  auto viewers = [&] { return memory.use_count() - 1; };
  auto sink = std::make_shared<plane_oks>();
  auto from_plane = [&](test::deterministic_fixture& f, const shard_actor& to,
                        uint32_t worker, std::size_t at, uint64_t request) {
    auto keep = std::shared_ptr<const void>(memory, memory->data());
    caf::anon_send(to, push_atom::value, slice_push{slice_a, worker, 0, {}},
                   plane_reply{sink, 1, request, nullptr,
                               shared_floats{keep, memory->data() + at, 2}});
    f.run();
  };
  SECTION("through CAF: the backup gets the values") {
    replica_fixture f;
    from_plane(f, f.primary, 0, 0, 1);
    from_plane(f, f.primary, 1, 2, 2);
    CHECK(sink->oks[1] == 1);
    CHECK(sink->oks[2] == 1);
    CHECK(viewers() == 0);
    auto v = f.takeover(0, 1);
    REQUIRE(v);
    CHECK(*v == std::vector<float>{11, 22});
  }
  SECTION("over a link: the forward reads the segment, which stays taken "
          "until the forward is let go of, and the push is answered once "
          "the backup ran it") {
    test::deterministic_fixture f;
    link_primary lp{f, 2, ""};
    auto& link = lp.link;
    auto& primary = lp.primary;
    from_plane(f, primary, 0, 2, 7);
    REQUIRE(link->batches.size() == 1);
    REQUIRE(link->batches[0].ops.size() == 1);
    auto& op = link->batches[0].ops[0];
    CHECK(op.shared.data() == memory->data() + 2);
    CHECK(op.shared.size() == 2);
    CHECK(op.values.data.empty());
    CHECK(viewers() == 1);
    CHECK(sink->oks.count(7) == 0);
    lp.answer_all();
    CHECK(sink->oks[7] == 1);
    link->batches.clear();
    CHECK(viewers() == 0);
    // Applied by the primary too.
    CHECK(lp.pull(1) == std::vector<float>{10, 20});
  }
}

TEST_CASE("over a link a large push goes to the backup before the primary "
          "applies it, and the primary still applies it whole") {
  constexpr std::size_t n = std::size_t{1} << 16;
  test::deterministic_fixture f;
  link_primary lp{f, n};
  SECTION("a buffer of its own, let go of by the link at once") {
    lp.link->keep = false;
    f.self->send(lp.primary, push_atom::value,
                 slice_push{slice_a, 0, 0, floats{std::vector<float>(n, 3)}});
    f.run();
    REQUIRE(lp.link->sent.size() == 1);
    CHECK(lp.link->sent[0] == std::vector<float>(n, 3));
    CHECK(f.no_reply());
    lp.answer_all();
    REQUIRE(f.reply<caf::ok_atom>());
    CHECK(lp.pull(1) == std::vector<float>(n, 3));
  }
  SECTION("a view of the worker's segment") {
    auto memory = std::make_shared<std::vector<float>>(n, 5);
    auto sink = std::make_shared<plane_oks>();
    caf::anon_send(lp.primary, push_atom::value, slice_push{slice_a, 0, 0, {}},
                   plane_reply{sink, 1, 9, nullptr,
                               shared_floats{std::shared_ptr<const void>(
                                               memory, memory->data()),
                                             memory->data(), n}});
    f.run();
    REQUIRE(lp.link->batches.size() == 1);
    CHECK(lp.link->batches[0].ops.at(0).shared.data() == memory->data());
    lp.answer_all();
    CHECK(sink->oks[9] == 1);
    lp.link->batches.clear();
    CHECK(memory.use_count() == 1);
    CHECK(lp.pull(1) == std::vector<float>(n, 5));
  }
  // (That it left before the apply shows in the benchmarks only.)
  SECTION("a pull behind it is forwarded after it and reads its sum") {
    f.self->send(lp.primary, push_atom::value,
                 slice_push{slice_a, 0, 0, floats{std::vector<float>(n, 2)}});
    f.self->send(lp.primary, pull_atom::value, slice_pull{slice_a, 0, 1});
    f.run();
    REQUIRE(lp.link->batches.size() == 2);
    CHECK(lp.link->batches[0].ops.size() == 1);
    CHECK(lp.link->batches[1].ops.size() == 1);
    CHECK(lp.link->numbers.back()
          > lp.link->numbers[lp.link->numbers.size() - 2]);
    lp.answer_all();
    REQUIRE(f.reply<caf::ok_atom>());
    auto v = f.reply<shared_floats>();
    REQUIRE(v);
    CHECK(v->vec() == std::vector<float>(n, 2));
  }
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
  CHECK(f.take_backup_lost() == 0);
  CHECK(f.no_reply());
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.send_pull(f.primary, 0, 1);
  f.run();
  auto v = f.pulled();
  REQUIRE(v);
  CHECK(*v == std::vector<float>{1, 2});
}

TEST_CASE("a primary whose backup is being reported lost holds the answer "
          "to a change too") {
  replica_fixture f;
  caf::anon_send_exit(f.backup, caf::exit_reason::kill);
  f.run();
  // The push's forward fails: the primary tells the coordinator (the test).
  f.send_push(f.primary, 0, 0, {1, 2});
  f.run();
  optimizer_config opt;
  opt.name = "assign";
  f.self->send(f.primary, set_opt_atom::value, opt);
  f.run();
  CHECK(f.take_backup_lost() == 0);
  // Neither the push nor the change is answered before it confirmed: a
  // stale backup promoted meanwhile would lack both.
  CHECK(f.no_reply());
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  REQUIRE(f.reply<caf::ok_atom>());
}

// -- rebuilt replicas ---------------------------------------------------------

namespace {

constexpr slice_id table_t = make_slice_id(4, 0);

// A sync job (update rule "adam": optimizer state matters) whose primary
// lost its backup after serving, beside a reference shard that never fails
// and runs the same operations.
struct rebuild_fixture : replica_fixture {
  shard_actor reference;
  shard_actor rebuilt;

  rebuild_fixture() : replica_fixture(true, "adam") {
    reference = guard(spawn_shard(sys, test::shard_cfg(0, 2, true)));
    expect_ok(reference, init_atom::value,
              slice_init{slice_a, floats{std::vector<float>{0, 0}}});
    optimizer_config opt;
    opt.name = "adam";
    expect_ok(reference, set_opt_atom::value, opt);
    on_both(init_atom::value, table_init{table_t, 4, 2});
  }

  template <class... Ts>
  void expect_ok(const shard_actor& to, Ts... xs) {
    self->send(to, std::move(xs)...);
    run();
    REQUIRE(reply<caf::ok_atom>());
  }

  // Sends the same message to the primary and to the reference.
  template <class... Ts>
  void on_both(Ts... xs) {
    expect_ok(primary, xs...);
    expect_ok(reference, std::move(xs)...);
  }

  // The backup's server dies; a new backup is paired with the primary
  // (the test plays the coordinator) and takes its state.
  void replace_backup() {
    expect_ok(primary, replica_atom::value, caf::actor{}, true);
    caf::anon_send_exit(backup, caf::exit_reason::kill);
    run();
    auto bc = test::shard_cfg(0, 2, true);
    bc.backup = true;
    rebuilt = guard(spawn_shard(sys, bc));
    expect_ok(rebuilt, replica_atom::value,
              caf::actor_cast<caf::actor>(primary), false);
    expect_ok(primary, replica_atom::value,
              caf::actor_cast<caf::actor>(rebuilt), true);
  }

  // What `to` answers to worker `worker`'s pull (sequence number `seq`) of
  // the whole dense slice and of every row of the table.
  std::pair<std::vector<float>, std::vector<float>>
  read(const shard_actor& to, uint32_t worker, uint64_t seq) {
    send_pull(to, worker, seq);
    run();
    auto dense = pulled();
    REQUIRE(dense);
    self->send(to, pull_atom::value,
               rows_pull{table_t, worker, seq, {0, 1, 2, 3}});
    run();
    auto rows = pulled();
    REQUIRE(rows);
    return {*dense, *rows};
  }
};

} // namespace

TEST_CASE("a backup paired with a primary that served takes its whole state "
          "and can take over") {
  rebuild_fixture f;
  // Round 0 of both slices is applied; round 1 holds worker 0's pushes.
  f.on_both(push_atom::value,
            slice_push{slice_a, 0, 0, floats{std::vector<float>{1, 2}}});
  f.on_both(push_atom::value,
            slice_push{slice_a, 1, 0, floats{std::vector<float>{3, 4}}});
  f.on_both(push_atom::value,
            slice_push{slice_a, 0, 1, floats{std::vector<float>{5, 6}}});
  f.on_both(
    push_atom::value,
    rows_push{table_t, 0, 0, {1, 3}, floats{std::vector<float>{1, 1, 2, 2}}});
  f.on_both(push_atom::value,
            rows_push{table_t, 1, 0, {3}, floats{std::vector<float>{1, 1}}});
  f.on_both(push_atom::value,
            rows_push{table_t, 0, 1, {0}, floats{std::vector<float>{4, 4}}});
  f.replace_backup();
  // The primary dies too: the rebuilt backup takes over.
  f.kill_primary();
  f.run();
  f.expect_ok(f.rebuilt, promote_atom::value);
  // Worker 1 completes round 1 there and on the reference.
  for (auto* to : {&f.rebuilt, &f.reference}) {
    f.expect_ok(*to, push_atom::value,
                slice_push{slice_a, 1, 1, floats{std::vector<float>{7, 8}}});
    f.expect_ok(
      *to, push_atom::value,
      rows_push{table_t, 1, 1, {2}, floats{std::vector<float>{1, 1}}});
  }
  auto got = f.read(f.rebuilt, 0, 2);
  auto want = f.read(f.reference, 0, 2);
  CHECK(got.first == want.first);
  CHECK(got.second == want.second);
  // (Two rounds of adam moved every value.)
  CHECK(want.first != std::vector<float>{0, 0});
}

namespace {

// A state's header of slice `id` of `floats` values, in a job of 2 workers.
replica_slice header_of(slice_id id, uint64_t floats) {
  replica_slice h;
  h.slice = id;
  h.value_floats = floats;
  h.next_seq.assign(2, 0);
  h.pushes_of.assign(2, 0);
  return h;
}

} // namespace

TEST_CASE("a backup that took a new state while a load was open refuses "
          "the load's commit") {
  replica_fixture f;
  auto b = f.backup_of_test(false);
  auto take = [&](std::vector<replica_slice> slices) {
    replica_state head;
    head.first = true;
    head.slices = std::move(slices);
    replica_state tail;
    tail.last = true;
    for (auto* x : {&head, &tail}) {
      f.self->send(b, replicate_atom::value, *x);
      f.run();
      REQUIRE(f.reply<caf::ok_atom>());
    }
  };
  take({header_of(slice_a, 2)});
  // Its primary (the test) opens a load and sends slice_a's values.
  optimizer_config opt;
  f.self->send(b, load_atom::value, uint64_t{1}, opt, true);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  slice_record rec;
  rec.key_id = 3;
  rec.part = 0;
  rec.value.data = {1, 2};
  rec.state.data.assign(core::state_size(opt, 2), 0.0f);
  f.self->send(b, load_atom::value, uint64_t{1},
               std::vector<slice_record>{rec});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  // A new state without slice_a, then the commit: refused, no crash.
  take({});
  f.self->send(b, load_atom::value, uint64_t{1}, true);
  f.run();
  auto why = require_error(f.reply<caf::ok_atom>(), errc::unknown_key);
  CHECK(why.find("no longer") != std::string::npos);
}

TEST_CASE("a rebuilt backup refuses promotion until it took the whole state, "
          "and parts out of order") {
  replica_fixture f;
  auto b = f.backup_of_test(false);
  replica_state tail;
  tail.last = true;
  f.self->send(b, replicate_atom::value, tail);
  f.run();
  auto why = require_error(f.reply<caf::ok_atom>(), errc::bad_config);
  CHECK(why.find("before the first") != std::string::npos);
  replica_state head;
  head.first = true;
  head.slices.push_back(header_of(slice_a, 2));
  f.self->send(b, replicate_atom::value, head);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.self->send(b, promote_atom::value);
  f.run();
  why = require_error(f.reply<caf::ok_atom>(), errc::bad_config);
  CHECK(why.find("whole state") != std::string::npos);
  // Nor is it paired with a backup of its own before then (replicas 3: it
  // would pass on a part of the state as the whole).
  f.self->send(b, replica_atom::value, caf::actor_cast<caf::actor>(f.backup),
               true);
  f.run();
  why = require_error(f.reply<caf::ok_atom>(), errc::bad_config);
  CHECK(why.find("still taking") != std::string::npos);
  // A piece beyond the slice's end is refused.
  replica_state bad;
  replica_piece p;
  p.slice = slice_a;
  p.offset = 1;
  p.data.data = {1, 2};
  bad.pieces.push_back(p);
  f.self->send(b, replicate_atom::value, bad);
  f.run();
  require_error(f.reply<caf::ok_atom>(), errc::bad_config);
  p.offset = 0;
  tail.pieces.push_back(p);
  f.self->send(b, replicate_atom::value, tail);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.self->send(b, promote_atom::value);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.send_pull(b, 0, 0);
  f.run();
  auto v = f.pulled();
  REQUIRE(v);
  CHECK(*v == std::vector<float>{1, 2});
}

TEST_CASE("a backup refuses a state that names a slice twice in one part, "
          "and takes no forwards once promoted") {
  replica_fixture f;
  auto b = f.backup_of_test(true);
  // The second header of the slice is smaller than the rows its first
  // header's round names: never both.
  replica_state head;
  head.first = true;
  auto big = header_of(slice_a, 8);
  big.dim = 2;
  replica_round r;
  r.number = 0;
  r.contributors = {0};
  r.rows = {3};
  r.sum.data = {1, 1};
  big.rounds.push_back(r);
  auto small = big;
  small.value_floats = 2;
  small.rounds.clear();
  head.slices = {big, small};
  f.self->send(b, replicate_atom::value, head);
  f.run();
  auto why = require_error(f.reply<caf::ok_atom>(), errc::bad_config);
  CHECK(why.find("came twice") != std::string::npos);
  head.slices = {small};
  head.last = true;
  f.self->send(b, replicate_atom::value, head);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.self->send(b, replicate_atom::value, replica_batch{});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  // Promoted, it serves the workers: its old primary (here: the test,
  // whose node id others might claim) forwards nothing more.
  f.self->send(b, promote_atom::value);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.self->send(b, replicate_atom::value, replica_batch{});
  f.run();
  require_error(f.reply<caf::ok_atom>(), errc::unauthorized);
}

TEST_CASE("a shard takes a state only from its primary") {
  replica_fixture f;
  replica_state head;
  head.first = true;
  head.last = true;
  // The test is not the backup's primary.
  f.self->send(f.backup, replicate_atom::value, head);
  f.run();
  require_error(f.reply<caf::ok_atom>(), errc::unauthorized);
  // A primary takes none.
  f.self->send(f.primary, replicate_atom::value, head);
  f.run();
  require_error(f.reply<caf::ok_atom>(), errc::bad_config);
}

TEST_CASE("an operation that arrives while the state is on its way reaches "
          "the new backup after it") {
  rebuild_fixture f;
  f.on_both(push_atom::value,
            slice_push{slice_a, 0, 0, floats{std::vector<float>{1, 2}}});
  f.expect_ok(f.primary, replica_atom::value, caf::actor{}, true);
  caf::anon_send_exit(f.backup, caf::exit_reason::kill);
  f.run();
  auto bc = test::shard_cfg(0, 2, true);
  bc.backup = true;
  f.rebuilt = f.guard(spawn_shard(f.sys, bc));
  f.expect_ok(f.rebuilt, replica_atom::value,
              caf::actor_cast<caf::actor>(f.primary), false);
  // The pairing and a push reach the primary before the backup ran
  // anything: the push's forward waits behind the state.
  f.self->send(f.primary, replica_atom::value,
               caf::actor_cast<caf::actor>(f.rebuilt), true);
  f.send_push(f.primary, 1, 0, {3, 4});
  f.sched.run_once();
  f.sched.run_once();
  CHECK(f.no_reply());
  f.run();
  // Both answered: the pairing, then the push once the backup ran it.
  REQUIRE(f.reply<caf::ok_atom>());
  REQUIRE(f.reply<caf::ok_atom>());
  f.expect_ok(f.reference, push_atom::value,
              slice_push{slice_a, 1, 0, floats{std::vector<float>{3, 4}}});
  f.kill_primary();
  f.run();
  f.expect_ok(f.rebuilt, promote_atom::value);

  f.send_pull(f.rebuilt, 0, 1);
  f.run();
  auto got = f.pulled();
  REQUIRE(got);
  f.send_pull(f.reference, 0, 1);
  f.run();
  auto want = f.pulled();
  REQUIRE(want);
  CHECK(*got == *want);
}

// On CAF's real scheduler: a shard on a thread of its own makes the actor
// system's end wait until the shard is destroyed. A completion its gate
// still holds when it quits (its backup never acknowledged the forward)
// holds the gate and the pull's promise, which references the shard: the
// shard's end must drop those, or the system's end waits forever.
TEST_CASE("a primary on a thread of its own is destroyed when it quits with "
          "answers its backup never acknowledged") {
  system_config cfg{system_options{}};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::scoped_actor watcher{sys};
  auto waiter = caf::actor_cast<caf::actor>(watcher);
  // The backup takes the primary's state, then every forward without
  // answering it (its promises kept until it quits), and tells the watcher
  // of each batch.
  // (The promises reference the primary: they go when the backup quits.)
  auto unanswered = std::make_shared<std::vector<caf::response_promise>>();
  auto backup = sys.spawn([unanswered,
                           waiter](caf::event_based_actor* b) -> caf::behavior {
    b->attach_functor([unanswered] { unanswered->clear(); });
    return {
      // The pairing's state: taken.
      [=](replicate_atom, const replica_state&) { return caf::ok_atom::value; },
      [=](init_atom, const slice_init&) {
        unanswered->push_back(b->make_response_promise());
      },
      [=](replicate_atom, const replica_batch& x) {
        unanswered->push_back(b->make_response_promise());
        b->send(waiter, x.ops.size());
      },
    };
  });
  auto sc = test::shard_cfg(0, 1, false);
  sc.own_thread = true;
  sc.replica_timeout = std::chrono::seconds{20};
  auto primary = spawn_shard(sys, sc);
  self->monitor(primary);
  caf::actor_addr weak = primary.address();
  bool paired = false;
  self
    ->request(primary, std::chrono::seconds{30}, replica_atom::value,
              caf::actor_cast<caf::actor>(backup), true)
    .receive([&](caf::ok_atom) { paired = true; },
             [&](caf::error& err) { FAIL(render(err)); });
  REQUIRE(paired);
  // The init's answer and the pull's wait for the backup.
  self->send(primary, init_atom::value,
             slice_init{slice_a, floats{std::vector<float>{1, 2}}});
  self->send(primary, pull_atom::value, slice_pull{slice_a, 0, 0});
  bool forwarded = false;
  watcher->receive([&](size_t ops) { forwarded = ops > 0; },
                   caf::after(std::chrono::seconds{30}) >> [] {});
  REQUIRE(forwarded);
  caf::anon_send_exit(primary, caf::exit_reason::user_shutdown);
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; },
                caf::after(std::chrono::seconds{30}) >> [] {});
  REQUIRE(down);
  caf::anon_send_exit(backup, caf::exit_reason::user_shutdown);
  primary = nullptr;
  backup = nullptr;
  unanswered.reset();
  // Nothing else references the shard once its thread let go of it.
  auto alive = [&] {
    return caf::actor_cast<caf::strong_actor_ptr>(weak) != nullptr;
  };
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds{30};
  while (alive() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  if (alive()) {
    // The actor system's end would wait for this shard forever.
    std::fprintf(stderr, "the quit shard is still referenced\n");
    std::_Exit(1);
  }
  CHECK_FALSE(alive());
}
