// SPDX-License-Identifier: BSD-3-Clause
// Two actor systems in one process, connected over loopback through CAF's
// network layer: every message type crosses a real connection (an
// unregistered type only fails there), and priority survives the network.
#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "caf/actor_system.hpp"
#include "caf/after.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/exit_reason.hpp"
#include "caf/io/middleman.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/send.hpp"

#include "actors/coordinator/coordinator.hpp"
#include "actors/node.hpp"
#include "actors/shard/relay.hpp"
#include "actors/shard/shard.hpp"
#include "actors/worker/worker.hpp"
#include "messages/errors.hpp"
#include "runtime/system.hpp"

using namespace actorps;
using namespace std::chrono_literals;

namespace {

system_options net_options(size_t threads = 0) {
  system_options opts;
  opts.network = true;
  opts.threads = threads;
  return opts;
}

// Sends an exit to every registered actor on destruction.
struct exit_guard {
  std::vector<caf::actor> actors;

  template <class Handle>
  Handle operator()(Handle h) {
    actors.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }

  ~exit_guard() {
    for (auto& a : actors)
      caf::anon_send_exit(a, caf::exit_reason::kill);
  }
};

// Takes the next message from `self`, which must be a `T` or an error.
template <class T>
caf::expected<T>
reply(caf::scoped_actor& self, std::chrono::seconds wait = 10s) {
  caf::expected<T> result = make_error(errc::timeout, "no reply");
  self->receive([&](T& x) { result = std::move(x); },
                [&](caf::error& err) { result = std::move(err); },
                caf::after(wait) >> [] {});
  return result;
}

template <class T>
T require_reply(caf::scoped_actor& self) {
  auto x = reply<T>(self);
  INFO((x ? std::string{"ok"} : render(x.error())));
  REQUIRE(x);
  return std::move(*x);
}

template <class Handle>
Handle connect(caf::actor_system& sys, uint16_t port) {
  auto h = sys.middleman().remote_actor<Handle>("127.0.0.1", port);
  INFO((h ? std::string{"ok"} : render(h.error())));
  REQUIRE(h);
  return *h;
}

template <class Handle>
uint16_t publish(caf::actor_system& sys, const Handle& h) {
  auto port = sys.middleman().publish(h, 0, "127.0.0.1", true);
  REQUIRE(port);
  return *port;
}

} // namespace

TEST_CASE("network: every message type crosses a real connection",
          "[integration]") {
  system_config cfg_a{net_options()};
  caf::actor_system sys_a{cfg_a};
  system_config cfg_b{net_options()};
  caf::actor_system sys_b{cfg_b};
  exit_guard guard_a;
  exit_guard guard_b;
  caf::scoped_actor done{sys_a};
  // System A: a distributed coordinator (1 server, 1 worker) and a shard
  // with its relay. System B talks to both through the network only.
  coordinator_config cc;
  cc.num_workers = 1;
  cc.num_servers = 1;
  cc.token = "tok";
  cc.sync = false;
  cc.bigarray_bound = 4;
  cc.on_done = caf::actor_cast<caf::actor>(done);
  auto coord_a = guard_a(spawn_coordinator(sys_a, cc));
  shard_config sc;
  sc.num_workers = 1;
  auto shard_a = guard_a(spawn_shard(sys_a, sc));
  auto relay_a = guard_a(spawn_priority_relay(sys_a, shard_a));
  auto coord = connect<coordinator_actor>(sys_b, publish(sys_a, coord_a));
  auto shard = connect<shard_actor>(sys_b, publish(sys_a, shard_a));
  auto relay = connect<shard_actor>(sys_b, publish(sys_a, relay_a));
  caf::scoped_actor self{sys_b};

  // Membership: join (with an agent handle), shards, routing. A node of
  // another wire version is refused, by name, before it gets a rank.
  caf::scoped_actor server_agent{sys_b};
  self->send(coord, join_atom::value, role::server, std::string{"tok"},
             caf::actor_cast<caf::actor>(server_agent), join_mode::any,
             wire_version + 1);
  auto other = reply<job_info>(self);
  REQUIRE_FALSE(other);
  CHECK(code_of(other.error()) == errc::bad_config);
  CHECK(render(other.error())
          .find("wire version " + std::to_string(wire_version + 1))
        != std::string::npos);
  self->send(coord, join_atom::value, role::server, std::string{"tok"},
             caf::actor_cast<caf::actor>(server_agent), join_mode::any,
             wire_version);
  auto server_job = require_reply<job_info>(self);
  CHECK(server_job.node_id == server_node_id(0));
  self->send(coord, shards_atom::value, server_job.node_id,
             std::vector<caf::actor>{caf::actor_cast<caf::actor>(shard)},
             std::vector<caf::actor>{caf::actor_cast<caf::actor>(relay)},
             std::string{"127.0.0.1:1"});
  require_reply<caf::ok_atom>(self);
  self->send(coord, routing_atom::value);
  auto table = require_reply<routing_table>(self);
  REQUIRE(table.shards.size() == 1);
  CHECK(table.servers == std::vector<std::string>{"127.0.0.1:1"});
  auto node_b = guard_b(spawn_node_agent(sys_b, coord, caf::actor{}));
  self->send(node_b, join_atom::value, role::worker, std::string{"tok"},
             join_mode::async);
  auto worker_job = require_reply<job_info>(self);
  CHECK(worker_job.rank == 0);
  self->send(coord, heartbeat_atom::value, worker_job.node_id);

  // Data: a worker in B drives the coordinator and the shard in A.
  worker_config wc;
  wc.rank = 0;
  wc.coordinator = coord;
  wc.shards = {caf::actor_cast<shard_actor>(table.shards[0])};
  wc.relays = {caf::actor_cast<shard_actor>(table.relays[0])};
  auto worker = guard_b(spawn_worker(sys_b, wc));
  self->send(worker, init_atom::value, std::string{"w"},
             std::vector<uint64_t>{2, 3}, floats{{1, 2, 3, 4, 5, 6}});
  require_reply<caf::ok_atom>(self);
  self->send(coord, lookup_atom::value, std::string{"w"});
  auto info = require_reply<key_info>(self);
  CHECK(info.slices.size() == 1);
  optimizer_config acc;
  acc.name = "accumulate";
  self->send(coord, set_opt_atom::value, acc);
  require_reply<caf::ok_atom>(self);
  for (int32_t priority : {0, 5}) {
    self->send(worker, push_atom::value, std::string{"w"}, priority,
               float_parts{{1, 1, 1, 1, 1, 1}});
    require_reply<caf::ok_atom>(self);
  }
  self->send(worker, pull_atom::value, std::string{"w"}, int32_t{3});
  CHECK(require_reply<float_parts>(self).flatten()
        == std::vector<float>{3, 4, 5, 6, 7, 8});
  // A push-pull, and a two-key pull that travels as one batch through the
  // relay (priority > 0).
  self->send(worker, push_pull_atom::value, std::string{"w"}, int32_t{0},
             float_parts{{1, 1, 1, 1, 1, 1}});
  CHECK(require_reply<float_parts>(self).flatten()
        == std::vector<float>{4, 5, 6, 7, 8, 9});
  self->send(worker, pull_atom::value, std::vector<std::string>{"w", "w"},
             int32_t{2});
  CHECK(require_reply<float_parts>(self).flatten()
        == std::vector<float>{4, 5, 6, 7, 8, 9, 4, 5, 6, 7, 8, 9});
  self->send(coord, command_atom::value, int32_t{0},
             std::string{"name=accumulate"});
  require_reply<caf::ok_atom>(self);
  self->send(coord, save_atom::value);
  auto snap = require_reply<state_snapshot>(self);
  REQUIRE(snap.slices.size() == 1);
  CHECK(snap.slices[0].key == "w");
  self->send(coord, load_atom::value, snap);
  require_reply<caf::ok_atom>(self);
  self->send(coord, dead_atom::value, int32_t{6}, int32_t{60});
  CHECK(require_reply<uint32_t>(self) == 0);
  self->send(coord, barrier_atom::value, uint32_t{0});
  require_reply<caf::ok_atom>(self);

  // The shard's own messages, directly and through its relay.
  self->send(shard, init_atom::value, slice_init{make_slice_id(9, 0), {{0}}});
  require_reply<caf::ok_atom>(self);
  self->send(relay, push_atom::value,
             slice_push{make_slice_id(9, 0), 0, 0, floats{{2}}});
  require_reply<caf::ok_atom>(self);
  self->send(relay, pull_atom::value, slice_pull{make_slice_id(9, 0), 0, 1});
  CHECK(require_reply<shared_floats>(self).vec() == std::vector<float>{2});
  self->send(shard, batch_atom::value,
             slice_batch{0,
                         static_cast<uint8_t>(op_kind::push_pull),
                         {make_slice_id(9, 0)},
                         {2},
                         floats{{5}},
                         {}});
  CHECK(require_reply<float_parts>(self).flatten() == std::vector<float>{7});
  self->send(shard, push_pull_atom::value,
             slice_push{make_slice_id(9, 0), 0, 3, floats{{1}}});
  CHECK(require_reply<shared_floats>(self).vec() == std::vector<float>{8});
  self->send(relay, push_pull_atom::value,
             slice_push{make_slice_id(9, 0), 0, 4, floats{{1}}});
  CHECK(require_reply<shared_floats>(self).vec() == std::vector<float>{9});
  // Compressed payloads cross packed: the wire keeps what the codec can
  // carry (these values were not quantized by a worker first, so the
  // packing shows). fp16 drops 1.00390625's lower half; 2-bit carries 0.3 as
  // +threshold.
  self->send(shard, push_atom::value,
             slice_push{make_slice_id(9, 0), 0, 5,
                        floats{{1.00390625f}, compression{codec::fp16}}});
  require_reply<caf::ok_atom>(self);
  self->send(shard, batch_atom::value,
             slice_batch{0,
                         static_cast<uint8_t>(op_kind::push_pull),
                         {make_slice_id(9, 0)},
                         {6},
                         floats{{0.3f}, compression{codec::two_bit, 0.25f}},
                         {}});
  CHECK(require_reply<float_parts>(self).flatten()
        == std::vector<float>{10.25f});
  // Values held in pieces of a shared buffer cross as the floats of the
  // pieces alone.
  float_parts piece_of;
  piece_of.size = 1;
  piece_of.buffers.push_back(shared_floats{{-1, 0.5f}});
  piece_of.pieces.push_back(float_piece{0, 1, 0, 1});
  self->send(relay, batch_atom::value,
             slice_batch{0,
                         static_cast<uint8_t>(op_kind::push_pull),
                         {make_slice_id(9, 0)},
                         {7},
                         floats{},
                         std::move(piece_of)});
  CHECK(require_reply<float_parts>(self).flatten()
        == std::vector<float>{10.75f});
  self->send(shard, workers_atom::value, std::vector<uint32_t>{0});
  require_reply<caf::ok_atom>(self);
  self->send(shard, stats_atom::value);
  CHECK(require_reply<shard_stats>(self).slices == 2);
  self->send(shard, set_opt_atom::value, acc);
  require_reply<caf::ok_atom>(self);
  self->send(shard, save_atom::value);
  auto shard_snap = require_reply<state_snapshot>(self);
  self->send(shard, load_atom::value, shard_snap);
  require_reply<caf::ok_atom>(self);
  self->send(shard, command_atom::value, int32_t{7}, std::string{"x"});
  auto unknown = reply<caf::ok_atom>(self);
  REQUIRE_FALSE(unknown);
  // The error's category and text survive the network.
  CHECK(code_of(unknown.error()) == errc::bad_config);
  CHECK(render(unknown.error()).find("head 7") != std::string::npos);

  // The end of the job: leave tells the server agent to shut down, and the
  // coordinator's owner hears that the job is done.
  self->send(worker, leave_atom::value);
  require_reply<caf::ok_atom>(self);
  bool shutdown_seen = false;
  server_agent->receive([&](shutdown_atom) { shutdown_seen = true; },
                        caf::after(10s) >> [] {});
  CHECK(shutdown_seen);
  caf::anon_send(coord_a, shutdown_atom::value);
  bool done_seen = false;
  done->receive([&](shutdown_atom) { done_seen = true; },
                caf::after(10s) >> [] {});
  CHECK(done_seen);
}

TEST_CASE("network: a priority pull overtakes a remote shard's backlog",
          "[integration]") {
  // System A has one scheduler thread, which the test blocks while the
  // backlog arrives; the relay runs on a thread of its own.
  system_config cfg_a{net_options(1)};
  caf::actor_system sys_a{cfg_a};
  system_config cfg_b{net_options()};
  caf::actor_system sys_b{cfg_b};
  exit_guard guard_a;
  caf::scoped_actor observer{sys_a};
  shard_config sc;
  sc.num_workers = 2;
  auto shard_a = guard_a(spawn_shard(sys_a, sc));
  auto relay_a = guard_a(spawn_priority_relay(
    sys_a, shard_a, caf::actor_cast<caf::actor>(observer), true));
  auto shard = connect<shard_actor>(sys_b, publish(sys_a, shard_a));
  auto relay = connect<shard_actor>(sys_b, publish(sys_a, relay_a));
  caf::scoped_actor self{sys_b};
  optimizer_config acc;
  acc.name = "accumulate";
  self->send(shard, set_opt_atom::value, acc);
  require_reply<caf::ok_atom>(self);
  constexpr auto slice = make_slice_id(1, 0);
  self->send(shard, init_atom::value, slice_init{slice, {{0}}});
  require_reply<caf::ok_atom>(self);
  auto pulled_after_backlog = [&](bool through_relay) {
    // Occupy A's only scheduler thread until the test lets go.
    std::promise<void> running;
    std::promise<void> release;
    auto released = release.get_future().share();
    auto blocker = sys_a.spawn([&running, released](caf::event_based_actor*) {
      return caf::behavior{[&running, released](caf::ok_atom) {
        running.set_value();
        released.wait();
      }};
    });
    caf::anon_send(blocker, caf::ok_atom::value);
    REQUIRE(running.get_future().wait_for(10s) == std::future_status::ready);
    // Worker 0 queues 20 pushes of 1; worker 1 then pulls.
    static uint64_t seq = 0;
    for (int i = 0; i < 20; ++i)
      self->send(shard, push_atom::value,
                 slice_push{slice, 0, seq++, floats{{1}}});
    static uint64_t pull_seq = 0;
    if (through_relay) {
      self->send(relay, pull_atom::value, slice_pull{slice, 1, pull_seq++});
      // The relay acts on its own thread; once it re-sent the pull, all 20
      // pushes (sent earlier on the same connection) wait in the mailbox.
      bool forwarded = false;
      observer->receive([&](forwarded_atom, slice_id) { forwarded = true; },
                        caf::after(10s) >> [] {});
      REQUIRE(forwarded);
    } else {
      self->send(shard, pull_atom::value, slice_pull{slice, 1, pull_seq++});
      // Wait until the 20 pushes and the pull reached the shard's mailbox:
      // a stats request behind them on the same connection is answered
      // only after the release, so count the shard's stats afterwards.
    }
    release.set_value();
    float seen = -1;
    int acks = 0;
    for (int i = 0; i < 21; ++i)
      self->receive([&](caf::ok_atom) { ++acks; },
                    [&](shared_floats& x) { seen = x.vec().at(0); },
                    caf::after(10s) >> [] {});
    CHECK(acks == 20);
    caf::anon_send_exit(blocker, caf::exit_reason::kill);
    return seen;
  };
  // Through the relay, the pull is applied before the 20 queued pushes.
  CHECK(pulled_after_backlog(true) == 0.0f);
  // Sent to the shard directly with normal priority, it waits behind them.
  CHECK(pulled_after_backlog(false) == 40.0f);
}

TEST_CASE("system: the scheduler policy follows the options",
          "[runtime][network]") {
  auto policy = [](const system_options& so) {
    system_config cfg{so};
    return caf::to_string(
      caf::get_or(cfg, "scheduler.policy", caf::atom("stealing")));
  };
  system_options so;
  CHECK(policy(so) == "stealing");
  so.network = true;
  CHECK(policy(so) == "sharing");
  so.scheduler = scheduler_policy::stealing;
  CHECK(policy(so) == "stealing");
  so.network = false;
  so.scheduler = scheduler_policy::sharing;
  CHECK(policy(so) == "sharing");
  for (auto x : {scheduler_policy::automatic, scheduler_policy::stealing,
                 scheduler_policy::sharing}) {
    auto parsed = scheduler_policy::stealing;
    CHECK(parse_scheduler_policy(to_string(x), parsed));
    CHECK(parsed == x);
  }
  auto untouched = scheduler_policy::sharing;
  CHECK_FALSE(parse_scheduler_policy("fifo", untouched));
  CHECK(untouched == scheduler_policy::sharing);
}

TEST_CASE("system: tune_malloc leaves malloc to an environment that tunes it",
          "[runtime]") {
  const char* names[] = {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_",
                         "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                         "MALLOC_MMAP_MAX_"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (auto* name : names)
    if (auto* v = std::getenv(name)) {
      saved.emplace_back(name, v);
      ::unsetenv(name);
    }
  ::setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2", 1);
  CHECK_FALSE(tune_malloc());
  // Other tunables are no reason to keep out.
  ::setenv("GLIBC_TUNABLES", "glibc.rtld.nns=2", 1);
  bool other_tunables = tune_malloc();
  ::unsetenv("GLIBC_TUNABLES");
  ::setenv("MALLOC_TRIM_THRESHOLD_", "1000000", 1);
  CHECK_FALSE(tune_malloc());
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
  bool plain = tune_malloc();
  for (auto& [name, value] : saved)
    ::setenv(name.c_str(), value.c_str(), 1);
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
  // Sanitizers replace malloc, and their mallopt sets nothing.
  CHECK(other_tunables);
  CHECK(plain);
#else
  CHECK(other_tunables == plain);
#endif
}
