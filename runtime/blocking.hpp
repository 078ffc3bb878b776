// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Internal to runtime/: the blocking edge's way to wait for one reply.

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <utility>

#include "caf/after.hpp"
#include "caf/blocking_actor.hpp"
#include "caf/error.hpp"
#include "caf/message_id.hpp"

#include "messages/errors.hpp"

namespace actorps::detail {

/// Receives the reply with id `mid` within `dur`; `on_value` gets it. With
/// `interrupted`, asks it every 100 ms and gives up with
/// `errc::interrupted` when it says so (the reply, if it comes, stays
/// unread: `on_value` never runs).
///
/// Requests are meant to be sent with `caf::infinite`: in CAF 0.17 a blocking
/// actor still receives the timeout message of an answered request later,
/// and nothing would ever take it out of the mailbox. Bounding the receive
/// instead leaves nothing behind.
template <class OnValue>
caf::error await_reply(caf::blocking_actor* self, caf::message_id mid,
                       std::chrono::milliseconds dur, OnValue& on_value,
                       const std::function<bool()>& interrupted = {}) {
  caf::error result;
  bool timed_out = false;
  auto deadline = std::chrono::steady_clock::now() + dur;
  // With a way to be interrupted, the wait goes in slices of 100 ms.
  constexpr auto slice = std::chrono::milliseconds{100};
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    auto wait = left;
    if (interrupted)
      wait = std::max(std::chrono::milliseconds{0}, std::min(left, slice));
    bool sliced = false;
    caf::blocking_actor::accept_one_cond rc;
    self->varargs_receive(
      rc, mid, on_value, [&](caf::error& err) { result = std::move(err); },
      caf::after(wait) >> [&] { sliced = true; });
    if (!sliced)
      break;
    if (wait >= left) {
      timed_out = true;
      break;
    }
    if (interrupted())
      return make_error(errc::interrupted,
                        "the wait was interrupted (the operation may still "
                        "complete; its result is dropped)");
  }
  if (timed_out)
    return make_error(errc::timeout,
                      "no reply within " + std::to_string(dur.count())
                        + " ms (a worker, shard or the coordinator is stuck "
                          "or dead, or a sync round lacks a worker)");
  return result;
}

/// Sends a request with an infinite timeout and waits at most `dur` for its
/// reply, which `on_value` gets.
template <class Dest, class OnValue, class... Ts>
caf::error ask(caf::blocking_actor* self, const Dest& dest,
               std::chrono::milliseconds dur, OnValue on_value, Ts&&... xs) {
  auto h = self->request(dest, caf::infinite, std::forward<Ts>(xs)...);
  return await_reply(self, h.id(), dur, on_value);
}

} // namespace actorps::detail
