// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "caf/allowed_unsafe_message_type.hpp"
#include "caf/fwd.hpp"
#include "caf/replies_to.hpp"
#include "caf/typed_actor.hpp"

#include <actorps/actors/coordinator/coordinator.hpp>
#include <actorps/actors/shard/shard.hpp>
#include <actorps/actors/worker/channel.hpp>
#include <actorps/core/batching.hpp>
#include <actorps/core/list_memo.hpp>
#include <actorps/messages/type_ids.hpp>

/// Protocol of a worker: one training thread's view of the store.
///
/// The worker caches each key's routing entry (fetched from the coordinator on
/// first use), numbers its operations per slice so that shards apply them in
/// issue order whatever their priorities, slices pushes and gathers pulls.
///
/// Messages:
/// - `(init_atom, key, shape, floats)` -> `ok_atom` once every shard holds the
///   key's value: rank 0 writes its value; other ranks wait for rank 0 and
///   their value is ignored (MXNet semantics). Errors: `shape_mismatch`
///   (value size differs from the shape, or the shape from the registered
///   one), `already_initialized`.
/// - `(push_atom, key, priority, float_parts)` -> `ok_atom` once every slice
///   was accepted by its shard. A piece of the payload that holds exactly one
///   large slice in a buffer of its own is moved to the shard, not copied.
///   Small slices of uncompressed keys are not copied either, unless they
///   are shorter than `min_shared_floats` on average: a batch refers to the
///   payload's buffers, and a lone small slice's own buffer is moved.
///   Errors: `unknown_key`, `not_initialized`, `shape_mismatch` (wrong size,
///   or pieces not in order and contiguous).
/// - `(pull_atom, key, priority)` -> `float_parts`: the whole value, as the
///   pieces its shards returned (nothing is copied into one vector; a local
///   shard's buffer is shared); sees every earlier push of this worker.
///   Errors: as push.
/// - `(push_pull_atom, key, priority, float_parts)` -> `float_parts`: a push,
///   then a pull of the value it produced, in one request per shard (MXNet's
///   pushpull; in sync mode the reply waits for the push's round).
/// - `(push_atom, keys, priority, float_parts)`, `(pull_atom, keys,
///   priority)`, `(push_pull_atom, keys, priority, float_parts)` with `keys`
///   a `std::vector<std::string>`: the same on several keys at once, their
///   values back to back in `keys` order. Slices of at most
///   `worker_config::batching.batch_floats` floats are sent as one batch per
///   shard, so
///   a round of many small keys costs one message per shard, not per key.
///   A key named more than once is grouped as MXNet does: its pushed values
///   are summed into one push, and it is pulled once into every place that
///   names it.
///   Errors: as for one key; `shape_mismatch` names the total size.
/// - The same three with `keys` a `key_list` (in the worker's process only:
///   the list shared, not copied).
/// - `(init_atom, key, table_init)` -> `ok_atom`: a row-sparse table of
///   `rows` x `dim` floats (MXNet's row_sparse storage), made where its rows
///   live by the rule of `table_init` (its slice and row numbering are
///   ignored): nothing of its size travels. Rows are spread so that row r
///   lives on shard r mod S. As for init: rank 0 makes it, other ranks wait.
/// - `(push_atom, key, rows, priority, floats)` -> `ok_atom`: pushes one row
///   of `dim` floats per id in `rows` (`std::vector<uint64_t>`; an id named
///   more than once has its rows summed), one request per shard holding
///   some of them; only those rows and their optimizer state change (lazy
///   update). MXNet's row-sparse push.
/// - `(pull_atom, key, rows, priority)` -> `float_parts`: one row per id, in
///   the order of `rows` (repeated ids repeat their row). MXNet's
///   row_sparse_pull. Errors of both: `unknown_key` (a row out of range, or
///   no such key), `shape_mismatch` (a dense key, values not one row per
///   id); dense push and pull refuse a table the same way.
/// - `(compress_atom, key, compression)` -> `ok_atom`: pushes of `key` from
///   now on go through `compression` (see core/compression.hpp); an
///   empty `key` sets it for every key without a setting of its own
///   (initially `worker_config::compression`). The key need not exist yet.
///   Changing a key's codec drops its 2-bit residuals. Takes effect after
///   every operation issued before it. Errors: `bad_config` (a bad
///   threshold).
/// - `(lookup_atom, key)` -> `key_info`. Errors: `unknown_key`,
///   `not_initialized`.
/// - `(barrier_atom)` -> `ok_atom` once every live worker reached the barrier.
/// - `(leave_atom)` -> `ok_atom`: this worker leaves the job; barriers and
///   sync rounds stop waiting for it (see the coordinator).
/// - `(leave_atom, why)` -> `ok_atom`: the same after its job failed; the
///   coordinator counts it as failed, with `why`.
/// - `(set_opt_atom, optimizer_config)`, `(save_atom)`, `(load_atom,
///   state_snapshot)`, `(save_atom, save_cursor)`, `(load_atom,
///   load_piece)`: forwarded to the coordinator (see its protocol).
///
/// - `(dead_atom, node_or_group, timeout_s)`, `(command_atom, head, body)`:
///   forwarded to the coordinator.
/// - `(stats_atom)` -> `worker_stats`: data operations completed and failed
///   per kind, floats moved, the latency histogram (from the request's
///   arrival here to its reply), bytes in flight and requests queued per
///   priority.
///
/// Priority: a push or pull with priority > 0 overtakes the shards' normal
/// backlog: local shards get it with CAF's high message priority, remote ones
/// through their relay (CAF drops priorities over the network). Operations
/// of this worker on one key still take effect in issue order.
///
/// Supervision: the worker monitors every shard and relay. When one goes
/// down, every request in flight to it fails at once with `dead_node`, and so
/// does every later request that needs it.
/// With `worker_config::recovery`, they wait for a replacement server
/// instead, and are re-sent to it.
///
/// Trust: a worker serves its own process only; a message from any other
/// node (or an anonymous one) is refused with `unauthorized`.
namespace actorps {

/// Static configuration of one worker.
struct worker_config {
  uint32_t rank = 0;
  coordinator_actor coordinator;
  std::vector<shard_actor> shards;
  /// Distributed mode: the priority relay of each shard (see
  /// spawn_priority_relay); empty when the shards are local.
  std::vector<shard_actor> relays;
  /// Timeout of each request to a shard or the coordinator.
  std::chrono::milliseconds timeout{60000};
  /// Timeout of a barrier (other workers may legitimately be slow).
  std::chrono::milliseconds barrier_timeout{600000};
  /// Which slices travel alone and which in one batch message per shard
  /// (the client facade lays pushed values out by the same policy).
  core::batching batching{};
  /// Per shard: bytes of requests sent and not answered yet beyond which
  /// further requests wait in the worker, highest priority first (a single
  /// larger request still goes alone). Bounds what queues up in the network
  /// buffers and the shard's mailbox, so a high-priority request overtakes
  /// a backlog of low-priority ones here instead of waiting behind it, and
  /// bounds what a server holds for this worker beyond its weights.
  uint64_t max_bytes_in_flight = uint64_t{4} << 20;
  /// The job is synchronous: pulls and push-pulls may wait for a round, so
  /// they never keep pushes back: sync pulls have a bound of their own
  /// (`max_bytes_in_flight` again), sync push-pulls hold no room (see
  /// core/send_queue.hpp).
  bool sync = false;
  /// Compression of pushed values for keys without a setting of their own.
  /// The worker quantizes each pushed slice (keeping 2-bit residuals per
  /// slice); the values then cross the network packed.
  actorps::compression compression{};
  /// The largest message the job's processes accept (job_info::message_cap;
  /// 0: no bound, a local store): a row request whose part for one shard
  /// would be larger is refused with `bad_config` before anything is sent.
  uint64_t message_cap = 0;
  /// Carries data requests to the shards it `carries` (the UCX plane);
  /// none: CAF carries everything. The channel wakes the worker with
  /// `(ucx_atom)` when replies wait.
  std::shared_ptr<data_channel> channel;
  /// Replacement servers (job_info::recovery_ms; 0: none). When a shard goes
  /// down, the requests in flight to it and every later one wait for the
  /// coordinator's routing table of a version above `routing_version`
  /// (at most this long plus `timeout`), then go to the replacement shard
  /// in the order they were first sent, numbered afresh (a replacement
  /// starts every worker's sequence numbers at 0); without a replacement
  /// in time they fail with `dead_node`.
  std::chrono::milliseconds recovery{0};
  uint64_t routing_version = 0;
  /// The job keeps replicas (job_info::replicas > 1): a dead shard's calls
  /// wait for its promoted backup (said on stderr). Whether requests keep
  /// their sequence numbers there follows routing_table::restarted.
  bool replicas = false;
  /// Per shard, as routing_table::restarted when this worker started: a
  /// restored shard that waits for its clocks (see shard_state::
  /// await_clocks), told at once.
  std::vector<uint32_t> restarted;
  /// A process in a dead worker's rank of a job that replaces servers: per
  /// shard, the pushes per slice its counts start from (the shard's own
  /// counts for the rank, asked at start), and the shards it could not ask,
  /// whose replacement it joins where the others are. Empty: from 0.
  std::vector<std::unordered_map<uint64_t, uint64_t>> clock_origins;
  std::vector<bool> clocks_unknown;
  /// Opens this process's direct connection to a replacement server at
  /// "host:port" (see routing_table::servers), blocking; run on a thread
  /// of its own. None: nothing to open (shards in this process).
  std::function<caf::error(const std::string& endpoint)> reach_server;
};

/// The names of a call on several keys, shared with the worker instead of
/// copied into the message: a store handle passes the list it resolved
/// last, and the worker finds the routes it kept for that list by the
/// list's address, without reading the names again. For callers in the
/// worker's own process only (never serialized). An empty or null list is
/// refused as an empty `std::vector<std::string>` is.
struct key_list {
  core::shared_names_ptr names;
};

/// Interface of a worker actor.
using worker_actor = caf::typed_actor<
  caf::replies_to<init_atom, std::string, std::vector<uint64_t>,
                  floats>::with<caf::ok_atom>,
  caf::replies_to<push_atom, std::string, int32_t,
                  float_parts>::with<caf::ok_atom>,
  caf::replies_to<pull_atom, std::string, int32_t>::with<float_parts>,
  caf::replies_to<push_pull_atom, std::string, int32_t,
                  float_parts>::with<float_parts>,
  caf::replies_to<push_atom, std::vector<std::string>, int32_t,
                  float_parts>::with<caf::ok_atom>,
  caf::replies_to<pull_atom, std::vector<std::string>,
                  int32_t>::with<float_parts>,
  caf::replies_to<push_pull_atom, std::vector<std::string>, int32_t,
                  float_parts>::with<float_parts>,
  caf::replies_to<push_atom, key_list, int32_t,
                  float_parts>::with<caf::ok_atom>,
  caf::replies_to<pull_atom, key_list, int32_t>::with<float_parts>,
  caf::replies_to<push_pull_atom, key_list, int32_t,
                  float_parts>::with<float_parts>,
  caf::replies_to<init_atom, std::string, table_init>::with<caf::ok_atom>,
  caf::replies_to<push_atom, std::string, std::vector<uint64_t>, int32_t,
                  floats>::with<caf::ok_atom>,
  caf::replies_to<pull_atom, std::string, std::vector<uint64_t>,
                  int32_t>::with<float_parts>,
  caf::replies_to<compress_atom, std::string, compression>::with<caf::ok_atom>,
  caf::replies_to<lookup_atom, std::string>::with<key_info>,
  caf::replies_to<barrier_atom>::with<caf::ok_atom>,
  caf::replies_to<leave_atom>::with<caf::ok_atom>,
  caf::replies_to<leave_atom, std::string>::with<caf::ok_atom>,
  caf::replies_to<dead_atom, int32_t, int32_t>::with<uint32_t>,
  caf::replies_to<command_atom, int32_t, std::string>::with<caf::ok_atom>,
  caf::replies_to<set_opt_atom, optimizer_config>::with<caf::ok_atom>,
  caf::replies_to<save_atom>::with<state_snapshot>,
  caf::replies_to<load_atom, state_snapshot>::with<caf::ok_atom>,
  caf::replies_to<save_atom, save_cursor>::with<save_piece>,
  caf::replies_to<load_atom, load_piece>::with<uint64_t>,
  caf::replies_to<stats_atom>::with<worker_stats>, caf::reacts_to<ucx_atom>,
  caf::reacts_to<ucx_atom, uint64_t>>;

/// Spawns a worker. The caller owns it: link to or monitor the handle.
worker_actor spawn_worker(caf::actor_system& sys, worker_config cfg);

} // namespace actorps

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorps::key_list)
