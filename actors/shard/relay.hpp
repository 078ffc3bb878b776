// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Why this file exists: CAF 0.17 drops message priorities over the network.
// A message sent with `message_priority::high` arrives in the remote
// mailbox's normal queue, and the reply to a high-priority *remote request*
// is never matched (the receiver sets the normal bit in the message id), so
// the request times out or hangs. Priority therefore has to be applied in
// the shard's own process: this relay is that local hop. When the data
// transport between processes carries priorities itself, remote workers no
// longer need it.

#include <vector>

#include "caf/actor.hpp"
#include "caf/fwd.hpp"

#include <actorps/actors/shard/shard.hpp>

namespace actorps {

/// Spawns the priority relay of a shard in the shard's own process.
///
/// CAF 0.17 drops message priority over the network (and never matches the
/// reply of a high-priority remote request), so remote workers send their
/// priority > 0 pushes and pulls to the relay with normal priority; the relay
/// re-sends them to its shard with CAF's high priority, where they overtake
/// the shard's normal backlog, and passes the reply back. Every other message
/// is forwarded as it is. The relay is linked to its shard: one dies with the
/// other. `observer`, if set, receives `(forwarded_atom, slice_id)` after each
/// re-sent push or pull (tests use it to know the relay has acted).
/// With `detached`, the relay gets a thread of its own instead of running on
/// the scheduler. The relay checks each sender as its shard does (see
/// shard.hpp: its own process, `trusted`, and nodes it is told to admit with
/// `admit_atom`, which it passes on to the shard).
shard_actor spawn_priority_relay(caf::actor_system& sys, shard_actor shard,
                                 caf::actor observer = {},
                                 bool detached = false,
                                 std::vector<caf::node_id> trusted = {});

} // namespace actorps
