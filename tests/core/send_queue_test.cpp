// SPDX-License-Identifier: BSD-3-Clause
#include "core/send_queue.hpp"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

using actorps::op_kind;
using actorps::slice_id;
using actorps::core::cost_of;
using actorps::core::outgoing;
using actorps::core::request_cost;
using actorps::core::send_queue;

namespace {

// Records the order in which requests leave; each has a name.
struct recorder {
  std::vector<std::string> sent;

  outgoing make(std::string name, int32_t priority, request_cost cost,
                std::vector<slice_id> slices) {
    outgoing x;
    x.priority = priority;
    x.cost = cost;
    x.slices = std::move(slices);
    x.send = [this, name = std::move(name)] { sent.push_back(name); };
    return x;
  }
};

request_cost bytes(uint64_t n) {
  request_cost c;
  c.bytes = n;
  return c;
}

} // namespace

TEST_CASE("send_queue: cost_of follows the mode", "[core]") {
  auto push = cost_of(op_kind::push, 10, false);
  CHECK(push.bytes == 40);
  CHECK(push.soft == 0);
  CHECK(push.pull_bytes == 0);
  SECTION("async: pulls and push-pulls hold what they carry there and back") {
    CHECK(cost_of(op_kind::pull, 10, false).bytes == 40);
    CHECK(cost_of(op_kind::push_pull, 10, false).bytes == 80);
    CHECK(cost_of(op_kind::pull, 10, false).pull_bytes == 0);
  }
  SECTION("sync: pulls and push-pulls never hold the bound") {
    auto pull = cost_of(op_kind::pull, 10, true);
    CHECK(pull.bytes == 0);
    CHECK(pull.pull_bytes == 40);
    auto pp = cost_of(op_kind::push_pull, 10, true);
    CHECK(pp.bytes == 0);
    CHECK(pp.soft == 80);
    CHECK(cost_of(op_kind::push, 10, true).bytes == 40);
  }
}

TEST_CASE("send_queue: bytes in flight bound what leaves", "[core]") {
  recorder r;
  send_queue q{100};
  SECTION("one request larger than the bound goes when nothing is in flight") {
    q.enqueue(r.make("big", 0, bytes(500), {1}));
    CHECK(r.sent == std::vector<std::string>{"big"});
    CHECK(q.in_flight() == 500);
  }
  SECTION("the next waits until a reply releases room") {
    q.enqueue(r.make("a", 0, bytes(60), {1}));
    q.enqueue(r.make("b", 0, bytes(60), {2}));
    CHECK(r.sent == std::vector<std::string>{"a"});
    CHECK(q.size() == 1);
    CHECK_FALSE(q.fits(10));
    q.release(bytes(60));
    CHECK(r.sent == std::vector<std::string>{"a", "b"});
    CHECK(q.size() == 0);
  }
  SECTION("requests that fit together leave together") {
    q.enqueue(r.make("a", 0, bytes(40), {1}));
    CHECK(q.fits(60));
    CHECK_FALSE(q.fits(61));
    q.enqueue(r.make("b", 0, bytes(60), {2}));
    CHECK(r.sent == std::vector<std::string>{"a", "b"});
  }
}

TEST_CASE("send_queue: higher priority leaves first under backlog", "[core]") {
  recorder r;
  send_queue q{100};
  q.enqueue(r.make("first", 0, bytes(100), {1}));
  q.enqueue(r.make("low1", 0, bytes(100), {2}));
  q.enqueue(r.make("low2", 0, bytes(100), {3}));
  q.enqueue(r.make("high", 10, bytes(100), {4}));
  q.enqueue(r.make("mid", 5, bytes(100), {5}));
  for (int i = 0; i < 4; ++i)
    q.release(bytes(100));
  CHECK(r.sent
        == std::vector<std::string>{"first", "high", "mid", "low1", "low2"});
}

TEST_CASE("send_queue: a request never overtakes an earlier one on its slice",
          "[core]") {
  recorder r;
  send_queue q{100};
  q.enqueue(r.make("busy", 0, bytes(100), {1}));
  q.enqueue(r.make("other", 0, bytes(100), {2}));
  q.enqueue(r.make("before", 0, bytes(100), {3}));
  q.enqueue(r.make("urgent", 7, bytes(100), {3}));
  // "before" was raised to 7 and queued before "urgent": it leaves first,
  // and both overtake "other".
  for (int i = 0; i < 3; ++i)
    q.release(bytes(100));
  CHECK(r.sent
        == std::vector<std::string>{"busy", "before", "urgent", "other"});
  SECTION("raising is transitive through shared slices") {
    recorder r2;
    send_queue q2{100};
    q2.enqueue(r2.make("busy", 0, bytes(100), {9}));
    q2.enqueue(r2.make("x", 0, bytes(100), {20}));
    q2.enqueue(r2.make("a", 0, bytes(100), {1}));
    q2.enqueue(r2.make("b", 1, bytes(100), {1, 2}));
    q2.enqueue(r2.make("c", 5, bytes(100), {2}));
    for (int i = 0; i < 4; ++i)
      q2.release(bytes(100));
    CHECK(r2.sent == std::vector<std::string>{"busy", "a", "b", "c", "x"});
  }
}

TEST_CASE("send_queue: sync pulls have a bound of their own", "[core]") {
  recorder r;
  send_queue q{100};
  auto pull = cost_of(op_kind::pull, 25, true); // 100 pull bytes
  q.enqueue(r.make("push", 0, bytes(100), {1}));
  SECTION("a pull is not held back by pushes in flight") {
    q.enqueue(r.make("pull1", 0, pull, {2}));
    CHECK(r.sent == std::vector<std::string>{"push", "pull1"});
  }
  SECTION("a second pull waits, but never holds a push back") {
    q.enqueue(r.make("pull1", 0, pull, {2}));
    q.enqueue(r.make("pull2", 0, pull, {3}));
    CHECK(r.sent == std::vector<std::string>{"push", "pull1"});
    q.release(bytes(100));
    q.enqueue(r.make("push2", 0, bytes(100), {4}));
    CHECK(r.sent == std::vector<std::string>{"push", "pull1", "push2"});
    q.release(pull);
    CHECK(r.sent.back() == "pull2");
  }
  SECTION("a push on a waiting pull's slice sends the pull first") {
    q.enqueue(r.make("pull1", 0, pull, {2}));
    q.enqueue(r.make("pull2", 0, pull, {3}));
    q.release(bytes(100));
    q.enqueue(r.make("push3", 0, bytes(100), {3}));
    CHECK(r.sent
          == std::vector<std::string>{"push", "pull1", "pull2", "push3"});
  }
}

TEST_CASE("send_queue: a send that fails at once does not recurse", "[core]") {
  send_queue q{100};
  std::vector<int> sent;
  outgoing blocker;
  blocker.cost = bytes(100);
  blocker.send = [] {};
  q.enqueue(std::move(blocker));
  for (int i = 0; i < 3; ++i) {
    outgoing x;
    x.cost = bytes(100);
    x.slices = {static_cast<slice_id>(i)};
    // Fails at once: releases its bytes from inside the send.
    x.send = [&q, &sent, i] {
      sent.push_back(i);
      q.release(bytes(100));
    };
    q.enqueue(std::move(x));
  }
  CHECK(sent.empty());
  // The blocker's reply lets the backlog go; each failure frees the room
  // for the next, in order, each sent once.
  q.release(bytes(100));
  CHECK(sent == std::vector<int>{0, 1, 2});
  CHECK(q.in_flight() == 0);
  CHECK(q.size() == 0);
}
