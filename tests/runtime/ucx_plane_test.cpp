// SPDX-License-Identifier: BSD-3-Clause
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ifaddrs.h>
#include <netinet/in.h>

#include "caf/actor_system.hpp"
#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/scoped_actor.hpp"

#include "actors/coordinator/coordinator.hpp"
#include "actors/shard/shard.hpp"
#include "actors/worker/worker.hpp"
#include "core/batch_ids.hpp"
#include "messages/control.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"
#include "runtime/kvstore.hpp"
#include "runtime/network.hpp"
#include "runtime/system.hpp"
#include "runtime/ucx/frames.hpp"
#include "runtime/ucx/ingress.hpp"
#include "runtime/ucx/plane.hpp"
#include "tests/integration/process.hpp"
#include "tests/runtime/ask.hpp"
#include "tests/runtime/blocker.hpp"
#include "tests/runtime/exit_guard.hpp"
#include "tests/runtime/job_threads.hpp"
#include "tests/runtime/ucx_planes.hpp"

using namespace actorps;
using namespace actorps::ucx;
using namespace std::chrono_literals;

namespace {

using test::ask;
using test::inbox;

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

// The secret worker `identity - 1` proves in these tests (as
// core::worker_secret gives each worker its own in a job).
std::string test_secret_of(uint32_t identity) {
  return "worker secret " + std::to_string(identity);
}

// A plane; with an identity, it proves that identity's test secret.
std::unique_ptr<plane> start(const std::string& secret, inbox& box,
                             bool shared_memory = true, uint32_t identity = 0) {
  plane_options opts;
  opts.secret = secret;
  opts.shared_memory = shared_memory;
  opts.identity = identity;
  if (identity != 0)
    opts.identity_secret = test_secret_of(identity);
  return test::started(opts, box.handlers());
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

  connected(const std::string& a_secret, const std::string& b_secret,
            bool shared_memory = true)
    : a(start(a_secret, a_box, shared_memory)),
      b(start(b_secret, b_box, shared_memory)),
      to_b(a->connect(b->address())) {
    // nop
  }
};

} // namespace

TEST_CASE("ucx: a buffer copied from bytes holds them, at any alignment "
          "and length; a view made its own too",
          "[ucx]") {
  // (A large message copied out of a peer's segment is made this way.)
  std::vector<char> src(80);
  std::iota(src.begin(), src.end(), char{1});
  for (std::size_t offset : {0, 1, 2, 3, 4})
    for (std::size_t length : {0, 1, 3, 4, 7, 64, 75}) {
      INFO("offset " << offset << ", length " << length);
      ucx::buffer b{src.data() + offset, length};
      CHECK_FALSE(b.is_view());
      REQUIRE(b.size() == length);
      CHECK(std::memcmp(b.data(), src.data() + offset, length) == 0);
      auto v = ucx::buffer::view(src.data() + offset, length,
                                 std::make_shared<int>(0));
      v.own();
      CHECK_FALSE(v.is_view());
      REQUIRE(v.size() == length);
      CHECK(std::memcmp(v.data(), src.data() + offset, length) == 0);
    }
}

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

namespace {

// Plane B keeps each message it receives (and with it the message's hold
// on its max_held_bytes) until the test lets go of it; plane A is
// connected to it. B's holds outlive B itself at the end.
struct holding_planes {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<std::vector<char>> headers;
  std::vector<buffer> bodies;
  inbox a_box;
  std::unique_ptr<plane> b;
  std::unique_ptr<plane> a;
  peer_id to_b = 0;
  // What A sent, kept alive until sent.
  std::vector<std::shared_ptr<std::vector<float>>> sent;

  explicit holding_planes(plane_options opts) {
    plane_handlers h;
    h.on_message = [this](peer_id, std::vector<char> header, buffer body) {
      std::lock_guard<std::mutex> guard{mtx};
      headers.push_back(std::move(header));
      bodies.push_back(std::move(body));
      cv.notify_all();
    };
    opts.secret = "job-secret";
    std::string error;
    b = plane::start(opts, h, error);
    INFO(error);
    REQUIRE(b);
    a = start("job-secret", a_box);
    to_b = a->connect(b->address());
  }

  // A sends `floats` floats (counting up from the number of sends before).
  void send(const std::string& name, std::size_t floats) {
    auto x = std::make_shared<std::vector<float>>(floats);
    std::iota(x->begin(), x->end(), static_cast<float>(sent.size()));
    sent.push_back(x);
    a->send(to_b, bytes(name), payload{x->data(), x->size() * sizeof(float), x},
            nullptr);
  }

  // True once B received `n` messages.
  bool arrived(std::size_t n, std::chrono::milliseconds limit = 10s) {
    std::unique_lock<std::mutex> lock{mtx};
    return cv.wait_for(lock, limit, [&] { return headers.size() >= n; });
  }

  // True once B was told of `n` large messages it holds back (UCX tells of
  // each on B's thread; nothing to wait on but the count).
  bool announced(std::size_t n) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (b->waiting() < n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    return b->waiting() == n;
  }

  // B lets go of message `i`, after checking that it carries `x`.
  void release(std::size_t i, const std::vector<float>* x = nullptr) {
    std::lock_guard<std::mutex> guard{mtx};
    if (x != nullptr) {
      REQUIRE(bodies[i].size() == x->size() * sizeof(float));
      CHECK(std::memcmp(bodies[i].data(), x->data(), bodies[i].size()) == 0);
    }
    bodies[i] = buffer{};
  }
};

} // namespace

TEST_CASE("ucx: a plane with max_held_bytes receives large messages only "
          "while fewer bytes are held, in order, and small ones always",
          "[ucx]") {
  // B holds at most 1 MB of large messages; A sends three of 768 KB (above
  // the 128 KB rendezvous threshold), a small one, and one of 2 MB.
  plane_options opts;
  opts.max_held_bytes = std::size_t{1} << 20;
  holding_planes job{opts};
  constexpr std::size_t part = 192 << 10; // floats: 768 KB
  job.send("l1", part);
  job.send("l2", part);
  job.send("l3", part);
  REQUIRE(job.arrived(1));
  // The first holds 768 KB: a second would pass the bound. A small message
  // sent after both is not held back.
  std::string hi = "small";
  job.a->send(job.to_b, bytes("s"), payload{hi.data(), hi.size(), nullptr},
              nullptr);
  REQUIRE(job.arrived(2));
  {
    std::lock_guard<std::mutex> guard{job.mtx};
    CHECK(job.headers[0] == bytes("l1"));
    CHECK(job.headers[1] == bytes("s"));
  }
  // Nothing else comes while the first is held (a bounded look).
  REQUIRE(job.announced(2));
  CHECK_FALSE(job.arrived(3, 300ms));
  // Letting go of it lets the second in, and so on, in order.
  job.release(0, job.sent[0].get());
  REQUIRE(job.arrived(3));
  CHECK_FALSE(job.arrived(4, 300ms));
  {
    // A hold taken out of its buffer keeps counting until it goes.
    std::unique_lock<std::mutex> lock{job.mtx};
    auto hold = job.bodies[2].take_hold();
    CHECK(hold != nullptr);
    job.bodies[2] = buffer{};
    lock.unlock();
    CHECK_FALSE(job.arrived(4, 300ms));
  }
  REQUIRE(job.arrived(4));
  // A message larger than the bound comes once nothing is held.
  job.send("big", 512 << 10); // 2 MB
  CHECK_FALSE(job.arrived(5, 300ms));
  job.release(3, job.sent[2].get());
  REQUIRE(job.arrived(5));
  job.release(4, job.sent[3].get());
  std::lock_guard<std::mutex> guard{job.mtx};
  CHECK(job.headers[2] == bytes("l2"));
  CHECK(job.headers[3] == bytes("l3"));
  CHECK(job.headers[4] == bytes("big"));
  CHECK(job.headers.size() == 5);
}

TEST_CASE("ucx: held-back large messages are received highest priority "
          "first",
          "[ucx]") {
  plane_options opts;
  opts.max_held_bytes = std::size_t{1} << 20;
  // "u..." is urgent.
  opts.priority_of = [](const std::vector<char>& header) {
    return !header.empty() && header[0] == 'u' ? 5 : 0;
  };
  holding_planes job{opts};
  constexpr std::size_t part = 192 << 10; // floats: 768 KB
  job.send("l1", part);
  REQUIRE(job.arrived(1));
  for (auto* name : {"n1", "u1", "n2", "u2"})
    job.send(name, part);
  REQUIRE(job.announced(4));
  // Each release lets the next in: the urgent ones first, each group in
  // the order sent.
  for (std::size_t next = 1; next < 5; ++next) {
    job.release(next - 1);
    REQUIRE(job.arrived(next + 1));
  }
  CHECK(job.b->waiting() == 0);
  std::lock_guard<std::mutex> guard{job.mtx};
  CHECK(job.headers
        == std::vector<std::vector<char>>{bytes("l1"), bytes("u1"), bytes("u2"),
                                          bytes("n1"), bytes("n2")});
}

namespace {

// The local addresses (hex, as /proc/net/tcp and tcp6 write them) of the
// TCP sockets this process listens on, by socket inode.
std::map<std::string, std::string> listening_sockets() {
  std::set<std::string> mine;
  for (auto& fd : std::filesystem::directory_iterator{"/proc/self/fd"}) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0)
      mine.insert(target.substr(8, target.size() - 9));
  }
  std::map<std::string, std::string> out;
  for (auto* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in{table};
    std::string line;
    std::getline(in, line); // header
    while (std::getline(in, line)) {
      std::istringstream fields{line};
      std::string slot, local, remote, state, queues, timer, retr, uid, tmo,
        inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retr
        >> uid >> tmo >> inode;
      if (state == "0A" && mine.count(inode) > 0)
        out[inode] = local.substr(0, local.find(':'));
    }
  }
  return out;
}

bool loopback_hex(const std::string& addr) {
  return addr == "0100007F" || addr == "00000000000000000000000001000000";
}

// True if this host has an IPv4 address beyond loopback.
bool has_network_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    return false;
  bool found = false;
  for (auto* a = list; a != nullptr; a = a->ifa_next)
    if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == AF_INET) {
      auto ip = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr;
      if ((ntohl(ip) >> 24) != 127)
        found = true;
    }
  ::freeifaddrs(list);
  return found;
}

} // namespace

TEST_CASE("ucx: a plane of a job on this host listens on loopback only",
          "[ucx]") {
  auto new_listeners = [](bool loopback_only) {
    auto before = listening_sockets();
    plane_options opts;
    opts.secret = "s";
    opts.loopback_only = loopback_only;
    inbox box;
    std::string error;
    auto p = plane::start(opts, box.handlers(), error);
    INFO(error);
    REQUIRE(p);
    std::vector<std::string> added;
    for (auto& [inode, addr] : listening_sockets())
      if (before.count(inode) == 0)
        added.push_back(addr);
    p->close();
    return added;
  };
  auto local = new_listeners(true);
  REQUIRE_FALSE(local.empty());
  for (auto& addr : local) {
    INFO(addr);
    CHECK(loopback_hex(addr));
  }
  // Without it, UCX listens on the host's other interfaces too.
  if (has_network_address()) {
    auto all = new_listeners(false);
    CHECK(std::any_of(all.begin(), all.end(),
                      [](const std::string& a) { return !loopback_hex(a); }));
  }
}

TEST_CASE("ucx: a job's data secret needs its token or its salt", "[ucx]") {
  // A job over TLS without a token: its coordinator's random salt, which
  // only admitted nodes get, makes the secret.
  CHECK(data_secret("", "").empty());
  auto salted = data_secret("", "salt-a");
  CHECK_FALSE(salted.empty());
  CHECK(salted != data_secret("", "salt-b"));
  CHECK(data_secret("tok", "salt-a") != data_secret("tok", "salt-b"));
  CHECK(data_secret("tok", "salt-a") != data_secret("tok2", "salt-a"));
  CHECK(data_secret("tok", "") != data_secret("", "tok"));
}

TEST_CASE("ucx: a peer without the secret gets nothing in and nothing out",
          "[ucx]") {
  // A guessed secret; and a peer that, knowing a TLS job has no token,
  // tries the secret of a job without one.
  auto [guess, secret] = GENERATE(
    std::make_pair(std::string{"guessed"}, std::string{"job-secret"}),
    std::make_pair(data_secret("", ""), data_secret("", "job-salt")));
  connected job{guess, secret};
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
  auto friend_plane = start(secret, friend_box);
  auto friend_to_server = friend_plane->connect(server->address());
  outcome friend_sent;
  friend_plane->send(friend_to_server, bytes("ok"), payload{},
                     friend_sent.callback());
  REQUIRE(friend_sent.wait());
  REQUIRE(server_box.wait([](inbox& x) { return x.bodies.size() == 1; }));
  CHECK(server_box.headers[0].second == bytes("ok"));
  CHECK(server_box.up.size() == 1);
  // The server's connection back to the friend is up before the friend
  // goes (UCX 1.13 aborts when a peer dies during connection setup:
  // openucx/ucx#8175).
  REQUIRE(friend_box.wait([](inbox& x) { return x.up.size() == 1; }));
  // Nothing went back to the intruder: the server never connected to it.
  CHECK(intruder_box.up.empty());
  CHECK(intruder_box.bodies.empty());
  intruder->close();
  CHECK(big_sent.wait());
}

namespace {

// Plane A, connected to plane B, which answers each message with one of
// header "r" (from a thread of its own, as a server's shards answer); A
// notes the thread each answer reached it on.
struct answering_planes {
  inbox a_box;
  inbox b_box;
  std::mutex mtx;
  std::vector<std::thread::id> threads;
  std::unique_ptr<plane> a;
  std::unique_ptr<plane> b;
  peer_id to_b = 0;
  std::atomic<bool> stop{false};
  std::thread answerer;

  answering_planes() {
    auto ha = a_box.handlers();
    ha.on_message = [this, f = ha.on_message](
                      peer_id from, std::vector<char> header, buffer body) {
      {
        std::lock_guard<std::mutex> guard{mtx};
        threads.push_back(std::this_thread::get_id());
      }
      f(from, std::move(header), std::move(body));
    };
    plane_options opts;
    opts.secret = "s";
    a = test::started(opts, ha);
    b = test::started(opts, b_box.handlers());
    to_b = a->connect(b->address());
    answerer = std::thread{[this] {
      std::size_t answered = 0;
      while (!stop) {
        if (!b_box.wait([&](inbox& x) { return x.headers.size() > answered; },
                        100ms))
          continue;
        peer_id from = 0;
        {
          std::lock_guard<std::mutex> guard{b_box.mtx};
          from = b_box.headers[answered].first;
        }
        b->send(from, bytes("r"), payload{});
        ++answered;
      }
    }};
  }

  ~answering_planes() {
    stop = true;
    answerer.join();
  }

  // Asks B once; the number of answers A has then.
  std::size_t ask_b() {
    auto before = a_box.count();
    a->send(to_b, bytes("q"), payload{});
    return before + 1;
  }

  std::thread::id thread_of(std::size_t answer) {
    std::lock_guard<std::mutex> guard{mtx};
    return threads.at(answer - 1);
  }
};

} // namespace

TEST_CASE("ucx: a thread that drives a plane receives on its own thread, and "
          "the progress thread receives again once it stops",
          "[ucx]") {
  answering_planes job;
  auto me = std::this_thread::get_id();
  auto deadline = [] { return std::chrono::steady_clock::now() + 10s; };
  // The peers admit each other first (the progress threads do).
  auto want = job.ask_b();
  REQUIRE(job.a_box.wait([&](inbox& x) { return x.bodies.size() >= want; }));
  // Then each answer is received by whoever waits for it: the driver, or
  // the progress thread if something else woke it (on a loaded machine it
  // may take most of them; it then wakes the driver).
  int here = 0;
  int rounds = 10;
  for (int round = 0; round < rounds; ++round) {
    INFO("round " << round);
    want = job.ask_b();
    CHECK(job.a->drive([&] { return job.a_box.count() >= want; }, deadline()));
    REQUIRE(job.a_box.count() >= want);
    here += job.thread_of(want) == me ? 1 : 0;
    // Nobody drives: the progress thread watches UCX's events again.
    want = job.ask_b();
    REQUIRE(job.a_box.wait([&](inbox& x) { return x.bodies.size() >= want; }));
    CHECK(job.thread_of(want) != me);
  }
  CHECK(here >= 1);
  CHECK(job.a->caller_receives() == static_cast<std::size_t>(rounds));
  // Nothing comes: the drive ends at its deadline, false.
  CHECK_FALSE(job.a->drive([] { return false; },
                           std::chrono::steady_clock::now() + 20ms));
  CHECK(job.a->caller_receives() == static_cast<std::size_t>(rounds));
  want = job.ask_b();
  REQUIRE(job.a_box.wait([&](inbox& x) { return x.bodies.size() >= want; }));
}

TEST_CASE("ucx: one thread drives a plane at a time", "[ucx]") {
  answering_planes job;
  std::promise<void> inside;
  std::atomic<bool> asked{false};
  std::atomic<bool> release{false};
  // The first driver holds on until released.
  auto first = std::async(std::launch::async, [&] {
    return job.a->drive(
      [&] {
        if (!asked.exchange(true))
          inside.set_value();
        return release.load();
      },
      std::chrono::steady_clock::now() + 60s);
  });
  inside.get_future().wait();
  // A second driver gives up at once: it waits as it would without one.
  CHECK_FALSE(
    job.a->drive([] { return true; }, std::chrono::steady_clock::now() + 10s));
  // What it waits for came another way: woken, it asks again (long before
  // its deadline).
  release = true;
  job.a->wake_driver();
  REQUIRE(first.wait_for(20s) == std::future_status::ready);
  CHECK(first.get());
  // The progress thread receives again.
  auto want = job.ask_b();
  REQUIRE(job.a_box.wait([&](inbox& x) { return x.bodies.size() >= want; }));
  // A closed plane is not driven.
  job.a->close();
  CHECK_FALSE(
    job.a->drive([] { return true; }, std::chrono::steady_clock::now() + 10s));
}

TEST_CASE("ucx: a peer that goes away is reported, and sends to it fail",
          "[ucx]") {
  // Without shared memory: UCX itself watches the connection.
  connected job{"s", "s", false};
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

TEST_CASE("ucx: a dropped peer's sends fail, in flight and later, and what "
          "it still sends is ignored",
          "[ucx]") {
  // On one host UCX takes shared memory and watches nothing: the owner
  // drops a peer whose death it learned elsewhere.
  connected job{"s", "s"};
  auto& [a_box, b_box, a, b, to_b] = job;
  outcome first;
  a->send(to_b, bytes("x"), payload{}, first.callback());
  REQUIRE(first.wait());
  REQUIRE(first.error.empty());
  REQUIRE(b_box.wait([](inbox& x) { return x.bodies.size() == 1; }));
  auto to_a = b_box.headers[0].first;
  // B stops progressing (as a stopped or dead process would): a large
  // send from A cannot finish until A drops B.
  b->close();
  auto big = std::make_shared<std::vector<char>>(16 << 20, 'x');
  outcome stuck;
  a->send(to_b, bytes("big"), payload{big->data(), big->size(), big},
          stuck.callback());
  a->drop(to_b, "its node is down");
  REQUIRE(stuck.wait());
  CHECK_FALSE(stuck.error.empty());
  REQUIRE(a_box.wait([](inbox& x) { return x.down.size() == 1; }));
  CHECK(a_box.down[0] == "its node is down");
  outcome later;
  a->send(to_b, bytes("y"), payload{}, later.callback());
  REQUIRE(later.wait());
  CHECK(later.error.find("down") != std::string::npos);
  // Dropping twice, or a peer never heard of, changes nothing.
  a->drop(to_b, "again");
  a->drop(to_a + 1000, "unknown");
  outcome after;
  a->send(to_b, bytes("z"), payload{}, after.callback());
  REQUIRE(after.wait());
  CHECK_FALSE(after.error.empty());
  CHECK(a_box.down.size() == 1);
}

TEST_CASE("ucx: a peer killed while it sends blocks no other peer", "[ucx]") {
  // A process on this host floods A with 4 KB messages and is killed in the
  // middle; C, another peer of A, must still get through. (Over UCX's
  // shared-memory FIFOs, which all of A's peers write into, a writer killed
  // within a slot blocked A for every peer in about 1 of 10 kills.)
  std::mutex mtx;
  std::condition_variable cv;
  std::size_t flood = 0;
  std::vector<std::string> others;
  plane_handlers h;
  h.on_message = [&](peer_id, std::vector<char> header, buffer) {
    std::lock_guard<std::mutex> guard{mtx};
    std::string text{header.begin(), header.end()};
    if (text == "spam")
      ++flood;
    else
      others.push_back(text);
    cv.notify_all();
  };
  plane_options opts;
  opts.secret = "s";
  std::string error;
  auto a = plane::start(opts, h, error);
  REQUIRE(a);
  inbox c_box;
  auto c = start("s", c_box);
  auto to_a = c->connect(a->address());
  auto hex = test::hex_of(a->address());
  for (int kill = 0; kill < 12; ++kill) {
    INFO("kill " << kill);
    test::process sender{{ACTORPS_UCX_SENDER_BIN, hex, "s"}};
    REQUIRE(sender.wait_for("sending\n", 30s));
    {
      std::unique_lock<std::mutex> lock{mtx};
      auto before = flood;
      REQUIRE(cv.wait_for(lock, 30s, [&] { return flood >= before + 50; }));
    }
    sender.kill9();
    REQUIRE(sender.wait_exit(30s));
    auto note = "after kill " + std::to_string(kill);
    outcome sent;
    c->send(to_a, bytes(note), payload{}, sent.callback());
    REQUIRE(sent.wait());
    REQUIRE(sent.error.empty());
    std::unique_lock<std::mutex> lock{mtx};
    REQUIRE(cv.wait_for(lock, 10s, [&] {
      return !others.empty() && others.back() == note;
    }));
  }
}

TEST_CASE("ucx: frame headers carry a slice's fields and refuse what is "
          "not a frame",
          "[ucx]") {
  frame_header h;
  h.kind = frame_kind::push_pull;
  h.request = 0x0102030405060708;
  h.shard = 5;
  h.priority = -3;
  slice_meta m{make_slice_id(4, 2), 9, 77, compression{codec::two_bit, 0.25f},
               1000};
  auto bytes = encode(h, m);
  CHECK(bytes.size() == 50);
  auto back = decode(bytes);
  REQUIRE(back);
  CHECK(back->kind == h.kind);
  CHECK(back->request == h.request);
  CHECK(back->shard == h.shard);
  CHECK(back->priority == h.priority);
  auto meta = decode_meta(bytes);
  REQUIRE(meta);
  CHECK(meta->slice == m.slice);
  CHECK(meta->worker == m.worker);
  CHECK(meta->seq == m.seq);
  CHECK(meta->encoding == m.encoding);
  CHECK(meta->count == m.count);
  // A pull carries no codec or count.
  h.kind = frame_kind::pull;
  auto pull = encode(h, m);
  CHECK(pull.size() == 37);
  REQUIRE(decode_meta(pull));
  CHECK(decode_meta(pull)->seq == 77);
  // Refused: a push without its fields, one byte too many, a reply with
  // fields, an unknown codec, a threshold that is no number > 0.
  h.kind = frame_kind::push;
  CHECK_FALSE(decode(encode(h)));
  auto longer = encode(h, m);
  longer.push_back(0);
  CHECK_FALSE(decode(longer));
  auto reply = encode(frame_header{frame_kind::reply});
  CHECK(decode(reply));
  reply.resize(37);
  CHECK_FALSE(decode(reply));
  auto bad_codec = encode(h, m);
  bad_codec[17 + 20] = 7;
  CHECK_FALSE(decode_meta(bad_codec));
  m.encoding.threshold = -1.0f;
  CHECK_FALSE(decode_meta(encode(h, m)));
  // No more values than a raw body of the plane's largest size holds, in
  // any codec: a 2-bit body must not decode into 16x its bytes.
  m.encoding = compression{codec::two_bit};
  m.count = max_frame_floats;
  CHECK(decode_meta(encode(h, m)));
  m.count = max_frame_floats + 1;
  CHECK_FALSE(decode_meta(encode(h, m)));
  CHECK_FALSE(decode_meta(encode(frame_header{frame_kind::batch})));
  // A batch's fields; its body holds the values, then the packed ids
  // padded to whole 4-byte words.
  frame_header b;
  b.kind = frame_kind::batch;
  batch_meta bm{
    3, static_cast<uint8_t>(op_kind::push), 10, 13, compression{codec::fp16},
    40};
  auto batch_bytes = encode(b, bm);
  CHECK(batch_bytes.size() == 43);
  auto got = decode_batch_meta(batch_bytes);
  REQUIRE(got);
  CHECK(got->worker == 3);
  CHECK(got->op == bm.op);
  CHECK(got->slices == 10);
  CHECK(got->ids_size == 13);
  CHECK(got->encoding == bm.encoding);
  CHECK(got->count == 40);
  CHECK(body_size(bm) == encoded_size(bm.encoding, 40) + 16);
  // Packed ids take at least a byte a slice and two for the sequence
  // numbers, and at most core::max_packed_ids.
  bm.ids_size = 11;
  CHECK_FALSE(decode_batch_meta(encode(b, bm)));
  bm.ids_size = 12;
  CHECK(decode_batch_meta(encode(b, bm)));
  bm.ids_size = static_cast<uint32_t>(core::max_packed_ids(10));
  CHECK(decode_batch_meta(encode(b, bm)));
  ++bm.ids_size;
  CHECK_FALSE(decode_batch_meta(encode(b, bm)));
  bm.ids_size = 13;
  CHECK_FALSE(decode_batch_meta(encode(b)));
  CHECK_FALSE(decode_meta(batch_bytes));
  // Refused: too many values, no slices, an unknown operation.
  bm.count = max_frame_floats + 1;
  CHECK_FALSE(decode_batch_meta(encode(b, bm)));
  bm.count = 40;
  bm.slices = 0;
  CHECK_FALSE(decode_batch_meta(encode(b, bm)));
  bm.slices = 1;
  bm.op = 3;
  CHECK_FALSE(decode_batch_meta(encode(b, bm)));
}

namespace {

std::vector<float> as_floats(const std::vector<char>& body) {
  std::vector<float> out(body.size() / sizeof(float));
  std::memcpy(out.data(), body.data(), out.size() * sizeof(float));
  return out;
}

// A plane whose messages go into `queue` (counted in `count`, if given),
// each tagged with the identity its sender proved (peers prove the test
// secrets); with an identity of its own, it proves that one's.
std::shared_ptr<plane> plane_into(std::shared_ptr<frame_queue> queue,
                                  std::atomic<int>* count = nullptr,
                                  inbox* downs = nullptr,
                                  uint32_t identity = 0) {
  plane_handlers handlers;
  if (downs != nullptr)
    handlers.on_peer_down = downs->handlers().on_peer_down;
  auto opts = test::identity_options(test_secret_of, identity);
  return test::plane_into_queue(queue, opts, handlers,
                                [count](const std::vector<char>&) {
                                  if (count != nullptr)
                                    ++*count;
                                });
}

// An actor system with a shard of `sc` behind an ingress (at the shard's
// index), fed by a plane whose peers going down land in `server_box`.
struct ingress_fixture {
  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  test::exit_guard guard;
  shard_actor shard;
  std::shared_ptr<frame_queue> queue = std::make_shared<frame_queue>();
  inbox server_box;
  std::shared_ptr<plane> server;
  caf::actor ingress;

  explicit ingress_fixture(const shard_config& sc)
    : shard(guard(spawn_shard(sys, sc))),
      server(plane_into(queue, nullptr, &server_box)),
      ingress(guard(spawn_ingress(sys, queue, server, {{sc.index, shard}}))) {
    // nop
  }
};

} // namespace

TEST_CASE("ucx: a server's ingress serves request frames as the shard's "
          "typed messages",
          "[ucx]") {
  shard_config sc;
  sc.index = 7;
  // `f.shard` behind the ingress; `reference` asked over CAF the same way.
  ingress_fixture f{sc};
  auto& self = f.self;
  auto& server = f.server;
  auto reference = f.guard(spawn_shard(f.sys, sc));
  auto id = make_slice_id(3, 0);
  std::vector<float> first{1, 2, 3, 4};
  for (auto& s : {f.shard, reference})
    ask<caf::ok_atom>(self, s, init_atom::value, slice_init{id, floats{first}});
  // Worker 0's plane.
  inbox client_box;
  auto client = start("s", client_box, true, 1);
  auto to_server = client->connect(server->address());
  // Sends a request frame and waits for the frame that answers it.
  auto send_frame = [&](uint64_t req, std::vector<char> header,
                        std::vector<char> body) {
    INFO("request " << req);
    auto keep = std::make_shared<std::vector<char>>(std::move(body));
    client->send(to_server, std::move(header),
                 payload{keep->data(), keep->size(), keep});
    return client_box.reply_to(req);
  };
  // The same, with the slice's fields, if given.
  auto request = [&](frame_kind kind, uint64_t req, uint32_t shard,
                     std::optional<slice_meta> meta, std::vector<char> body) {
    frame_header h;
    h.kind = kind;
    h.request = req;
    h.shard = shard;
    return send_frame(req, meta ? encode(h, *meta) : encode(h),
                      std::move(body));
  };
  auto raw = [](const std::vector<float>& xs) {
    std::vector<char> out(xs.size() * sizeof(float));
    std::memcpy(out.data(), xs.data(), out.size());
    return out;
  };
  std::vector<float> grad{10, 20, 30, 40};
  auto [push_kind, push_body] = request(
    frame_kind::push, 1, 7, slice_meta{id, 0, 0, {}, grad.size()}, raw(grad));
  CHECK(push_kind == frame_kind::reply);
  CHECK(push_body.empty());
  ask<caf::ok_atom>(self, reference, push_atom::value,
                    slice_push{id, 0, 0, floats{grad}});
  auto [pull_kind, pull_body] = request(frame_kind::pull, 2, 7,
                                        slice_meta{id, 0, 1}, {});
  CHECK(pull_kind == frame_kind::reply);
  auto want = ask<shared_floats>(self, reference, pull_atom::value,
                                 slice_pull{id, 0, 1});
  CHECK(as_floats(pull_body) == want.vec());
  // A compressed push_pull: the body holds the codec's bytes.
  compression half{codec::fp16};
  std::vector<float> small{0.5f, -1.5f, 2.25f, 8.0f};
  std::vector<char> packed(encoded_size(half, small.size()));
  encode(half, small.data(), small.size(),
         reinterpret_cast<uint8_t*>(packed.data()));
  auto [pp_kind, pp_body] = request(frame_kind::push_pull, 3, 7,
                                    slice_meta{id, 0, 2, half, small.size()},
                                    packed);
  CHECK(pp_kind == frame_kind::reply);
  auto pp_want = ask<shared_floats>(self, reference, push_pull_atom::value,
                                    slice_push{id, 0, 2, floats{small, half}});
  CHECK(as_floats(pp_body) == pp_want.vec());
  // Errors come back as errors: a shard this server lacks, a body that is
  // not the values the header announces, and the shard's own refusal (a
  // slice never initialized).
  auto error_of = [&](const std::vector<char>& body) {
    caf::error err;
    caf::binary_deserializer source{f.sys, body};
    REQUIRE_FALSE(source(err));
    return err;
  };
  auto [k1, b1] = request(frame_kind::pull, 4, 9, slice_meta{id, 0, 3}, {});
  CHECK(k1 == frame_kind::failure);
  CHECK(code_of(error_of(b1)) == errc::bad_config);
  auto [k2, b2] = request(frame_kind::push, 5, 7, slice_meta{id, 0, 3, {}, 4},
                          bytes("no push"));
  CHECK(k2 == frame_kind::failure);
  CHECK(code_of(error_of(b2)) == errc::bad_config);
  auto [k3, b3] = request(frame_kind::pull, 6, 7,
                          slice_meta{make_slice_id(99, 0), 0, 0}, {});
  CHECK(k3 == frame_kind::failure);
  caf::error want_err;
  self
    ->request(reference, 10s, pull_atom::value,
              slice_pull{make_slice_id(99, 0), 0, 0})
    .receive([](shared_floats&) { FAIL("an unknown slice was pulled"); },
             [&](caf::error& err) { want_err = std::move(err); });
  REQUIRE(want_err);
  CHECK(error_of(b3) == want_err);
  // A batch: its values, then its slice ids and sequence numbers, packed
  // and padded to whole 4-byte words.
  slice_batch batch;
  batch.kind = static_cast<uint8_t>(op_kind::pull);
  batch.slices = {id};
  batch.seqs = {3};
  frame_header bh;
  bh.kind = frame_kind::batch;
  bh.request = 7;
  bh.shard = 7;
  std::vector<uint8_t> packed_ids;
  core::pack_ids(batch.slices.data(), batch.seqs.data(), 1, packed_ids);
  auto ids_size = static_cast<uint32_t>(packed_ids.size());
  std::vector<char> ids(packed_ids.begin(), packed_ids.end());
  ids.resize(core::padded_ids(ids.size()));
  auto meta = batch_meta{0, batch.kind, 1, ids_size, {}, 0};
  auto [k4, b4] = send_frame(7, encode(bh, meta), ids);
  CHECK(k4 == frame_kind::reply);
  // Refused: a batch body one word short, one with padding that is not
  // zeros, and one whose ids do not decode.
  auto refused = [&](uint64_t request, const std::vector<char>& body) {
    bh.request = request;
    auto [k, b] = send_frame(request, encode(bh, meta), body);
    CHECK(k == frame_kind::failure);
    CHECK(code_of(error_of(b)) == errc::bad_config);
  };
  refused(8, std::vector<char>(ids.begin(), ids.end() - 4));
  if (ids_size % 4 != 0) {
    auto dirty = ids;
    dirty.back() = 1;
    refused(9, dirty);
  }
  auto broken = ids;
  std::fill(broken.begin(), broken.begin() + ids_size, static_cast<char>(0x80));
  refused(10, broken);
  auto batch_want = ask<float_parts>(self, reference, batch_atom::value, batch);
  CHECK(as_floats(b4) == batch_want.flatten());
  client->close();
  server->close();
}

TEST_CASE("ucx: the ingress serves rows of a table as the shard's row "
          "messages",
          "[ucx]") {
  shard_config sc;
  sc.index = 2;
  ingress_fixture f{sc};
  auto& self = f.self;
  auto reference = f.guard(spawn_shard(f.sys, sc));
  auto id = make_slice_id(5, 0);
  table_init spec;
  spec.slice = id;
  spec.rows = 6;
  spec.dim = 2;
  spec.rule = table_init::uniform;
  spec.high = 1.0f;
  for (auto& s : {f.shard, reference})
    ask<caf::ok_atom>(self, s, init_atom::value, spec);
  inbox client_box;
  auto client = start("s", client_box, true, 1);
  auto to_server = client->connect(f.server->address());
  // Sends a rows request (header, then values and rows) and waits for its
  // answer.
  auto send_rows = [&](frame_kind kind, uint64_t req, slice_meta meta,
                       std::vector<float> values, std::vector<uint64_t> rows) {
    INFO("request " << req);
    frame_header h;
    h.kind = kind;
    h.request = req;
    h.shard = 2;
    auto body = std::make_shared<std::vector<char>>(
      values.size() * sizeof(float) + rows.size() * sizeof(uint64_t));
    std::copy(values.begin(), values.end(),
              reinterpret_cast<float*>(body->data()));
    std::copy(rows.begin(), rows.end(),
              reinterpret_cast<uint64_t*>(body->data()
                                          + values.size() * sizeof(float)));
    client->send(to_server, encode(h, meta),
                 payload{body->data(), body->size(), body});
    return client_box.reply_to(req);
  };
  // A push of rows 4 and 1, then a pull of rows 1, 4 and 0: as the same
  // messages over CAF do.
  std::vector<float> grad{1, 2, 3, 4};
  auto [k1, b1] = send_rows(frame_kind::rows_push, 1,
                            slice_meta{id, 0, 0, {}, 4, 2}, grad, {4, 1});
  CHECK(k1 == frame_kind::reply);
  CHECK(b1.empty());
  ask<caf::ok_atom>(self, reference, push_atom::value,
                    rows_push{id, 0, 0, {4, 1}, floats{grad}});
  auto [k2, b2] = send_rows(frame_kind::rows_pull, 2,
                            slice_meta{id, 0, 1, {}, 0, 3}, {}, {1, 4, 0});
  CHECK(k2 == frame_kind::reply);
  auto want = ask<shared_floats>(self, reference, pull_atom::value,
                                 rows_pull{id, 0, 1, {1, 4, 0}});
  CHECK(as_floats(b2).size() == 6);
  CHECK(as_floats(b2) == want.vec());
  // A body one row short, and the shard's own refusal (a row out of
  // range), come back as failures.
  auto [k3, b3] = send_rows(frame_kind::rows_pull, 3,
                            slice_meta{id, 0, 2, {}, 0, 3}, {}, {1, 4});
  CHECK(k3 == frame_kind::failure);
  auto [k4, b4] = send_rows(frame_kind::rows_pull, 4,
                            slice_meta{id, 0, 2, {}, 0, 1}, {}, {6});
  CHECK(k4 == frame_kind::failure);
  caf::error err;
  caf::binary_deserializer source{f.sys, b4};
  REQUIRE_FALSE(source(err));
  CHECK(code_of(err) == errc::unknown_key);
  // A rows_pull header that announces values does not decode.
  frame_header h;
  h.kind = frame_kind::rows_pull;
  auto bytes = encode(h, slice_meta{id, 0, 0, {}, 3, 1});
  CHECK(bytes.size() == 58);
  CHECK_FALSE(decode_meta(bytes));
  h.kind = frame_kind::rows_push;
  auto meta = decode_meta(encode(h, slice_meta{id, 3, 9, {}, 3, 7}));
  REQUIRE(meta);
  CHECK(meta->rows == 7);
  CHECK(meta->count == 3);
  CHECK(meta->seq == 9);
  client->close();
  f.server->close();
}

namespace {

// One worker, a coordinator and two shards; with `channel`, the worker's
// data requests travel over it.
struct small_job {
  std::vector<shard_actor> shards;
  coordinator_actor coord;
  worker_actor worker;

  small_job(caf::actor_system& sys, test::exit_guard& guard,
            std::shared_ptr<data_channel> channel = nullptr) {
    for (uint32_t i = 0; i < 2; ++i) {
      shard_config sc;
      sc.index = i;
      shards.push_back(guard(spawn_shard(sys, sc)));
    }
    coordinator_config cc;
    cc.num_workers = 1;
    cc.bigarray_bound = 64; // A key of 100 floats is cut over both shards.
    cc.shards = shards;
    coord = guard(spawn_coordinator(sys, cc));
    worker_config wc;
    wc.coordinator = coord;
    wc.shards = shards;
    wc.timeout = std::chrono::milliseconds{10000};
    wc.channel = std::move(channel);
    worker = guard(spawn_worker(sys, wc));
  }
};

} // namespace

TEST_CASE("ucx: the ingress drops the peers of a worker whose node went "
          "down",
          "[ucx]") {
  shard_config sc;
  sc.num_workers = 2;
  ingress_fixture f{sc};
  auto& server = f.server;
  auto& server_box = f.server_box;
  auto id = make_slice_id(0, 0);
  ask<caf::ok_atom>(f.self, f.shard, init_atom::value,
                    slice_init{id, floats{{1}}});
  // Worker `w` pulls with sequence number `seq`; true once answered.
  inbox boxes[2];
  std::unique_ptr<plane> clients[2]{start("s", boxes[0], true, 1),
                                    start("s", boxes[1], true, 2)};
  peer_id to_server[2]{clients[0]->connect(server->address()),
                       clients[1]->connect(server->address())};
  auto pull = [&](uint32_t w, uint64_t seq) {
    frame_header h;
    h.kind = frame_kind::pull;
    h.request = seq;
    clients[w]->send(to_server[w], encode(h, slice_meta{id, w, seq}),
                     payload{});
    return boxes[w].wait([&](inbox& x) { return x.headers.size() > seq; });
  };
  REQUIRE(pull(0, 0));
  REQUIRE(pull(1, 0));
  CHECK(server_box.down.empty());
  caf::anon_send(f.ingress, node_down_atom::value, uint32_t{0});
  REQUIRE(server_box.wait([](inbox& x) { return x.down.size() == 1; }));
  CHECK(server_box.down[0].find("worker 0 is down") != std::string::npos);
  // The other worker is still served, and still connected.
  REQUIRE(pull(1, 1));
  CHECK(server_box.down.size() == 1);
}

TEST_CASE("ucx: a connection acts only as the worker whose secret its hello "
          "proved",
          "[ucx]") {
  shard_config sc;
  sc.index = 0;
  sc.num_workers = 2;
  ingress_fixture f{sc};
  auto id = make_slice_id(1, 0);
  ask<caf::ok_atom>(f.self, f.shard, init_atom::value,
                    slice_init{id, floats{{5}}});
  auto pull = [&](plane& from, peer_id to, inbox& box, uint64_t req,
                  uint32_t worker) {
    frame_header h;
    h.kind = frame_kind::pull;
    h.request = req;
    from.send(to, encode(h, slice_meta{id, worker, 0}), payload{});
    return box.reply_to(req);
  };
  auto error_of = [&](const std::vector<char>& body) {
    caf::error err;
    caf::binary_deserializer source{f.sys, body};
    REQUIRE_FALSE(source(err));
    return err;
  };
  // Worker 0's plane: served as worker 0, refused as worker 1.
  inbox w0_box;
  auto w0 = start("s", w0_box, true, 1);
  auto w0_to = w0->connect(f.server->address());
  auto [k1, b1] = pull(*w0, w0_to, w0_box, 1, 0);
  CHECK(k1 == frame_kind::reply);
  CHECK(as_floats(b1) == std::vector<float>{5});
  auto [k2, b2] = pull(*w0, w0_to, w0_box, 2, 1);
  REQUIRE(k2 == frame_kind::failure);
  CHECK(code_of(error_of(b2)) == errc::unauthorized);
  // A batch in worker 1's name is refused before its body is read (its
  // ids take 16 bytes a slice once unpacked): even one whose ids do not
  // decode is answered as unauthorized, not as a bad body; in worker 0's
  // name, the same frame is a bad body.
  auto junk_batch = [&](uint64_t req, uint32_t worker) {
    frame_header h;
    h.kind = frame_kind::batch;
    h.request = req;
    auto junk = std::make_shared<std::vector<char>>(4, static_cast<char>(0x80));
    w0->send(
      w0_to,
      encode(
        h,
        batch_meta{worker, static_cast<uint8_t>(op_kind::pull), 2, 4, {}, 0}),
      payload{junk->data(), junk->size(), junk});
    auto [k, b] = w0_box.reply_to(req);
    REQUIRE(k == frame_kind::failure);
    return code_of(error_of(b));
  };
  CHECK(junk_batch(20, 1) == errc::unauthorized);
  CHECK(junk_batch(21, 0) == errc::bad_config);
  // A plane that proves the data secret only (as a server's does) is
  // admitted, but acts for no worker.
  inbox anon_box;
  auto anon = start("s", anon_box);
  auto anon_to = anon->connect(f.server->address());
  auto [k3, b3] = pull(*anon, anon_to, anon_box, 3, 1);
  REQUIRE(k3 == frame_kind::failure);
  CHECK(code_of(error_of(b3)) == errc::unauthorized);
  // One that claims worker 1 without its secret is not admitted at all:
  // the server never connects back to it, and it is never answered.
  plane_options forged;
  forged.secret = "s";
  forged.identity = 2;
  forged.identity_secret = test_secret_of(1);
  inbox forged_box;
  std::string error;
  auto liar = plane::start(forged, forged_box.handlers(), error);
  REQUIRE(liar);
  auto liar_to = liar->connect(f.server->address());
  frame_header h;
  h.kind = frame_kind::pull;
  h.request = 4;
  outcome sent;
  liar->send(liar_to, encode(h, slice_meta{id, 1, 0}), payload{},
             sent.callback());
  REQUIRE(sent.wait());
  // Worker 1's own plane, connecting after it, is served as worker 1.
  inbox w1_box;
  auto w1 = start("s", w1_box, true, 2);
  auto w1_to = w1->connect(f.server->address());
  auto [k4, b4] = pull(*w1, w1_to, w1_box, 5, 1);
  CHECK(k4 == frame_kind::reply);
  CHECK(forged_box.up.empty());
  CHECK(forged_box.bodies.empty());
  for (auto* p : {w0.get(), anon.get(), liar.get(), w1.get()})
    p->close();
}

TEST_CASE("ucx: a worker's data requests travel over the plane and give "
          "what CAF gives",
          "[ucx]") {
  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  test::exit_guard guard;
  // The server side: a plane whose request frames reach an ingress; the
  // worker side: a plane whose replies wake the worker.
  auto requests = std::make_shared<frame_queue>();
  std::atomic<int> frames_in{0};
  auto server = plane_into(requests, &frames_in);
  auto replies = std::make_shared<frame_queue>();
  // The worker of small_job is rank 0.
  auto client = plane_into(replies, nullptr, nullptr, 1);
  auto peer = client->connect(server->address());
  auto channel = make_worker_channel(sys, client, replies,
                                     {{0, peer}, {1, peer}});
  small_job over_ucx{sys, guard, channel};
  small_job over_caf{sys, guard};
  guard(spawn_ingress(sys, requests, server,
                      {{0, over_ucx.shards[0]}, {1, over_ucx.shards[1]}}));
  replies->set_target(caf::actor_cast<caf::actor>(over_ucx.worker));
  // The same calls on both jobs give the same values.
  std::vector<std::vector<float>> seen[2];
  int j = 0;
  for (auto* job : {&over_ucx, &over_caf}) {
    auto& w = job->worker;
    std::vector<float> start(100);
    std::iota(start.begin(), start.end(), 1.0f);
    ask<caf::ok_atom>(self, w, init_atom::value, std::string{"w"},
                      std::vector<uint64_t>{100}, floats{start});
    ask<caf::ok_atom>(self, w, init_atom::value, std::string{"b"},
                      std::vector<uint64_t>{3}, floats{{1, 2, 3}});
    std::vector<float> grad(100, 0.5f);
    ask<caf::ok_atom>(self, w, push_atom::value, std::string{"w"}, int32_t{0},
                      float_parts{grad});
    seen[j].push_back(
      ask<float_parts>(self, w, pull_atom::value, std::string{"w"}, int32_t{1})
        .flatten());
    seen[j].push_back(ask<float_parts>(self, w, push_pull_atom::value,
                                       std::string{"w"}, int32_t{0},
                                       float_parts{grad})
                        .flatten());
    // Several keys in one call (batched per shard).
    std::vector<float> both(103, 2.0f);
    ask<caf::ok_atom>(self, w, push_atom::value,
                      std::vector<std::string>{"w", "b"}, int32_t{0},
                      float_parts{both});
    seen[j].push_back(ask<float_parts>(self, w, pull_atom::value,
                                       std::vector<std::string>{"w", "b"},
                                       int32_t{0})
                        .flatten());
    ++j;
  }
  CHECK(seen[0] == seen[1]);
  CHECK(seen[0].size() == 3);
  // The requests did cross the plane (not CAF).
  CHECK(frames_in.load() >= 5);
  client->close();
  server->close();
}

TEST_CASE("ucx: a request frame with priority overtakes the shard's backlog",
          "[ucx]") {
  // One scheduler thread, which the test blocks while the frames arrive:
  // the ingress then hands all of them to the shard at once.
  system_options so;
  so.threads = 1;
  system_config cfg{so};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  test::exit_guard guard;
  shard_config sc;
  sc.num_workers = 2;
  auto shard = guard(spawn_shard(sys, sc));
  optimizer_config acc;
  acc.name = "accumulate";
  ask<caf::ok_atom>(self, shard, set_opt_atom::value, acc);
  constexpr auto slice = make_slice_id(1, 0);
  ask<caf::ok_atom>(self, shard, init_atom::value, slice_init{slice, {{0}}});
  auto queue = std::make_shared<frame_queue>();
  std::atomic<int> frames_in{0};
  auto server = plane_into(queue, &frames_in);
  guard(spawn_ingress(sys, queue, server, {{0, shard}}));
  // Worker 0's plane pushes, worker 1's pulls.
  inbox client_box;
  auto client = start("s", client_box, true, 1);
  auto to_server = client->connect(server->address());
  inbox puller_box;
  auto puller = start("s", puller_box, true, 2);
  auto puller_to_server = puller->connect(server->address());
  uint64_t next_request = 1;
  uint64_t push_seq = 0;
  uint64_t pull_seq = 0;
  auto frames_reach = [&](int n) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (frames_in.load() < n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    return frames_in.load() == n;
  };
  auto pulled_after_backlog = [&](int32_t priority) {
    test::thread_blocker blocker{sys};
    auto frames_before = frames_in.load();
    auto replies_before = client_box.bodies.size();
    auto pulls_before = puller_box.bodies.size();
    // Worker 0 pushes 1 twenty times at priority 0; worker 1 then pulls.
    auto one = std::make_shared<std::vector<float>>(1, 1.0f);
    for (int i = 0; i < 20; ++i) {
      frame_header h{frame_kind::push, next_request++, 0, 0};
      client->send(to_server,
                   encode(h, slice_meta{slice, 0, push_seq++, {}, 1}),
                   payload{one->data(), sizeof(float), one});
    }
    // Every frame waits in the ingress's queue before the thread is free,
    // the pull behind the pushes.
    REQUIRE(frames_reach(frames_before + 20));
    auto pull_request = next_request++;
    frame_header h{frame_kind::pull, pull_request, 0, priority};
    puller->send(puller_to_server, encode(h, slice_meta{slice, 1, pull_seq++}),
                 payload{});
    REQUIRE(frames_reach(frames_before + 21));
    blocker.release();
    REQUIRE(client_box.wait(
      [&](inbox& x) { return x.bodies.size() == replies_before + 20; }));
    REQUIRE(puller_box.wait(
      [&](inbox& x) { return x.bodies.size() == pulls_before + 1; }));
    std::lock_guard<std::mutex> lock{puller_box.mtx};
    auto& last = puller_box.headers.back().second;
    REQUIRE(decode(last)->request == pull_request);
    return as_floats(puller_box.bodies.back()).at(0);
  };
  // At priority 10 the pull is applied before the 20 queued pushes.
  CHECK(pulled_after_backlog(10) == 0.0f);
  // At priority 0 it waits behind them (20 more on top of the first 20).
  CHECK(pulled_after_backlog(0) == 40.0f);
  client->close();
  puller->close();
  server->close();
}

TEST_CASE("ucx: a sliced 64 MB key and batches of 1000 and 10000 keys come "
          "back exact, compressed or not",
          "[ucx]") {
  auto codec_name = GENERATE(as<std::string>{}, "none", "fp16");
  INFO(codec_name);
  coordinator_options co;
  co.token = "tok";
  co.transport = transport::ucx;
  test::coordinator_thread coordinator{co};
  auto port = coordinator.port();
  server_options so;
  so.coordinator = endpoint{"127.0.0.1", port};
  so.token = "tok";
  so.shards = 2;
  caf::error server_err;
  std::thread server{[&] { server_err = run_server(so, [](uint32_t) {}); }};
  store_options o;
  o.coordinator = "127.0.0.1:" + std::to_string(port);
  o.token = "tok";
  o.compression = *parse_compression(codec_name);
  {
    auto kv = kvstore::create("dist_sync", o);
    REQUIRE(kv);
    optimizer_config acc;
    acc.name = "accumulate";
    REQUIRE_FALSE(kv->set_optimizer(acc));
    // Small integers: fp16 keeps them, and their sums, exactly.
    auto pattern = [](size_t n, int salt) {
      Eigen::VectorXf v(static_cast<Eigen::Index>(n));
      for (Eigen::Index i = 0; i < v.size(); ++i)
        v[i] = static_cast<float>((i + salt) % 64);
      return v;
    };
    // One key of 16M floats, cut into 16 slices over both shards.
    const size_t big_n = size_t{16} << 20;
    auto big = pattern(big_n, 0);
    REQUIRE_FALSE(kv->init("big", Eigen::VectorXf::Zero(big.size())));
    // Many keys, each group pushed and pulled in one call per shard.
    auto many = [](size_t keys, size_t floats, const std::string& prefix) {
      std::vector<std::string> names;
      std::vector<Eigen::VectorXf> values;
      for (size_t k = 0; k < keys; ++k) {
        names.push_back(prefix + std::to_string(k));
        values.push_back(Eigen::VectorXf(static_cast<Eigen::Index>(floats)));
        for (Eigen::Index i = 0; i < values.back().size(); ++i)
          values.back()[i] = static_cast<float>((k + 3 * i) % 64);
      }
      return std::make_pair(names, values);
    };
    auto [names_a, grads_a] = many(1000, 1024, "a");
    auto [names_b, grads_b] = many(10000, 1, "b");
    for (auto* group : {&names_a, &names_b})
      for (auto& name : *group)
        REQUIRE_FALSE(
          kv->init(name, Eigen::VectorXf::Zero(group == &names_a ? 1024 : 1)));
    auto refs = [](std::vector<Eigen::VectorXf>& xs) {
      return std::vector<Eigen::Ref<Eigen::VectorXf>>(xs.begin(), xs.end());
    };
    auto crefs = [](const std::vector<Eigen::VectorXf>& xs) {
      return std::vector<Eigen::Ref<const Eigen::VectorXf>>(xs.begin(),
                                                            xs.end());
    };
    // Two rounds: every value ends as twice its gradient.
    for (int round = 0; round < 2; ++round) {
      REQUIRE_FALSE(kv->push("big", big));
      REQUIRE_FALSE(kv->push_many(names_a, crefs(grads_a)));
      REQUIRE_FALSE(kv->push_many(names_b, crefs(grads_b)));
    }
    Eigen::VectorXf big_out(big.size());
    auto outs_a = grads_a;
    auto outs_b = grads_b;
    auto t1 = kv->pull("big", big_out);
    auto t2 = kv->pull_many(names_a, refs(outs_a));
    auto t3 = kv->pull_many(names_b, refs(outs_b));
    REQUIRE(t1);
    REQUIRE(t2);
    REQUIRE(t3);
    REQUIRE_FALSE(kv->wait_all());
    CHECK(big_out == 2 * big);
    bool a_exact = true;
    for (size_t k = 0; k < outs_a.size(); ++k)
      a_exact = a_exact && outs_a[k] == 2 * grads_a[k];
    CHECK(a_exact);
    bool b_exact = true;
    for (size_t k = 0; k < outs_b.size(); ++k)
      b_exact = b_exact && outs_b[k] == 2 * grads_b[k];
    CHECK(b_exact);
    REQUIRE_FALSE(kv->close());
  }
  server.join();
  auto coord_err = coordinator.join();
  CHECK_FALSE(server_err);
  CHECK_FALSE(coord_err);
}
