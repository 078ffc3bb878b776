// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "caf/actor.hpp"

#include "caf/fwd.hpp"
#include "caf/replies_to.hpp"
#include "caf/typed_actor.hpp"

#include <actorps/actors/shard/shard.hpp>
#include <actorps/messages/type_ids.hpp>

/// Protocol of the coordinator.
///
/// The coordinator owns the key registry (string names to compact ids, shapes
/// and the slice layout over the shards), init gating, barriers and the
/// job-wide control operations that fan out to every shard.
///
/// Messages:
/// - `(declare_atom, key, shape, rank)` -> `key_info`. The first declaration
///   of a key registers it and computes its layout. Rank 0 gets the reply at
///   once and must then write the initial value to the shards and send
///   `init_done`; any other rank gets the reply once that happened. Errors:
///   `shape_mismatch` (shape differs from the registered one or is empty),
///   `already_initialized` (this rank declared the key before), `bad_config`
///   (rank out of range).
/// - `(declare_atom, key, shape, rank, dim)` -> `key_info`: the same for a
///   row-sparse table, `shape` being [rows, dim]: one slice per shard
///   s < rows holding rows s, s + S, ... (`key_info::dim`). A name is a
///   table or a dense key for good: declaring it as the other is a
///   `shape_mismatch`.
/// - `(init_done_atom, key_id, ok)` -> `ok_atom`. With `ok`, marks the key
///   initialized and releases the waiting declarations; without, rank 0 failed
///   to write it: the waiters fail with `not_initialized` and rank 0 may
///   declare the key again. Error: `unknown_key`.
/// - `(lookup_atom, key)` -> `key_info` of an initialized key. Errors:
///   `unknown_key`, `not_initialized`.
/// - `(barrier_atom, rank)` -> `ok_atom` once every live worker arrived. A
///   rank entering again before the release (a retry after a timeout) just
///   waits again.
/// - `(leave_atom, rank)` -> `ok_atom`. The worker leaves the job: it no
///   longer counts for barriers, and every shard drops it from sync rounds,
///   so the others never wait for it.
/// - `(leave_atom, rank, why)` -> `ok_atom`: the same, for a worker whose
///   job failed (`why`); `on_done` hears `(leave_atom, node_id, rank, why)`.
/// - `(set_opt_atom, optimizer_config)` -> `ok_atom` once every shard applied
///   it. Error: `bad_optimizer` (checked before anything is sent).
/// - `(save_atom)` -> `state_snapshot` of all shards, key names and offsets
///   filled in, ordered by key name and part.
/// - `(load_atom, state_snapshot)` -> `ok_atom` once every shard loaded its
///   slices. A key saved in other slices (other shards, slice size or
///   slicing bound) is cut anew to this store's (core::reslice). Errors:
///   `unknown_key` (key not initialized in this store), `checkpoint_mismatch`
///   (other sizes, state sizes, slices that overlap or leave gaps, or a
///   slice to cut from saved ones that saw different numbers of updates),
///   `bad_optimizer`. Both move the whole model in one message: for tests
///   and small stores; kvstore uses the pieces below.
/// - `(save_atom, save_cursor)` -> `save_piece`: a save in pieces. A cursor
///   of session 0 begins one (every shard takes its state as it is now);
///   each answer holds some records (named, offsets filled, `parts` the
///   key's slice count), at most save_piece_bytes but one record, and the
///   cursor to ask with next; `done` after the last shard's last.
/// - `(load_atom, load_piece)` -> session number: a load in pieces. The
///   first (session 0) names the optimizer and opens a session on every
///   shard; each piece's records are cut to this store's slices
///   (core::cut_piece: other shard counts and slicing as for the whole
///   load) and handed to their shards; `commit` checks that every key seen
///   is whole, then every shard takes its slices. Errors as for the whole
///   load; a failed step drops the session everywhere.
/// - `(command_atom, head, body)` -> `ok_atom` once every shard applied it
///   (send_command_to_servers). Head 0 sets the optimizer from text, as
///   set_opt does (and is recorded for save); its text is checked first.
///   Errors: `bad_optimizer` (head 0), the shards' errors.
///
/// Trust: every message but the join is refused with `unauthorized` unless
/// its sender is in the coordinator's process or on a node that joined with
/// the job's token (an anonymous sender counts as foreign); `heartbeat` and
/// `shutdown` from others are dropped. The first refusal per node is logged.
///
/// Distributed jobs (num_servers > 0) add membership and supervision:
/// - `(join_atom, role, token, agent, mode, version)` -> `job_info`: a server
///   or worker node joins with its job token and its node agent; ranks count
///   up from 0 per role in order of joining. `mode` is what the node
///   expects of the job (join_mode::expect: a mode and a transport, either
///   may be "any"), `version` the `wire_version` it speaks: a mismatch of
///   any is refused before any rank is given out. Errors: `unauthorized`
///   (wrong token), `bad_config` (another wire version, role full, unknown
///   role, mode or transport mismatch, or a local coordinator). The reply
///   carries the coordinator's handle: nodes reach the coordinator through
///   its gate (actors/gate.hpp), which answers nothing but the join.
///   The joining node (the sender's CAF node) is admitted, and every
///   server's shards and relays are told (`admit_atom`). A worker joining
///   a full job takes the place of the lowest dead rank (not 0).
/// - `(join_atom, role, token, agent, mode, version, rank)` -> `job_info`:
///   the same, for a worker that takes the place of dead worker `rank`
///   (`any_rank`: as above). Errors: `bad_config` when the rank is out of
///   range, 0, alive, left the job, or the job is not full yet.
/// - `(shards_atom, node_id, shards, relays, endpoint, data_address)` ->
///   `ok_atom`: a server's shards, their priority relays, the "host:port" on
///   which the server accepts direct connections from workers, and (UCX
///   transport) its UCX address, required then and ignored otherwise. Once
///   every server registered, the routing table is complete. Errors:
///   `bad_config`, `unauthorized` (sent from another process than the server's
///   join).
/// - `(routing_atom)` -> `routing_table`, as soon as it is complete and every
///   live server's shards know every admitted node.
/// - `(routing_atom, version)` -> `routing_table` of a higher version than
///   `version`: once a server that died was replaced and its replacement
///   restored (see "Replacement servers" below). Errors: `dead_node` when
///   the job takes no replacements (`recovery_timeout` 0, or the job is
///   done) or a dead server was not replaced in time.
/// - `(heartbeat_atom, node_id)`: a node is alive (no reply).
/// - `(dead_atom, node_or_group, timeout_s)` -> `uint32_t`: MXNet's
///   num_dead_node. A node counts as dead once its agent or one of its
///   shards went down (CAF's down_msg, which also follows a connection
///   timeout), or when no heartbeat came for `timeout_s` seconds.
///   `node_or_group` is a node id (>= 8) or an or-ed set of `role` groups.
/// The coordinator monitors every agent and shard. A dead worker is dropped
/// from barriers and sync rounds, as if it had left; every surviving agent
/// hears `(node_down_atom, node_id, role)`. Once every worker left or died,
/// every server agent gets `(shutdown_atom)`, and `on_done` gets it once
/// every node went down (at most 5 s later). `(shutdown_atom)` sent to the
/// coordinator itself ends that wait. `on_done` also hears
/// `(join_atom, node_id, role, rank)` for every node admitted, so a runner
/// can say whom the job still waits for, and `(node_down_atom, node_id,
/// role, lost)` for every node that goes down, so it can say how the job
/// ended.
/// - `(join_atom, role::observer, token, agent, mode, version)` ->
///   `job_info` without rank or data salt: the node (actorps-status) may
///   send `status_atom` from then on, and nothing else; it counts for no
///   barrier, round or end of the job.
/// - `(status_atom)` -> `job_status`: the nodes with their addresses, last
///   heartbeat and state, the open barrier and whom it waits for, and per
///   server and per worker the shards' counters (shards that do not answer
///   within 2 s are left out and their server marked). From a trusted node
///   or an observer.
/// Replacement servers (`recovery_timeout` > 0): for that long after a
/// server went down, a server that joins the full job takes its rank. Once
/// it registered its shards (which must be as many as the dead server's),
/// the coordinator restores them: it tells them the live workers, makes
/// every initialized key's slices there (zeros; a table's rows as
/// constants), loads their part of the newest checkpoint, which `on_done`
/// reads (`(load_atom, restore, index)` -> `load_piece`: index 0 opens the
/// checkpoint, each answer holds the next records, `commit` with the last),
/// sets the current optimizer if it changed since, and once the shards
/// know every admitted node publishes a routing table of a higher version
/// (`routing_table::version`) and answers the registration. `on_done`
/// hears `(recover_atom, rank, recovery_event, what)` when a server's
/// replacement is awaited (`what`: for how long), done (`what`: what was
/// restored) or given up at the deadline (`what`: why). Updates the dead server
/// applied after that checkpoint are lost; keys made after it start from zeros.
/// No periodic checkpoint is taken while a server is being replaced. The
/// `(recover_atom, rank, generation)` message is the coordinator's own
/// deadline.
/// Replicas (`replicas` 2 or 3): each server registers, before its shards,
/// replicas - 1 sets of as many backups (`(replica_atom, node_id, backups,
/// relays)` -> `ok_atom`), backup i of set j of server r+1+j holding copy j
/// of shard i of server r. Once every server registered, the coordinator
/// pairs each primary with its first backup and each backup with the next
/// (a chain; `(replica_atom, peer, is_backup)` to both) before it releases
/// the routing table. A dead copy leaves its chain: the copy before it is
/// told its backup is gone and the copy after it, if any, is paired with
/// that one (taking its whole state). A dead primary's first backup is
/// promoted and keeps the rest of the chain. When a server dies, its backups
/// are promoted
/// (`promote_atom`), and a routing table of a higher version moves its
/// shards to them; `on_done` hears `(recover_atom, rank,
/// recovery_event::promoted, what)` once for the dead server when every
/// shard it held moved (`what`: to which servers), else `given_up` for
/// each rank whose shards did not (their backups died too).
/// The primaries whose backups lived on the dead server go on without one.
/// A primary (or a backup with a backup) that loses its backup otherwise
/// (the backup failed or timed out) says so with `(replica_atom,
/// shard_index)` -> `ok_atom` (only a copy of the shard at that index
/// may): the coordinator ends that backup and will not promote it; the
/// sender holds its answers until then.
/// A promoted shard has no backup until a server joins the full job: the
/// coordinator tracks, per shard, the server holding its primary and its
/// backup (if any, and whether it took the primary's whole state: only
/// then is it promoted). A server that joins the full job while a dead
/// server's shards all live on, short of a copy, takes that rank with
/// `job_info::rebuild`: its shards are backups of that rank's shards and
/// its backups those of the previous ranks', each joining the end of a
/// chain short of a copy (the copy before it, or the primary wherever it
/// is now, first sends its whole state); its registration is answered, and
/// `on_done` hears
/// `(recover_atom, rank, recovery_event::rebuilt, what)`, once every such
/// pair completed. A server's death promotes the backups of every primary
/// it held, its own rank's or another's. Promotion comes first: a job with
/// replicas and a recovery timeout replaces a dead server from its
/// checkpoint only when its backups are gone.
/// Failures of shards (errors, timeouts) are passed on to the requester.
namespace actorps::core {
class local_hooks;
} // namespace actorps::core

namespace actorps {

/// Largest key the coordinator accepts, in floats (256 GiB of float32).
constexpr uint64_t max_key_floats = uint64_t{1} << 36;

/// Longest key name, in bytes: a save's piece names at most
/// `max_piece_records` keys, which keeps it far below the message bound.
constexpr std::size_t max_key_name = std::size_t{64} << 10;

/// What `on_done` hears of a dead server's replacement (see above).
namespace recovery_event {
constexpr uint8_t waiting = 0;
constexpr uint8_t replaced = 1;
constexpr uint8_t given_up = 2;
constexpr uint8_t promoted = 3;
/// At the start: a server's shards could not be paired with backups.
constexpr uint8_t unpaired = 4;
/// A server rebuilt the missing copies of shards that went alone (`what`:
/// how many).
constexpr uint8_t rebuilt = 5;
} // namespace recovery_event

/// Static configuration of the coordinator.
struct coordinator_config {
  uint32_t num_workers = 1;
  /// A local store's hooks (its own update rule names keys through them);
  /// null in dist jobs.
  std::shared_ptr<core::local_hooks> hooks;
  uint64_t bigarray_bound = uint64_t{1} << 20;
  /// Largest slice of a sliced key, in floats (see core::make_layout).
  uint64_t slice_floats = uint64_t{1} << 20;
  /// Timeout of each request the coordinator sends to a shard.
  std::chrono::milliseconds timeout{60000};
  std::vector<shard_actor> shards;
  /// Distributed mode: servers expected to join (0: local, `shards` given).
  uint32_t num_servers = 0;
  /// Token a node must present to join (empty: none required).
  std::string token;
  /// What a server must present to join instead of `token`
  /// (core::server_join_proof of the servers' own token); empty: `token`.
  std::string server_token;
  /// Whether the job runs synchronous rounds (told to joining nodes).
  bool sync = false;
  /// Bounded staleness (`sync` off, >= 0: dist_ssp; see shard_config);
  /// -1: none. Told to joining nodes.
  int32_t staleness = -1;
  /// Heartbeat interval told to joining nodes.
  std::chrono::milliseconds heartbeat{1000};
  /// The job's data transport (`transport::caf` or `transport::ucx`), told
  /// every node in its `job_info`.
  uint8_t transport = transport::caf;
  /// UCX transport: the job's data salt (job_info::data_salt); empty: the
  /// coordinator draws 32 random bytes.
  std::string data_salt;
  /// UCX transport: the job's rank key (job_info::rank_key); empty: the
  /// coordinator draws 32 random bytes.
  std::string rank_key;
  /// It listens on a loopback address only (job_info::loopback).
  bool loopback = false;
  /// Receives `(shutdown_atom)` once every worker left or died (dist mode),
  /// `(node_down_atom, node_id, role, lost)` for every node that goes down
  /// (`lost`: a worker that had not left, a server before every worker left
  /// or died) and
  /// `(join_atom, node_id, role, rank)` for every node admitted.
  caf::actor on_done;
  /// Periodic checkpoints: when a barrier is complete and this much time
  /// passed since the last checkpoint (0: at every barrier; negative: never),
  /// the coordinator gathers every shard's state first (no worker pushes
  /// while all wait at the barrier, so every slice is at the same round),
  /// sends `(save_atom, barrier_number, state_snapshot)` to `on_done`, and
  /// only then releases the barrier (barriers count from 1).
  std::chrono::milliseconds checkpoint_every{-1};
  /// "host:port" a node's connection comes from (for the status); may be
  /// empty.
  std::function<std::string(const caf::node_id&)> address_of;
  /// How long after a server went down a new server may take its place
  /// (restored from the newest checkpoint, which `on_done` reads), and so
  /// how long workers' calls to its shards wait (job_info::recovery_ms);
  /// 0: a dead server is not replaced and those calls fail at once.
  std::chrono::milliseconds recovery_timeout{0};
  /// Copies of each slice (1, 2 or 3; job_info::replicas; at most the
  /// servers): server r's shards are backed up by shards of server r+1
  /// (and r+2 with 3, mod the servers), which register them with
  /// `(replica_atom, node_id, backups, relays)` before their own shards;
  /// when a server dies its backups are promoted and the routing table
  /// moves its shards to them (a higher version).
  uint32_t replicas = 1;
};

/// Interface of the coordinator actor.
using coordinator_actor = caf::typed_actor<
  caf::replies_to<declare_atom, std::string, std::vector<uint64_t>,
                  uint32_t>::with<key_info>,
  caf::replies_to<declare_atom, std::string, std::vector<uint64_t>, uint32_t,
                  uint64_t>::with<key_info>,
  caf::replies_to<init_done_atom, uint32_t, bool>::with<caf::ok_atom>,
  caf::replies_to<lookup_atom, std::string>::with<key_info>,
  caf::replies_to<barrier_atom, uint32_t>::with<caf::ok_atom>,
  caf::replies_to<leave_atom, uint32_t>::with<caf::ok_atom>,
  caf::replies_to<leave_atom, uint32_t, std::string>::with<caf::ok_atom>,
  caf::replies_to<set_opt_atom, optimizer_config>::with<caf::ok_atom>,
  caf::replies_to<save_atom>::with<state_snapshot>,
  caf::replies_to<load_atom, state_snapshot>::with<caf::ok_atom>,
  caf::replies_to<save_atom, save_cursor>::with<save_piece>,
  caf::replies_to<load_atom, load_piece>::with<uint64_t>,
  caf::replies_to<command_atom, int32_t, std::string>::with<caf::ok_atom>,
  caf::replies_to<join_atom, uint8_t, std::string, caf::actor, uint8_t,
                  uint32_t>::with<job_info>,
  caf::replies_to<join_atom, uint8_t, std::string, caf::actor, uint8_t,
                  uint32_t, uint32_t>::with<job_info>,
  caf::replies_to<shards_atom, uint32_t, std::vector<caf::actor>,
                  std::vector<caf::actor>, std::string,
                  std::string>::with<caf::ok_atom>,
  caf::replies_to<replica_atom, uint32_t, std::vector<caf::actor>,
                  std::vector<caf::actor>>::with<caf::ok_atom>,
  caf::replies_to<replica_atom, uint32_t>::with<caf::ok_atom>,
  caf::replies_to<routing_atom>::with<routing_table>,
  caf::replies_to<routing_atom, uint64_t>::with<routing_table>,
  caf::reacts_to<recover_atom, uint32_t, uint64_t>,
  caf::reacts_to<heartbeat_atom, uint32_t>, caf::reacts_to<shutdown_atom>,
  caf::replies_to<dead_atom, int32_t, int32_t>::with<uint32_t>,
  caf::replies_to<status_atom>::with<job_status>>;

/// Spawns a coordinator. The caller owns it: link to or monitor the handle.
coordinator_actor spawn_coordinator(caf::actor_system& sys,
                                    coordinator_config cfg);

} // namespace actorps
