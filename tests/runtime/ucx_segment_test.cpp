// SPDX-License-Identifier: BSD-3-Clause
// The data plane's shared-memory lane between planes of one host: segments
// on their own, then planes that send their large messages through them.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/ucx/ingress.hpp"
#include "runtime/ucx/plane.hpp"
#include "runtime/ucx/segment.hpp"
#include "runtime/ucx/testing.hpp"
#include "tests/integration/process.hpp"
#include "tests/runtime/ucx_pair.hpp"
#include "tests/runtime/ucx_planes.hpp"

using namespace actorps;
using namespace actorps::ucx;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<out_segment> make_segment(std::size_t size) {
  std::string error;
  auto x = out_segment::create(size, error);
  INFO(error);
  REQUIRE(x);
  return x;
}

std::unique_ptr<in_segment> map_segment(const segment_info& info,
                                        std::size_t max_size = 1 << 30) {
  std::string error;
  auto x = in_segment::open(info, max_size, error);
  INFO(error);
  REQUIRE(x);
  return x;
}

// The permissions ("rw-s", ...) of the mapping of this process that holds
// `at` ("" if none does).
std::string permissions_at(const void* at) {
  auto where = reinterpret_cast<std::uintptr_t>(at);
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  REQUIRE(maps != nullptr);
  char line[512];
  std::string found;
  while (std::fgets(line, sizeof(line), maps) != nullptr) {
    unsigned long from = 0;
    unsigned long to = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%lx-%lx %4s", &from, &to, perms) == 3
        && where >= from && where < to) {
      found = perms;
      break;
    }
  }
  std::fclose(maps);
  return found;
}

// Files of planes' segments this process holds open (what another process
// of its user could open through /proc/PID/fd).
int open_segment_files() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    auto path = "/proc/self/fd/" + std::to_string(fd);
    char target[64] = {};
    if (::readlink(path.c_str(), target, sizeof(target) - 1) > 0
        && std::strncmp(target, "/memfd:actorps-plane", 20) == 0)
      ++n;
  }
  return n;
}

} // namespace

TEST_CASE("ucx segment: closed once mapped, its file can no longer be "
          "opened, and both mappings still share it",
          "[ucx]") {
  auto out = make_segment(1 << 20);
  CHECK(open_segment_files() == 1);
  auto in = map_segment(out->info());
  out->close_file();
  CHECK(open_segment_files() == 0);
  std::string error;
  CHECK_FALSE(in_segment::open(out->info(), 1 << 30, error));
  auto slot = out->reserve(1000);
  REQUIRE(slot);
  std::memset(out->data(*slot), 'x', 1000);
  std::vector<char> got(in->at(*slot), in->at(*slot) + 1000);
  CHECK(got == std::vector<char>(1000, 'x'));
  // The reader maps the messages read-only (a stray write would fault).
  CHECK(permissions_at(in->at(*slot)).substr(0, 2) == "r-");
  CHECK(permissions_at(out->data(*slot)).substr(0, 2) == "rw");
}

TEST_CASE("ucx segment: each slot takes the lowest place with room, and "
          "places come back in whatever order the reader frees them",
          "[ucx]") {
  constexpr std::size_t size = 1 << 20;
  auto out = make_segment(size);
  auto in = map_segment(out->info());
  constexpr std::size_t third = 300 << 10;
  std::vector<segment_slot> slots;
  for (int i = 0; i < 3; ++i) {
    auto x = out->reserve(third);
    REQUIRE(x);
    std::memset(out->data(*x), 'a' + i, third);
    slots.push_back(*x);
  }
  CHECK(slots[0].offset == 0);
  CHECK(slots[1].offset >= third);
  CHECK(slots[2].offset >= slots[1].offset + third);
  // No room for a fourth, nor for one larger than the segment.
  CHECK_FALSE(out->reserve(third));
  CHECK_FALSE(out->reserve(size + 1));
  CHECK_FALSE(out->reserve(0));
  CHECK(out->in_flight() == 3);
  // The reader sees what the writer wrote.
  for (int i = 0; i < 3; ++i) {
    REQUIRE(in->valid(slots[i]));
    std::vector<char> got(in->at(slots[i]), in->at(slots[i]) + third);
    CHECK(got == std::vector<char>(third, static_cast<char>('a' + i)));
  }
  // The middle one freed: its place is the only one with room.
  in->release(slots[1]);
  auto middle = out->reserve(third);
  REQUIRE(middle);
  CHECK(middle->offset == slots[1].offset);
  CHECK_FALSE(out->reserve(third));
  // The first freed: a smaller one goes to the start, a larger one finds
  // no gap that fits.
  in->release(slots[0]);
  CHECK_FALSE(out->reserve(third + 4096));
  auto start = out->reserve(1000);
  REQUIRE(start);
  CHECK(start->offset == 0);
  auto after = out->reserve(1000);
  REQUIRE(after);
  CHECK(after->offset == 1024);
  // A slot given back by the writer (never announced) is free as well.
  out->cancel(*start);
  auto again = out->reserve(64);
  REQUIRE(again);
  CHECK(again->offset == 0);
  // Everything freed: the whole segment in one.
  for (auto* x : {&*again, &*after, &*middle, &slots[2]})
    in->release(*x);
  auto whole = out->reserve(size);
  REQUIRE(whole);
  CHECK(whole->offset == 0);
  CHECK(out->in_flight() == 1);
}

TEST_CASE("ucx segment: at most segment_slots messages are in flight",
          "[ucx]") {
  auto out = make_segment(1 << 20);
  auto in = map_segment(out->info());
  std::vector<segment_slot> slots;
  while (auto x = out->reserve(64))
    slots.push_back(*x);
  CHECK(slots.size() == segment_slots);
  in->release(slots.front());
  CHECK(out->reserve(64));
}

TEST_CASE("ucx segment: a reader refuses a place outside the segment",
          "[ucx]") {
  constexpr std::size_t size = 1 << 20;
  auto out = make_segment(size);
  auto in = map_segment(out->info());
  CHECK(in->valid(segment_slot{0, size, 0}));
  CHECK(in->valid(segment_slot{size - 1, 1, segment_slots - 1}));
  CHECK_FALSE(in->valid(segment_slot{0, 0, 0}));
  CHECK_FALSE(in->valid(segment_slot{0, size + 1, 0}));
  CHECK_FALSE(in->valid(segment_slot{size, 1, 0}));
  CHECK_FALSE(in->valid(segment_slot{1, size, 0}));
  CHECK_FALSE(in->valid(segment_slot{~uint64_t{0}, 2, 0}));
  CHECK_FALSE(in->valid(segment_slot{8, ~uint64_t{0} - 4, 0}));
  CHECK_FALSE(in->valid(segment_slot{0, 8, segment_slots}));
}

TEST_CASE("ucx segment: a reader opens only the sealed segment announced",
          "[ucx]") {
  auto out = make_segment(1 << 20);
  std::string error;
  SECTION("another size") {
    auto info = out->info();
    info.size += 4096;
    CHECK_FALSE(in_segment::open(info, 1 << 30, error));
    CHECK(error.find("size announced") != std::string::npos);
  }
  SECTION("more than the reader allows") {
    CHECK_FALSE(in_segment::open(out->info(), (1 << 20) - 1, error));
    CHECK(error.find("a segment of") != std::string::npos);
    auto huge = out->info();
    huge.size = ~uint64_t{0};
    CHECK_FALSE(in_segment::open(huge, ~std::size_t{0}, error));
  }
  SECTION("another tag") {
    auto info = out->info();
    info.tag[3] ^= 1;
    CHECK_FALSE(in_segment::open(info, 1 << 30, error));
    CHECK(error.find("tag") != std::string::npos);
  }
  SECTION("a file descriptor that is not open") {
    auto info = out->info();
    info.fd = 1 << 20;
    CHECK_FALSE(in_segment::open(info, 1 << 30, error));
    CHECK(error.find("no memfd") != std::string::npos);
  }
  // A file of the segment's size at `fd`, announced in its place, is
  // refused with `why` in the error.
  auto refused = [&](int fd, const std::string& why) {
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, 4096 + (1 << 20)) == 0);
    auto info = out->info();
    info.fd = static_cast<uint32_t>(fd);
    CHECK_FALSE(in_segment::open(info, 1 << 30, error));
    CHECK(error.find(why) != std::string::npos);
    ::close(fd);
  };
  SECTION("a memory file without seals: its writer could shrink it under "
          "the reader") {
    refused(::memfd_create("unsealed", MFD_CLOEXEC), "sealed");
  }
  SECTION("a regular file") {
    char path[] = "/tmp/actorps-segment-XXXXXX";
    int fd = ::mkstemp(path);
    ::unlink(path);
    refused(fd, "no memfd");
  }
  SECTION("announcements that are not one") {
    auto bytes = encode(out->info());
    segment_info back;
    REQUIRE(decode(bytes.data(), bytes.size(), back));
    CHECK(back.pid == out->info().pid);
    CHECK(back.fd == out->info().fd);
    CHECK(back.size == out->info().size);
    CHECK(std::memcmp(back.tag, out->info().tag, segment_tag_size) == 0);
    CHECK_FALSE(decode(bytes.data(), bytes.size() - 1, back));
    bytes[0] ^= 1;
    CHECK_FALSE(decode(bytes.data(), bytes.size(), back));
  }
}

using test::bytes;
using test::check_numbered;
using test::counting;
using test::inbox;
using test::pair_of_planes;
using test::same;
using test::start_plane;

TEST_CASE("ucx: large messages to a plane of this host go through a shared "
          "segment, both ways, exactly and in order",
          "[ucx]") {
  pair_of_planes job{8 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  // Large ones (through the segment), a small one between them (through
  // UCX), and pieces gathered into one body.
  std::vector<std::shared_ptr<std::vector<float>>> sent;
  for (int i = 0; i < 6; ++i)
    sent.push_back(counting(std::size_t{256} << 10, 1000.0f * i));
  for (int i = 0; i < 3; ++i)
    a->send(to_b, bytes("l" + std::to_string(i)),
            payload{sent[i]->data(), sent[i]->size() * sizeof(float), sent[i]});
  std::string small = "small";
  a->send(to_b, bytes("s"), payload{small.data(), small.size()});
  auto half = sent[3]->size() * sizeof(float) / 2;
  auto* base = reinterpret_cast<const char*>(sent[3]->data());
  a->send(to_b, bytes("pieces"),
          payload{{{base, half}, {base + half, half}}, sent[3]});
  REQUIRE(b_box.wait([](inbox& x) { return x.bodies.size() == 6; }));
  CHECK(a->shared_sends() == 4);
  std::vector<std::string> large_order;
  for (std::size_t i = 1; i < b_box.headers.size(); ++i) {
    std::string h{b_box.headers[i].second.begin(),
                  b_box.headers[i].second.end()};
    if (h == "s") {
      CHECK(b_box.bodies[i] == bytes("small"));
      continue;
    }
    large_order.push_back(h);
    auto k = h == "pieces" ? 3 : std::stoi(h.substr(1));
    CHECK(same(b_box.bodies[i], *sent[k]));
  }
  CHECK(large_order == std::vector<std::string>{"l0", "l1", "l2", "pieces"});
  // And back: B's answers through its own segment.
  for (int i = 4; i < 6; ++i)
    b->send(to_a, bytes("r" + std::to_string(i)),
            payload{sent[i]->data(), sent[i]->size() * sizeof(float), sent[i]});
  REQUIRE(a_box.wait([](inbox& x) { return x.bodies.size() == 3; }));
  CHECK(b->shared_sends() == 2);
  // Each writer closed its segment's file once its reader mapped it.
  CHECK(open_segment_files() == 0);
  CHECK(same(a_box.bodies[1], *sent[4]));
  CHECK(same(a_box.bodies[2], *sent[5]));
  CHECK(a_box.down.empty());
  CHECK(b_box.down.empty());
}

TEST_CASE("ucx: messages beyond a segment's free room go through UCX, "
          "none lost",
          "[ucx]") {
  // A 1 MB segment and 24 messages of 512 KB sent at once: some go through
  // the segment, the others through UCX, all arrive whole.
  pair_of_planes job{1 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  // B reads nothing from the first message's arrival until all are sent.
  std::promise<void> open_gate;
  {
    std::lock_guard<std::mutex> guard{b_box.mtx};
    b_box.gate_at_zero = open_gate.get_future().share();
  }
  constexpr int n = 24;
  std::vector<std::shared_ptr<std::vector<float>>> sent;
  for (int i = 0; i < n; ++i) {
    sent.push_back(counting(std::size_t{128} << 10, 10.0f * i));
    a->send(to_b, bytes(std::to_string(i)),
            payload{sent[i]->data(), sent[i]->size() * sizeof(float), sent[i]});
  }
  // Two fit in the segment; a third if B had read the first (it frees the
  // first's slot before it waits), none after.
  CHECK(a->shared_sends() >= 2);
  CHECK(a->shared_sends() <= 3);
  open_gate.set_value();
  REQUIRE(b_box.wait([](inbox& x) { return x.bodies.size() == n + 1; }));
  CHECK(a->shared_sends() >= 2);
  CHECK(a->shared_sends() < n);
  check_numbered(b_box, sent);
}

TEST_CASE("ucx: a message is read where it lies in the segment until views "
          "kept take a quarter of it, each kept until its last copy goes",
          "[ucx]") {
  // A 4 MB segment: messages of 256 KB are read where they lie while those
  // kept that way take at most 1 MB.
  pair_of_planes job{4 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  {
    std::lock_guard<std::mutex> guard{b_box.mtx};
    b_box.keep_buffers = true;
  }
  std::vector<std::shared_ptr<std::vector<float>>> sent;
  // Sends message i and returns what B received (and keeps).
  auto exchange = [&, &a = a, &to_b = to_b, &b_box = b_box](int i) {
    sent.push_back(counting(std::size_t{64} << 10, 100.0f * i));
    a->send(to_b, bytes(std::to_string(i)),
            payload{sent[i]->data(), sent[i]->size() * sizeof(float), sent[i]});
    auto n = static_cast<std::size_t>(i) + 1;
    REQUIRE(b_box.wait([n](inbox& x) { return x.buffers.size() == n; }));
    std::lock_guard<std::mutex> guard{b_box.mtx};
    auto x = b_box.buffers.at(i);
    CHECK(same(x.bytes(), *sent[i]));
    return x;
  };
  auto let_go = [&, &b_box = b_box](int i) {
    std::lock_guard<std::mutex> guard{b_box.mtx};
    b_box.buffers.at(i) = ucx::buffer{};
  };
  for (int i = 0; i < 4; ++i)
    CHECK(exchange(i).is_view());
  // A fifth would take more than a quarter: copied out.
  CHECK_FALSE(exchange(4).is_view());
  // B lets go of the first, but a copy of it lives on; then of the copy.
  auto copy = exchange(5);
  CHECK_FALSE(copy.is_view());
  {
    std::lock_guard<std::mutex> guard{b_box.mtx};
    copy = b_box.buffers.at(0);
  }
  let_go(0);
  CHECK_FALSE(exchange(6).is_view());
  copy = ucx::buffer{};
  CHECK(exchange(7).is_view());
  CHECK(a->shared_sends() == 8);
  // A view outlives both planes: the mapping stays while it is held.
  auto last = exchange(8);
  CHECK_FALSE(last.is_view());
  last = [&, &b_box = b_box] {
    std::lock_guard<std::mutex> guard{b_box.mtx};
    auto x = b_box.buffers.at(7);
    b_box.buffers.clear();
    return x;
  }();
  REQUIRE(last.is_view());
  job.b.reset();
  job.a.reset();
  // Moved, the view goes along; what it was moved from is empty.
  auto moved = std::move(last);
  CHECK(last.size() == 0);
  CHECK_FALSE(last.is_view());
  last = std::move(moved);
  CHECK(same(last.bytes(), *sent[7]));
  // Taken as floats, it is copied and let go of.
  std::vector<float> floats;
  REQUIRE(last.take_floats(floats));
  CHECK(floats == *sent[7]);
  CHECK_FALSE(last.is_view());
  CHECK(last.size() == 0);
}

TEST_CASE("ucx: a peer that cannot map a plane's segment gets everything "
          "through UCX",
          "[ucx]") {
  // B takes bodies of at most 1 MB, so it refuses A's 8 MB segment.
  pair_of_planes job{8 << 20, 1 << 20};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  auto x = counting(std::size_t{200} << 10, 5.0f);
  a->send(to_b, bytes("large"),
          payload{x->data(), x->size() * sizeof(float), x});
  REQUIRE(b_box.wait([](inbox& r) { return r.bodies.size() == 2; }));
  CHECK(same(b_box.bodies[1], *x));
  CHECK(a->shared_sends() == 0);
  // B's own segment, which A took, still carries B's large messages.
  b->send(to_a, bytes("back"),
          payload{x->data(), x->size() * sizeof(float), x});
  REQUIRE(a_box.wait([](inbox& r) { return r.bodies.size() == 2; }));
  CHECK(same(a_box.bodies[1], *x));
  CHECK(b->shared_sends() == 1);
}

TEST_CASE("ucx: an admitted peer that names a place outside its segment is "
          "cut off; an unadmitted one is not heard",
          "[ucx]") {
  constexpr std::size_t segment = 1 << 20;
  pair_of_planes job{segment};
  auto& [a_box, b_box, a, b, to_b, to_a] = job;
  struct bad {
    uint64_t offset;
    uint64_t length;
    uint32_t index;
  };
  auto which = GENERATE(bad{segment, 1, 0}, bad{0, segment + 1, 0},
                        bad{8, ~uint64_t{0} - 4, 0}, bad{0, 64, segment_slots});
  plane_testing::send_shared(*a, to_b, which.offset, which.length, which.index,
                             bytes("bad"));
  REQUIRE(b_box.wait([](inbox& x) { return !x.down.empty(); }));
  CHECK(b_box.down[0].find("outside its shared segment") != std::string::npos);
  CHECK(b_box.count() == 1);
  // An intruder without the secret, naming a place in a segment it never
  // offered, is dropped unread (B takes a legitimate peer afterwards).
  inbox intruder_box;
  auto intruder = start_plane(intruder_box, segment, "guessed");
  auto to_b2 = intruder->connect(b->address());
  plane_testing::send_shared(*intruder, to_b2, 0, 64, 0, bytes("x"));
  CHECK(plane_testing::wait_unheard(*b, 1, 10s));
  inbox c_box;
  auto c = start_plane(c_box, segment);
  auto c_to_b = c->connect(b->address());
  c->send(c_to_b, bytes("ok"), payload{});
  REQUIRE(b_box.wait([](inbox& x) { return x.bodies.size() == 2; }));
  CHECK(b_box.headers[1].second == bytes("ok"));
  CHECK(b_box.down.size() == 1);
}

TEST_CASE("ucx: a peer killed while it sends through its segment takes "
          "nothing down",
          "[ucx]") {
  // A process on this host floods A with 256 KB messages through its
  // segment and is killed in the middle, three times; A lives on, is told
  // of each death by UCX, and C's large messages still get through.
  inbox a_box;
  auto a = start_plane(a_box, 8 << 20);
  inbox c_box;
  auto c = start_plane(c_box, 8 << 20);
  auto c_to_a = c->connect(a->address());
  auto hex = test::hex_of(a->address());
  auto x = counting(std::size_t{64} << 10, 3.0f);
  for (int kill = 0; kill < 3; ++kill) {
    INFO("kill " << kill);
    auto before = a_box.count();
    test::process sender{{ACTORPS_UCX_SENDER_BIN, hex, "job-secret", "large"}};
    REQUIRE(sender.wait_for("shared\n", 30s));
    REQUIRE(a_box.wait([&](inbox& r) { return r.bodies.size() >= before + 20; },
                       30s));
    sender.kill9();
    REQUIRE(sender.wait_exit(30s));
    REQUIRE(a_box.wait(
      [&](inbox& r) { return r.down.size() == std::size_t(kill + 1); }, 60s));
    auto note = "after kill " + std::to_string(kill);
    c->send(c_to_a, bytes(note),
            payload{x->data(), x->size() * sizeof(float), x});
    REQUIRE(a_box.wait([&](inbox& r) {
      return !r.headers.empty() && r.headers.back().second == bytes(note);
    }));
    std::lock_guard<std::mutex> guard{a_box.mtx};
    CHECK(same(a_box.bodies.back(), *x));
    // Every flooded message that arrived is whole.
    for (std::size_t i = before; i + 1 < a_box.bodies.size(); ++i)
      if (a_box.headers[i].second == bytes("spam"))
        CHECK(a_box.bodies[i] == std::vector<char>(256 << 10, 'x'));
  }
  CHECK(c->shared_sends() >= 3);
}

namespace {

// Puts environment variable `name` back as it was at the end of a test.
struct saved_env {
  std::string name;
  std::string old;
  bool had = false;

  explicit saved_env(std::string n) : name(std::move(n)) {
    if (auto* x = std::getenv(name.c_str())) {
      old = x;
      had = true;
    }
  }

  ~saved_env() {
    if (had)
      ::setenv(name.c_str(), old.c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

} // namespace

TEST_CASE("ucx: ACTORPS_UCX_SEGMENT_MB sizes the segments, and a value that "
          "is no size is refused by name",
          "[ucx]") {
  saved_env guard{"ACTORPS_UCX_SEGMENT_MB"};
  std::size_t bytes = 1;
  std::string error;
  ::unsetenv("ACTORPS_UCX_SEGMENT_MB");
  REQUIRE(segment_size_from_env(bytes, error));
  CHECK(bytes == default_segment_mb << 20);
  ::setenv("ACTORPS_UCX_SEGMENT_MB", "0", 1);
  REQUIRE(segment_size_from_env(bytes, error));
  CHECK(bytes == 0);
  ::setenv("ACTORPS_UCX_SEGMENT_MB", "16", 1);
  REQUIRE(segment_size_from_env(bytes, error));
  CHECK(bytes == std::size_t{16} << 20);
  for (auto bad : {"", "abc", "-1", "1.5", "16M", "1025", "99999999999"}) {
    INFO(bad);
    ::setenv("ACTORPS_UCX_SEGMENT_MB", bad, 1);
    error.clear();
    CHECK_FALSE(segment_size_from_env(bytes, error));
    CHECK(error.find("ACTORPS_UCX_SEGMENT_MB") != std::string::npos);
  }
}

TEST_CASE("ucx: ACTORPS_UCX_CALLER_PROGRESS turns a waiting caller's own "
          "receiving on or off, and another value is refused by name",
          "[ucx]") {
  saved_env guard{"ACTORPS_UCX_CALLER_PROGRESS"};
  bool on = false;
  std::string error;
  ::unsetenv("ACTORPS_UCX_CALLER_PROGRESS");
  REQUIRE(caller_progress_from_env(on, error));
  CHECK(on);
  ::setenv("ACTORPS_UCX_CALLER_PROGRESS", "0", 1);
  REQUIRE(caller_progress_from_env(on, error));
  CHECK_FALSE(on);
  REQUIRE(plane_settings_ok(error));
  ::setenv("ACTORPS_UCX_CALLER_PROGRESS", "1", 1);
  REQUIRE(caller_progress_from_env(on, error));
  CHECK(on);
  for (auto bad : {"", "yes", "2", "01", "on"}) {
    INFO(bad);
    ::setenv("ACTORPS_UCX_CALLER_PROGRESS", bad, 1);
    error.clear();
    CHECK_FALSE(caller_progress_from_env(on, error));
    CHECK(error.find("ACTORPS_UCX_CALLER_PROGRESS") != std::string::npos);
    error.clear();
    CHECK_FALSE(plane_settings_ok(error));
    CHECK(error.find("ACTORPS_UCX_CALLER_PROGRESS") != std::string::npos);
  }
}
