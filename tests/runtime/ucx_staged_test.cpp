// SPDX-License-Identifier: BSD-3-Clause
// Bodies made ready ahead of their send (plane::stage, plane::send_staged)
// and bodies the progress thread copies into the segment
// (plane::send_offloaded).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "runtime/ucx/plane.hpp"
#include "tests/runtime/ucx_pair.hpp"
#include "tests/runtime/ucx_planes.hpp"

using namespace actorps;
using namespace actorps::ucx;
using test::bytes;
using test::check_numbered;
using test::counting;
using test::inbox;
using test::pair_of_planes;
using test::same;

namespace {

payload body_of(const std::shared_ptr<std::vector<float>>& x) {
  return payload{x->data(), x->size() * sizeof(float), x};
}

} // namespace

TEST_CASE("ucx: a staged body is copied into the segment at once and "
          "leaves when its send comes",
          "[ucx]") {
  pair_of_planes job{8 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  auto x = counting(std::size_t{256} << 10, 5.0f);
  auto want = *x;
  auto staged = a->stage(to_b, body_of(x));
  CHECK(staged.in_segment());
  // The caller's buffer is its own again: what it writes now is not sent.
  std::fill(x->begin(), x->end(), -1.0f);
  x.reset();
  CHECK(a->shared_sends() == 0);
  a->send_staged(to_b, bytes("staged"), std::move(staged));
  REQUIRE(b_box.wait([](inbox& box) { return box.bodies.size() == 2; }));
  CHECK(a->shared_sends() == 1);
  CHECK(same(b_box.bodies[1], want));
}

TEST_CASE("ucx: a staged body never sent gives its place in the segment "
          "back",
          "[ucx]") {
  pair_of_planes job{1 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  auto x = counting(std::size_t{192} << 10, 1.0f); // 768 KB
  {
    auto first = a->stage(to_b, body_of(x));
    REQUIRE(first.in_segment());
    // No room for a second beside it: held as it is.
    auto second = a->stage(to_b, body_of(x));
    CHECK_FALSE(second.in_segment());
  }
  auto third = a->stage(to_b, body_of(x));
  CHECK(third.in_segment());
  // Moved into another, it is sent from there, once.
  staged_body moved;
  moved = std::move(third);
  CHECK_FALSE(third.in_segment());
  a->send_staged(to_b, bytes("third"), std::move(moved));
  REQUIRE(b_box.wait([](inbox& box) { return box.bodies.size() == 2; }));
  CHECK(a->shared_sends() == 1);
  CHECK(same(b_box.bodies[1], *x));
}

TEST_CASE("ucx: small bodies and bodies without a segment are staged as "
          "they are and sent through UCX",
          "[ucx]") {
  pair_of_planes job{8 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  auto small = counting(64, 3.0f);
  auto staged = a->stage(to_b, body_of(small));
  CHECK_FALSE(staged.in_segment());
  // (Held as it is: the buffer must stay as it was until it left.)
  a->send_staged(to_b, bytes("small"), std::move(staged));
  REQUIRE(b_box.wait([](inbox& box) { return box.bodies.size() == 2; }));
  CHECK(same(b_box.bodies[1], *small));
  CHECK(a->shared_sends() == 0);
  // A peer this plane does not know: staged as it is, the send fails.
  auto large = counting(std::size_t{256} << 10, 0.0f);
  auto nowhere = a->stage(to_b + 1000, body_of(large));
  CHECK_FALSE(nowhere.in_segment());
  std::promise<std::string> failed;
  a->send_staged(to_b + 1000, bytes("nowhere"), std::move(nowhere),
                 [&failed](const std::string& why) { failed.set_value(why); });
  auto why = failed.get_future();
  REQUIRE(why.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK_FALSE(why.get().empty());
}

TEST_CASE("ucx: bodies sent offloaded are copied into the segment by the "
          "progress thread and arrive whole",
          "[ucx]") {
  pair_of_planes job{8 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  std::vector<std::shared_ptr<std::vector<float>>> sent;
  std::vector<std::promise<std::string>> done(4);
  for (int i = 0; i < 4; ++i) {
    sent.push_back(counting(std::size_t{256} << 10, 100.0f * i));
    a->send_offloaded(to_b, bytes(std::to_string(i)), body_of(sent[i]),
                      [&done, i](const std::string& why) {
                        done[i].set_value(why);
                      });
  }
  // And a small one, sent as `send` does.
  auto small = counting(16, 7.0f);
  a->send_offloaded(to_b, bytes("small"), body_of(small));
  for (auto& d : done) {
    auto f = d.get_future();
    REQUIRE(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    CHECK(f.get().empty());
  }
  REQUIRE(b_box.wait([](inbox& box) { return box.bodies.size() == 6; }));
  CHECK(a->shared_sends() == 4);
  int smalls = 0;
  auto seen = check_numbered(
    b_box, sent, [&](const std::string& h, const std::vector<char>& body) {
      CHECK(h == "small");
      CHECK(same(body, *small));
      ++smalls;
    });
  CHECK(seen.size() == 4);
  CHECK(smalls == 1);
}

TEST_CASE("ucx: a plane closed with bodies still to copy ends each of their "
          "sends once",
          "[ucx]") {
  pair_of_planes job{16 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  constexpr int n = 8;
  std::vector<std::shared_ptr<std::vector<float>>> sent;
  std::array<std::atomic<int>, n> ended{};
  std::array<std::atomic<bool>, n> failed{};
  for (int i = 0; i < n; ++i) {
    sent.push_back(counting(std::size_t{256} << 10, 10.0f * i));
    a->send_offloaded(to_b, bytes(std::to_string(i)), body_of(sent[i]),
                      [&ended, &failed, i](const std::string& why) {
                        failed[i] = !why.empty();
                        ++ended[i];
                      });
  }
  // At once: some copies may still wait for the progress thread.
  a->close();
  int went = 0;
  for (int i = 0; i < n; ++i) {
    CHECK(ended[i].load() == 1);
    went += failed[i] ? 0 : 1;
  }
  // Whatever arrives was reported sent, and arrives whole (a force-closed
  // connection may still lose what had left: no more is asked).
  static_cast<void>(b_box.wait(
    [went](inbox& box) {
      return box.bodies.size() >= static_cast<std::size_t>(went) + 1;
    },
    std::chrono::seconds(2)));
  for (auto i : check_numbered(b_box, sent))
    CHECK_FALSE(failed[i].load());
}

// -- room lent to be written in place (plane::lease) -------------------------

namespace {

// `n` floats counting up from `first`, written into lent room.
void fill(const body_lease& room, std::size_t n, float first) {
  auto* x = reinterpret_cast<float*>(room.data);
  std::iota(x, x + n, first);
}

// The body a request of one slice carries: its values in lent room, then a
// tail from elsewhere.
payload lent_body(const body_lease& room, std::size_t n,
                  const std::shared_ptr<std::vector<float>>& tail) {
  return payload{
    {{room.data, n * sizeof(float)},
     {tail->data(), tail->size() * sizeof(float)}},
    std::make_shared<
      std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(
      room.keep, tail)};
}

} // namespace

TEST_CASE("ucx: a body written in lent room leaves from there, the room "
          "staying its lessee's until let go of",
          "[ucx]") {
  pair_of_planes job{4 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  constexpr std::size_t n = std::size_t{200} << 10; // 800 KB
  auto tail = counting(4, -4.0f);
  auto room = a->lease(to_b, (n + tail->size()) * sizeof(float));
  REQUIRE(room.data != nullptr);
  fill(room, n, 1.0f);
  auto want = *counting(n, 1.0f);
  want.insert(want.end(), tail->begin(), tail->end());
  a->send(to_b, bytes("lent"), lent_body(room, n, tail));
  REQUIRE(b_box.wait([](inbox& box) { return box.bodies.size() == 2; }));
  CHECK(same(b_box.bodies[1], want));
  CHECK(a->in_place_sends() == 1);
  CHECK(a->shared_sends() == 1);
  // Read and freed by the peer (its handler returned once the next
  // message arrived), the room is still held: a body of 3.5 MB finds no
  // room in the segment beside it and goes through UCX, and the lessee
  // reads its values back unchanged.
  a->send(to_b, bytes("sync"), payload{});
  REQUIRE(b_box.wait([](inbox& box) { return box.bodies.size() == 3; }));
  auto other = counting(std::size_t{896} << 10, 1000.0f);
  a->send(to_b, bytes("other"), body_of(other));
  REQUIRE(b_box.wait([](inbox& box) { return box.bodies.size() == 4; }));
  CHECK(same(b_box.bodies[3], *other));
  CHECK(a->shared_sends() == 1);
  CHECK(std::equal(want.begin(), want.begin() + n,
                   reinterpret_cast<const float*>(room.data)));
  // Let go of, the room serves the next body.
  room = body_lease{};
  a->send(to_b, bytes("after"), body_of(other));
  REQUIRE(b_box.wait([](inbox& box) { return box.bodies.size() == 5; }));
  CHECK(same(b_box.bodies[4], *other));
  CHECK(a->shared_sends() == 2);
  CHECK(a->in_place_sends() == 1);
}

TEST_CASE("ucx: at most a quarter of a segment is lent at once, room goes "
          "back when let go of unsent, and leaves in place only once",
          "[ucx]") {
  pair_of_planes job{4 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  constexpr std::size_t n = std::size_t{200} << 10; // 800 KB
  auto x = counting(n, 1.0f);
  {
    auto room = a->lease(to_b, n * sizeof(float));
    REQUIRE(room.data != nullptr);
    // The segment has room for a second, but lending it would pass a
    // quarter of the segment.
    CHECK(a->lease(to_b, n * sizeof(float)).data == nullptr);
    CHECK(a->stage(to_b, body_of(x)).in_segment());
  }
  // Both given back, unsent (no reader frees them): 3.5 MB fits again.
  auto large = counting(std::size_t{896} << 10, 0.0f);
  CHECK(a->stage(to_b, body_of(large)).in_segment());
  auto room = a->lease(to_b, n * sizeof(float));
  REQUIRE(room.data != nullptr);
  // Too small to go through a segment, to an unknown peer: no room.
  CHECK(a->lease(to_b, 64).data == nullptr);
  CHECK(a->lease(to_b + 1000, n * sizeof(float)).data == nullptr);
  fill(room, n, 1.0f);
  // Sent twice: the second send copies, and both arrive whole.
  for (auto name : {"1", "2"})
    a->send(to_b, bytes(name),
            payload{room.data, n * sizeof(float), room.keep});
  REQUIRE(b_box.wait([](inbox& box) { return box.bodies.size() == 3; }));
  CHECK(same(b_box.bodies[1], *x));
  CHECK(same(b_box.bodies[2], *x));
  CHECK(a->in_place_sends() == 1);
  CHECK(a->shared_sends() == 2);
  // A body that begins inside the room but not where it begins is copied.
  a->send(to_b, bytes("3"),
          payload{room.data + 64, (n - 16) * sizeof(float), room.keep});
  REQUIRE(b_box.wait([](inbox& box) { return box.bodies.size() == 4; }));
  CHECK(a->in_place_sends() == 1);
  std::vector<float> rest(x->begin() + 16, x->end());
  CHECK(same(b_box.bodies[3], rest));
}

TEST_CASE("ucx: at most a quarter of a segment's slots are lent at once",
          "[ucx]") {
  pair_of_planes job{64 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  // 128 KB each: far below a quarter of the bytes, but not of the slots.
  constexpr std::size_t size = std::size_t{128} << 10;
  std::vector<body_lease> rooms;
  for (uint32_t i = 0; i < segment_slots / 4; ++i) {
    rooms.push_back(a->lease(to_b, size));
    REQUIRE(rooms.back().data != nullptr);
  }
  CHECK(a->lease(to_b, size).data == nullptr);
  // The other slots still serve bodies as they go.
  auto x = counting(size / sizeof(float), 1.0f);
  CHECK(a->stage(to_b, body_of(x)).in_segment());
  rooms.pop_back();
  CHECK(a->lease(to_b, size).data != nullptr);
}

TEST_CASE("ucx: lent room outlives its peer and its plane", "[ucx]") {
  pair_of_planes job{4 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  constexpr std::size_t n = std::size_t{64} << 10;
  auto room = a->lease(to_b, n * sizeof(float));
  REQUIRE(room.data != nullptr);
  fill(room, n, 1.0f);
  // The peer dropped: a send from the room fails, once, and the room
  // still holds what was written.
  a->drop(to_b, "gone");
  std::promise<std::string> failed;
  a->send(to_b, bytes("late"), payload{room.data, n * sizeof(float), room.keep},
          [&failed](const std::string& why) { failed.set_value(why); });
  auto why = failed.get_future();
  REQUIRE(why.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK_FALSE(why.get().empty());
  CHECK(a->in_place_sends() == 0);
  // The plane closed: the room stays mapped until let go of.
  a->close();
  auto want = counting(n, 1.0f);
  CHECK(std::equal(want->begin(), want->end(),
                   reinterpret_cast<const float*>(room.data)));
  room = body_lease{};
}
