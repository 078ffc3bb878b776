// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "caf/error.hpp"
#include "caf/fwd.hpp"
#include "caf/node_id.hpp"

/// Who may talk to an actor: its own process, and the nodes it was told to
/// trust. Each actor owns one `trusted_nodes` in its state; the coordinator
/// fills its own with the nodes that proved the job's token, and tells the
/// servers' shards and relays which nodes those are (`admit_atom`).
///
/// A message whose sender is anonymous is treated as foreign: over the
/// network its origin cannot be told. Without TLS, a sender's node is what
/// its CAF handshake claimed: see the README's trust model.
namespace actorps {

/// True if a down message about `source` came from `sender` = that actor:
/// CAF sends a real one as the actor that went down (a remote one's proxy),
/// so one from any other sender is forged.
bool sent_by_source(const caf::strong_actor_ptr& sender,
                    const caf::actor_addr& source);

/// True if any actor of this process trusts `node` (see trusted_nodes::add).
/// The network layer asks this before it reads a large message from a
/// connection (runtime/guard.cpp). Thread-safe.
bool admitted_in_process(const caf::node_id& node);

/// Lets `node` (the coordinator's) pass on other nodes' messages to this
/// process: CAF routes a message through the coordinator while its sender
/// has no connection of its own to this process yet. The network layer
/// refuses routed messages from any other node (runtime/guard.cpp).
/// Thread-safe.
void trust_routes_of(const caf::node_id& node);

/// True if `trust_routes_of(node)` was called in this process.
bool routes_trusted(const caf::node_id& node);

/// Marks `node` as one that never opens a connection to `to` (a node of
/// this process): a server whose shards forward to `to`'s or take their
/// forwards (the servers reach one another through the coordinator, to
/// which each connected). Thread-safe.
void never_connects_in(const caf::node_id& to, const caf::node_id& node);

/// False for the nodes that never open a connection to `to`: the
/// coordinator (trust_routes_of) and those of `never_connects_in`. The
/// network layer closes an accepted connection whose handshake names one
/// (runtime/guard.cpp): a token holder on a connection of its own must not
/// pass for a node that `to` takes more from than from a worker.
/// Thread-safe.
bool may_connect_in(const caf::node_id& to, const caf::node_id& node);

/// The set of remote nodes an actor accepts messages from.
class trusted_nodes {
public:
  /// Trusts `node` from now on (and records it for admitted_in_process).
  void add(const caf::node_id& node);

  /// Trusts each of `nodes`.
  void add(const std::vector<caf::node_id>& nodes);

  /// Trusts each of `nodes` and lets them admit other nodes: the nodes a
  /// shard or relay starts with (the coordinator's).
  void add_admitters(const std::vector<caf::node_id>& nodes);

  /// Like `check`, for messages that change whom the actor trusts: only
  /// its own process and the admitters may send them, not every admitted
  /// node.
  caf::error check_admitter(caf::local_actor* self, const char* op) const;

  /// True if `node` was added.
  bool contains(const caf::node_id& node) const;

  /// Every trusted node, in order.
  std::vector<caf::node_id> list() const;

  /// `none` if the message `self` is handling now comes from `self`'s own
  /// process or from a trusted node; `errc::unauthorized` naming `op`
  /// otherwise. The first refusal per foreign node is written to stderr
  /// (one line; at most `max_reported` nodes per actor).
  caf::error check(caf::local_actor* self, const char* op) const;

  /// `workers[r]` is the node that joined as worker r (none: not known).
  void bind_workers(std::vector<caf::node_id> workers);

  /// `none` if the message `self` is handling now may act as worker
  /// `worker`: it comes from this process, or no binding was given yet,
  /// or from the node bound to that rank; `errc::unauthorized` naming `op`
  /// otherwise. An admitted node acts only as itself.
  caf::error check_rank(caf::local_actor* self, const char* op,
                        uint32_t worker) const;

  /// `check`, then `check_rank`: for a data operation in worker
  /// `worker`'s name.
  caf::error check(caf::local_actor* self, const char* op,
                   uint32_t worker) const;

  /// Foreign nodes this set reports at most, per actor.
  static constexpr size_t max_reported = 16;

private:
  std::set<caf::node_id> nodes_;
  std::set<caf::node_id> admitters_;
  std::vector<caf::node_id> workers_;
  // Nodes already reported (an empty id stands for anonymous senders).
  mutable std::set<caf::node_id> reported_;
  mutable bool reported_all_ = false;
};

/// Keeps messages that CAF handles before any behaviour from ending `self`:
/// an error message that answers no request is dropped, and an exit message
/// ends `self` only when it comes from `self`'s process or a trusted node
/// (CAF's defaults end the actor on both). `trusted` must live as long as
/// `self` (a member of its state). An exit with `exit_reason::kill` still
/// ends the actor: CAF 0.17 applies it before any handler (README, trust).
void ignore_strays(caf::scheduled_actor* self, const trusted_nodes& trusted);

} // namespace actorps
