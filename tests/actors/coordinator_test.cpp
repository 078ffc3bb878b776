// SPDX-License-Identifier: BSD-3-Clause
#include "actors/coordinator/coordinator.hpp"

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "caf/event_based_actor.hpp"

#include "tests/actors/fixture.hpp"

using namespace actorps;
using actorps::test::require_error;

namespace {

// A local coordinator (no servers) over `num_shards` real shards.
struct local_fixture : test::deterministic_fixture {
  std::vector<shard_actor> shards;
  coordinator_actor coord;

  explicit local_fixture(uint32_t workers = 2, uint32_t num_shards = 2,
                         uint64_t bigarray_bound = 1 << 20,
                         shard_config base = {}) {
    for (uint32_t i = 0; i < num_shards; ++i) {
      auto sc = base;
      sc.index = i;
      sc.num_workers = workers;
      shards.push_back(guard(spawn_shard(sys, sc)));
    }
    cc.num_workers = workers;
    cc.bigarray_bound = bigarray_bound;
    cc.slice_floats = bigarray_bound;
    cc.shards = shards;
    coord = guard(spawn_coordinator(sys, cc));
  }

  // Replaces the coordinator by one whose configuration `tweak` changed.
  void respawn(const std::function<void(coordinator_config&)>& tweak) {
    tweak(cc);
    coord = guard(spawn_coordinator(sys, cc));
  }

  coordinator_config cc;

  caf::expected<key_info> declare(const std::string& key,
                                  std::vector<uint64_t> shape, uint32_t rank) {
    self->send(coord, declare_atom::value, key, std::move(shape), rank);
    run();
    return reply<key_info>();
  }

  // Rank 0 declares `key`; `rank1` then declares it too and is left
  // waiting for rank 0's init. Returns rank 0's answer.
  caf::expected<key_info> declare_with_waiter(const std::string& key,
                                              caf::scoped_actor& rank1) {
    auto info = declare(key, {4}, 0);
    rank1->send(coord, declare_atom::value, key, std::vector<uint64_t>{4},
                uint32_t{1});
    run();
    return info;
  }

  caf::expected<caf::ok_atom> init_done(uint32_t id, bool ok) {
    self->send(coord, init_done_atom::value, id, ok);
    run();
    return reply<caf::ok_atom>();
  }

  caf::expected<key_info> lookup(const std::string& key) {
    self->send(coord, lookup_atom::value, key);
    run();
    return reply<key_info>();
  }

  // Declares `key` as rank 0, writes `value` to the shards as a worker does,
  // and reports the init done.
  key_info init_key(const std::string& key, const std::vector<float>& value) {
    auto info = declare(key, {value.size()}, 0);
    REQUIRE(info);
    for (auto& s : info->slices) {
      std::vector<float> part(value.begin() + s.offset,
                              value.begin() + s.offset + s.length);
      self->send(shards[s.shard], init_atom::value,
                 slice_init{make_slice_id(info->id, s.part),
                            floats{std::move(part)}});
      run();
      REQUIRE(reply<caf::ok_atom>());
    }
    REQUIRE(init_done(info->id, true));
    return *info;
  }

  caf::expected<state_snapshot> save() {
    self->send(coord, save_atom::value);
    run();
    return reply<state_snapshot>();
  }

  template <class... Ts>
  caf::expected<caf::ok_atom> ask_ok(Ts... xs) {
    self->send(coord, xs...);
    run();
    return reply<caf::ok_atom>();
  }
};

// Values 0, 1, ..., n-1.
std::vector<float> iota(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(i);
  return v;
}

} // namespace

TEST_CASE("coordinator: rank 0 declares and inits, the others wait for it",
          "[coordinator]") {
  local_fixture f{2};
  SECTION("lookups fail before the init, succeed after") {
    require_error(f.lookup("w"), errc::unknown_key);
    auto info = f.declare("w", {2, 3}, 0);
    REQUIRE(info);
    CHECK(info->name == "w");
    CHECK(info->size == 6);
    CHECK(info->shape == std::vector<uint64_t>{2, 3});
    require_error(f.lookup("w"), errc::not_initialized);
    REQUIRE(f.init_done(info->id, true));
    auto found = f.lookup("w");
    REQUIRE(found);
    CHECK(found->id == info->id);
  }
  SECTION("rank 1's declaration is answered once rank 0's init is done") {
    caf::scoped_actor rank1{f.sys, true};
    auto info = f.declare_with_waiter("w", rank1);
    REQUIRE(info);
    CHECK(f.no_reply(rank1));
    REQUIRE(f.init_done(info->id, true));
    auto waited = f.reply<key_info>(rank1);
    REQUIRE(waited);
    CHECK(waited->id == info->id);
  }
  SECTION("a failed init fails the waiters; rank 0 may declare again") {
    caf::scoped_actor rank1{f.sys, true};
    auto info = f.declare_with_waiter("w", rank1);
    REQUIRE(info);
    REQUIRE(f.init_done(info->id, false));
    require_error(f.reply<key_info>(rank1), errc::not_initialized);
    auto again = f.declare("w", {4}, 0);
    REQUIRE(again);
    CHECK(again->id == info->id);
  }
  SECTION("rank 0's shape wins over one another rank declared before it") {
    caf::scoped_actor rank1{f.sys, true};
    rank1->send(f.coord, declare_atom::value, std::string{"w"},
                std::vector<uint64_t>{2}, uint32_t{1});
    f.run();
    CHECK(f.no_reply(rank1));
    auto info = f.declare("w", {3}, 0);
    REQUIRE(info);
    CHECK(info->shape == std::vector<uint64_t>{3});
    CHECK(info->size == 3);
    auto why = require_error(f.reply<key_info>(rank1), errc::shape_mismatch);
    CHECK_THAT(why, Catch::Contains("[3]"));
    // Declared as rank 0 did, it waits for the init as any other rank.
    rank1->send(f.coord, declare_atom::value, std::string{"w"},
                std::vector<uint64_t>{3}, uint32_t{1});
    f.run();
    CHECK(f.no_reply(rank1));
    REQUIRE(f.init_done(info->id, true));
    auto waited = f.reply<key_info>(rank1);
    REQUIRE(waited);
    CHECK(waited->id == info->id);
  }
  SECTION("another rank may declare again (its call timed out, or a new "
          "process took its place), before the init and after it") {
    caf::scoped_actor rank1{f.sys, true};
    auto info = f.declare_with_waiter("w", rank1);
    REQUIRE(info);
    rank1->send(f.coord, declare_atom::value, std::string{"w"},
                std::vector<uint64_t>{4}, uint32_t{1});
    f.run();
    CHECK(f.no_reply(rank1));
    REQUIRE(f.init_done(info->id, true));
    for (int i = 0; i < 2; ++i) {
      auto waited = f.reply<key_info>(rank1);
      REQUIRE(waited);
      CHECK(waited->id == info->id);
    }
    auto late = f.declare("w", {4}, 1);
    REQUIRE(late);
    CHECK(late->id == info->id);
  }
  SECTION("declarations that do not fit are refused") {
    auto info = f.declare("w", {4}, 0);
    REQUIRE(info);
    require_error(f.declare("w", {5}, 1), errc::shape_mismatch);
    // Rank 0 may declare again until its init is done (a retry), not after.
    REQUIRE(f.declare("w", {4}, 0));
    REQUIRE(f.init_done(info->id, true));
    require_error(f.declare("w", {4}, 0), errc::already_initialized);
    require_error(f.declare("v", {}, 0), errc::shape_mismatch);
    auto msg = require_error(f.declare("v", {4}, 2), errc::bad_config);
    CHECK_THAT(msg, Catch::Contains("2"));
    require_error(f.init_done(999, true), errc::unknown_key);
  }
}

TEST_CASE("coordinator: a large key is sliced over every shard",
          "[coordinator]") {
  local_fixture f{1, 3, /*bigarray_bound=*/100};
  auto info = f.init_key("big", iota(1000));
  REQUIRE(info.slices.size() >= 3);
  std::vector<bool> used(3, false);
  uint64_t next = 0;
  for (auto& s : info.slices) {
    CHECK(s.offset == next);
    CHECK(s.length > 0);
    CHECK(s.length <= 100);
    next += s.length;
    used[s.shard] = true;
  }
  CHECK(next == 1000);
  CHECK(used == std::vector<bool>{true, true, true});
  auto small = f.init_key("small", iota(10));
  CHECK(small.slices.size() == 1);
}

TEST_CASE("coordinator: barriers release once every live worker arrived",
          "[coordinator]") {
  local_fixture f{3};
  caf::scoped_actor r1{f.sys, true};
  caf::scoped_actor r2{f.sys, true};
  f.self->send(f.coord, barrier_atom::value, uint32_t{0});
  r1->send(f.coord, barrier_atom::value, uint32_t{1});
  f.run();
  CHECK(f.no_reply());
  CHECK(f.no_reply(r1));
  SECTION("the last arrival releases everyone") {
    r2->send(f.coord, barrier_atom::value, uint32_t{2});
    f.run();
    CHECK(f.reply<caf::ok_atom>());
    CHECK(f.reply<caf::ok_atom>(r1));
    CHECK(f.reply<caf::ok_atom>(r2));
    // The next barrier starts afresh.
    f.self->send(f.coord, barrier_atom::value, uint32_t{0});
    f.run();
    CHECK(f.no_reply());
  }
  SECTION("a worker that leaves no longer holds the barrier") {
    REQUIRE(f.ask_ok(leave_atom::value, uint32_t{2}));
    CHECK(f.reply<caf::ok_atom>());
    CHECK(f.reply<caf::ok_atom>(r1));
  }
  SECTION("a rank entering again before the release just waits") {
    r1->send(f.coord, barrier_atom::value, uint32_t{1});
    f.run();
    CHECK(f.no_reply(r1));
    r2->send(f.coord, barrier_atom::value, uint32_t{2});
    f.run();
    CHECK(f.reply<caf::ok_atom>(r2));
    CHECK(f.reply<caf::ok_atom>());
    CHECK(f.reply<caf::ok_atom>(r1));
  }
}

TEST_CASE("coordinator: optimizer and commands reach every shard",
          "[coordinator]") {
  std::atomic<int> handled{0};
  shard_config base;
  base.on_command = [&](int32_t head, const std::string& body) -> caf::error {
    if (head == 7 && body == "ping") {
      ++handled;
      return caf::none;
    }
    return make_error(errc::bad_config, "refused " + body);
  };
  local_fixture f{1, 3, 1 << 20, base};
  f.init_key("w", iota(4));
  auto optimizer_on_shards = [&] {
    auto snap = f.save();
    REQUIRE(snap);
    return snap->optimizer.name;
  };
  SECTION("set_opt") {
    optimizer_config adam;
    adam.name = "adam";
    REQUIRE(f.ask_ok(set_opt_atom::value, adam));
    CHECK(optimizer_on_shards() == "adam");
    optimizer_config bad;
    bad.name = "nope";
    require_error(f.ask_ok(set_opt_atom::value, bad), errc::bad_optimizer);
    CHECK(optimizer_on_shards() == "adam");
  }
  SECTION("command head 0 sets the optimizer from text") {
    REQUIRE(f.ask_ok(command_atom::value, int32_t{0},
                     std::string{"name=rmsprop,learning_rate=0.1"}));
    CHECK(optimizer_on_shards() == "rmsprop");
    require_error(f.ask_ok(command_atom::value, int32_t{0},
                           std::string{"name=nope"}),
                  errc::bad_optimizer);
  }
  SECTION("other heads run the shards' handler, errors come back") {
    REQUIRE(f.ask_ok(command_atom::value, int32_t{7}, std::string{"ping"}));
    CHECK(handled == 3);
    auto msg = require_error(f.ask_ok(command_atom::value, int32_t{7},
                                      std::string{"pong"}),
                             errc::bad_config);
    CHECK_THAT(msg, Catch::Contains("refused pong"));
  }
}

TEST_CASE("coordinator: save and load fan out over the shards",
          "[coordinator]") {
  local_fixture f{1, 2, /*bigarray_bound=*/8};
  f.init_key("b", iota(20));
  f.init_key("a", iota(3));
  auto snap = f.save();
  REQUIRE(snap);
  SECTION("save names every slice and orders them by key and part") {
    uint64_t b_floats = 0;
    std::string last;
    uint32_t last_part = 0;
    for (auto& rec : snap->slices) {
      CHECK((rec.key == "a" || rec.key == "b"));
      if (rec.key == last)
        CHECK(rec.part > last_part);
      else
        CHECK(rec.key > last);
      last = rec.key;
      last_part = rec.part;
      if (rec.key == "b") {
        for (std::size_t i = 0; i < rec.value.data.size(); ++i)
          CHECK(rec.value.data[i] == static_cast<float>(rec.offset + i));
        b_floats += rec.value.data.size();
      }
    }
    CHECK(b_floats == 20);
  }
  SECTION("load restores the saved values") {
    auto changed = *snap;
    for (auto& rec : changed.slices)
      for (auto& x : rec.value.data)
        x += 100.0f;
    REQUIRE(f.ask_ok(load_atom::value, changed));
    auto again = f.save();
    REQUIRE(again);
    REQUIRE(again->slices.size() == changed.slices.size());
    for (std::size_t i = 0; i < changed.slices.size(); ++i)
      CHECK(again->slices[i].value.data == changed.slices[i].value.data);
  }
  SECTION("load refuses unknown keys and other sizes") {
    auto unknown = *snap;
    unknown.slices[0].key = "zz";
    require_error(f.ask_ok(load_atom::value, unknown), errc::unknown_key);
    auto resized = *snap;
    resized.slices.back().value.data.push_back(1.0f);
    require_error(f.ask_ok(load_atom::value, resized),
                  errc::checkpoint_mismatch);
  }
  SECTION("a dead shard fails the fan-out instead of hanging it") {
    caf::anon_send_exit(f.shards[1], caf::exit_reason::kill);
    f.run();
    auto failed = f.save();
    CHECK_FALSE(failed);
    // The coordinator still answers.
    CHECK(f.lookup("a"));
  }
}

namespace {

// A distributed coordinator expecting 2 workers and 1 server, token "tok"
// (and, if given, a token of the servers' own).
struct dist_fixture : test::deterministic_fixture {
  coordinator_actor coord;

  explicit dist_fixture(std::string server_token = {}) {
    coordinator_config cc;
    cc.num_workers = 2;
    cc.num_servers = 1;
    cc.token = "tok";
    cc.server_token = std::move(server_token);
    cc.sync = true;
    coord = guard(spawn_coordinator(sys, cc));
  }

  // A node agent that ignores what the coordinator tells it.
  // Two workers and a server join: the workers' agents.
  std::pair<caf::actor, caf::actor> two_workers_and_a_server() {
    auto a0 = agent();
    auto a1 = agent();
    REQUIRE(join(role::worker, "tok", a0));
    REQUIRE(join(role::worker, "tok", a1));
    REQUIRE(join(role::server, "tok", agent()));
    return {a0, a1};
  }

  caf::actor agent() {
    return guard(sys.spawn([](caf::event_based_actor* a) -> caf::behavior {
      a->set_default_handler(caf::drop);
      return {[](shutdown_atom) {}};
    }));
  }

  caf::expected<job_info> join(uint8_t role_id, std::string token,
                               caf::actor who, uint8_t mode = join_mode::any,
                               uint32_t version = wire_version) {
    self->send(coord, join_atom::value, role_id, std::move(token),
               std::move(who), mode, version);
    run();
    return reply<job_info>();
  }

  caf::expected<uint32_t> dead(int32_t node_or_group) {
    self->send(coord, dead_atom::value, node_or_group, int32_t{600});
    run();
    return reply<uint32_t>();
  }
};

} // namespace

TEST_CASE("coordinator: joining needs the token, the mode, the transport and "
          "the version",
          "[coordinator]") {
  dist_fixture f;
  auto msg = require_error(f.join(role::worker, "guess-1234", f.agent()),
                           errc::unauthorized);
  CHECK(msg.find("guess-1234") == std::string::npos); // not echoed
  require_error(f.join(role::worker, "tok", f.agent(), join_mode::async),
                errc::bad_config);
  CHECK_THAT(
    require_error(f.join(role::worker, "tok", f.agent(), join_mode::ssp),
                  errc::bad_config),
    Catch::Contains("runs dist_sync, the node asked for dist_ssp"));
  auto ver = require_error(f.join(role::worker, "tok", f.agent(),
                                  join_mode::any, wire_version + 1),
                           errc::bad_config);
  CHECK_THAT(ver, Catch::Contains(std::to_string(wire_version + 1)));
  require_error(f.join(uint8_t{3}, "tok", f.agent()), errc::bad_config);
  // The job's tensors travel over CAF (the fixture's default).
  CHECK_THAT(
    require_error(f.join(role::worker, "tok", f.agent(),
                         join_mode::expect(join_mode::sync, transport::ucx)),
                  errc::bad_config),
    Catch::Contains("travel over caf, the node asked for ucx"));
  CHECK_THAT(require_error(f.join(role::worker, "tok", f.agent(),
                                  join_mode::expect(join_mode::any, 9)),
                           errc::bad_config),
             Catch::Contains("asked for an unknown transport"));
  // Refusals gave out no rank: the first accepted worker is rank 0.
  auto w0 = f.join(role::worker, "tok", f.agent(),
                   join_mode::expect(join_mode::sync, transport::caf));
  REQUIRE(w0);
  CHECK(w0->rank == 0);
  CHECK(w0->node_id == worker_node_id(0));
  CHECK(w0->num_workers == 2);
  CHECK(w0->sync);
  CHECK(w0->staleness == -1);
  auto w1 = f.join(role::worker, "tok", f.agent());
  REQUIRE(w1);
  CHECK(w1->rank == 1);
  require_error(f.join(role::worker, "tok", f.agent()), errc::bad_config);
  auto s0 = f.join(role::server, "tok", f.agent());
  REQUIRE(s0);
  CHECK(s0->node_id == server_node_id(0));
  require_error(f.join(role::server, "tok", f.agent()), errc::bad_config);
}

TEST_CASE("coordinator: with a server token, the job token alone joins no "
          "server",
          "[coordinator]") {
  dist_fixture f{"srv"};
  // A holder of the job token cannot take a server's place (and the rank
  // key that checks every worker), nor the server token a worker's.
  CHECK_THAT(require_error(f.join(role::server, "tok", f.agent()),
                           errc::unauthorized),
             Catch::Contains("wrong server token"));
  require_error(f.join(role::server, "srv-guess", f.agent()),
                errc::unauthorized);
  require_error(f.join(role::worker, "srv", f.agent()), errc::unauthorized);
  auto s0 = f.join(role::server, "srv", f.agent());
  REQUIRE(s0);
  CHECK(s0->node_id == server_node_id(0));
  CHECK_FALSE(s0->rank_key.empty());
  auto w0 = f.join(role::worker, "tok", f.agent());
  REQUIRE(w0);
  CHECK(w0->rank == 0);
  CHECK(w0->rank_key.empty());
}

TEST_CASE("coordinator: on_done hears every admitted node, no refused one",
          "[coordinator]") {
  test::deterministic_fixture f;
  caf::scoped_actor watcher{f.sys, true};
  coordinator_config cc;
  cc.num_workers = 1;
  cc.num_servers = 1;
  cc.token = "tok";
  cc.on_done = caf::actor_cast<caf::actor>(watcher);
  auto coord = f.guard(spawn_coordinator(f.sys, cc));
  auto join = [&](uint8_t role_id, std::string token) {
    f.self->send(coord, join_atom::value, role_id, std::move(token),
                 caf::actor{}, join_mode::any, wire_version);
    f.run();
    return f.reply<job_info>();
  };
  // What the watcher heard: (node id, role, rank), or nothing.
  auto heard = [&]() -> std::optional<std::tuple<uint32_t, uint8_t, uint32_t>> {
    std::optional<std::tuple<uint32_t, uint8_t, uint32_t>> out;
    watcher->receive([&](join_atom, uint32_t id, uint8_t r,
                         uint32_t rank) { out = std::make_tuple(id, r, rank); },
                     caf::after(std::chrono::seconds(0)) >> [] {});
    return out;
  };
  REQUIRE_FALSE(join(role::worker, "wrong"));
  CHECK_FALSE(heard());
  REQUIRE(join(role::server, "tok"));
  CHECK(heard() == std::make_tuple(server_node_id(0), role::server, 0u));
  REQUIRE(join(role::worker, "tok"));
  CHECK(heard() == std::make_tuple(worker_node_id(0), role::worker, 0u));
  CHECK_FALSE(heard());
  // A worker that leaves after a failure is heard with its reason, once.
  auto failed = [&]() -> std::optional<std::string> {
    std::optional<std::string> out;
    watcher->receive(
      [&](leave_atom, uint32_t id, uint32_t rank, const std::string& why) {
        CHECK(id == worker_node_id(0));
        CHECK(rank == 0u);
        out = why;
      },
      caf::after(std::chrono::seconds(0)) >> [] {});
    return out;
  };
  for (int i = 0; i < 2; ++i) {
    f.self->send(coord, leave_atom::value, uint32_t{0},
                 std::string{"push k: dead_node"});
    f.run();
    REQUIRE(f.reply<caf::ok_atom>());
    if (i == 0)
      CHECK(failed() == std::string{"push k: dead_node"});
    else
      CHECK_FALSE(failed());
  }
}

TEST_CASE("coordinator: a local coordinator takes no joins", "[coordinator]") {
  local_fixture f{1};
  f.self->send(f.coord, join_atom::value, role::worker, std::string{},
               caf::actor{}, join_mode::any, wire_version);
  f.run();
  require_error(f.reply<job_info>(), errc::bad_config);
}

TEST_CASE("coordinator: the routing table is complete once servers register",
          "[coordinator]") {
  dist_fixture f;
  auto s0 = f.join(role::server, "tok", f.agent());
  REQUIRE(s0);
  f.self->send(f.coord, routing_atom::value);
  f.run();
  CHECK(f.no_reply());
  auto shard = f.guard(spawn_shard(f.sys, test::shard_cfg(0, 2, true)));
  std::vector<caf::actor> shards{caf::actor_cast<caf::actor>(shard)};
  SECTION("shards and relays must pair up") {
    f.self->send(f.coord, shards_atom::value, s0->node_id, shards,
                 std::vector<caf::actor>{}, std::string{"127.0.0.1:1"},
                 std::string{});
    f.run();
    require_error(f.reply<caf::ok_atom>(), errc::bad_config);
  }
  // The shard serves as its own relay here: the table just lists both.
  f.self->send(f.coord, shards_atom::value, s0->node_id, shards, shards,
               std::string{"127.0.0.1:1"}, std::string{});
  f.run();
  // Two replies: the registration's ok and the waiting routing table.
  bool got_ok = false;
  bool got_table = false;
  for (int i = 0; i < 2; ++i)
    f.self->receive([&](caf::ok_atom) { got_ok = true; },
                    [&](routing_table& t) {
                      got_table = true;
                      CHECK(t.shards.size() == 1);
                      CHECK(t.relays.size() == 1);
                      CHECK(t.servers
                            == std::vector<std::string>{"127.0.0.1:1"});
                    },
                    caf::after(std::chrono::seconds(0)) >> [] {});
  CHECK(got_ok);
  CHECK(got_table);
}

TEST_CASE("coordinator: dead nodes are counted and release barriers",
          "[coordinator]") {
  dist_fixture f;
  auto [a0, a1] = f.two_workers_and_a_server();
  CHECK(f.dead(role::worker) == 0u);
  f.self->send(f.coord, barrier_atom::value, uint32_t{0});
  f.run();
  CHECK(f.no_reply());
  caf::anon_send_exit(a1, caf::exit_reason::kill);
  f.run();
  CHECK(f.reply<caf::ok_atom>());
  CHECK(f.dead(role::worker) == 1u);
  CHECK(f.dead(static_cast<int32_t>(worker_node_id(1))) == 1u);
  CHECK(f.dead(static_cast<int32_t>(worker_node_id(0))) == 0u);
  CHECK(f.dead(role::server) == 0u);
  CHECK(f.dead(role::server | role::worker) == 1u);
}

TEST_CASE("coordinator: a down message that the node's agent did not send "
          "is ignored",
          "[coordinator]") {
  dist_fixture f;
  auto [a0, a1] = f.two_workers_and_a_server();
  // Forged: from the test, naming worker 1's agent.
  f.self->send(caf::actor_cast<caf::actor>(f.coord),
               caf::down_msg{a1.address(), caf::exit_reason::kill});
  f.run();
  CHECK(f.dead(role::worker) == 0u);
  // The real one counts.
  caf::anon_send_exit(a1, caf::exit_reason::kill);
  f.run();
  CHECK(f.dead(role::worker) == 1u);
}

TEST_CASE("coordinator: a dist_ssp job tells its bound and refuses other "
          "modes",
          "[coordinator]") {
  test::deterministic_fixture f;
  coordinator_config cc;
  cc.num_workers = 2;
  cc.num_servers = 1;
  cc.token = "tok";
  cc.staleness = 3;
  auto coord = f.guard(spawn_coordinator(f.sys, cc));
  auto join = [&](uint8_t mode) {
    f.self->send(coord, join_atom::value, role::worker, std::string{"tok"},
                 caf::actor{}, mode, wire_version);
    f.run();
    return f.reply<job_info>();
  };
  CHECK_THAT(require_error(join(join_mode::async), errc::bad_config),
             Catch::Contains("runs dist_ssp, the node asked for dist_async"));
  auto w0 = join(join_mode::ssp);
  REQUIRE(w0);
  CHECK_FALSE(w0->sync);
  CHECK(w0->staleness == 3);
  auto w1 = join(join_mode::any);
  REQUIRE(w1);
  CHECK(w1->staleness == 3);
}

TEST_CASE("coordinator: a due checkpoint is taken at a complete barrier",
          "[coordinator]") {
  local_fixture f{2};
  caf::scoped_actor watcher{f.sys, true};
  f.respawn([&](coordinator_config& cc) {
    cc.on_done = caf::actor_cast<caf::actor>(watcher);
    cc.checkpoint_every = std::chrono::milliseconds{0};
  });
  f.init_key("w", iota(6));
  caf::scoped_actor r1{f.sys, true};
  auto checkpoint = [&]() {
    // The checkpoint's pieces, in order, up to the last.
    std::optional<std::pair<uint64_t, state_snapshot>> got;
    for (bool more = true; more;) {
      // The coordinator asks for the next piece once the last is written.
      f.run();
      watcher->receive(
        [&](save_atom, uint64_t n, save_piece& piece) {
          if (!got)
            got.emplace(n, state_snapshot{});
          CHECK(got->first == n);
          for (auto& rec : piece.records)
            got->second.slices.push_back(std::move(rec));
          more = !piece.done;
          // Written: the coordinator may send the next piece.
          return caf::ok_atom::value;
        },
        [&](save_atom, uint64_t, caf::error& err) {
          FAIL(render(err));
          more = false;
        },
        caf::after(std::chrono::seconds{0}) >> [&] { more = false; });
    }
    return got;
  };
  for (uint64_t barrier = 1; barrier <= 2; ++barrier) {
    INFO("barrier " << barrier);
    f.self->send(f.coord, barrier_atom::value, uint32_t{0});
    f.run();
    // One worker is not there yet: no checkpoint, no release.
    CHECK(f.no_reply());
    CHECK_FALSE(checkpoint());
    r1->send(f.coord, barrier_atom::value, uint32_t{1});
    f.run();
    CHECK(f.reply<caf::ok_atom>());
    CHECK(f.reply<caf::ok_atom>(r1));
    auto cp = checkpoint();
    REQUIRE(cp);
    CHECK(cp->first == barrier);
    std::vector<float> saved;
    for (auto& rec : cp->second.slices) {
      CHECK(rec.key == "w");
      saved.insert(saved.end(), rec.value.data.begin(), rec.value.data.end());
    }
    CHECK(saved == iota(6));
  }
  SECTION("the next piece waits until the last one was written") {
    f.self->send(f.coord, barrier_atom::value, uint32_t{0});
    r1->send(f.coord, barrier_atom::value, uint32_t{1});
    f.run();
    CHECK(f.reply<caf::ok_atom>());
    CHECK(f.reply<caf::ok_atom>(r1));
    // The first piece, not answered yet.
    caf::response_promise written;
    bool first = false;
    watcher->receive(
      [&](save_atom, uint64_t, save_piece& piece) {
        first = true;
        CHECK_FALSE(piece.done);
        written = watcher->make_response_promise();
      },
      caf::after(std::chrono::seconds{0}) >> [] {});
    REQUIRE(first);
    f.run();
    bool early = false;
    watcher->receive([&](save_atom, uint64_t, save_piece&) { early = true; },
                     caf::after(std::chrono::seconds{0}) >> [] {});
    CHECK_FALSE(early);
    written.deliver(caf::ok_atom::value);
    f.run();
    bool next = false;
    watcher->receive(
      [&](save_atom, uint64_t, save_piece&) {
        next = true;
        return caf::ok_atom::value;
      },
      caf::after(std::chrono::seconds{0}) >> [] {});
    CHECK(next);
  }
  SECTION("not before the interval passed") {
    f.respawn([&](coordinator_config& cc) {
      cc.checkpoint_every = std::chrono::hours{1};
    });
    f.self->send(f.coord, barrier_atom::value, uint32_t{0});
    r1->send(f.coord, barrier_atom::value, uint32_t{1});
    f.run();
    CHECK(f.reply<caf::ok_atom>());
    CHECK(f.reply<caf::ok_atom>(r1));
    CHECK_FALSE(checkpoint());
  }
}

TEST_CASE("coordinator: a server that dies during a checkpoint does not "
          "hold the barrier",
          "[coordinator]") {
  test::deterministic_fixture f;
  caf::scoped_actor watcher{f.sys, true};
  coordinator_config cc;
  cc.num_workers = 2;
  cc.num_servers = 1;
  cc.token = "tok";
  cc.sync = true;
  cc.on_done = caf::actor_cast<caf::actor>(watcher);
  cc.checkpoint_every = std::chrono::milliseconds{0};
  auto coord = f.guard(spawn_coordinator(f.sys, cc));
  // Node agents that drop everything.
  auto mute = [&] {
    return f.guard(f.sys.spawn([](caf::event_based_actor* a) -> caf::behavior {
      a->set_default_handler(caf::drop);
      return {[](shutdown_atom) {}};
    }));
  };
  auto join = [&](uint8_t role_id, caf::actor agent = caf::actor{}) {
    f.self->send(coord, join_atom::value, role_id, std::string{"tok"},
                 agent ? agent : mute(), join_mode::any, wire_version);
    f.run();
    auto info = f.reply<job_info>();
    REQUIRE(info);
    return *info;
  };
  auto server_agent = mute();
  auto server = join(role::server, server_agent);
  // Keeps every request unanswered (skip, unlike drop, sends no error).
  auto shard
    = f.guard(f.sys.spawn([](caf::event_based_actor* a) -> caf::behavior {
        a->set_default_handler(caf::skip);
        return {[](shutdown_atom) {}};
      }));
  std::vector<caf::actor> shards{shard};
  f.self->send(coord, shards_atom::value, server.node_id, shards, shards,
               std::string{"127.0.0.1:1"}, std::string{});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  join(role::worker);
  join(role::worker);
  caf::scoped_actor r1{f.sys, true};
  f.self->send(coord, barrier_atom::value, uint32_t{0});
  r1->send(coord, barrier_atom::value, uint32_t{1});
  f.run();
  // Complete, but the checkpoint waits for the mute shard.
  CHECK(f.no_reply());
  CHECK(f.no_reply(r1));
  // The server's process dies: its agent goes down (its shard's request
  // stays unanswered, as CAF 0.17 leaves requests to a dead remote node
  // until they time out).
  caf::anon_send_exit(server_agent, caf::exit_reason::kill);
  f.run();
  CHECK(f.reply<caf::ok_atom>());
  CHECK(f.reply<caf::ok_atom>(r1));
  // The runner hears that this checkpoint failed, and why.
  bool failed = false;
  for (int i = 0; i < 16 && !failed; ++i)
    watcher->receive(
      [&](save_atom, uint64_t n, caf::error& err) {
        CHECK(n == 1);
        INFO(render(err));
        CHECK(code_of(err) == errc::dead_node);
        failed = true;
      },
      [](save_atom, uint64_t, state_snapshot&) { FAIL("a checkpoint"); },
      [](caf::message&) {}, caf::after(std::chrono::seconds{0}) >> [] {});
  CHECK(failed);
}

TEST_CASE("coordinator: a worker joining a full job takes a dead rank's "
          "place",
          "[coordinator]") {
  dist_fixture f;
  auto w0 = f.join(role::worker, "tok", f.agent());
  auto a1 = f.agent();
  auto w1 = f.join(role::worker, "tok", a1);
  REQUIRE(w0);
  REQUIRE(w1);
  // Full, nobody dead: refused.
  CHECK_THAT(require_error(f.join(role::worker, "tok", f.agent()),
                           errc::bad_config),
             Catch::Contains("none of them died"));
  caf::anon_send_exit(a1, caf::exit_reason::kill);
  f.run();
  auto dead = f.dead(role::worker);
  REQUIRE(dead);
  CHECK(*dead == 1);
  // The next worker gets rank 1, and rank 1 counts again.
  auto again = f.join(role::worker, "tok", f.agent());
  REQUIRE(again);
  CHECK(again->rank == 1);
  CHECK(again->node_id == worker_node_id(1));
  dead = f.dead(role::worker);
  REQUIRE(dead);
  CHECK(*dead == 0);
  // A barrier needs it again.
  caf::scoped_actor r1{f.sys, true};
  f.self->send(f.coord, barrier_atom::value, uint32_t{0});
  f.run();
  CHECK(f.no_reply());
  r1->send(f.coord, barrier_atom::value, uint32_t{1});
  f.run();
  CHECK(f.reply<caf::ok_atom>());
  CHECK(f.reply<caf::ok_atom>(r1));
}
