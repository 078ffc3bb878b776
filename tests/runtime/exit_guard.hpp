// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Ends the actors a test spawned however the test ends, so that a failed
// check does not leave the actor system's destructor waiting for them.

#include <vector>

#include "caf/actor.hpp"
#include "caf/actor_cast.hpp"
#include "caf/exit_reason.hpp"
#include "caf/send.hpp"

namespace actorps::test {

/// Kills every actor it was handed when it goes out of scope.
struct exit_guard {
  std::vector<caf::actor> actors;

  /// Remembers `h` and returns it.
  template <class Handle>
  Handle operator()(Handle h) {
    actors.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }

  ~exit_guard() {
    for (auto& a : actors)
      caf::anon_send_exit(a, caf::exit_reason::kill);
  }
};

} // namespace actorps::test
