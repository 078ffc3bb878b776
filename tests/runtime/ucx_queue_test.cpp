// SPDX-License-Identifier: BSD-3-Clause
// The frame queue between a plane's progress thread and the actor that
// takes its frames (runtime/ucx/ingress.hpp).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <thread>

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/send.hpp"
#include "caf/spawn_options.hpp"

#include "messages/type_ids.hpp"
#include "runtime/system.hpp"
#include "runtime/ucx/ingress.hpp"
#include "tests/runtime/exit_guard.hpp"

using namespace actorps;
using namespace actorps::ucx;

TEST_CASE("ucx: frames pushed for later wake their actor once, at flush, on "
          "the flushing thread",
          "[ucx]") {
  // (Work sharing, as in a node with the network layer: see run_here.hpp.)
  system_options opts;
  opts.scheduler = scheduler_policy::sharing;
  system_config cfg{opts};
  caf::actor_system sys{cfg};
  auto queue = std::make_shared<frame_queue>();
  // What the actor saw each time it was woken (written on the thread that
  // runs it, read here once flush returned or the actor is gone).
  struct seen {
    std::atomic<int> wakes{0};
    std::size_t thread = 0;
    std::size_t frames = 0;
  };
  auto got = std::make_shared<seen>();
  test::exit_guard guard;
  // (Lazy: it starts idle, not scheduled for its first run.)
  auto taker = guard(sys.spawn<caf::lazy_init>(
    [queue, got](caf::event_based_actor*) -> caf::behavior {
      return {[queue, got](ucx_atom) {
        got->thread = std::hash<std::thread::id>{}(std::this_thread::get_id());
        got->frames = queue->take().size();
        ++got->wakes;
      }};
    }));
  queue->set_target(taker);
  queue->push_later(frame{});
  queue->push_later(frame{});
  queue->flush();
  // The actor ran in flush, on this thread, once, and found both frames.
  REQUIRE(got->wakes == 1);
  CHECK(got->thread
        == std::hash<std::thread::id>{}(std::this_thread::get_id()));
  CHECK(got->frames == 2);
  // Nothing owed any more: a second flush wakes nobody (it would run the
  // idle actor here, before returning).
  queue->flush();
  CHECK(got->wakes == 1);
  // Pushed for later again: owed again.
  queue->push_later(frame{});
  queue->flush();
  CHECK(got->wakes == 2);
  CHECK(got->frames == 1);
}
