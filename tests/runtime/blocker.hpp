// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Occupies one scheduler thread of an actor system until released, so that
// a test can let messages pile up in mailboxes first.

#include <chrono>
#include <future>

#include <catch2/catch.hpp>

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/send.hpp"

namespace actorps::test {

class thread_blocker {
public:
  /// Returns once an actor of `sys` runs and holds its thread.
  explicit thread_blocker(caf::actor_system& sys) {
    auto released = release_.get_future().share();
    auto* running = &running_;
    actor_ = sys.spawn([running, released](caf::event_based_actor*) {
      return caf::behavior{[running, released](caf::ok_atom) {
        running->set_value();
        released.wait();
      }};
    });
    caf::anon_send(actor_, caf::ok_atom::value);
    REQUIRE(running_.get_future().wait_for(std::chrono::seconds{10})
            == std::future_status::ready);
  }

  /// Lets the thread go.
  void release() {
    if (!released_) {
      released_ = true;
      release_.set_value();
    }
  }

  ~thread_blocker() {
    release();
    caf::anon_send_exit(actor_, caf::exit_reason::kill);
  }

  thread_blocker(const thread_blocker&) = delete;
  thread_blocker& operator=(const thread_blocker&) = delete;

private:
  std::promise<void> running_;
  std::promise<void> release_;
  bool released_ = false;
  caf::actor actor_;
};

} // namespace actorps::test
