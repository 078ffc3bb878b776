// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Internal to the shard (shard.cpp, forward.cpp): how a primary's forwards
// reach its backup, through CAF or over a replica_link, and how a backup
// takes those that come over its process's data plane (shard.hpp,
// "Replicas").

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

#include "actors/shard/state.hpp"

namespace actorps {

using shard_ptr = shard_actor::stateful_pointer<shard_state>;

// The reply to a change a primary forwarded, and whether the change failed
// here (then the reply went out already).
struct change_reply {
  caf::typed_response_promise<caf::ok_atom> rp;
  bool failed_here = false;
};

// The backup is gone, or did not answer in time (`why`), or the coordinator
// said so (no `why`): the primary goes on alone (see forward.cpp). With
// `of`, only if that is still the backup (a late failure of an earlier
// one is ignored).
void lose_backup(shard_ptr self, const caf::error& why,
                 const caf::actor_addr& of = {});

// Sends the operations run since the last forward to the backup; their
// completions go out once it acknowledged them.
void flush(shard_ptr self);

// Forwards change `msg` to the backup; `p` is answered once the backup ran
// it (or was lost).
void forward_change(shard_ptr self, caf::message msg,
                    std::shared_ptr<change_reply> p);

// Runs `answer` once the backup ran everything this shard ran so far
// (flushed first; at once without a backup): how a backup with a backup of
// its own (a chain, replicas 3) holds its answers to its primary.
void after_forwards(shard_ptr self, std::function<void()> answer);

// A standby backup takes changes from its primary only; others as said.
caf::error check_change(shard_ptr self, const char* op, bool admitter_only);

// `(replica_atom, peer, peer_is_backup[, address])`: pairs this shard with
// its backup or its primary.
caf::result<caf::ok_atom> pair(shard_ptr self, caf::actor peer,
                               bool peer_is_backup, const std::string& address);

// The backup's answer to a forward sent over the link (or the reminder that
// it is overdue).
void on_ack(shard_ptr self, const replica_ack& a);

// A backup: forward `number` of its primary arrived over this process's
// data plane; `run` runs it (in the order of the numbers) and says how it
// went, which goes back through `r`.
void from_link(shard_ptr self, uint64_t number, plane_reply& r,
               std::function<caf::error()> run);

// A backup runs change `m` that its primary forwarded over the link, as if
// its primary had sent it.
caf::error run_change(shard_ptr self, caf::message& m);

} // namespace actorps
