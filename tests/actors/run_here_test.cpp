// SPDX-License-Identifier: BSD-3-Clause
// detail::send_and_run on CAF's real scheduler (it is meaningless on the
// test scheduler, which the other actor tests use).
#include "actors/run_here.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/after.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/send.hpp"
#include "caf/spawn_options.hpp"
#include "caf/system_messages.hpp"
#include "caf/weak_intrusive_ptr.hpp"

namespace {

// An actor system with CAF's work-sharing scheduler, the one send_and_run
// runs actors under.
struct sharing_config : caf::actor_system_config {
  sharing_config() {
    set("scheduler.policy", caf::atom("sharing"));
  }
};

uint64_t this_thread() {
  return std::hash<std::thread::id>{}(std::this_thread::get_id());
}

// Sends `x` to `dest` as a request of `self` through send_and_run and
// returns the reply's id; `ran`, if given, gets what send_and_run returned
// (whether this thread ran `dest`).
caf::message_id ask_here(caf::scoped_actor& self, const caf::actor& dest,
                         int32_t x, bool* ran = nullptr) {
  auto id = self->new_request_id(caf::message_priority::normal);
  auto here = actorps::detail::send_and_run(self->ctrl(), id, dest,
                                            caf::make_message(x));
  if (ran != nullptr)
    *ran = here;
  return id.response_id();
}

// The thread that answered the request `mid`, or 0 if no answer came
// within `wait`.
uint64_t answer(caf::scoped_actor& self, caf::message_id mid,
                std::chrono::milliseconds wait) {
  uint64_t got = 0;
  caf::blocking_actor::accept_one_cond rc;
  self->varargs_receive(
    rc, mid, [&](uint64_t x) { got = x; }, caf::after(wait) >> [] {});
  return got;
}

// The thread that answered a request to `dest` sent through send_and_run.
uint64_t answered(caf::scoped_actor& self, const caf::actor& dest) {
  return answer(self, ask_here(self, dest, 1), std::chrono::seconds{30});
}

// An actor that answers an int32_t with the thread it runs on. Lazy: it
// starts idle, not scheduled for a first run of its own.
caf::actor spawn_echo(caf::actor_system& sys) {
  return sys.spawn<caf::lazy_init>(
    [](caf::event_based_actor*) -> caf::behavior {
      return {[](int32_t) { return this_thread(); }};
    });
}

} // namespace

TEST_CASE("run_here: an idle actor runs on the sending thread, and its reply "
          "reaches the sender",
          "[run_here]") {
  sharing_config cfg;
  caf::actor_system sys{cfg};
  REQUIRE(actorps::detail::can_run_here(sys));
  auto echo = spawn_echo(sys);
  caf::scoped_actor self{sys};
  // Twice: the second time the actor's last context is this thread's unit.
  for (int i = 0; i < 2; ++i) {
    bool ran = false;
    auto mid = ask_here(self, echo, i, &ran);
    CHECK(ran);
    CHECK(answer(self, mid, std::chrono::seconds{30}) == this_thread());
  }
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}

TEST_CASE("run_here: an actor running on another thread is only sent to",
          "[run_here]") {
  sharing_config cfg;
  caf::actor_system sys{cfg};
  std::promise<void> entered;
  std::promise<void> release;
  auto released = release.get_future().share();
  auto busy = sys.spawn([&](caf::event_based_actor*) -> caf::behavior {
    return {
      [&](const std::string&) {
        // Holds its thread until the test lets go.
        entered.set_value();
        released.wait();
      },
      [](int32_t) { return this_thread(); },
    };
  });
  caf::anon_send(busy, std::string{"hold"});
  entered.get_future().wait();
  caf::scoped_actor self{sys};
  bool ran = true;
  auto mid = ask_here(self, busy, 1, &ran);
  // send_and_run returned while the actor is still inside its first
  // handler: it could not run it here, and says so.
  CHECK_FALSE(ran);
  release.set_value();
  auto got = answer(self, mid, std::chrono::seconds{30});
  CHECK(got != 0);
  CHECK(got != this_thread());
  caf::anon_send_exit(busy, caf::exit_reason::user_shutdown);
}

TEST_CASE("run_here: what the actor wakes while it runs here runs elsewhere",
          "[run_here]") {
  sharing_config cfg;
  caf::actor_system sys{cfg};
  auto inner = spawn_echo(sys);
  std::atomic<uint64_t> outer_thread{0};
  auto outer = sys.spawn<caf::lazy_init>(
    [inner, &outer_thread](caf::event_based_actor* self) -> caf::behavior {
      return {[self, inner, &outer_thread](int32_t x) {
        outer_thread = this_thread();
        return self->delegate(inner, x);
      }};
    });
  caf::scoped_actor self{sys};
  auto got = answered(self, outer);
  CHECK(outer_thread == this_thread());
  CHECK(got != 0);
  CHECK(got != this_thread());
  caf::anon_send_exit(outer, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(inner, caf::exit_reason::user_shutdown);
}

TEST_CASE("run_here: under work stealing the actor is only sent to",
          "[run_here]") {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("stealing"));
  caf::actor_system sys{cfg};
  CHECK(!actorps::detail::can_run_here(sys));
  auto echo = spawn_echo(sys);
  caf::scoped_actor self{sys};
  auto got = answered(self, echo);
  CHECK(got != 0);
  CHECK(got != this_thread());
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}

TEST_CASE("run_here: a pass ends after a few messages, and the scheduler runs "
          "the rest",
          "[run_here]") {
  sharing_config cfg;
  caf::actor_system sys{cfg};
  // Each message's thread, by its number; the first message sends the
  // actor 20 more, then the 21st makes it quit.
  constexpr int32_t more = 20;
  std::vector<uint64_t> threads(more + 1, 0);
  std::promise<void> all_seen;
  auto counter = sys.spawn<caf::lazy_init>(
    [&](caf::event_based_actor* self) -> caf::behavior {
      return {[&, self](int32_t i) {
        threads[static_cast<size_t>(i)] = this_thread();
        if (i == 0)
          for (int32_t j = 1; j <= more; ++j)
            self->send(self, j);
        if (i == more) {
          all_seen.set_value();
          self->quit();
        }
      }};
    });
  caf::scoped_actor self{sys};
  self->monitor(counter);
  auto seen = all_seen.get_future();
  actorps::detail::send_and_run(nullptr, caf::make_message_id(), counter,
                                caf::make_message(int32_t{0}));
  REQUIRE(seen.wait_for(std::chrono::seconds{30}) == std::future_status::ready);
  // The first pass ran here, and not all 21 messages in it.
  CHECK(threads[0] == this_thread());
  CHECK(threads[more] != this_thread());
  for (auto t : threads)
    CHECK(t != 0);
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; },
                caf::after(std::chrono::seconds{30}) >> [] {});
  CHECK(down);
}

TEST_CASE("run_here: an actor that ends in a pass run here is gone after it",
          "[run_here]") {
  sharing_config cfg;
  caf::actor_system sys{cfg};
  auto quitter = sys.spawn<caf::lazy_init>(
    [](caf::event_based_actor* self) -> caf::behavior {
      return {[self](int32_t) { self->quit(); }};
    });
  caf::scoped_actor self{sys};
  self->monitor(quitter);
  caf::weak_actor_ptr weak = caf::actor_cast<caf::weak_actor_ptr>(quitter);
  actorps::detail::send_and_run(nullptr, caf::make_message_id(), quitter,
                                caf::make_message(int32_t{1}));
  // It ended in the pass, on this thread: its monitors heard of it before
  // send_and_run returned.
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; },
                caf::after(std::chrono::milliseconds{0}) >> [] {});
  CHECK(down);
  // And nothing kept it alive (a reference leaked by the pass would).
  quitter = nullptr;
  CHECK(weak.lock() == nullptr);
}
