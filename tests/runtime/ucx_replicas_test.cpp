// SPDX-License-Identifier: BSD-3-Clause
// Replicas over the UCX plane (runtime/ucx/replicas.hpp): two planes of one
// process play two servers, a primary shard behind one forwards to its
// backup behind the other; the test plays the workers and the coordinator.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"
#include "caf/exit_reason.hpp"
#include "caf/scoped_actor.hpp"

#include "actors/shard/shard.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"
#include "runtime/system.hpp"
#include "runtime/ucx/frames.hpp"
#include "runtime/ucx/ingress.hpp"
#include "runtime/ucx/plane.hpp"
#include "runtime/ucx/replicas.hpp"
#include "tests/runtime/exit_guard.hpp"
#include "tests/runtime/ucx_planes.hpp"

using namespace actorps;
using namespace actorps::ucx;
using namespace std::chrono_literals;

namespace {

constexpr slice_id slice_a = make_slice_id(7, 0);

// The identity secrets of these tests (core::worker_secret in a job).
std::string secret_of(uint32_t identity) {
  return "identity secret " + std::to_string(identity);
}

// A plane whose frames go into `queue`, counting the replicate frames in
// `forwards`. `server`: it proves the servers' identity (else it proves
// worker `identity - 1`'s, or only the data secret for 0). `segment`:
// bytes of a shared-memory segment for large messages to each peer (over
// loopback TCP, which UCX watches), or none.
std::shared_ptr<plane>
plane_into(std::shared_ptr<frame_queue> queue, std::atomic<int>* forwards,
           bool server, uint32_t identity = 0, std::string server_secret = {},
           std::size_t segment = 0) {
  plane_options opts;
  if (segment > 0) {
    opts.shared_memory = false;
    opts.shared_segment = segment;
  }
  opts.secret = "s";
  opts.secret_of = secret_of;
  opts.identity = identity;
  if (identity != 0)
    opts.identity_secret = secret_of(identity);
  if (server)
    opts.server_secret = server_secret.empty() ? secret_of(server_identity)
                                               : server_secret;
  return test::plane_into_queue(
    queue, opts, {}, [forwards](const std::vector<char>& header) {
      auto h = decode(header);
      if (forwards != nullptr && h
          && (h->kind == frame_kind::replicate
              || h->kind == frame_kind::replicate_change))
        ++*forwards;
    });
}

template <class Reply, class Handle, class... Ts>
caf::expected<Reply>
ask(caf::scoped_actor& self, const Handle& to, Ts&&... xs) {
  caf::expected<Reply> out{caf::error{}};
  self->request(to, 10s, std::forward<Ts>(xs)...)
    .receive([&](Reply& x) { out = std::move(x); },
             [&](caf::error& err) { out = std::move(err); });
  return out;
}

std::vector<char> address_of(const plane& p) {
  return p.address();
}

// Two servers: a primary (index 0, 2 workers) behind plane `p` with the
// link, its backup behind plane `b`, paired by the test; with `segment`,
// their large messages to one another go through shared-memory segments.
struct link_fixture {
  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  test::exit_guard guard;
  std::atomic<int> forwards{0};
  std::shared_ptr<frame_queue> p_queue = std::make_shared<frame_queue>();
  std::shared_ptr<frame_queue> b_queue = std::make_shared<frame_queue>();
  std::shared_ptr<plane> p;
  std::shared_ptr<plane> b;
  std::shared_ptr<plane_link> link = std::make_shared<plane_link>(sys);
  shard_actor primary;
  shard_actor backup;

  explicit link_fixture(std::size_t segment = 0)
    : p(plane_into(p_queue, nullptr, true, 0, {}, segment)),
      b(plane_into(b_queue, &forwards, true, 0, {}, segment)) {
    link->attach(p);
    shard_config pc;
    pc.num_workers = 2;
    pc.link = link;
    primary = guard(spawn_shard(sys, pc));
    shard_config bc;
    bc.num_workers = 2;
    bc.backup = true;
    backup = guard(spawn_shard(sys, bc));
    guard(spawn_ingress(sys, p_queue, p, {{0, primary}}, link));
    guard(spawn_ingress(sys, b_queue, b, {{0, backup}}));
    REQUIRE(ask<caf::ok_atom>(self, backup, replica_atom::value,
                              caf::actor_cast<caf::actor>(primary), false));
    auto addr = address_of(*b);
    REQUIRE(ask<caf::ok_atom>(self, primary, replica_atom::value,
                              caf::actor_cast<caf::actor>(backup), true,
                              std::string{addr.begin(), addr.end()}));
  }

  ~link_fixture() {
    p->close();
    b->close();
  }

  caf::expected<caf::ok_atom> push(uint32_t worker, uint64_t seq,
                                   std::vector<float> g) {
    return ask<caf::ok_atom>(self, primary, push_atom::value,
                             slice_push{slice_a, worker, seq,
                                        floats{std::move(g)}});
  }

  // The primary's process dies; the test, as the coordinator, promotes the
  // backup and reads what it holds.
  std::vector<float> takeover(uint32_t worker, uint64_t seq) {
    caf::anon_send_exit(primary, caf::exit_reason::kill);
    REQUIRE(ask<caf::ok_atom>(self, backup, promote_atom::value));
    auto v = ask<shared_floats>(self, backup, pull_atom::value,
                                slice_pull{slice_a, worker, seq});
    REQUIRE(v);
    return v->take();
  }
};

} // namespace

TEST_CASE("ucx: a primary's forwards, changes and operations, reach its "
          "backup over the plane in the primary's order",
          "[ucx][replicas]") {
  // Through UCX, or through segments: the primary's plane copies a large
  // forward into its segment on its own thread, and the backup applies it
  // where it lies there.
  auto segment = GENERATE(std::size_t{0}, std::size_t{16} << 20);
  INFO("segment: " << segment);
  link_fixture f{segment};
  constexpr std::size_t n = 1 << 18; // 1 MB: large frames overtaken by small
  REQUIRE(
    ask<caf::ok_atom>(f.self, f.primary, init_atom::value,
                      slice_init{slice_a, floats{std::vector<float>(n)}}));
  optimizer_config opt;
  opt.name = "accumulate";
  REQUIRE(ask<caf::ok_atom>(f.self, f.primary, set_opt_atom::value, opt));
  // Pushes of both workers, each waited for (its answer comes only once
  // the backup ran it), large and small frames in turn; a change between.
  std::vector<float> sum(n, 0);
  uint64_t seq[2] = {0, 0};
  for (int round = 0; round < 6; ++round) {
    for (uint32_t w = 0; w < 2; ++w) {
      std::vector<float> g(n, 0);
      // Odd rounds touch only the first value (a small change of the
      // value), even rounds every value.
      if (round % 2 == 0)
        std::fill(g.begin(), g.end(), static_cast<float>(w + 1));
      else
        g[0] = 100;
      for (std::size_t i = 0; i < n; ++i)
        sum[i] += g[i];
      REQUIRE(f.push(w, seq[w]++, std::move(g)));
    }
    if (round == 3)
      REQUIRE(ask<caf::ok_atom>(f.self, f.primary, workers_atom::value,
                                std::vector<uint32_t>{0, 1}));
  }
  // 2 changes before the pushes, 12 pushes, 1 change: each its own frame.
  CHECK(f.forwards.load() >= 15);
  // A burst: large pushes in flight, then a change of the update rule (a
  // small frame, which arrives before the large ones it follows), then a
  // push under the new rule. Run in another order, the backup would hold
  // another value.
  for (int k = 0; k < 4; ++k) {
    f.self->send(f.primary, push_atom::value,
                 slice_push{slice_a, 0, seq[0]++,
                            floats{std::vector<float>(n, 3)}});
    for (std::size_t i = 0; i < n; ++i)
      sum[i] += 3;
  }
  optimizer_config sgd;
  sgd.name = "sgd";
  sgd.learning_rate = 0.5f;
  REQUIRE(ask<caf::ok_atom>(f.self, f.primary, set_opt_atom::value, sgd));
  REQUIRE(f.push(1, seq[1]++, std::vector<float>(n, 2)));
  for (int k = 0; k < 4; ++k)
    f.self->receive([](caf::ok_atom) {},
                    [](caf::error& err) { FAIL(to_string(err)); },
                    caf::after(10s) >> [] { FAIL("a push went unanswered"); });
  auto on_primary = ask<shared_floats>(f.self, f.primary, pull_atom::value,
                                       slice_pull{slice_a, 0, seq[0]++});
  REQUIRE(on_primary);
  auto expected = on_primary->take();
  CHECK(expected[0] == Approx(sum[0] - 1.0f));
  // The large forwards (12 + 4 + 1 pushes of 1 MB) went through the
  // primary's segment once its backup had mapped it.
  CHECK((segment == 0 ? f.p->shared_sends() == 0 : f.p->shared_sends() >= 12));
  auto held = f.takeover(0, seq[0]);
  REQUIRE(held.size() == n);
  CHECK(held == expected);
  // A push sent again to the promoted backup (its answer lost with the
  // primary) is answered, not applied twice.
  REQUIRE(ask<caf::ok_atom>(f.self, f.backup, push_atom::value,
                            slice_push{slice_a, 1, seq[1] - 1,
                                       floats{std::vector<float>(n, 5)}}));
  auto again = ask<shared_floats>(f.self, f.backup, pull_atom::value,
                                  slice_pull{slice_a, 1, seq[1]});
  REQUIRE(again);
  CHECK(again->take() == expected);
}

TEST_CASE("ucx: a backup takes forwards only from a connection that proved "
          "the servers' identity",
          "[ucx][replicas]") {
  link_fixture f;
  REQUIRE(ask<caf::ok_atom>(f.self, f.primary, init_atom::value,
                            slice_init{slice_a, floats{{1, 1}}}));
  // A forward frame as the primary's link makes it: a push of {50, 50} by
  // worker 0, forward number 2 (the init was 1).
  replica_batch batch;
  replica_op op;
  op.slice = slice_a;
  op.kind = static_cast<uint8_t>(op_kind::push);
  batch.ops.push_back(op);
  std::vector<char> meta;
  caf::binary_serializer sink{f.sys, meta};
  REQUIRE_FALSE(sink(batch, std::vector<uint64_t>{2}));
  uint64_t length = meta.size();
  meta.resize((length + 3) / 4 * 4, 0);
  float values[2] = {50, 50};
  std::vector<char> body(sizeof(values) + meta.size() + sizeof(length));
  std::memcpy(body.data(), values, sizeof(values));
  std::memcpy(body.data() + sizeof(values), meta.data(), meta.size());
  std::memcpy(body.data() + sizeof(values) + meta.size(), &length,
              sizeof(length));
  auto send_forward = [&](plane& from, std::shared_ptr<frame_queue> replies,
                          uint64_t request) {
    auto to = from.connect(address_of(*f.b), server_identity);
    frame_header h;
    h.kind = frame_kind::replicate;
    h.request = request;
    h.shard = 0;
    caf::scoped_actor waiter{f.sys};
    replies->set_target(caf::actor_cast<caf::actor>(waiter));
    from.send(to, encode(h, uint64_t{2}), payload{body.data(), body.size()});
    // The answer, if one comes within 2 s (the queue wakes the waiter).
    auto until = std::chrono::steady_clock::now() + 2s;
    for (;;) {
      for (auto& x : replies->take())
        if (auto r = decode(x.header); r && r->request == request)
          return std::optional<frame>{std::move(x)};
      auto left = until - std::chrono::steady_clock::now();
      if (left <= 0s)
        return std::optional<frame>{};
      waiter->receive(
        [](ucx_atom) {},
        caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(left))
          >> [] {});
    }
  };
  // A worker's plane (it holds the data secret and its own) and one that
  // claims the servers' identity with a wrong secret: the first is refused,
  // the second never even admitted.
  auto w_queue = std::make_shared<frame_queue>();
  auto worker = plane_into(w_queue, nullptr, false, 1);
  auto answer = send_forward(*worker, w_queue, 11);
  REQUIRE(answer);
  REQUIRE(decode(answer->header)->kind == frame_kind::failure);
  caf::error err;
  caf::binary_deserializer source{f.sys, answer->body.data(),
                                  answer->body.size()};
  REQUIRE_FALSE(source(err));
  CHECK(code_of(err) == errc::unauthorized);
  auto l_queue = std::make_shared<frame_queue>();
  auto liar = plane_into(l_queue, nullptr, true, 0, "not the secret");
  CHECK_FALSE(send_forward(*liar, l_queue, 12));
  // The backup holds what its primary forwarded, nothing else.
  auto held = f.takeover(0, 0);
  CHECK(held == std::vector<float>{1, 1});
  worker->close();
  liar->close();
}

TEST_CASE("ucx: a primary whose backup dies goes on without waiting for the "
          "replica timeout",
          "[ucx][replicas]") {
  link_fixture f;
  REQUIRE(ask<caf::ok_atom>(f.self, f.primary, init_atom::value,
                            slice_init{slice_a, floats{{0}}}));
  REQUIRE(f.push(0, 0, {1}));
  caf::anon_send_exit(f.backup, caf::exit_reason::kill);
  // The primary tells its pairer (the test, here the coordinator) that
  // the backup is gone, and answers once told it knows.
  auto pushed = std::async(std::launch::async, [&] {
    caf::scoped_actor worker{f.sys};
    return ask<caf::ok_atom>(worker, f.primary, push_atom::value,
                             slice_push{slice_a, 0, 1, floats{{2}}});
  });
  bool told = false;
  f.self->receive(
    [&](replica_atom, uint32_t shard) -> caf::ok_atom {
      told = shard == 0;
      return caf::ok_atom::value;
    },
    caf::after(10s) >> [] {});
  CHECK(told);
  REQUIRE(pushed.wait_for(10s) == std::future_status::ready);
  CHECK(pushed.get());
}
