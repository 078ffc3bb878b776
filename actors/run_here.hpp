// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Sending to an actor and running it on the sending thread: one thread
// hand-off fewer on a latency path (a data channel's reply waking the
// worker, a caller's request to it).

#include "caf/actor.hpp"
#include "caf/fwd.hpp"
#include "caf/message.hpp"
#include "caf/message_id.hpp"

namespace actorps::detail {

/// Enqueues `msg` (from `sender`, with id `mid`) to `dest`. If that wakes
/// `dest` (a scheduled actor that was idle), this thread runs it for one
/// pass of a few messages before returning, instead of waking a scheduler
/// thread for it; what it wakes in that pass, and the rest of its mailbox
/// after the pass, goes to the scheduler as usual. CAF runs an actor on one
/// thread at a time however it was woken, so this changes only which
/// thread runs it. Only under CAF's work-sharing scheduler (`can_run_here`;
/// else it just sends): under work stealing, actors woken from a thread
/// outside the scheduler wait for a polling thread, and the test scheduler
/// alone decides what runs. Detached and blocking actors are just sent to.
/// Not from inside an actor's handler. True if this thread ran `dest`.
bool send_and_run(const caf::strong_actor_ptr& sender, caf::message_id mid,
                  const caf::actor& dest, caf::message msg);

/// True if `sys` runs CAF's work-sharing scheduler (send_and_run runs
/// actors on the sending thread only there).
bool can_run_here(caf::actor_system& sys);

} // namespace actorps::detail
