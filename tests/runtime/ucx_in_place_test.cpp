// SPDX-License-Identifier: BSD-3-Clause
// Bodies that leave from where they were written ahead: a worker's large
// pushes written in room its data channel lent (data_channel::lease,
// ucx::plane::lease), and a server's reply held for later, copied into the
// segment at once (reply_sink::value_later).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include "actors/coordinator/coordinator.hpp"
#include "actors/shard/shard.hpp"
#include "actors/worker/worker.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"
#include "runtime/system.hpp"
#include "runtime/ucx/frames.hpp"
#include "runtime/ucx/ingress.hpp"
#include "runtime/ucx/plane.hpp"
#include "tests/runtime/ask.hpp"
#include "tests/runtime/exit_guard.hpp"
#include "tests/runtime/ucx_pair.hpp"
#include "tests/runtime/ucx_planes.hpp"

using namespace actorps;
using namespace actorps::ucx;
using namespace std::chrono_literals;
using test::ask;

namespace {

std::string secret_of(uint32_t identity) {
  return "worker secret " + std::to_string(identity);
}

// A plane whose frames go into `queue`, with a segment for its large
// messages to each peer (over loopback TCP, which UCX watches); it proves
// worker `identity - 1`'s secret (none for 0: a server).
std::shared_ptr<plane> plane_into(std::shared_ptr<frame_queue> queue,
                                  uint32_t identity) {
  auto opts = test::identity_options(secret_of, identity);
  opts.shared_memory = false;
  opts.shared_segment = std::size_t{8} << 20;
  return test::plane_into_queue(std::move(queue), opts);
}

// A server's plane in front of `count` shards (each run by the plane's
// thread with `run_shards`) and a worker (rank 0, the job's only one)
// whose channel reaches them all over a plane of its own.
struct plane_job {
  std::shared_ptr<frame_queue> requests = std::make_shared<frame_queue>();
  std::shared_ptr<plane> server = plane_into(requests, 0);
  std::shared_ptr<frame_queue> replies = std::make_shared<frame_queue>();
  std::shared_ptr<plane> client = plane_into(replies, 1);
  std::shared_ptr<data_channel> channel;
  std::vector<shard_actor> shards;
  worker_actor worker;

  plane_job(caf::actor_system& sys, test::exit_guard& guard, uint32_t count,
            bool run_shards = false) {
    auto peer = client->connect(server->address());
    std::map<uint32_t, peer_id> peers;
    std::map<uint32_t, shard_actor> by_index;
    for (uint32_t i = 0; i < count; ++i) {
      shard_config sc;
      sc.index = i;
      shards.push_back(guard(spawn_shard(sys, sc)));
      peers.emplace(i, peer);
      by_index.emplace(i, shards.back());
    }
    channel = make_worker_channel(sys, client, replies, std::move(peers));
    guard(spawn_ingress(sys, requests, server, std::move(by_index), nullptr,
                        run_shards));
    coordinator_config cc;
    cc.num_workers = 1;
    cc.shards = shards;
    auto coord = guard(spawn_coordinator(sys, cc));
    worker_config wc;
    wc.coordinator = coord;
    wc.shards = shards;
    wc.timeout = 10000ms;
    wc.channel = channel;
    worker = guard(spawn_worker(sys, wc));
    replies->set_target(caf::actor_cast<caf::actor>(worker));
  }

  ~plane_job() {
    client->close();
    server->close();
  }
};

} // namespace

TEST_CASE("ucx: a push written in room its channel lent leaves from there "
          "and is applied as any other",
          "[ucx]") {
  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  test::exit_guard guard;
  // A server's plane in front of two shards; a worker's plane (rank 0)
  // with its channel to both.
  plane_job job{sys, guard, 2};
  auto& [requests, server, replies, client, channel, shards, worker] = job;
  // One slice of 64K floats (256 KB: through the segment, alone in its
  // request).
  constexpr std::size_t n = std::size_t{64} << 10;
  ask<caf::ok_atom>(self, worker, init_atom::value, std::string{"w"},
                    std::vector<uint64_t>{n}, floats{std::vector<float>(n)});
  auto info = ask<key_info>(self, worker, lookup_atom::value, std::string{"w"});
  REQUIRE(info.slices.size() == 1);
  auto shard = info.slices[0].shard;
  // Room comes once the server mapped the worker's segment: each pull is a
  // round trip over the plane, after which it may have.
  data_channel::lent_room room;
  for (int i = 0; i < 100 && room.data == nullptr; ++i) {
    room = channel->lease(shard, n * sizeof(float));
    if (room.data == nullptr)
      ask<float_parts>(self, worker, pull_atom::value, std::string{"w"},
                       int32_t{0});
  }
  REQUIRE(room.data != nullptr);
  // No room for a shard the channel does not carry.
  CHECK(channel->lease(7, n * sizeof(float)).data == nullptr);
  std::iota(room.data, room.data + n, 1.0f);
  std::vector<float> want(room.data, room.data + n);
  float_parts lent;
  lent.append(shared_floats{room.keep, room.data, n});
  room = data_channel::lent_room{};
  auto sent_before = client->shared_sends();
  ask<caf::ok_atom>(self, worker, push_atom::value, std::string{"w"},
                    int32_t{0}, std::move(lent));
  CHECK(client->in_place_sends() == 1);
  CHECK(client->shared_sends() == sent_before + 1);
  // The default rule assigns the push.
  auto got = ask<float_parts>(self, worker, pull_atom::value, std::string{"w"},
                              int32_t{0})
               .flatten();
  CHECK(got == want);
  // A push in a buffer of its own is copied into the segment, as before.
  std::vector<float> next(n, 3.0f);
  ask<caf::ok_atom>(self, worker, push_atom::value, std::string{"w"},
                    int32_t{0}, float_parts{next});
  CHECK(client->in_place_sends() == 1);
  CHECK(client->shared_sends() == sent_before + 2);
  got = ask<float_parts>(self, worker, pull_atom::value, std::string{"w"},
                         int32_t{0})
          .flatten();
  CHECK(got == next);
}

TEST_CASE("ucx: a reply held for later is copied into the segment at once "
          "and leaves when let go",
          "[ucx]") {
  system_config cfg;
  caf::actor_system sys{cfg};
  // A server's plane `a` and a worker's `b`.
  test::pair_of_planes job{std::size_t{8} << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  auto sink = make_plane_sink(sys, a);
  auto peer = reply_peer(to_b, 0);
  constexpr std::size_t n = std::size_t{64} << 10; // 256 KB
  std::vector<float> want(n);
  std::iota(want.begin(), want.end(), 1.0f);
  shared_floats value{want};
  auto later = sink->value_later(peer, 41, value);
  REQUIRE(later);
  // Copied already: the shard's buffer is its own again.
  CHECK(value.unique());
  value.mutate()[0] = -1.0f;
  // Nothing leaves before `later` runs: a message sent after it arrives
  // alone.
  a->send(to_b, test::bytes("marker"), payload{});
  REQUIRE(b_box.wait([](test::inbox& x) { return x.bodies.size() == 2; }));
  later();
  REQUIRE(b_box.wait([](test::inbox& x) { return x.bodies.size() == 3; }));
  CHECK(a->shared_sends() == 1);
  std::vector<char> header;
  std::vector<char> body;
  {
    std::lock_guard<std::mutex> guard{b_box.mtx};
    header = b_box.headers[2].second;
    body = b_box.bodies[2];
  }
  auto h = decode(header);
  REQUIRE(h);
  CHECK(h->kind == frame_kind::reply);
  CHECK(h->request == 41);
  CHECK(test::same(body, want));
  // A value too small for a segment is not held: the caller sends it.
  shared_floats small{std::vector<float>(16, 2.0f)};
  CHECK_FALSE(sink->value_later(peer, 42, small));
  a->close();
  b->close();
}

namespace {

// A server's plane in front of one shard, the shard run by the plane's
// thread when `run_shards`, and a worker's plane with its channel, under
// CAF's work-sharing scheduler; 10 pushes and pulls of a key of `n`
// floats at `priority`, each pull checked. Returns the requests whose shard
// the server's plane thread ran itself.
std::size_t thread_runs_after(bool run_shards, int32_t priority,
                              std::size_t n = 16) {
  system_options so;
  so.scheduler = scheduler_policy::sharing;
  system_config cfg{so};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  test::exit_guard guard;
  plane_job job{sys, guard, 1, run_shards};
  auto& worker = job.worker;
  ask<caf::ok_atom>(self, worker, init_atom::value, std::string{"w"},
                    std::vector<uint64_t>{n}, floats{std::vector<float>(n)});
  for (int i = 1; i <= 10; ++i) {
    std::vector<float> next(n, static_cast<float>(i));
    ask<caf::ok_atom>(self, worker, push_atom::value, std::string{"w"},
                      priority, float_parts{next});
    // The default rule assigns the push.
    auto got = ask<float_parts>(self, worker, pull_atom::value,
                                std::string{"w"}, priority)
                 .flatten();
    CHECK(got == next);
  }
  return job.server->thread_runs();
}

} // namespace

TEST_CASE("ucx: a server's plane thread runs its shard for requests of "
          "normal priority, when asked to",
          "[ucx]") {
  SECTION("asked: the shard, idle between requests, runs there") {
    auto runs = thread_runs_after(true, 0);
    CHECK(runs > 0);
    CHECK(runs <= 20);
  }
  SECTION("not asked: every request goes to the shard's mailbox") {
    CHECK(thread_runs_after(false, 0) == 0);
  }
  SECTION("high priority: to the mailbox at once, where it overtakes") {
    CHECK(thread_runs_after(true, 1) == 0);
  }
  SECTION("a large slice: its pushes and pulls go to the mailbox at once") {
    // 2 MB: applied or copied out there, the plane's thread would receive
    // nothing meanwhile.
    CHECK(thread_runs_after(true, 0, std::size_t{1} << 19) == 0);
  }
}
