// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "caf/duration.hpp"
#include "caf/error.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

#include "actors/trust.hpp"
#include "actors/worker/worker.hpp"
#include "core/list_memo.hpp"
#include "core/parts.hpp"
#include "core/send_queue.hpp"

/// The state of a worker actor and the functions its files share (internal:
/// not installed). worker.cpp holds the message handlers; routes.cpp what
/// the worker learns of keys and the routes of the key lists named again;
/// dispatch.cpp turns one call into requests to shards (slicing, batching,
/// compression, the send queues, assembly of pulled values); tables.cpp
/// writes inits and serves row-sparse tables; recovery.cpp follows shards
/// to their replacements.
namespace actorps {

/// Routing entry of one key plus where this worker's next sequence number
/// per part lies.
struct route {
  /// The key's slices (as `info.slices`), at the front of the route and, for
  /// a key of one slice, held in it: a call naming 10000 small keys reads
  /// them for every key, and heap blocks of their own cost two cache misses
  /// a key (start_ops).
  boost::container::small_vector<slice_range, 1> parts;
  /// Where this worker's next sequence number on each part lies in
  /// `worker_state::seqs` (one per part, back to back; moved only if the
  /// key were told again with more parts, which marks every plan stale):
  /// the numbers of keys made one after another lie side by side, so a
  /// plan (list_plan) reads those of a list in one sweep, not a route a
  /// key.
  std::size_t seq_at = 0;
  /// The key's compression and, for 2-bit, each part's residual (allocated
  /// at the part's first push).
  compression comp;
  /// The last call (`worker_state::calls`) that named this key: a key
  /// named twice in one call is seen without hashing the key list.
  uint64_t named_in = 0;
  /// (Its numbers, which start_ops reads too, lie at its front.)
  key_info info;
  std::vector<std::vector<float>> residual;
};

/// The bytes at the front of `r` that a call reads of every key it names:
/// the slices, where its sequence numbers lie, the compression and the
/// key's numbers
/// (start_ops fetches them ahead, and no more: fetching a whole route ahead
/// filled the core's queue of misses and stalled on it).
inline std::size_t route_front(const route& r) noexcept {
  return static_cast<std::size_t>(reinterpret_cast<const char*>(&r.info.name)
                                  - reinterpret_cast<const char*>(&r));
}

/// What a call on a kept list sends to one shard when every slice of the
/// list is batched (list_plan).
struct shard_plan {
  /// The batch's slices, in list order, and where each slice's next
  /// sequence number lies (worker_state::seqs).
  std::vector<slice_id> slices;
  std::vector<std::size_t> seq_at;
  /// Where each slice lies in the call's value (list order).
  /// (Its floats: list_summary::per_shard.)
  std::vector<core::piece> pieces;
};

/// A kept list's batches laid out once: valid with its summary (no route
/// changed since), made only when every slice of the list is batched, no
/// key is compressed and no shard's batch outgrows the batching cap, so that
/// a call sends one batch a shard, made of these in a few sweeps instead of
/// a route read a key (start_ops).
struct list_plan {
  bool valid = false;
  std::vector<shard_plan> shards;
};

/// What start_ops reads of every key of a call before it sends anything,
/// kept with a list the worker keeps (see worker_state::distinct): a call
/// naming the same 10000 keys again reads each key's route once, not twice.
struct list_summary {
  /// worker_state::route_changes when this was taken (another: stale).
  uint64_t taken_at = 0;
  bool valid = false;
  uint64_t total = 0;
  std::size_t parts = 0;
  bool uncompressed = true;
  uint64_t batched = 0;
  uint64_t batched_floats = 0;
  /// Per shard, the slices and floats it may get in batches.
  std::vector<std::pair<uint64_t, uint64_t>> per_shard;
  /// The batches, when a call can send them as they are.
  list_plan plan;
};

/// The routes of a list of keys (each named once) and their summary.
struct route_list {
  std::vector<route*> routes;
  mutable list_summary summary;
};

/// Failure handlers of requests in flight, by request id.
using pending_failures
  = std::unordered_map<uint64_t, std::function<void(caf::error&)>>;

struct worker_state {
  static inline const char* name = "actorps.worker";

  worker_config cfg;
  // Empty: a worker serves its own process only.
  trusted_nodes trusted;
  std::unordered_map<std::string, route> routes;
  /// Keys whose init this worker (rank > 0) saw done: an init of one again
  /// is refused here (rank 0's by the coordinator, which lets other ranks
  /// declare again: a retry after a timeout).
  std::unordered_set<std::string> declared;
  /// Keys with a compression setting of their own (see compress_atom).
  std::unordered_map<std::string, compression> key_compression;
  /// While a lookup is in flight, every later operation waits here, so that
  /// operations take effect in issue order (lookups happen once per key).
  bool stalled = false;
  std::deque<std::function<void()>> backlog;
  /// Per shard: dead or not, and the failure handlers of requests in flight,
  /// so that a shard going down fails them at once (CAF 0.17 fails requests
  /// to a dead remote peer only when they time out).
  std::vector<bool> dead;
  std::vector<pending_failures> in_flight;
  uint64_t next_request = 0;
  // Requests out on cfg.channel, by id: what their reply or timeout runs.
  struct channel_wait {
    std::function<void(data_reply&)> on_reply;
    std::function<void(caf::error&)> on_fail;
  };
  std::unordered_map<uint64_t, channel_wait> channel_waiting;
  /// Calls on several keys so far (see route::named_in).
  uint64_t calls = 0;
  /// The routes of the last key lists that named each key once (routes
  /// only ever join `routes`, which keeps them in place).
  core::list_memo<route_list> distinct;
  /// Counts changes of any route's slices or compression (a summary taken
  /// before one is stale).
  uint64_t route_changes = 0;
  /// This worker's next sequence number on every part of every key it
  /// routes, a key's parts back to back (see route::seq_at).
  std::vector<uint64_t> seqs;
  /// Set once the coordinator went down: every call that needs it fails at
  /// once with `dead_node` from then on.
  bool coordinator_down = false;
  /// Requests out to the coordinator, by id: what their failure runs, so
  /// that the coordinator going down fails them at once (CAF 0.17 fails
  /// them only when they time out, a barrier after 10 minutes).
  pending_failures coordinator_calls;
  /// Per shard: requests waiting for room under cfg.max_bytes_in_flight.
  std::vector<core::send_queue> queues;
  /// Replacement servers (cfg.recovery), per shard: how to send each
  /// request in flight again (by request id), the requests waiting for the
  /// shard's replacement (by id: the order they were first sent), whether
  /// one is awaited, and, once replaced, the next sequence number of each
  /// slice there (a replacement numbers every slice from 0).
  std::vector<std::map<uint64_t, std::function<void()>>> retries;
  std::vector<std::map<uint64_t, std::function<void()>>> parked;
  std::vector<bool> recovering;
  /// Why a shard was not replaced (empty: it was, or was never awaited).
  std::vector<std::string> unreplaced;
  std::vector<bool> renumbered;
  // Per shard: how often a promoted backup took it over (see init_slices).
  std::vector<uint64_t> promotions;
  std::vector<std::unordered_map<slice_id, uint64_t>> renumber;
  /// Per shard, in a dist_sync or dist_ssp job that replaces servers
  /// (worker_config::sync): the pushes each slice there
  /// acknowledged (by any process that held it), told to a replacement so
  /// that its rounds (dist_sync) and clocks (dist_ssp) start where this
  /// worker is (see shard_state::await_clocks).
  std::vector<std::unordered_map<slice_id, uint64_t>> acked;
  /// Per shard: this process cannot tell where its counts stand there
  /// (worker_config::clocks_unknown).
  std::vector<bool> clocks_unknown;
  /// A request for a newer routing table is out.
  bool rerouting = false;
  /// The version of the last routing table adopted (0: none yet; the
  /// coordinator only sends tables newer than the worker's first). Two answers
  /// may race through their connections to the servers they name: an older one,
  /// or the same one twice, changes nothing (see adopt).
  uint64_t adopted_version = 0;
  // Why the last routing table could not be applied (a server it names
  // could not be reached), while a newer one is awaited.
  std::string reach_failure;
  /// The worker left the job: its servers going down at the job's end are
  /// not waited for.
  bool leaving = false;
  /// Counters of the data operations (see stats_atom).
  worker_stats stats;

  caf::duration timeout() const {
    return caf::duration{cfg.timeout};
  }
};

using worker_ptr = worker_actor::stateful_pointer<worker_state>;

/// The sequence number of the next request on part `part` of `r`, counted.
inline uint64_t next_seq(worker_state& st, const route& r, uint32_t part) {
  return st.seqs[r.seq_at + part]++;
}

/// Takes the handler of request `id` out of `pending` and runs it with `err`
/// (nothing if the request already completed or failed).
inline void fail_pending(pending_failures& pending, uint64_t id,
                         caf::error& err) {
  auto i = pending.find(id);
  if (i == pending.end())
    return;
  auto f = std::move(i->second);
  pending.erase(i);
  f(err);
}

/// The `dead_node` error of a call that needs the lost coordinator.
caf::error lost_coordinator();

/// Sends `xs` to the coordinator with `timeout`: `on_ok` gets its answer,
/// `on_err` its error, or `lost_coordinator()` at once if the coordinator is
/// down or goes down before answering.
template <class R, class... Ts>
void ask_coordinator(worker_ptr self, caf::duration timeout,
                     std::function<void(R&)> on_ok,
                     std::function<void(caf::error&)> on_err, Ts&&... xs) {
  auto& st = self->state;
  if (st.coordinator_down) {
    auto err = lost_coordinator();
    on_err(err);
    return;
  }
  auto id = st.next_request++;
  st.coordinator_calls.emplace(id, std::move(on_err));
  self->request(st.cfg.coordinator, timeout, std::forward<Ts>(xs)...)
    .then(
      [self, id, on_ok = std::move(on_ok)](R& x) {
        if (self->state.coordinator_calls.erase(id) > 0)
          on_ok(x);
      },
      [self, id](caf::error& err) {
        fail_pending(self->state.coordinator_calls, id, err);
      });
}

/// A shard, relay or the coordinator went down: what waits on it fails at
/// once (or, for a shard in a job that replaces servers, waits for the
/// replacement).
void on_shard_down(worker_ptr self, const caf::down_msg& dm);

/// True if `err` says a shard's process is gone (not a shard's answer).
bool shard_gone(const caf::error& err);

/// Shard `index` went down in a job that replaces servers: its requests
/// in flight wait for the replacement (see worker_config::recovery).
void await_replacement(worker_ptr self, uint32_t index);

/// Tells the restored shard `index` how many pushes to each slice there
/// were acknowledged (it holds every worker's operations until each live
/// worker did, in dist_sync and dist_ssp); again after a timeout, for as
/// long as calls wait for a replacement (worker_config::recovery).
void tell_clocks(worker_ptr self, uint32_t index);

/// Records the route of `key`; a known route keeps its sequence numbers.
void add_route(worker_ptr self, key_info info);

/// The `dead_node` error of shard `index`.
caf::error dead_shard(uint32_t index);

/// The error of a request to shard `index`, which is dead: dead_shard, or
/// why it was not replaced.
caf::error shard_down_error(worker_ptr self, uint32_t index);

/// Sets the compression of `r`; a new codec starts from zero residuals.
void set_compression(worker_state& st, route& r, const compression& c);

/// Name of an operation kind in errors ("push", "pull", "push_pull").
const char* op_name(op_kind kind);

/// Starts `kind` on the keys of `rs` (their routes, each key once): checks
/// the payload,
/// numbers each slice's operation, and sends each large slice on its own
/// (its buffer moved along when the caller gave it one of its own) and the
/// small slices of each shard as batches. `finish` gets the pulled values
/// of all keys back to back (empty for pushes) once every shard answered;
/// `on_error` gets the first error instead.
/// `summary`: where a summary of `rs` is kept from call to call (null:
/// none).
void start_ops(worker_ptr self, op_kind kind, std::vector<route*> rs,
               int32_t priority, float_parts data,
               std::function<void(float_parts)> finish,
               std::function<void(caf::error)> on_error,
               list_summary* summary = nullptr);

/// The routes of the keys of `list`, each looked up once; nothing if one is
/// not known or the list names a key more than once. A list kept in
/// `distinct` is found again by its address or its names; `summary` (if
/// not null) gets where its summary is kept, when the list is.
std::optional<std::vector<route*>>
distinct_routes(worker_ptr self, const core::shared_names_ptr& list,
                list_summary** summary = nullptr);

/// `already_initialized` if this worker saw `key`'s init done.
caf::error init_again(worker_ptr self, const std::string& key);

/// A rank other than 0: the key's init is done (by rank 0), the worker
/// routes to it and answers `rp`.
void joined(worker_ptr self, key_info info,
            caf::typed_response_promise<caf::ok_atom> rp);

/// Rank 0 writes the value to every shard, then tells the coordinator. If a
/// shard fails, the coordinator hears of it too, so the waiting ranks fail
/// instead of waiting and rank 0 may try again.
void write_init(worker_ptr self, key_info info, floats value,
                caf::typed_response_promise<caf::ok_atom> rp);

/// The same for a row-sparse table: each shard makes its rows as `spec`
/// says (its rows, dim, rule, bounds and seed; the slice and the row
/// numbering are filled in per shard).
void write_table(worker_ptr self, key_info info, table_init spec,
                 caf::typed_response_promise<caf::ok_atom> rp);

/// Runs `f` once the routes of `keys` are known (asking the coordinator
/// for those it lacks; later calls wait behind a lookup in flight), or
/// `on_error` if one cannot be had.
void with_routes(worker_ptr self, const std::vector<std::string>& keys,
                 std::function<void()> f,
                 std::function<void(const caf::error&)> on_error);

/// Runs `kind` (push or pull) on `rows` of table `key` once its route is
/// known (see start_rows): `done` gets the pulled rows (none for a push),
/// `fail` the error; counted in the worker's stats.
void rows_op(worker_ptr self, op_kind kind, std::string key,
             std::vector<uint64_t> rows, int32_t priority,
             std::vector<float> values, std::function<void(float_parts)> done,
             std::function<void(const caf::error&)> fail);

/// Starts a push (`kind` push: `values` holds one row per id, rows named
/// more than once summed) or a pull (`kind` pull: `finish` gets one row per
/// id, in the order of `ids`) of rows `ids` of the table behind `r`: each
/// shard gets one request for its rows. Errors: `shape_mismatch` (not a
/// table, values not one row per id), `unknown_key` (a row out of range).
void start_rows(worker_ptr self, op_kind kind, route& r,
                const std::vector<uint64_t>& ids, int32_t priority,
                std::vector<float> values,
                std::function<void(float_parts)> finish,
                std::function<void(caf::error)> on_error);

} // namespace actorps
