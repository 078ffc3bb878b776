// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "caf/actor_system.hpp"
#include "caf/after.hpp"
#include "caf/exit_reason.hpp"
#include "caf/scheduler/test_coordinator.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/send.hpp"

#include "actors/shard/shard.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"
#include "runtime/system.hpp"

namespace actorps::test {

/// An actor system on CAF's deterministic test scheduler. Messages are
/// processed only when the test calls `run()`; replies land in `self`.
/// Every actor registered with `guard` is sent an exit on destruction, so a
/// failed REQUIRE cannot hang the actor system's destructor.
struct deterministic_fixture {
  static system_options testing_options() {
    system_options opts;
    opts.testing = true;
    return opts;
  }

  system_config cfg{testing_options()};
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched
    = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  caf::scoped_actor self{sys, true};
  std::vector<caf::actor> guarded;

  template <class Handle>
  Handle guard(Handle h) {
    guarded.push_back(caf::actor_cast<caf::actor>(h));
    run();
    return h;
  }

  ~deterministic_fixture() {
    for (auto& a : guarded)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    sched.run();
  }

  /// Runs every actor until no message is left.
  void run() {
    sched.run();
  }

  /// Takes the next message from `self`'s mailbox, which must be a `T` or an
  /// error; a missing reply is reported as `errc::timeout`.
  template <class T>
  caf::expected<T> reply() {
    return reply<T>(self);
  }

  /// The same for the mailbox of `who` (another requester than `self`).
  template <class T>
  caf::expected<T> reply(caf::scoped_actor& who) {
    caf::expected<T> result = make_error(errc::timeout, "no reply");
    who->receive([&](T& x) { result = std::move(x); },
                 [&](caf::error& err) { result = std::move(err); },
                 caf::after(std::chrono::seconds(0)) >> [] {});
    return result;
  }

  /// Takes the report of a copy that lost its backup, `(replica_atom,
  /// shard)` to who paired them (the test), and confirms it (the answer
  /// waits in the mailbox of the copy until the next `run()`): the shard's
  /// index, or -1 if no report came.
  int64_t take_backup_lost() {
    int64_t told = -1;
    self->receive(
      [&](replica_atom, uint32_t shard) {
        told = shard;
        return caf::ok_atom::value;
      },
      caf::after(std::chrono::seconds(0)) >> [] {});
    return told;
  }

  /// True if `self` has no message waiting.
  bool no_reply() {
    return no_reply(self);
  }

  /// True if `who` has no message waiting.
  bool no_reply(caf::scoped_actor& who) {
    // (A blocking receive with a `caf::message&` handler matches nothing
    // in CAF 0.17: the mailbox itself tells.)
    return who->mailbox().empty();
  }
};

/// A shard configuration without command handler.
inline shard_config shard_cfg(uint32_t index, uint32_t workers, bool sync) {
  shard_config cfg;
  cfg.index = index;
  cfg.num_workers = workers;
  cfg.sync = sync;
  return cfg;
}

/// Checks that `x` failed with `code`; returns the rendered error.
template <class T>
std::string require_error(const caf::expected<T>& x, errc code) {
  REQUIRE_FALSE(x);
  INFO(render(x.error()));
  REQUIRE(code_of(x.error()) == code);
  return render(x.error());
}

} // namespace actorps::test
