// SPDX-License-Identifier: BSD-3-Clause
// Replacement servers at the message level: a distributed coordinator, a
// server's shard and a worker in one process on the deterministic
// scheduler; the test plays the server's process and the coordinator's
// runner (which reads checkpoints).
#include <string>
#include <thread>
#include <vector>

#include "caf/event_based_actor.hpp"

#include "actors/coordinator/coordinator.hpp"
#include "actors/shard/shard.hpp"
#include "actors/worker/worker.hpp"
#include "core/node_ids.hpp"

#include "tests/actors/fixture.hpp"

using namespace actorps;
using actorps::test::require_error;

namespace {

struct recovery_fixture : test::deterministic_fixture {
  caf::scoped_actor runner{sys, true};
  coordinator_actor coord;
  worker_actor worker;
  shard_actor shard;
  uint32_t server_node = 0;

  bool sync;

  explicit recovery_fixture(std::chrono::milliseconds recovery
                            = std::chrono::milliseconds{60000},
                            bool sync_job = false)
    : sync(sync_job) {
    coordinator_config cc;
    cc.num_workers = 1;
    cc.num_servers = 1;
    cc.sync = sync;
    cc.token = "tok";
    cc.on_done = caf::actor_cast<caf::actor>(runner);
    cc.recovery_timeout = recovery;
    coord = guard(spawn_coordinator(sys, cc));
    shard = join_server(test::shard_cfg(0, 1, sync));
    REQUIRE(reply<caf::ok_atom>());
    auto w = join(role::worker);
    REQUIRE(w);
    CHECK(w->recovery_ms == recovery.count());
    self->send(coord, routing_atom::value);
    run();
    auto table = reply<routing_table>();
    REQUIRE(table);
    worker_config wc;
    wc.rank = 0;
    wc.coordinator = coord;
    for (auto& s : table->shards)
      wc.shards.push_back(caf::actor_cast<shard_actor>(s));
    wc.recovery = std::chrono::milliseconds{w->recovery_ms};
    wc.routing_version = table->version;
    wc.sync = sync;
    worker = guard(spawn_worker(sys, wc));
  }

  caf::actor agent() {
    return guard(sys.spawn([](caf::event_based_actor* a) -> caf::behavior {
      a->set_default_handler(caf::drop);
      return {[](shutdown_atom) {}};
    }));
  }

  caf::expected<job_info> join(uint8_t role_id) {
    self->send(coord, join_atom::value, role_id, std::string{"tok"}, agent(),
               join_mode::any, wire_version);
    run();
    return reply<job_info>();
  }

  // Joins as a server and registers one shard of `cfg` (the registration's
  // answer is left in `self`'s mailbox).
  shard_actor join_server(shard_config cfg) {
    auto s = join(role::server);
    REQUIRE(s);
    server_node = s->node_id;
    auto sh = guard(spawn_shard(sys, cfg));
    std::vector<caf::actor> shards{caf::actor_cast<caf::actor>(sh)};
    self->send(coord, shards_atom::value, s->node_id, shards, shards,
               std::string{"127.0.0.1:1"}, std::string{});
    run();
    return sh;
  }

  // Answers the coordinator's requests for the checkpoint with `records`
  // (in one piece) and the optimizer `opt`; false if none came.
  bool serve_checkpoint(const std::vector<slice_record>& records,
                        const optimizer_config& opt) {
    bool served = false;
    for (bool more = true; more;)
      runner->receive(
        [&](load_atom, uint64_t, uint64_t index) -> load_piece {
          served = true;
          load_piece p;
          p.optimizer = opt;
          if (index == 0)
            p.records = records;
          p.end = load_piece::commit;
          return p;
        },
        [](caf::message&) {},
        caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
    run();
    return served;
  }

  // Worker 0 makes key "k" of 4 zeros.
  void init_key() {
    self->send(worker, init_atom::value, std::string{"k"},
               std::vector<uint64_t>{4}, floats{std::vector<float>(4, 0.0f)});
    run();
    REQUIRE(reply<caf::ok_atom>());
  }

  void push(float x) {
    self->send(worker, push_atom::value, std::string{"k"}, int32_t{0},
               float_parts{std::vector<float>(4, x)});
  }

  caf::expected<shard_stats> stats_of(const shard_actor& s) {
    self->send(s, stats_atom::value);
    run();
    return reply<shard_stats>();
  }

  caf::expected<std::vector<float>> pull() {
    self->send(worker, pull_atom::value, std::string{"k"}, int32_t{0});
    run();
    auto r = reply<float_parts>();
    if (!r)
      return r.error();
    return r->flatten();
  }
};

slice_record checkpointed(float value) {
  slice_record rec;
  rec.key = "k";
  rec.part = 0;
  rec.offset = 0;
  rec.parts = 1;
  rec.value.data.assign(4, value);
  return rec;
}

} // namespace

TEST_CASE("recovery: a replacement server is restored from the checkpoint "
          "and gets what was in flight to the dead one, once and in order",
          "[recovery]") {
  recovery_fixture f;
  f.init_key();
  optimizer_config acc;
  acc.name = "accumulate";
  f.self->send(f.worker, set_opt_atom::value, acc);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  // Acknowledged by the server that dies: lost with it (the checkpoint the
  // replacement is restored from holds 10).
  f.push(1);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  // Sent as the server dies: the shard is gone before it takes it, and the
  // worker hears so from the failed request before the down message.
  caf::anon_send_exit(f.shard, caf::exit_reason::kill);
  f.push(2);
  f.run();
  CHECK(f.no_reply());
  // Issued while the server is down: waits too.
  f.push(4);
  f.self->send(f.worker, pull_atom::value, std::string{"k"}, int32_t{0});
  f.run();
  CHECK(f.no_reply());
  // A new server takes rank 0; its shard is made, loaded and routed to.
  auto replacement = f.join_server(test::shard_cfg(0, 1, false));
  REQUIRE(f.serve_checkpoint({checkpointed(10)}, acc));
  // The registration, the two pushes and the pull (10 + 2 + 4) answer.
  bool registered = false;
  int oks = 0;
  std::vector<float> pulled;
  for (int i = 0; i < 4; ++i)
    f.self->receive([&](caf::ok_atom) { ++oks; },
                    [&](float_parts& x) { pulled = x.flatten(); },
                    [&](caf::error& err) { FAIL(render(err)); },
                    caf::after(std::chrono::seconds(0)) >> [] {});
  registered = oks == 3;
  CHECK(registered);
  CHECK(pulled == std::vector<float>(4, 16.0f));
  // The replacement goes on numbering from where the re-sent ones ended.
  f.push(8);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  auto now = f.pull();
  REQUIRE(now);
  CHECK(*now == std::vector<float>(4, 24.0f));
  auto st = f.stats_of(replacement);
  REQUIRE(st);
  CHECK(st->pushes == 3);
  // The runner heard the replacement.
  bool heard = false;
  for (bool more = true; more;)
    f.runner->receive(
      [&](recover_atom, uint32_t rank, uint8_t kind, const std::string&) {
        if (kind == recovery_event::replaced && rank == 0)
          heard = true;
      },
      [](caf::message&) {},
      caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  CHECK(heard);
}

TEST_CASE("recovery: a replacement whose checkpoint cannot be read fails, and "
          "the next one is restored",
          "[recovery]") {
  recovery_fixture f;
  f.init_key();
  caf::anon_send_exit(f.shard, caf::exit_reason::kill);
  f.run();
  f.push(1);
  f.run();
  CHECK(f.no_reply());
  // Only one replacement at a time: a second server is refused meanwhile.
  f.join_server(test::shard_cfg(0, 1, false));
  auto second = f.join(role::server);
  CHECK_THAT(require_error(second, errc::bad_config),
             Catch::Contains("none of them may be replaced"));
  // The runner has no checkpoint: the registration fails with its reason.
  for (bool more = true; more;)
    f.runner->receive(
      [&](load_atom, uint64_t, uint64_t) -> caf::result<load_piece> {
        return make_error(errc::checkpoint_io, "no checkpoint in ckpt/");
      },
      [](caf::message&) {},
      caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  f.run();
  auto failed = f.reply<caf::ok_atom>();
  CHECK_THAT(require_error(failed, errc::checkpoint_io),
             Catch::Contains("no checkpoint in ckpt/"));
  // The push still waits; the next replacement is restored and gets it.
  CHECK(f.no_reply());
  f.join_server(test::shard_cfg(0, 1, false));
  REQUIRE(f.serve_checkpoint({checkpointed(5)}, optimizer_config{}));
  int oks = 0;
  for (int i = 0; i < 2; ++i)
    f.self->receive([&](caf::ok_atom) { ++oks; },
                    caf::after(std::chrono::seconds(0)) >> [] {});
  CHECK(oks == 2);
  // "assign" (the checkpoint's optimizer, and the job's): the push is the
  // value.
  auto now = f.pull();
  REQUIRE(now);
  CHECK(*now == std::vector<float>(4, 1.0f));
}

TEST_CASE("recovery: the recovery timeout covers the restore; the waiting "
          "calls then fail",
          "[recovery]") {
  using clock = std::chrono::steady_clock;
  auto timeout = std::chrono::milliseconds{300};
  recovery_fixture f{timeout};
  f.init_key();
  auto died = clock::now();
  caf::anon_send_exit(f.shard, caf::exit_reason::kill);
  f.run();
  f.push(1);
  f.run();
  CHECK(f.no_reply());
  // A replacement joins and registers; the runner never answers.
  f.join_server(test::shard_cfg(0, 1, false));
  // The deadline passes (time must pass: the coordinator's deadline is a
  // timed message of its own).
  while (clock::now() - died < timeout + std::chrono::milliseconds{50})
    std::this_thread::yield();
  f.sched.trigger_timeouts();
  f.run();
  // The registration and the waiting push fail, saying why.
  std::vector<std::string> errors;
  for (int i = 0; i < 2; ++i)
    f.self->receive([&](caf::error& err) { errors.push_back(render(err)); },
                    [](caf::ok_atom) { FAIL("an answer"); },
                    caf::after(std::chrono::seconds(0)) >> [] {});
  REQUIRE(errors.size() == 2);
  CHECK_THAT(errors[0] + errors[1],
             Catch::Contains("no server replaced it within the recovery "
                             "timeout"));
  CHECK_THAT(errors[0] + errors[1], Catch::Contains("dead_node"));
  // The push says which shard and why.
  CHECK_THAT(errors[0] + errors[1],
             Catch::Contains("shard 0 is down and was not replaced"));
  // The rank takes no replacement any more.
  CHECK_THAT(require_error(f.join(role::server), errc::bad_config),
             Catch::Contains("none of them may be replaced"));
}

TEST_CASE("recovery: a server that dies before every server registered "
          "opens no recovery",
          "[recovery]") {
  test::deterministic_fixture f;
  caf::scoped_actor runner{f.sys, true};
  coordinator_config cc;
  cc.num_workers = 1;
  cc.num_servers = 2;
  cc.token = "tok";
  cc.on_done = caf::actor_cast<caf::actor>(runner);
  cc.recovery_timeout = std::chrono::milliseconds{60000};
  auto coord = f.guard(spawn_coordinator(f.sys, cc));
  auto join = [&] {
    auto agent
      = f.guard(f.sys.spawn([](caf::event_based_actor* a) -> caf::behavior {
          a->set_default_handler(caf::drop);
          return {[](shutdown_atom) {}};
        }));
    f.self->send(coord, join_atom::value, role::server, std::string{"tok"},
                 caf::actor_cast<caf::actor>(agent), join_mode::any,
                 wire_version);
    f.run();
    return std::make_pair(f.reply<job_info>(), agent);
  };
  auto [first, first_agent] = join();
  REQUIRE(first);
  auto [second, second_agent] = join();
  REQUIRE(second);
  // Only the first registers; then it dies.
  auto sh = f.guard(spawn_shard(f.sys, test::shard_cfg(0, 1, false)));
  std::vector<caf::actor> shards{caf::actor_cast<caf::actor>(sh)};
  f.self->send(coord, shards_atom::value, first->node_id, shards, shards,
               std::string{"127.0.0.1:1"}, std::string{});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  caf::anon_send_exit(first_agent, caf::exit_reason::kill);
  f.run();
  // No table to replace a server in: a third server is refused.
  auto third = join().first;
  CHECK_THAT(require_error(third, errc::bad_config),
             Catch::Contains("the job already has its 2 servers"));
}

TEST_CASE("recovery: in a dist_sync job the worker tells the replacement its "
          "acknowledged pushes, where the restored rounds start",
          "[recovery]") {
  recovery_fixture f{std::chrono::milliseconds{60000}, true};
  f.init_key();
  optimizer_config acc;
  acc.name = "accumulate";
  f.self->send(f.worker, set_opt_atom::value, acc);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  // Rounds 0 and 1 acknowledged by the server that dies (the checkpoint
  // holds 10); the push of round 2 is in flight when it dies.
  for (float x : {1.0f, 1.0f}) {
    f.push(x);
    f.run();
    REQUIRE(f.reply<caf::ok_atom>());
  }
  caf::anon_send_exit(f.shard, caf::exit_reason::kill);
  f.push(2);
  f.run();
  CHECK(f.no_reply());
  auto replacement = f.join_server(test::shard_cfg(0, 1, true));
  REQUIRE(f.serve_checkpoint({checkpointed(10)}, acc));
  // The registration and the push re-sent, into round 2 there: without the
  // worker's word (2 pushes) the replacement would hold it.
  for (int i = 0; i < 2; ++i)
    REQUIRE(f.reply<caf::ok_atom>());
  // The worker's pull needs round 2, which the push completed.
  auto now = f.pull();
  REQUIRE(now);
  CHECK(*now == std::vector<float>(4, 12.0f));
  auto st = f.stats_of(replacement);
  REQUIRE(st);
  CHECK(st->pushes == 1);
  CHECK(st->waiting_pulls == 0);
}

TEST_CASE("recovery: a dist_sync job that replaces servers refuses "
          "clear_pending",
          "[recovery]") {
  recovery_fixture f{std::chrono::milliseconds{60000}, true};
  f.self->send(f.coord, command_atom::value, command_head::clear_pending,
               std::string{});
  f.run();
  auto why = require_error(f.reply<caf::ok_atom>(), errc::bad_config);
  CHECK_THAT(why, Catch::Contains("--recovery-timeout"));
}

TEST_CASE("recovery: a worker whose first routing table names a restored "
          "shard tells it its clocks at start",
          "[recovery]") {
  recovery_fixture f{std::chrono::milliseconds{60000}, true};
  constexpr auto slice = make_slice_id(7, 0);
  f.self->send(f.shard, init_atom::value, slice_init{slice, floats{{0.0f}}});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  // The shard waits for the clocks of worker 0 (the only live one).
  f.self->send(f.shard, clocks_atom::value);
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.self->send(f.shard, push_atom::value, slice_push{slice, 0, 0, floats{{1}}});
  f.run();
  CHECK(f.no_reply());
  // A worker process that starts now never adopts the shard: it says at
  // once that it pushed nothing there.
  worker_config wc;
  wc.rank = 0;
  wc.coordinator = f.coord;
  wc.shards.push_back(f.shard);
  wc.recovery = std::chrono::milliseconds{60000};
  wc.sync = true;
  wc.restarted = {1};
  f.guard(spawn_worker(f.sys, wc));
  f.run();
  CHECK(f.reply<caf::ok_atom>());
}
