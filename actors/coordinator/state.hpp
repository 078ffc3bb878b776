// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "caf/actor.hpp"
#include "caf/actor_addr.hpp"
#include "caf/duration.hpp"
#include "caf/node_id.hpp"
#include "caf/timestamp.hpp"
#include "caf/typed_response_promise.hpp"

#include "actors/coordinator/coordinator.hpp"
#include "actors/trust.hpp"

/// The state of the coordinator actor (internal: not installed), and the
/// membership and supervision functions that membership.cpp implements for
/// the handlers in coordinator.cpp.
namespace actorps {

struct key_entry {
  key_info info;
  bool initialized = false;
  std::vector<bool> declared;
  std::vector<caf::typed_response_promise<key_info>> waiters;
};

struct coordinator_state {
  static inline const char* name = "actorps.coordinator";

  coordinator_config cfg;
  std::unordered_map<std::string, key_entry> keys;
  std::vector<std::string> names_by_id;
  std::vector<bool> live;
  std::vector<bool> at_barrier;
  std::vector<caf::typed_response_promise<caf::ok_atom>> barrier_waiters;
  optimizer_config optimizer;

  // -- distributed mode -------------------------------------------------------

  struct node_entry {
    uint8_t role = 0;
    uint32_t rank = 0;
    // The CAF node that proved the token for this node.
    caf::node_id node;
    caf::actor agent;
    std::vector<caf::actor_addr> shards;
    bool dead = false;
    bool left = false;
    caf::timestamp last_seen;
    // Where its connection came from, as seen at its join.
    std::string address;
    // A server that took a dead server's rank (cfg.recovery_timeout): its
    // shards replace the dead one's once restored.
    bool replacing = false;
    // A server that took a dead server's rank in a replicas job whose
    // shards its backups took over: all its shards are backups, paired with
    // the primaries that lack one (rebuilt replicas).
    bool rebuilding = false;
  };

  std::map<uint32_t, node_entry> nodes;
  // Nodes that proved the job's token; every handler but the join checks
  // its sender against them.
  trusted_nodes trusted;
  // Bumped with each admission; a server's shards know every admitted node
  // once `server_admitted[rank]` reached it. Workers get the routing table
  // only then, so that no shard refuses a worker that joined.
  uint64_t admit_version = 0;
  std::vector<uint64_t> server_admitted;
  uint32_t workers_joined = 0;
  uint32_t servers_joined = 0;
  // Shards and relays per server rank, until every server registered.
  std::vector<std::vector<caf::actor>> server_shards;
  std::vector<std::vector<caf::actor>> server_relays;
  std::vector<std::string> server_endpoints;
  // UCX transport: each server's UCX address.
  std::vector<std::string> server_data;
  // Replicas: each server's backups (of the previous server's shards) and
  // their relays; per shard in the job's order, whether a live backup
  // holds a copy; pairings not acknowledged yet (the routing waits).
  std::vector<std::vector<caf::actor>> server_backups;
  std::vector<std::vector<caf::actor>> server_backup_relays;
  // Per shard in the job's order, its chain of copies (replicas - 1 at
  // most; empty: it goes alone): the primary forwards to the first, each
  // to the next. Each copy: the backup, its relay, its server, and whether
  // it took the whole state of the one before it (only then may the first
  // be promoted). And the server that holds the primary (its own server's
  // rank, until a backup took over).
  struct backup_slot {
    caf::actor backup;
    caf::actor relay;
    uint32_t holder = 0;
    bool ready = false;
  };
  std::vector<std::vector<backup_slot>> backup_slots;
  std::vector<uint32_t> primary_on;
  size_t pairing = 0;
  routing_table table;
  bool routing_ready = false;
  std::vector<caf::typed_response_promise<routing_table>> routing_waiters;
  std::vector<bool> shard_dead;
  bool done = false;
  bool finished = false;
  // Nodes that joined as observers (actorps-status): they may ask for the
  // status and nothing else.
  std::set<caf::node_id> observers;
  uint64_t barriers_done = 0;
  // Status requests answered by the gathering in flight (one at a time).
  std::vector<caf::typed_response_promise<job_status>> status_waiters;
  // Periodic checkpoints: one is being gathered (the barrier waits), and
  // when the last one was taken.
  bool checkpointing = false;
  // Bumped when a gathering is given up (a server died during it): its
  // late answer is then ignored.
  uint64_t checkpoint_generation = 0;
  std::chrono::steady_clock::time_point last_checkpoint
    = std::chrono::steady_clock::now();
  // A periodic checkpoint whose state was taken (the barrier went on) and
  // whose pieces still travel to on_done: its barrier number, 0 if none.
  uint64_t checkpoint_streaming = 0;
  // Every worker left while a checkpoint was taken: the servers end once it
  // was (see check_done).
  bool end_after_checkpoint = false;
  // Saves and loads in pieces: the last session number given out, and the
  // loads in progress with what each key received so far.
  uint64_t last_session = 0;
  struct load_progress {
    optimizer_config opt;
    std::map<std::string, uint64_t> covered;
  };
  std::map<uint64_t, load_progress> loads;
  // Replacement servers (cfg.recovery_timeout), per server rank.
  struct server_recovery {
    // Its server is down and a new one may take its place until
    // `deadline`.
    bool open = false;
    std::chrono::steady_clock::time_point deadline;
    // A replacement joined and holds the rank (one at a time).
    bool claimed = false;
    // A replacement registered its shards and is being restored; then
    // restored, waiting for its shards to know every admitted node.
    bool restoring = false;
    bool restored = false;
    // Bumped when a replacement goes down: its restore stops.
    uint64_t generation = 0;
    // The replacement's registration, answered once it is published.
    caf::typed_response_promise<caf::ok_atom> registration;
    // What it was restored from (for on_done).
    std::string what;
  };
  std::vector<server_recovery> recoveries;
  // Workers waiting for a routing table of a higher version than theirs.
  std::vector<caf::typed_response_promise<routing_table>> reroute_waiters;

  bool distributed() const {
    return cfg.num_servers > 0;
  }

  caf::duration timeout() const {
    return caf::duration{cfg.timeout};
  }

  // True once every live worker waits at the barrier.
  bool barrier_complete() const {
    if (barrier_waiters.empty())
      return false;
    for (size_t r = 0; r < live.size(); ++r)
      if (live[r] && !at_barrier[r])
        return false;
    return true;
  }

  // True if the complete barrier must wait for a checkpoint first.
  bool checkpoint_due() const {
    return cfg.checkpoint_every.count() >= 0 && cfg.on_done
           && checkpoint_streaming == 0 && !recovering()
           && std::chrono::steady_clock::now() - last_checkpoint
                >= cfg.checkpoint_every;
  }

  // Releases the barrier once every live worker is in it (not while a
  // checkpoint is being gathered).
  void check_barrier() {
    if (checkpointing || !barrier_complete())
      return;
    for (auto& w : barrier_waiters)
      w.deliver(caf::ok_atom::value);
    barrier_waiters.clear();
    ++barriers_done;
    at_barrier.assign(cfg.num_workers, false);
  }

  // The lowest rank but 0 whose worker died (not left), if any. Rank 0 is
  // not replaced: it writes every key's first value and the optimizer.
  std::optional<uint32_t> dead_worker_rank() const {
    for (auto& [id, n] : nodes)
      if (n.role == role::worker && n.dead && !n.left && n.rank > 0)
        return n.rank;
    return std::nullopt;
  }

  // True while a dead server may still be replaced or its replacement is
  // being restored: no periodic checkpoint then (it would hold nothing of
  // that server's shards, and newer than the one being restored).
  bool recovering() const {
    return std::any_of(recoveries.begin(), recoveries.end(),
                       [](const server_recovery& r) {
                         return r.open || r.restoring || r.restored;
                       });
  }

  // The index of server `rank`'s first shard in the job's order (every
  // server runs as many shards as the first: the shard indices say so).
  uint32_t first_shard(uint32_t rank) const {
    uint32_t first = 0;
    for (uint32_t r = 0; r < rank && r < server_shards.size(); ++r)
      first += static_cast<uint32_t>(server_shards[r].size());
    return first;
  }

  std::vector<uint32_t> live_ranks() const {
    std::vector<uint32_t> result;
    for (uint32_t r = 0; r < live.size(); ++r)
      if (live[r])
        result.push_back(r);
    return result;
  }
};

using coordinator_ptr = coordinator_actor::stateful_pointer<coordinator_state>;

/// `none` if the sender may act as node `id` (worker_node_id(rank) or
/// server_node_id(rank)): it is this process, or the node that joined as
/// `id`. An admitted node cannot leave, wait at a barrier or declare keys
/// in another node's name.
caf::error speaks_for(coordinator_ptr self, const char* op, uint32_t id);

/// A node joins (`join_atom`, see coordinator.hpp): `wish` names the dead
/// worker rank a worker takes, or is any_rank.
caf::result<job_info> join_job(coordinator_ptr self, uint8_t role_id,
                               const std::string& token,
                               const caf::actor& agent, uint8_t mode,
                               uint32_t version, uint32_t wish);

/// A worker leaves the job (`why`: its job failed; may be null).
caf::result<caf::ok_atom> leave(coordinator_ptr self, uint32_t rank,
                                const std::string* why);

/// Records server `node`'s shards, relays, endpoint and (UCX) data address
/// under its rank and monitors the shards.
void record_shards(coordinator_ptr self, coordinator_state::node_entry& node,
                   const std::vector<caf::actor>& shards,
                   const std::vector<caf::actor>& relays,
                   const std::string& endpoint,
                   const std::string& data_address);

/// Tells every live shard which workers are live (fire and forget).
void announce_workers(coordinator_ptr self);

/// Tells `on_done` once, after every node went down (or the grace period
/// ended): no reply or shutdown message is lost with this process.
void finish(coordinator_ptr self);

/// Ends a distributed job once no worker is left.
void check_done(coordinator_ptr self);

/// A periodic checkpoint ended (written, failed or given up): a job that
/// ended meanwhile ends now.
void checkpoint_settled(coordinator_ptr self);

/// A worker rank left or died: releases whoever waits for it.
void drop_worker(coordinator_ptr self, uint32_t rank);

/// Marks the node that `dm` reports down dead and tells the survivors.
void on_down(coordinator_ptr self, const caf::down_msg& dm);

/// Builds the routing table once every server registered its shards.
void complete_routing(coordinator_ptr self);

/// Tells the shards of server `rank` (through their relays) every admitted
/// node; records the version they acknowledged and releases the routing
/// table once every live server knows every admitted node.
void send_admissions(coordinator_ptr self, uint32_t rank);

/// Answers the routing requests that wait, if routing is complete and every
/// live server knows every admitted node.
void release_routing(coordinator_ptr self);

/// Releases a complete barrier, first taking a checkpoint when one is due
/// (coordinator_config::checkpoint_every).
void release_barrier(coordinator_ptr self);

/// The next records of a save in pieces (`save_atom, save_cursor`): a
/// cursor of session 0 begins one (every shard takes its state as it is
/// now); records come shard by shard, named, `done` after the last shard.
caf::result<save_piece> save_next(coordinator_ptr self, const save_cursor& at);

/// A step of a load in pieces (`load_atom, load_piece`): the first opens a
/// session on every shard; records are cut to this store's slices and
/// handed to their shards; the commit checks that every key seen is whole
/// and lets every shard take its slices. Answers the session number.
caf::result<uint64_t> load_next(coordinator_ptr self, load_piece& piece);

/// A whole checkpoint in one message (`load_atom, state_snapshot`): cut to
/// this store's slices (core::split_snapshot), each shard's part in one.
caf::result<caf::ok_atom> load_whole(coordinator_ptr self,
                                     const state_snapshot& snap);

/// A server rank whose server went down: with cfg.recovery_timeout, a new
/// server may take its place until the deadline.
/// (`replacement`: the server that went down was a replacement not yet
/// published, whose death reopens nothing.)
void server_lost(coordinator_ptr self, uint32_t rank, bool replacement);

/// The rank a server joining a full job takes (the lowest one that may be
/// replaced), or why it cannot join.
caf::expected<uint32_t> replaceable_server(coordinator_ptr self);

/// A replacement server registers its shards (see coordinator.hpp,
/// "Replacement servers"): answered once they are restored and published.
caf::result<caf::ok_atom>
register_replacement(coordinator_ptr self, coordinator_state::node_entry& node,
                     const std::vector<caf::actor>& shards,
                     const std::vector<caf::actor>& relays,
                     const std::string& endpoint,
                     const std::string& data_address);

/// Publishes every restored replacement whose shards know every admitted
/// node.
void publish_recoveries(coordinator_ptr self);

/// `(routing_atom, version)`: the routing table once newer than `version`.
caf::result<routing_table> newer_routing(coordinator_ptr self,
                                         uint64_t version);

/// `(recover_atom, rank, generation)`: a dead server's deadline passed.
void recovery_deadline(coordinator_ptr self, uint32_t rank);

/// Answers every worker waiting for a newer routing table with `err`.
void fail_reroutes(coordinator_ptr self, const caf::error& err);

/// `(replica_atom, node_id, backups, relays)`: a server's backups.
caf::result<caf::ok_atom> record_backups(coordinator_ptr self, uint32_t node_id,
                                         const std::vector<caf::actor>& backups,
                                         const std::vector<caf::actor>& relays);

/// `(replica_atom, shard)`: the primary at `shard`, or a copy of it, lost
/// its backup (the next copy in the shard's chain).
caf::result<caf::ok_atom> backup_lost(coordinator_ptr self, uint32_t shard);

/// Backup `backup` went down: it leaves its shard's chain (the copy before
/// it goes on without it; the one after it is paired with that one).
void cut_copy(coordinator_ptr self, const caf::actor_addr& backup);

/// Pairs every primary with its chain of backups (replicas 2 or 3, once
/// every server registered); the routing waits until each pair
/// acknowledged.
void pair_replicas(coordinator_ptr self);

/// Server `rank` died: the backups of the primaries it held are promoted
/// and published, and the primaries backed up on it go on alone. False if
/// the job keeps no replicas, or the primaries it held have no backup left:
/// the caller may try a replacement.
bool promote_backups(coordinator_ptr self, uint32_t rank);

/// True if server `rank` holds the primary of some shard (replicas).
bool holds_primaries(const coordinator_state& st, uint32_t rank);

/// A server joins the full job: the rank of a dead server whose shards all
/// live on as promoted backups, none of them with a backup, which the
/// joining server rebuilds (replicas 2); an error if there is none.
caf::expected<uint32_t> rebuildable_server(coordinator_ptr self);

/// `(shards_atom, ...)` of a server that rebuilds replicas: its shards
/// (backups of those of its rank) and its backups (of the previous rank's)
/// are paired with the primaries that lack a backup; answered once each
/// took its primary's whole state.
caf::result<caf::ok_atom>
register_rebuild(coordinator_ptr self, coordinator_state::node_entry& node,
                 const std::vector<caf::actor>& shards,
                 const std::vector<caf::actor>& relays,
                 const std::string& endpoint, const std::string& data_address);

/// Registers key `key` (a table of row size `dim`, or dense when 0) for
/// worker `rank`, or checks it against its registration (`declare_atom`,
/// see coordinator.hpp).
caf::result<key_info> declare_key(coordinator_ptr self, const std::string& key,
                                  const std::vector<uint64_t>& shape,
                                  uint32_t rank, uint64_t dim);

/// The job's status (`status_atom`): membership from the state, counters
/// from every shard that answers within a few seconds.
caf::result<job_status> job_status_of(coordinator_ptr self);

} // namespace actorps
