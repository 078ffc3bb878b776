// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "caf/allowed_unsafe_message_type.hpp"
#include "caf/fwd.hpp"
#include "caf/node_id.hpp"
#include "caf/replies_to.hpp"
#include "caf/typed_actor.hpp"

#include <actorps/messages/type_ids.hpp>

/// Protocol of a parameter shard.
///
/// A shard owns a disjoint set of key slices: the weights (float32), the
/// optimizer state beside them, an update counter per slice and, in sync
/// mode, the pending aggregation of the current round. Nothing else touches
/// them.
///
/// Messages (errors are `actorps::errc` values with a message naming the
/// operation, the slice and what was expected):
/// - `(init_atom, slice_init)` -> `ok_atom`. Creates the slice with the given
///   value. Errors: `already_initialized`, `shape_mismatch` (empty value).
/// - `(push_atom, slice_push)` -> `ok_atom`, sent once the push is applied
///   (async) or added to its round (sync). Errors: `not_initialized`,
///   `shape_mismatch` (length differs from the slice), `bad_config` (worker
///   out of range, sequence number reused or more than 65536 ahead),
///   `dead_node` (the worker is not live: it left or was declared dead).
///   The shard keeps the pushed buffer when it can: as a round's sum, and,
///   under "assign", as the new value.
/// - `(pull_atom, slice_pull)` -> `shared_floats`: the slice's value, shared
///   with the shard in the same process (copy on write: the shard copies its
///   value before updating it only while a reader still holds it). In sync
///   mode the reply waits until every round to which the same worker
///   contributed before this pull has been applied; with bounded staleness
///   (`shard_config::staleness`), until every live worker's clock on the
///   slice reached the puller's minus the bound. Errors: as for push.
/// - `(push_pull_atom, slice_push)` -> `shared_floats`: the push, then a pull
///   of the value it produced (in sync mode, once its round is applied), in
///   one request. Errors: as for push.
/// - `(batch_atom, slice_batch)` -> `float_parts`: several pushes, pulls or
///   push-pulls of one worker on this shard's slices, each ordered with the
///   worker's other operations on its slice by its sequence number; the reply
///   (pulled values back to back in `slices` order: each slice's buffer
///   shared as one piece, or all copied into one buffer when the slices
///   average under `min_shared_floats`; empty for pushes) comes once all of
///   them completed. Pushed values held in `parts` are read where they lie
///   (a slice that spans two pieces is gathered). Errors: as for push and
///   pull, checked for every slice before anything runs (`not_initialized`,
///   `shape_mismatch` when `data` or `parts` does not hold the slices'
///   floats or the pieces of `parts` leave gaps, `bad_config` for values in
///   both); the first error of an operation fails the whole batch (earlier
///   operations stay applied).
/// - `(init_atom, table_init)` -> `ok_atom`: creates this shard's part of a
///   row-sparse table (its rows made here, see `table_init`). Errors:
///   `already_initialized`, `shape_mismatch` (no rows, no row size, more
///   than 2^34 floats on this shard), `bad_config` (an unknown rule, low >
///   high).
/// - `(push_atom, rows_push)` -> `ok_atom`: applies the pushed rows through
///   the optimizer, row by row (lazy update: a row's optimizer state and
///   step change only when the row is pushed, as MXNet's lazy_update).
///   Sync: a round sums each row over the workers and updates it once
///   when every live worker pushed (no rows is a push too); bounded
///   staleness: each push of a table slice is one tick of the worker's
///   clock there.
///   A row named more than once gets the sum of its rows.
///   Errors: as for push, plus `shape_mismatch` (not a table, values not
///   one row per id), `unknown_key` (a row out of range).
/// - `(pull_atom, rows_pull)` -> `shared_floats`: the rows asked for, back
///   to back (with bounded staleness, once the bound allows, as a pull).
///   Errors: as for rows_push. `save` and `load` carry a table's values
///   and optimizer state as a slice's; its rows' update counts start again
///   at 0 after a load (for now).
/// - `(set_opt_atom, optimizer_config)` -> `ok_atom`. Replaces the update rule
///   and resets every slice's optimizer state and step. Error: `bad_optimizer`.
/// - `(save_atom)` -> `state_snapshot` with every slice (key names empty,
///   offsets 0: the shard knows ids only). Partial sync rounds are not saved.
/// - `(load_atom, state_snapshot)` -> `ok_atom`. Restores the optimizer and,
///   for each record, weights, state and step; all-or-nothing. Errors:
///   `bad_optimizer`, `unknown_key` (slice not initialized here),
///   `checkpoint_mismatch` (length or state size differs). Both move the
///   whole shard in one message: for tests and small stores; the
///   coordinator uses the pieces below.
/// - `(save_atom, session)` -> `ok_atom`: begins a save of the state as it
///   is now; `(save_atom, save_cursor)` -> `save_piece`: its next records
///   (at most save_piece_bytes but one record; a large slice comes in
///   pieces), `done` with the last. At most `max_sessions` saves (and as
///   many loads) at once: a new one drops the oldest.
/// - `(load_atom, session, optimizer_config)` -> `ok_atom` begins a load;
///   `(load_atom, session, std::vector<slice_record>)` -> `ok_atom` adds
///   pieces of this shard's slices (core::slice_assembly: sized by the
///   slice, each float or row at most once); `(load_atom, session, bool
///   commit)` -> `ok_atom` ends it: with commit every slice touched must be
///   whole, then the optimizer and all of them are taken at once. Errors as
///   for the whole load, and `checkpoint_io` for a session that is not open.
/// - `(workers_atom, std::vector<uint32_t>)` -> `ok_atom`. Sets the live
///   workers (ids < num_workers); sync rounds complete when every live worker
///   contributed, so a dead worker never blocks a round (nor, with bounded
///   staleness, a pull).
/// - `(stats_atom)` -> `shard_stats`.
/// - `(command_atom, head, body)` -> `ok_atom` (MXNet's
///   send_command_to_servers). Head 0 sets the optimizer from text (see
///   core::parse_optimizer); other heads go to `shard_config::on_command`.
///   Errors: `bad_optimizer`, `bad_config` (no handler for the head).
/// - `(admit_atom, std::vector<caf::node_id> nodes, std::vector<caf::node_id>
///   workers)` -> `ok_atom`: trusts these nodes from now on (the
///   coordinator sends every node that proved the job's token), and
///   `workers[r]` is the node that joined as worker r: from then on a data
///   operation in worker r's name is taken from another node only if it is
///   that one (`unauthorized` otherwise; this process's own senders, such as
///   a UCX plane that checked the peer itself, act for any rank). Only the
///   shard's process and the nodes of `shard_config::trusted` may send it:
///   an admitted worker cannot admit others.
///
/// - `(push_atom, slice_push, plane_reply)`, `(pull_atom, slice_pull,
///   plane_reply)`, `(push_pull_atom, slice_push, plane_reply)`,
///   `(batch_atom, slice_batch, plane_reply)`, `(push_atom, rows_push,
///   plane_reply)` and `(pull_atom, rows_pull, plane_reply)`: the same
///   operations, arrived
///   over a data plane (runtime/ucx) whose peer proved the job's secret; no
///   CAF reply: the outcome goes to the `plane_reply`'s sink, on the shard's
///   thread, so the data plane answers without another actor's hop.
///   `plane_reply` has no type id, so such a message can only come from the
///   shard's own process.
///
/// Trust: every message is refused with `unauthorized` unless its sender is
/// in the shard's process, on a node of `shard_config::trusted` or on an
/// admitted node (an anonymous sender counts as foreign). The first refusal
/// per node is logged.
///
/// Replicas (a job run with `--replicas 2` or 3): a shard may be the
/// primary of its slices with a backup, a shard of the next server that
/// holds a copy of them (`shard_config::backup`), as the OSDI'14 Parameter
/// Server keeps a key range on the next server of its ring. With 3 copies
/// a backup has a backup of its own (a chain): it forwards what it runs,
/// as a primary does, and answers its primary's forwards (and changes,
/// and state parts) only once its own backup acknowledged them.
/// - `(replica_atom, caf::actor peer, bool peer_is_backup)` -> `ok_atom`
///   (from the shard's process or an admitter only): with `peer_is_backup`
///   the shard forwards to `peer` everything that changes its state from
///   now on (an invalid `peer`: the backup is gone, stop); without, `peer`
///   is the primary whose forwards a backup accepts.
/// - A primary forwards each operation it runs, in the order it runs it
///   (pulls as their sequence number only), as `(replicate_atom,
///   replica_batch)` -> `ok_atom`, one message per message it handled; and
///   every other change (init, tables, optimizer, loads, live workers,
///   clear_pending, command head 0) as the same message it got, before it
///   runs it. An operation completes (its reply, or its error, reaches the
///   worker) only once the backup acknowledged it: whatever a worker saw
///   acknowledged, the backup holds. If the backup fails or is told gone,
///   the primary goes on alone (and ends a backup that only timed out, so
///   that it is never promoted behind).
/// - `(replica_atom, caf::actor peer, true, std::string address)`: the
///   same, and the backup's server has a data plane at `address`: with a
///   `shard_config::link`, the forwards travel there (as frames numbered
///   from 1) instead of through CAF, and the backup's answers come back as
///   `(replicate_atom, replica_ack)` (local only). The primary then watches
///   the backup (a down backup is lost at once).
/// - A backup takes its primary's forwards that arrive over this process's
///   data plane as `(replicate_atom, uint64_t number, replica_batch,
///   plane_reply)` and `(replicate_atom, uint64_t number, caf::message
///   change, plane_reply)` (the plane checked that a server sent them), in
///   the order of their numbers, whatever order they arrive in; a change is
///   one of the messages above that `change` forwards (init, set_opt, load,
///   workers, command), run as if its primary had sent it.
/// - Before anything else, a primary sends a backup paired with it its
///   whole state, as forwards `(replicate_atom, replica_state)` -> `ok_atom`
///   (the first part replaces whatever the backup held; nothing but the
///   update rule and the live workers at the start of a job); the pairing
///   is answered once the backup took the last part. A backup that has not
///   refuses promotion. This rebuilds a replica for a primary that served
///   alone (a promoted backup, or a primary whose backup died).
/// - A backup runs what its primary forwards, and refuses everything else
///   that reads or changes its slices, from anyone, until `(promote_atom)`
///   -> `ok_atom` (an admitter's) makes it the slices' primary. A promoted
///   shard answers an operation whose sequence number it saw forwarded (a
///   worker sending again what its dead primary had not answered) without
///   applying it twice: a push is acknowledged, a pull answered (in sync
///   mode once its round is applied).
///
/// Ordering: operations of one worker on one slice carry consecutive sequence
/// numbers and are applied in that order, whatever order the mailbox delivers
/// them in (a high-priority message overtakes the normal queue). Operations
/// of different workers or on different slices are independent.
///
/// Update rules: with the default "assign" rule the stored value becomes the
/// merged push (sync: sum over all live workers' pushes of the round; async:
/// the one push); otherwise the merged push goes through the optimizer (see
/// core/optimizer.hpp).
namespace actorps::core {
class local_hooks;
} // namespace actorps::core

namespace actorps {

class replica_link;

/// Static configuration of one shard.
struct shard_config {
  /// Index of the shard among all shards of the job (for messages only).
  uint32_t index = 0;
  /// Number of workers of the job; worker ids are 0..num_workers-1.
  uint32_t num_workers = 1;
  /// Synchronous (BSP) rounds instead of applying each push on arrival.
  bool sync = false;
  /// Bounded staleness (stale synchronous parallel) when >= 0 and `sync`
  /// is off: each push is applied on arrival, as in async mode, and counts
  /// as one clock tick of its worker on that slice; a pull by a worker
  /// whose clock on the slice is c is answered once every live worker's
  /// clock there is at least c - staleness. A worker that left or died
  /// stops counting. -1: plain async.
  int32_t staleness = -1;

  /// True for bounded staleness.
  bool ssp() const noexcept {
    return !sync && staleness >= 0;
  }
  /// Handles send_command_to_servers heads other than 0 (embedders' hook);
  /// runs inside the shard, so it must not block.
  std::function<caf::error(int32_t head, const std::string& body)> on_command;
  /// A local store's own update rule (MXNet's _set_updater), run instead
  /// of the optimizer while one is set; null in servers.
  std::shared_ptr<core::local_hooks> hooks;
  /// Remote nodes trusted from the start (a server's: the coordinator's).
  std::vector<caf::node_id> trusted;
  /// A backup (see "Replicas" above): runs only what its primary forwards
  /// until promoted.
  bool backup = false;
  /// How long a primary waits for its backup to acknowledge a forward
  /// before it goes on without it.
  std::chrono::milliseconds replica_timeout{30000};
  /// Carries a primary's forwards over a data plane (see "Replicas");
  /// none: through CAF.
  std::shared_ptr<replica_link> link;
  /// The largest message of the job in bytes (job_info::message_cap; 0: no
  /// bound): a pull whose answer would not fit one (a batch's slices, a
  /// table's rows) is refused before anything is made for it, as the
  /// worker refuses it before it asks.
  uint64_t message_cap = 0;
  /// Bytes of one worker's operations that arrived ahead of an earlier one
  /// of the same worker (out of order) that the shard holds until their
  /// turn, over all its slices; an early operation past it is refused (as
  /// one too far ahead in sequence numbers is). Never below `message_cap`:
  /// one message of the job always fits. A worker's own bound on bytes in
  /// flight per shard (store_options::max_bytes_in_flight, 4 MiB by
  /// default) keeps a working one far below it; one whose bound is set
  /// above this may see early operations refused. The same bound holds a
  /// dist_sync worker's pushes into rounds past a slice's current one (a
  /// worker that pushes again before the others did): past it, its next
  /// such push waits, unanswered, until rounds complete (pushes into a
  /// current round always run). A pull waiting for a round (or, bounded
  /// staleness, for the others' clocks) counts its bookkeeping against it
  /// too; past it, the pull is refused.
  uint64_t max_stash_bytes = uint64_t{1} << 30;
  /// Runs the shard on a thread of its own (a detached actor) instead of
  /// on CAF's scheduler threads, so that its buffers are made and freed in
  /// one malloc arena (a server's choice, docs/benchmarks.md). CAF's actor
  /// system then waits at its end until the shard is destroyed: whoever
  /// spawns one monitors it at once and waits for its down message before
  /// the system goes down (run_server does; see spawn_shard).
  bool own_thread = false;
};

/// Interface of a shard actor.
/// Where a shard sends the outcome of an operation that reached it over a
/// data plane (see the messages above). Called on the shard's thread: it
/// must not block.
class reply_sink {
public:
  virtual ~reply_sink() = default;

  /// A push completed.
  virtual void ok(uint64_t peer, uint64_t request) = 0;

  /// A pull or push_pull's value (shared with the shard: copy on write).
  virtual void value(uint64_t peer, uint64_t request, const shared_floats& x)
    = 0;

  /// A pull's value that may leave only later (a primary's reply held until
  /// its backup acknowledged the pushes before it): a sink may copy it now
  /// to where it leaves from, so that the shard's buffer is let go of at
  /// once and the reply leaves at once when the returned function runs.
  /// Empty (the default): the caller keeps the value and calls `value`.
  virtual std::function<void()> value_later(uint64_t peer, uint64_t request,
                                            const shared_floats& x) {
    static_cast<void>(peer);
    static_cast<void>(request);
    static_cast<void>(x);
    return {};
  }

  /// A batch's value, in pieces.
  virtual void parts(uint64_t peer, uint64_t request, float_parts&& x) = 0;

  /// The operation failed.
  virtual void fail(uint64_t peer, uint64_t request, const caf::error& err) = 0;
};

/// The reply address of an operation that arrived over a data plane: the
/// sink, and what it needs to find the request (the peer it came from and
/// the peer's request id).
struct plane_reply {
  std::shared_ptr<reply_sink> sink;
  uint64_t peer = 0;
  uint64_t request = 0;
  /// Keeps the request's values counted against the plane's bound on bytes
  /// held (plane_options::max_held_bytes); the shard lets go of it once it
  /// has handled the message, whatever becomes of the reply.
  std::shared_ptr<void> hold;
  /// A push's values where they lie (a view of the worker's shared-memory
  /// segment) instead of in its `slice_push`: read where they lie by the
  /// shard and by its forward to a backup; copied by an operation that must
  /// wait. The shard lets go of it once the message was handled, except for
  /// the share a forward keeps until it has left.
  shared_floats values;
};

/// The answer to a forward a primary sent over its `replica_link`: `err`
/// is empty once the backup ran forward `number`; `timer` marks the
/// primary's own reminder that the answer is overdue. Local only.
struct replica_ack {
  uint64_t peer = 0;
  uint64_t number = 0;
  caf::error err;
  bool timer = false;
};

/// How a primary's forwards reach its backup's server beside CAF (the UCX
/// plane: runtime/ucx/replicas.hpp). Called on the primary's thread.
class replica_link {
public:
  virtual ~replica_link() = default;

  /// The way to the server whose data plane is at `address`; 0 if this
  /// link cannot reach it.
  virtual uint64_t open(const std::string& address) = 0;

  /// The way forwards from the server whose data plane is at `address`
  /// arrive (plane_reply::peer); 0 if that server never reached this one.
  virtual uint64_t source(const std::string& address) = 0;

  /// Sends forward `number` of shard `index` to the backup of the same
  /// index behind `to`: operations, or a change. Its answer (or the reason
  /// it could not leave) goes to `primary` as `(replicate_atom,
  /// replica_ack)` with `peer` = `to`.
  virtual void send(uint64_t to, uint32_t index, uint64_t number,
                    replica_batch&& ops, const caf::actor& primary)
    = 0;
  virtual void send(uint64_t to, uint32_t index, uint64_t number,
                    const caf::message& change, const caf::actor& primary)
    = 0;

  /// Shard `index` stopped forwarding to `to`: answers still owed to it
  /// are dropped.
  virtual void forget(uint64_t to, uint32_t index) = 0;
};

using shard_actor = caf::typed_actor<
  caf::replies_to<init_atom, slice_init>::with<caf::ok_atom>,
  caf::replies_to<push_atom, slice_push>::with<caf::ok_atom>,
  caf::replies_to<pull_atom, slice_pull>::with<shared_floats>,
  caf::replies_to<push_pull_atom, slice_push>::with<shared_floats>,
  caf::replies_to<batch_atom, slice_batch>::with<float_parts>,
  caf::replies_to<init_atom, table_init>::with<caf::ok_atom>,
  caf::replies_to<push_atom, rows_push>::with<caf::ok_atom>,
  caf::replies_to<pull_atom, rows_pull>::with<shared_floats>,
  caf::replies_to<set_opt_atom, optimizer_config>::with<caf::ok_atom>,
  caf::replies_to<save_atom>::with<state_snapshot>,
  caf::replies_to<load_atom, state_snapshot>::with<caf::ok_atom>,
  caf::replies_to<save_atom, uint64_t>::with<caf::ok_atom>,
  caf::replies_to<save_atom, save_cursor>::with<save_piece>,
  caf::replies_to<load_atom, uint64_t, optimizer_config,
                  bool>::with<caf::ok_atom>,
  caf::replies_to<load_atom, uint64_t,
                  std::vector<slice_record>>::with<caf::ok_atom>,
  caf::replies_to<load_atom, uint64_t, bool>::with<caf::ok_atom>,
  caf::replies_to<workers_atom, std::vector<uint32_t>>::with<caf::ok_atom>,
  caf::replies_to<stats_atom>::with<shard_stats>,
  caf::replies_to<command_atom, int32_t, std::string>::with<caf::ok_atom>,
  caf::replies_to<admit_atom, std::vector<caf::node_id>,
                  std::vector<caf::node_id>>::with<caf::ok_atom>,
  caf::reacts_to<push_atom, slice_push, plane_reply>,
  caf::reacts_to<pull_atom, slice_pull, plane_reply>,
  caf::reacts_to<push_pull_atom, slice_push, plane_reply>,
  caf::reacts_to<batch_atom, slice_batch, plane_reply>,
  caf::reacts_to<push_atom, rows_push, plane_reply>,
  caf::reacts_to<pull_atom, rows_pull, plane_reply>,
  caf::replies_to<replica_atom, caf::actor, bool>::with<caf::ok_atom>,
  caf::replies_to<replica_atom, caf::actor, bool,
                  std::string>::with<caf::ok_atom>,
  caf::replies_to<replicate_atom, replica_batch>::with<caf::ok_atom>,
  caf::replies_to<replicate_atom, replica_state>::with<caf::ok_atom>,
  caf::reacts_to<replicate_atom, uint64_t, replica_batch, plane_reply>,
  caf::reacts_to<replicate_atom, uint64_t, caf::message, plane_reply>,
  caf::reacts_to<replicate_atom, replica_ack>,
  caf::replies_to<promote_atom>::with<caf::ok_atom>,
  caf::replies_to<clocks_atom>::with<caf::ok_atom>,
  caf::replies_to<clocks_atom, uint32_t, std::vector<uint64_t>,
                  std::vector<uint64_t>, bool>::with<caf::ok_atom>,
  caf::replies_to<clocks_atom, uint32_t>::with<std::vector<uint64_t>,
                                               std::vector<uint64_t>>>;

/// Spawns a shard. The caller owns it: link to or monitor the handle.
///
/// With `cfg.own_thread`, the caller monitors the shard before anything
/// else can (before it hands the handle on) and, once the shard quit, waits
/// for that down message before the actor system goes down. CAF runs an
/// actor's monitors newest first, so the first one runs last: by then the
/// shard's down message to CAF's network layer (which monitors every actor
/// a remote node holds) is in that broker's mailbox while the broker still
/// runs. Sent later, it could land in a broker that no longer reads its
/// mailbox, keep the shard alive, and hold the system's end forever.
shard_actor spawn_shard(caf::actor_system& sys, shard_config cfg);

} // namespace actorps

// Local only: no type id, never serialized.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorps::plane_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorps::replica_ack)
