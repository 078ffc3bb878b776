// SPDX-License-Identifier: BSD-3-Clause
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/ucx/plane.hpp"

using namespace actorps::ucx;
using namespace std::chrono_literals;

namespace {

// What a plane's handlers saw, with waits that time out.
struct inbox {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<std::pair<peer_id, std::vector<char>>> headers;
  std::vector<std::vector<char>> bodies;
  std::vector<peer_id> up;
  std::vector<std::string> down;

  plane_handlers handlers() {
    plane_handlers h;
    h.on_message = [this](peer_id from, std::vector<char> header,
                          std::vector<char> body) {
      std::lock_guard<std::mutex> guard{mtx};
      headers.emplace_back(from, std::move(header));
      bodies.push_back(std::move(body));
      cv.notify_all();
    };
    h.on_peer_up = [this](peer_id id, const std::vector<char>&) {
      std::lock_guard<std::mutex> guard{mtx};
      up.push_back(id);
      cv.notify_all();
    };
    h.on_peer_down = [this](peer_id, const std::string& why) {
      std::lock_guard<std::mutex> guard{mtx};
      down.push_back(why);
      cv.notify_all();
    };
    return h;
  }

  template <class Pred>
  bool wait(Pred pred, std::chrono::milliseconds limit = 10s) {
    std::unique_lock<std::mutex> lock{mtx};
    return cv.wait_for(lock, limit, [&] { return pred(*this); });
  }
};

// The outcome of one send.
struct outcome {
  std::mutex mtx;
  std::condition_variable cv;
  bool done = false;
  std::string error;

  std::function<void(const std::string&)> callback() {
    return [this](const std::string& err) {
      std::lock_guard<std::mutex> guard{mtx};
      done = true;
      error = err;
      cv.notify_all();
    };
  }

  bool wait(std::chrono::milliseconds limit = 10s) {
    std::unique_lock<std::mutex> lock{mtx};
    return cv.wait_for(lock, limit, [&] { return done; });
  }
};

std::unique_ptr<plane> start(const std::string& secret, inbox& box) {
  plane_options opts;
  opts.secret = secret;
  std::string error;
  auto p = plane::start(opts, box.handlers(), error);
  INFO(error);
  REQUIRE(p);
  return p;
}

std::vector<char> bytes(const std::string& text) {
  return {text.begin(), text.end()};
}

// Plane A, connected to plane B.
struct connected {
  inbox a_box;
  inbox b_box;
  std::unique_ptr<plane> a;
  std::unique_ptr<plane> b;
  peer_id to_b;

  connected(const std::string& a_secret, const std::string& b_secret)
    : a(start(a_secret, a_box)),
      b(start(b_secret, b_box)),
      to_b(a->connect(b->address())) {
    // nop
  }
};

} // namespace

TEST_CASE("ucx: planes holding the secret exchange small and large "
          "messages both ways",
          "[ucx]") {
  connected job{"job-secret", "job-secret"};
  auto& [a_box, b_box, a, b, to_b] = job;
  // Small (eager) and 8 MB (rendezvous) bodies, sent straight from the
  // caller's buffer.
  auto big = std::make_shared<std::vector<float>>(2 << 20);
  std::iota(big->begin(), big->end(), 0.0f);
  outcome small_sent;
  outcome big_sent;
  std::string hello = "hello";
  a->send(to_b, bytes("h1"), payload{hello.data(), hello.size(), nullptr},
          small_sent.callback());
  a->send(to_b, bytes("h2"),
          payload{big->data(), big->size() * sizeof(float), big},
          big_sent.callback());
  REQUIRE(small_sent.wait());
  REQUIRE(big_sent.wait());
  CHECK(small_sent.error.empty());
  CHECK(big_sent.error.empty());
  REQUIRE(b_box.wait([](inbox& x) { return x.bodies.size() == 2; }));
  CHECK(b_box.up.size() == 1);
  auto from_a = b_box.headers[0].first;
  CHECK(b_box.headers[0].second == bytes("h1"));
  CHECK(b_box.bodies[0] == bytes("hello"));
  CHECK(b_box.headers[1].second == bytes("h2"));
  REQUIRE(b_box.bodies[1].size() == big->size() * sizeof(float));
  CHECK(std::memcmp(b_box.bodies[1].data(), big->data(), b_box.bodies[1].size())
        == 0);
  // B answers over its own connection back, which A admits by B's hello.
  outcome reply_sent;
  b->send(from_a, bytes("r"), payload{}, reply_sent.callback());
  REQUIRE(reply_sent.wait());
  CHECK(reply_sent.error.empty());
  REQUIRE(a_box.wait([](inbox& x) { return x.bodies.size() == 1; }));
  CHECK(a_box.headers[0].first == to_b);
  CHECK(a_box.headers[0].second == bytes("r"));
  CHECK(a_box.bodies[0].empty());
  // Connecting twice gives the same peer.
  CHECK(a->connect(b->address()) == to_b);
}

TEST_CASE("ucx: a peer without the secret gets nothing in and nothing out",
          "[ucx]") {
  connected job{"guessed", "job-secret"};
  auto& [intruder_box, server_box, intruder, server, to_server] = job;
  std::string data = "overwrite the model";
  outcome sent;
  intruder->send(to_server, bytes("push"),
                 payload{data.data(), data.size(), nullptr}, sent.callback());
  // A large one too: a rendezvous the server must not fetch.
  auto big = std::make_shared<std::vector<char>>(4 << 20, 'x');
  outcome big_sent;
  intruder->send(to_server, bytes("push"),
                 payload{big->data(), big->size(), big}, big_sent.callback());
  REQUIRE(sent.wait());
  // The server saw no peer and no message; a legitimate peer connecting
  // afterwards is served, so the server did look at what arrived.
  inbox friend_box;
  auto friend_plane = start("job-secret", friend_box);
  auto friend_to_server = friend_plane->connect(server->address());
  outcome friend_sent;
  friend_plane->send(friend_to_server, bytes("ok"), payload{},
                     friend_sent.callback());
  REQUIRE(friend_sent.wait());
  REQUIRE(server_box.wait([](inbox& x) { return x.bodies.size() == 1; }));
  CHECK(server_box.headers[0].second == bytes("ok"));
  CHECK(server_box.up.size() == 1);
  // Nothing went back to the intruder: the server never connected to it.
  CHECK(intruder_box.up.empty());
  CHECK(intruder_box.bodies.empty());
  intruder->close();
  CHECK(big_sent.wait());
}

TEST_CASE("ucx: a peer that goes away is reported, and sends to it fail",
          "[ucx]") {
  connected job{"s", "s"};
  auto& [a_box, b_box, a, b, to_b] = job;
  outcome first;
  a->send(to_b, bytes("x"), payload{}, first.callback());
  REQUIRE(first.wait());
  REQUIRE(first.error.empty());
  REQUIRE(b_box.wait([](inbox& x) { return x.bodies.size() == 1; }));
  b.reset();
  // UCX notices on the next send (or by its keepalive): the peer goes down
  // and the send fails, without a hang.
  auto deadline = std::chrono::steady_clock::now() + 30s;
  bool failed = false;
  while (!failed && std::chrono::steady_clock::now() < deadline) {
    outcome later;
    a->send(to_b, bytes("y"), payload{}, later.callback());
    REQUIRE(later.wait(30s));
    failed = !later.error.empty();
  }
  CHECK(failed);
  CHECK(a_box.wait([](inbox& x) { return !x.down.empty(); }, 30s));
  // After close, sends fail at once.
  a->close();
  outcome after;
  a->send(to_b, bytes("z"), payload{}, after.callback());
  REQUIRE(after.wait(1s));
  CHECK(after.error.find("closed") != std::string::npos);
}
