// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Internal to runtime/: the blocking edge's way to wait for one reply.

#include <chrono>
#include <string>
#include <utility>

#include "caf/after.hpp"
#include "caf/blocking_actor.hpp"
#include "caf/error.hpp"
#include "caf/message_id.hpp"

#include "messages/errors.hpp"

namespace actorps::detail {

/// Receives the reply with id `mid` within `dur`; `on_value` gets it.
///
/// Requests are meant to be sent with `caf::infinite`: in CAF 0.17 a blocking
/// actor still receives the timeout message of an answered request later,
/// and nothing would ever take it out of the mailbox. Bounding the receive
/// instead leaves nothing behind.
template <class OnValue>
caf::error await_reply(caf::blocking_actor* self, caf::message_id mid,
                       std::chrono::milliseconds dur, OnValue& on_value) {
  caf::error result;
  bool timed_out = false;
  caf::blocking_actor::accept_one_cond rc;
  self->varargs_receive(
    rc, mid, on_value, [&](caf::error& err) { result = std::move(err); },
    caf::after(dur) >> [&] { timed_out = true; });
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
