// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
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

// -- which worker a connection speaks for ----------------------------------
//
// A worker's connections to the servers prove its rank (core::identity_proof
// after the proof of the token or TLS: runtime/guard.cpp), so that a token
// holder on a connection of its own cannot name another worker's node and
// act in its name. Each registry below is per node of this process.

/// Node `node` of this process joined as worker `rank` with that rank's
/// secret (job_info::rank_secret): the connections it opens from now on
/// speak for that worker. Thread-safe.
void set_worker_identity(const caf::node_id& node, uint32_t rank,
                         std::string secret);

/// The worker rank and secret `node`'s connections speak for (a rank of
/// core::identity_proof::no_rank and "" for none). Thread-safe.
std::pair<uint32_t, std::string> worker_identity(const caf::node_id& node);

/// Node `node` of this process (a server) holds the job's rank key
/// (job_info::rank_key), from which every worker's secret derives: it
/// checks the claims of the connections it accepts. Thread-safe.
void set_rank_key(const caf::node_id& node, std::string key);

/// The rank key of `node` ("" if none). Thread-safe.
std::string rank_key_of(const caf::node_id& node);

/// Node `node`'s connections shake hands (TLS, or the proof of a token),
/// and so carry the identity exchange. Thread-safe.
void links_carry_identity(const caf::node_id& node);

/// True if `node` checks the worker identity of what it takes in a
/// worker's name: it holds a rank key and its connections carry identities.
bool identities_checked(const caf::node_id& node);

/// The connection `owner` that `to` accepted now speaks for node `peer`
/// (CAF took its handshake's name), having proven worker `rank` (no_rank:
/// none). Replaces what an earlier connection of `peer` recorded.
void record_proven(const caf::node_id& to, const caf::node_id& peer,
                   uint32_t rank, const void* owner);

/// Forgets what connection `owner` recorded (it closed).
void forget_proven(const caf::node_id& to, const caf::node_id& peer,
                   const void* owner);

/// True if `to` takes a message in worker `rank`'s name from node `peer`:
/// `to` checks no identities, or the connection that speaks for `peer`
/// proved that rank. Thread-safe.
bool proven_worker(const caf::node_id& to, const caf::node_id& peer,
                   uint32_t rank);

/// The worker rank the coordinator said node `peer` joined as, as an actor
/// of `to` was told (trusted_nodes::bind_workers); no_rank if none.
uint32_t bound_worker(const caf::node_id& to, const caf::node_id& peer);

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

  /// `workers[r]` is the node that joined as worker r (none: not known),
  /// as the coordinator told an actor of node `at` (recorded for
  /// bound_worker too).
  void bind_workers(const caf::node_id& at, std::vector<caf::node_id> workers);

  /// `none` if the message `self` is handling now may act as worker
  /// `worker`: it comes from this process, or no binding was given yet,
  /// or from the node bound to that rank over a connection that proved
  /// that rank (proven_worker); `errc::unauthorized` naming `op`
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
