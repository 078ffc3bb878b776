// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include <actorps/core/errc.hpp>
#include <actorps/core/node_ids.hpp>
#include <actorps/core/update_rule.hpp>
#include <actorps/messages/types.hpp>
#include <actorps/runtime/metrics.hpp>
#include <actorps/runtime/scheduler_policy.hpp>
#include <actorps/runtime/system_options.hpp>

namespace actorps {

/// Handles the commands of `kvstore::send_command_to_servers` with a head
/// other than 0. It runs inside each shard actor, once per shard and
/// possibly on several threads at once: it must not block, and anything it
/// shares between shards must be safe to use concurrently. An error it
/// returns fails the command.
using command_handler
  = std::function<caf::error(int32_t head, const std::string& body)>;

/// Options of a store.
struct store_options {
  /// Local mode: number of worker handles (training threads).
  uint32_t num_workers = 1;
  /// Local mode: number of shard actors.
  uint32_t num_shards = 2;
  /// Keys with at least this many floats are sliced over all shards.
  uint64_t bigarray_bound = uint64_t{1} << 20;
  /// Local mode: largest slice of a sliced key, in floats (at most 2^25).
  uint64_t slice_floats = uint64_t{1} << 20;
  /// local_ssp: the staleness bound s. Each push of a key is one tick of
  /// its worker's clock on that key; a pull by a worker at clock c returns
  /// once every live worker pushed the key at least c - s times (0 waits
  /// for every worker's push of the same step, as BSP does, though each
  /// push is applied on arrival; a large s never waits, as async).
  /// dist_ssp takes the coordinator's.
  uint32_t staleness = 2;
  /// Bound on every data or control operation.
  std::chrono::milliseconds timeout{60000};
  /// Bound on a barrier (other workers may legitimately be slow).
  std::chrono::milliseconds barrier_timeout{600000};
  /// Per shard: bytes of requests a worker keeps in flight before further
  /// ones wait in the worker, highest priority first (see
  /// worker_config::max_bytes_in_flight).
  uint64_t max_bytes_in_flight = uint64_t{4} << 20;
  /// Compression of pushed values (gradients) for every key without a
  /// setting of its own: `codec::fp16` (BigDL) or `codec::two_bit` with error
  /// feedback (MXNet); see core/compression.hpp and
  /// `kvstore::set_gradient_compression`.
  actorps::compression compression{};
  /// Pushes a handle keeps in flight before `push` waits for the oldest.
  std::size_t max_pending = 1024;
  /// Scheduler threads of the local actor system; 0 keeps CAF's default.
  std::size_t threads = 0;
  /// Scheduler policy of this store's actor system.
  scheduler_policy scheduler = scheduler_policy::automatic;
  /// Tune glibc malloc for the data plane when the store is created
  /// (process-wide; see `tune_malloc` in runtime/system.hpp).
  bool keep_freed_memory = true;
  /// Local stores: the shards' handler of commands with a head other than 0
  /// (distributed jobs install theirs on the servers: see
  /// `server_options::on_command`).
  command_handler on_command;
  /// Distributed stores: the coordinator's "host:port".
  std::string coordinator;
  /// Distributed stores: the job token.
  std::string token;
  /// Distributed stores: what must carry tensor bytes between this worker
  /// and the servers, "caf" or "ucx"; a job whose coordinator chose the
  /// other refuses the join. Empty: whatever the job uses.
  std::string transport;
  /// Distributed stores: how long to keep trying to reach the coordinator.
  std::chrono::milliseconds connect_timeout{5000};
  /// Distributed stores: take the place of this dead worker rank (a job
  /// whose workers all joined; not rank 0). Unset: the next rank, or in a
  /// full job the lowest dead one.
  std::optional<uint32_t> rank;
  /// Distributed stores: CAF's heartbeat interval on each connection.
  std::chrono::milliseconds heartbeat{1000};
  /// Distributed stores: a connection silent this long counts as dead.
  std::chrono::milliseconds connection_timeout{10000};
  /// Distributed stores: mutual TLS with the job's other nodes (the
  /// certificate, key and CA files; all three or none).
  tls_files tls;
  /// Asked about every 100 ms while a call waits (from the waiting
  /// thread): true ends the wait with `errc::interrupted`. Pushes and
  /// pulls waited for stay pending (a later wait finishes them and writes
  /// their outputs); the reply of any other call (a barrier, say) is
  /// dropped. The handle stays usable. The Python module checks Ctrl-C.
  std::function<bool()> interrupted;
  /// Prometheus metrics of this process's workers (and, local stores, its
  /// shards) at http://host:port/metrics (runtime/metrics.hpp); off unless
  /// `metrics.port` >= 0. A distributed store's scrapes log in with
  /// `metrics_password(token)`.
  metrics_options metrics;
};

/// How the values of a row-sparse table start (`kvstore::init_table`):
/// every value `low` (constant), or drawn uniformly from [low, high) by a
/// generator seeded with `seed` and each value's place in the table, so
/// that a table starts the same whatever the number of shards.
struct table_fill {
  enum rule_kind { constant, uniform };
  rule_kind rule = constant;
  float low = 0.0f;
  float high = 0.0f;
  uint64_t seed = 0;
};

/// A pending pull, to pass to `kvstore::wait`.
class pull_ticket {
public:
  /// The ticket's number, unique per handle.
  uint64_t id() const noexcept {
    return id_;
  }

private:
  friend class kvstore;
  explicit pull_ticket(uint64_t id) : id_(id) {
  }
  uint64_t id_ = 0;
};

/// One worker's handle on a parameter store: the blocking edge that a
/// training loop calls (MXNet KVStore / DJL ParameterServer semantics).
///
/// Types: "local" (= "local_async": each push is applied on arrival) and
/// "local_sync" (BSP: each round sums the pushes of all workers, then
/// updates once) and "local_ssp" (bounded staleness, see
/// `store_options::staleness`) run coordinator, shards and workers in one
/// process. "dist_sync", "dist_async" and "dist_ssp" connect this process,
/// as one worker, to the
/// coordinator at `store_options::coordinator` (see apps/); the mode must
/// match the job's. "dist" joins in whatever mode the job has; `type()`
/// and `synchronous()` then tell which. MXNet's names for where devices'
/// copies are aggregated name the same stores (values live in host memory
/// here): "device", "local_update_cpu", "local_allreduce_cpu" and
/// "local_allreduce_device" are "local"; "dist_device_sync" and
/// "dist_sync_device" are "dist_sync". `type()` is the name given.
///
/// Contract: `push` and `pull` return at once; a pull's output may be read
/// only after `wait` on its ticket (or `wait_all`). Pushes and pulls of one
/// handle on one key take effect in issue order, whatever their priorities;
/// different workers synchronize only through `barrier`. Errors of a push
/// (e.g. a shard failing) surface at the next `wait` or `wait_all`.
/// A handle is used by one thread at a time; give each training thread its
/// own handle via `worker(rank)`. Every call after `close` fails with
/// `errc::closed`.
class kvstore {
public:
  /// Creates a store of the given type and returns the handle of rank 0
  /// (local) or of the rank the coordinator assigned (dist). Errors:
  /// `bad_config` (unknown type, zero workers or shards, bad coordinator
  /// address, mode mismatch), `dead_node` (coordinator unreachable),
  /// `unauthorized` (wrong token), `timeout`.
  static caf::expected<kvstore> create(const std::string& type,
                                       const store_options& opts = {});

  kvstore(kvstore&&) noexcept;
  kvstore& operator=(kvstore&&) noexcept;
  ~kvstore();

  /// Another handle on the same local store, for worker `rank`.
  caf::expected<kvstore> worker(uint32_t rank) const;

  /// The type given to `create`.
  const std::string& type() const;

  /// True for synchronous (BSP) stores: local_sync, dist_sync.
  bool synchronous() const;

  /// The staleness bound of a local_ssp or dist_ssp store; -1 for others.
  int32_t staleness() const;

  /// What carries this store's tensor bytes between processes: "caf" or
  /// "ucx" (distributed stores, as the job's coordinator chose), "local"
  /// (local stores: none leave the process).
  std::string transport() const;

  /// This handle's worker rank, 0..num_workers()-1.
  uint32_t rank() const;

  /// Number of workers of the store.
  uint32_t num_workers() const;

  /// The port of this process's /metrics endpoint; 0 if it serves none.
  uint16_t metrics_port() const;

  /// Initializes `key` (collective: rank 0's value is stored, other ranks
  /// wait until it is). Returns once every shard holds the value. An empty
  /// `shape` means a vector of `value.size()`.
  caf::error init(const std::string& key,
                  const Eigen::Ref<const Eigen::VectorXf>& value,
                  std::vector<uint64_t> shape = {});

  /// DJL's `init(parameterId, NDArray[] value)`: one copy of the value per
  /// device, all of one size (checked); the first is the value stored.
  caf::error init(const std::string& key,
                  const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values,
                  std::vector<uint64_t> shape = {});

  /// Pushes a value (a gradient, once an optimizer is set). Higher
  /// `priority` is sent first. Returns at once.
  caf::error push(const std::string& key,
                  const Eigen::Ref<const Eigen::VectorXf>& value,
                  int priority = 0);

  /// Creates `key` as a row-sparse table of `rows` x `dim` floats (MXNet's
  /// row_sparse storage: embeddings, huge linear models), collectively as
  /// `init`. Rows are spread so that row r lives on shard r mod S, and each
  /// shard makes its own rows by `fill`: no message holds the table, so a
  /// 10M-row table starts in place. Push and pull it by rows only.
  caf::error init_table(const std::string& key, uint64_t rows, uint64_t dim,
                        const table_fill& fill = {});

  /// Pushes rows `ids` of table `key`: `values` holds one row of `dim`
  /// floats per id, in order; an id named more than once has its rows
  /// summed. Only the rows pushed change, each through the optimizer with
  /// its own state and step (lazy update). Returns at once, as `push`.
  /// Refused at the call: `unknown_key` (a key never initialized, a row
  /// out of range), `shape_mismatch` (a dense key, `values` not one row
  /// per id); a refusal found later (2-bit compression on a table, a dead
  /// server) comes with the next wait.
  caf::error push_rows(const std::string& key, const std::vector<uint64_t>& ids,
                       const Eigen::Ref<const Eigen::VectorXf>& values,
                       int priority = 0);

  /// Pulls rows `ids` of table `key` into `out` (one row per id, in order;
  /// it must stay alive until waited for), MXNet's row_sparse_pull.
  /// Errors, at the call: `unknown_key` (a key never initialized, a row
  /// out of range), `shape_mismatch` (a dense key, `out` not one row per
  /// id).
  caf::expected<pull_ticket>
  pull_rows(const std::string& key, const std::vector<uint64_t>& ids,
            Eigen::Ref<Eigen::VectorXf> out, int priority = 0);

  /// Pushes the sum of several values (several devices' gradients).
  caf::error push(const std::string& key,
                  const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values,
                  int priority = 0);

  /// Pulls the value of `key` into `out`, which must stay alive and
  /// untouched until `wait` returns. Returns at once.
  caf::expected<pull_ticket> pull(const std::string& key,
                                  Eigen::Ref<Eigen::VectorXf> out,
                                  int priority = 0);

  /// Pulls the value of `key` into each of `outs`.
  caf::expected<pull_ticket> pull(const std::string& key,
                                  std::vector<Eigen::Ref<Eigen::VectorXf>> outs,
                                  int priority = 0);

  /// Pushes `value`, then pulls the value it produced into `out` (MXNet's
  /// pushpull): one request per shard instead of two, so a round costs one
  /// round trip. The same rules as `push` followed by `pull` otherwise; in a
  /// sync store the pull waits for the push's round.
  caf::expected<pull_ticket>
  push_pull(const std::string& key,
            const Eigen::Ref<const Eigen::VectorXf>& value,
            Eigen::Ref<Eigen::VectorXf> out, int priority = 0);

  /// Pushes `values[i]` to `keys[i]` for every i, in one request: the small
  /// slices of all keys travel as one message per shard (ps-lite's key-list
  /// push).
  caf::error
  push_many(const std::vector<std::string>& keys,
            const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values,
            int priority = 0);

  /// Pulls `keys[i]` into `outs[i]` for every i, in one request.
  caf::expected<pull_ticket>
  pull_many(const std::vector<std::string>& keys,
            std::vector<Eigen::Ref<Eigen::VectorXf>> outs, int priority = 0);

  /// DJL's `update(parameterId, grads, params)`: pushes the sum of `grads`
  /// (one per device), then pulls the updated value into every array of
  /// `params` and waits for it (and for this handle's earlier calls, as
  /// `wait`). In a sync store it returns once every worker's push of the
  /// round is applied.
  caf::error update(const std::string& key,
                    const std::vector<Eigen::Ref<const Eigen::VectorXf>>& grads,
                    std::vector<Eigen::Ref<Eigen::VectorXf>> params,
                    int priority = 0);

  /// `push_pull` on every key, in one request.
  caf::expected<pull_ticket>
  push_pull_many(const std::vector<std::string>& keys,
                 const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values,
                 std::vector<Eigen::Ref<Eigen::VectorXf>> outs,
                 int priority = 0);

  /// Waits for the pull of `ticket` and every operation issued before it;
  /// returns the first error among them.
  caf::error wait(pull_ticket ticket);

  /// Waits for the pull of `ticket` only: operations issued before it may
  /// still be in flight, and their errors surface at a later `wait` or
  /// `wait_all`. With priorities, this is how a high-priority pull returns
  /// before a backlog of lower-priority pushes issued earlier (the pull still
  /// sees every earlier push of this handle on its own keys). A ticket that
  /// was already waited for returns at once.
  caf::error wait_only(pull_ticket ticket);

  /// Waits for every operation issued so far; returns the first error.
  caf::error wait_all();

  /// Waits for this handle's operations, then for every worker to arrive.
  caf::error barrier();

  /// Sets the update rule on every shard; resets optimizer states. In a
  /// local store it also ends a rule of `set_updater`.
  caf::error set_optimizer(const optimizer_config& cfg);

  /// MXNet's `_set_updater` (local stores only): from now on the shards
  /// run `rule(key, grad, weight, n)` on every merged push instead of the
  /// optimizer, updating the weights in place (a sliced key slice by slice,
  /// a row table row by row, each call with that part only; a sync round
  /// once, with its sum). Several shards call it at once: it must be
  /// thread-safe, and must not call the store. An empty rule, set_optimizer,
  /// a command of head 0 or closing the store's last handle ends it. Waits
  /// for this handle's operations first. `bad_config` on a dist store (its
  /// servers run the optimizer: set_optimizer).
  caf::error set_updater(core::update_rule rule);

  /// Compresses this handle's later pushes (MXNet's
  /// set_gradient_compression), for every key without a setting of its own.
  /// The handle quantizes each pushed value before it leaves: fp16 keeps the
  /// upper 16 bits of each float; 2-bit sends +threshold, -threshold or 0 and
  /// adds what it left out to the key's next push (error feedback). In a
  /// distributed store the values cross the network packed (2 bytes or 2 bits
  /// a value); a local store sees the same values. Pulls and `init` are never
  /// compressed. Errors: `bad_config` (a threshold that is not a finite
  /// number > 0).
  caf::error set_gradient_compression(const compression& c);

  /// The same for `key` only (which need not be initialized yet); overrides
  /// the store-wide setting for that key. Keys pushed together in one call
  /// with different settings are each quantized by their own, but cross the
  /// network unpacked.
  caf::error set_gradient_compression(const std::string& key,
                                      const compression& c);

  /// Saves weights, optimizer states, step counts and the optimizer's
  /// settings of the whole store to `path` (atomically: temporary file,
  /// fsync, rename): a checkpoint. Every shard takes its state as it is when
  /// the save begins; the coordinator then walks the shards one piece at a
  /// time (at most save_piece_bytes per message: a large table's part comes
  /// in pieces), and each piece goes to the file as it arrives. With
  /// `dump_optimizer` (MXNet's flag), load_optimizer_states takes the saved
  /// optimizer settings too (load_checkpoint always does).
  caf::error save_optimizer_states(const std::string& path,
                                   bool dump_optimizer = false);

  /// Writes every key's weights, each with its shape, as one safetensors
  /// file at `path` (atomically: a temporary file renamed), for PyTorch,
  /// numpy and other tools (python: `actorps.load_safetensors`). With
  /// `optimizer_state`, each key's optimizer state too, as tensors
  /// "__optimizer__/KEY/J" of the key's shape (J: 0 = momentum or first
  /// moment, 1 = Adam's second moment), named in the file's metadata. Waits
  /// for this handle's operations first. `save_optimizer_states` stays the
  /// format to resume from (it keeps steps and slices exactly).
  caf::error export_weights(const std::string& path,
                            bool optimizer_state = false);

  /// MXNet's load_optimizer_states: loads the optimizer states (and step
  /// counts) of every key of a file written by `save_optimizer_states`; the
  /// weights stay as they are. The optimizer: the file's settings if it was
  /// saved with dump_optimizer or if this store has none set ("assign"),
  /// else this store's, which must be of the file's kind
  /// (`checkpoint_mismatch` if not). Keys not in the file start their state
  /// afresh. Otherwise as load_checkpoint.
  caf::error load_optimizer_states(const std::string& path);

  /// Loads a checkpoint written by `save_optimizer_states` whole, for an
  /// exact resume: weights, optimizer states, step counts and the file's
  /// optimizer. Record by record (no more of it in memory here than one
  /// piece; the shards assemble their slices and take them all at once at
  /// the end, or nothing). Every key of the file must be initialized here
  /// with the same shape. A key that was sliced otherwise when saved (other
  /// shards, slice size or slicing bound) is cut to this store's slices; a
  /// slice cut from several saved ones needs them to have seen the same
  /// number of updates (always so in sync training), else
  /// `checkpoint_mismatch`.
  caf::error load_checkpoint(const std::string& path);

  /// MXNet's num_dead_node: how many nodes of `node_id` (a node id >= 8, or
  /// an or-ed group: 1 coordinator, 2 servers, 4 workers; see
  /// core/node_ids.hpp) are dead: their process went down, or no heartbeat
  /// came for `timeout`. Worker `r` is node `worker_node_id(r)` (9 + 2r),
  /// server `r` node `server_node_id(r)` (8 + 2r). Always 0 for a local
  /// store.
  caf::expected<uint32_t>
  num_dead_node(int node_id,
                std::chrono::seconds timeout = std::chrono::seconds{60});

  /// Sends a command to every shard and waits until all applied it. Head 0
  /// sets the optimizer from text ("name=sgd,learning_rate=0.1"), head -1
  /// is `clear_pending`, other negative heads are reserved; other heads
  /// go to the handler the embedding program installed
  /// (`store_options::on_command`, or `server_options::on_command` on the
  /// servers of a distributed job); without one they fail with
  /// `bad_config`. A body over `max_command_bytes` is refused
  /// (`bad_config`): every message of a job has a bound.
  caf::error send_command_to_servers(int head, const std::string& body);

  /// Largest command body (64 MiB).
  static constexpr std::size_t max_command_bytes = std::size_t{64} << 20;

  /// DataPredict's clearGradients: every shard drops the pushes of sync
  /// rounds that are not applied yet (in every other mode there are none:
  /// nothing happens). Each worker's next push of a key then starts the
  /// round anew: a worker that had pushed into a dropped round pushes again
  /// for it, and a pull that waited for a dropped round is answered with
  /// the value of the last round applied. Waits for this handle's pending
  /// operations first, like every command. Call it when every worker
  /// agrees (after a barrier): a push still on its way to a shard lands in
  /// the round afresh.
  caf::error clear_pending();

  /// The shape of an initialized key. Errors: `unknown_key`,
  /// `not_initialized`.
  caf::expected<std::vector<uint64_t>> shape(const std::string& key);

  /// Makes `close` enter a barrier first, so no worker leaves early. Turn it
  /// off before closing after a failure: in sync mode the others may be
  /// waiting for this worker's pushes, not at the barrier.
  void set_barrier_before_exit(bool value);

  /// Closes the handle after this worker's job failed: enters no barrier,
  /// and leaves the job telling the coordinator `why`, so that it counts
  /// this worker as failed (and says so when the job ends). Otherwise as
  /// `close`.
  caf::error close_failed(const std::string& why);

  /// Waits for every operation, then closes the handle (idempotent). Pulls
  /// that were never waited for complete without writing their outputs, so
  /// buffers freed after an error are never touched.
  caf::error close();

  /// True once `close` was called.
  bool closed() const;

private:
  struct impl;
  explicit kvstore(std::unique_ptr<impl> ptr);
  // load_checkpoint (`whole`) or load_optimizer_states.
  caf::error load_file(const std::string& path, bool whole);
  std::unique_ptr<impl> impl_;
};

} // namespace actorps
