// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "caf/actor.hpp"
#include "caf/actor_addr.hpp"
#include "caf/behavior.hpp"
#include "caf/error.hpp"
#include "caf/expected.hpp"
#include "caf/typed_response_promise.hpp"

#include "actors/shard/gate.hpp"
#include "actors/shard/shard.hpp"
#include "actors/shard/targets.hpp"
#include "actors/trust.hpp"
#include "core/restore.hpp"
#include "core/rows.hpp"
#include "core/update_rule.hpp"
#include "messages/types.hpp"

/// The state of a shard actor (internal: not installed): its slices, the
/// ordering of each worker's operations per slice, synchronous rounds and
/// updates (state.cpp), and saving and loading (snapshot.cpp). The message
/// handlers in shard.cpp only unpack messages and call into it.
namespace actorps {

/// Names a slice in errors: "slice 3/1" (key id 3, part 1).
std::string slice_name(slice_id id);

// Aggregation of one sync round of one slice.
struct round_sum {
  std::vector<float> sum;
  // Who contributed: bits for ranks below 64 (no allocation per round in
  // jobs of up to 64 workers), a vector beyond.
  uint64_t low = 0;
  std::vector<bool> high;
  uint32_t contributors = 0;
  // A table's round: each row pushed, its values summed.
  core::row_sum rows;
  // Pushes made to it while it was past the slice's current round: whose,
  // and their bytes (see shard_state::ahead_bytes).
  std::vector<std::pair<uint32_t, uint64_t>> charges;

  bool contributed(uint32_t worker) const {
    if (worker < 64)
      return (low >> worker) & 1;
    return worker - 64 < high.size() && high[worker - 64];
  }

  void add(uint32_t worker) {
    if (worker < 64) {
      low |= uint64_t{1} << worker;
    } else {
      if (high.size() <= worker - 64)
        high.resize(worker - 63, false);
      high[worker - 64] = true;
    }
    ++contributors;
  }
};

// A worker's place on one slice: the sequence number its next operation
// must carry, and the pushes it made (sync: the round its next push joins;
// bounded staleness: its clock on this slice).
struct worker_clock {
  uint64_t next_seq = 0;
  uint64_t pushes = 0;
};

struct slice_state {
  // (What every operation reads lies at the front, up to and including
  // `spare`: a batch of many small slices fetches that much of each ahead,
  // see slice_front.)
  slice_id id = 0;
  // A table slice: its row size (0: a dense slice), and per row its
  // optimizer state (`state_size(opt, dim)` floats each, in opt_state) and
  // its update count (row_steps).
  uint64_t dim = 0;
  uint64_t step = 0;
  // Sync mode: rounds applied (and `rounds`, the open ones).
  uint64_t rounds_done = 0;
  shared_floats value;
  // One per worker, held in the slice itself for jobs of up to 4 workers:
  // every operation reads its worker's, and a batch over many small slices
  // missed the cache on a heap block of its own for each.
  boost::container::small_vector<worker_clock, 4> clocks;
  // Operations that arrived early, by (worker, seq).
  std::map<std::pair<uint32_t, uint64_t>, stashed_op> stash;
  std::map<uint64_t, round_sum> rounds;
  std::vector<waiting_pull> waiting;
  // A dense slice of at most `spare_floats` floats keeps its last finished
  // round's entry, sum buffer included, for the next round to open: with
  // several workers a round of 10000 small slices otherwise made and freed
  // two heap blocks per slice (its entry and its sum).
  static constexpr std::size_t spare_floats = 64;
  std::map<uint64_t, round_sum>::node_type spare;
  std::vector<float> opt_state;
  std::vector<uint64_t> row_steps;
  // Bounded staleness: a worker whose pull waits has its later operations
  // held (stashed) until the pull is answered, so that it never sees a push
  // issued after it.
  std::vector<bool> pull_waiting;
};

// The bytes at the front of `s` that an operation on a dense slice reads
// (fetched ahead for each slice of a batch, and no more: fetching whole
// slices ahead filled the core's queue of misses and stalled on it).
inline std::size_t slice_front(const slice_state& s) noexcept {
  return static_cast<std::size_t>(reinterpret_cast<const char*>(&s.opt_state)
                                  - reinterpret_cast<const char*>(&s));
}

// A save in progress (save_atom with a cursor): the state as it was when
// the save began, handed out in pieces.
struct save_session {
  state_snapshot snap;
  // Each record's row size (0: dense).
  std::vector<uint64_t> dims;
  size_t record = 0;
  uint64_t from = 0;
  uint64_t served = 0;
};

// A load in progress: slices assembled from pieces, taken all at once at
// the commit.
struct load_session {
  optimizer_config opt;
  // Whether the weights are loaded too (else only states and steps).
  bool weights = true;
  std::map<slice_id, core::slice_assembly> slices;
};

struct shard_state {
  static inline const char* name = "actorps.shard";

  /// Saves and loads in progress at once; a new one drops the oldest (a
  /// requester that vanished mid-way leaves no copy of the model behind
  /// for long).
  static constexpr size_t max_sessions = 2;

  /// Operations a worker may run ahead of the next expected one per slice.
  static constexpr uint64_t max_seq_gap = 1 << 16;
  /// A restored sync shard's rounds opened for a worker's lost pushes: at
  /// most this many ahead of the lowest clock (a sync worker's pushes are
  /// a round or two ahead of the others' when it pulls between them).
  static constexpr uint64_t max_clock_lead = 1 << 10;

  shard_config cfg;
  trusted_nodes trusted;
  optimizer_config opt;
  // The rule is "assign": a round's sum becomes the value as it is.
  bool replaces = true;
  std::unordered_map<slice_id, slice_state> slices;
  // Part 0 of key k at first_parts[k] (null: look in `slices`), so that a
  // batch of many one-slice keys finds each with one read instead of a walk
  // through a hash bucket (the coordinator numbers keys from 0 in order, and
  // spreads them over the shards).
  // The entries point into `slices`, whose elements stay in place until
  // it is cleared; add_slice fills it, clear_slices empties both.
  std::vector<slice_state*> first_parts;
  std::vector<bool> live;
  // Per worker: bytes of its operations held in the slices' stashes (see
  // shard_config::max_stash_bytes).
  std::vector<uint64_t> stashed_bytes;
  // dist_sync, per worker: bytes of its pushes into rounds past a slice's
  // current round that are still open, over all slices. A push past the
  // current round that would take them over the bound waits (stashed,
  // unanswered) until rounds complete: a worker far ahead of the others
  // holds no more than that here (shard_config::max_stash_bytes).
  std::vector<uint64_t> ahead_bytes;
  // The slices where a push waits so, by (worker, slice).
  std::set<std::pair<uint32_t, slice_id>> held_ahead;
  // (release_held runs, and was asked to run again meanwhile; rounds
  // completed inside `run` ask it of the outermost `run`'s end.)
  bool releasing = false;
  bool release_again = false;
  uint32_t running = 0;
  bool release_pending = false;
  // The empty round a plain push completes (run_plain): finish_round leaves
  // it empty.
  round_sum plain_round;
  shard_stats stats;

  // -- replicas (shard.hpp, "Replicas") ---------------------------------------

  // A primary's backup (none: nothing is forwarded).
  caf::actor backup;
  // A backup's primary, whose forwards it runs.
  caf::actor_addr primary;
  // A backup made the primary of its slices.
  bool promoted = false;
  // Who paired this primary with its backup (the coordinator): told when
  // the backup is lost; until it confirmed, answers are held (`losing`).
  caf::actor pairer;
  bool losing = false;
  // Operations forwarded so far (numbered from 1), and their completions.
  uint64_t forwarded = 0;
  gate_ptr gate = std::make_shared<replica_gate>();
  // Every gate this shard made (`new_gate`). A completion a gate holds may
  // hold the gate itself and a promise, which references this shard: a
  // cycle. The shard's end drops them (~shard_state), or a shard on a
  // thread of its own would never be destroyed and the actor system's end
  // would wait for it forever (see spawn_shard).
  std::vector<std::weak_ptr<replica_gate>> gates{gate};

  gate_ptr new_gate();

  ~shard_state();
  // Operations run since the last forward, sent at the end of the handler,
  // or at once before a large push is applied (`forward_now`), so that the
  // backup applies it while this shard does.
  std::vector<replica_op> outbox;
  // Sends the outbox (set by the shard's behavior: see flush).
  std::function<void()> forward_now;
  // Forwards over shard_config::link: the way to the backup's server (0:
  // through CAF), the forwards sent that way (numbered from 1) and what
  // runs when each is answered (with its error, if any).
  uint64_t link_peer = 0;
  uint64_t link_sent = 0;
  std::map<uint64_t, std::function<void(const caf::error&)>> link_waits;
  // A backup: the number of its primary's next forward over the link, those
  // that came before their turn, and whether a forwarded change runs now
  // (it passes for its primary's).
  uint64_t link_next = 1;
  std::map<uint64_t, std::function<void()>> link_early;
  // The data plane address of the primary's server, as the coordinator
  // named it in the pairing (empty: not named), and the connection
  // (plane_reply::peer) forwards come over: that server's, or else the
  // first forward's.
  std::string link_source;
  uint64_t link_from = 0;
  bool link_change = false;
  // This shard's own handlers, to run a forwarded change with.
  caf::behavior own;

  // A backup taking its primary's whole state (replica_state parts): not
  // promoted before the last part.
  bool rebuilding = false;
  // A primary sending its whole state to a new backup, one part at a time
  // (each within the replica timeout): the forwards made meanwhile wait
  // here, in order, and leave once the backup took the last part.
  bool sending_state = false;
  std::vector<std::function<void()>> deferred;

  // -- a restored shard of a dist_sync or dist_ssp job (snapshot.cpp) --------

  // A replacement restored from a checkpoint holds every worker's
  // operations until each live worker told it how many of its pushes per
  // slice the shard it replaces acknowledged (`clocks`): rounds and clocks
  // then start where the workers are, and a push acknowledged there but
  // lost with the dead server counts as a contribution of nothing.
  bool awaiting_clocks = false;
  // Who told (or came back meanwhile: a new process, which joins where the
  // others are).
  std::vector<bool> clocks_in;
  std::vector<bool> clocks_rejoined;
  // Per worker, the pushes it said were acknowledged, by slice.
  std::vector<std::unordered_map<slice_id, uint64_t>> told_clocks;

  // True while answers wait for the backup (or for the coordinator to
  // know it is lost).
  bool holding() const {
    return backup || losing;
  }

  // True for a backup that was not promoted: it runs forwards only.
  bool standby() const {
    return cfg.backup && !promoted;
  }

  // `dead_node` naming `op` unless worker `worker` is live.
  caf::error check_live(const char* op, uint32_t worker) const;

  // Runs the operations a primary forwarded, in its order (see shard.hpp).
  void replay(replica_batch& batch);

  /// The counters of worker `rank` (< cfg.num_workers, checked before).
  worker_traffic& traffic(uint32_t rank) {
    if (stats.by_worker.size() <= rank)
      stats.by_worker.resize(rank + 1);
    return stats.by_worker[rank];
  }

  // -- validation -------------------------------------------------------------

  caf::error check_worker(const char* op, slice_id id, uint32_t worker) const;

  // Keeps an operation until its predecessors ran; a duplicate fails.
  void stash(const char* op, slice_state& s, slice_id id, uint32_t worker,
             uint64_t seq, stashed_op x);

  // What a waiting pull counts against its worker's bound (see
  // shard_config::max_stash_bytes), and taking it off again.
  static uint64_t waiting_cost(const waiting_pull& p);
  void stop_waiting(const waiting_pull& p);

  // Per worker, the bytes its waiting operations may hold here
  // (shard_config::max_stash_bytes, at least the message bound); taking
  // `bytes` of it (`bad_config` beginning with `what`, ending with `why`,
  // when they do not fit), and giving them back.
  uint64_t room_bound() const;
  caf::error take_room(uint32_t worker, uint64_t bytes, const std::string& what,
                       const char* why = "");
  void give_room(uint32_t worker, uint64_t bytes);

  // Takes stash entry `i` of `s` out (its bytes no longer count).
  stashed_op
  unstash(slice_state& s,
          std::map<std::pair<uint32_t, uint64_t>, stashed_op>::iterator i);

  slice_state* find(slice_id id) {
    auto key = key_of(id);
    if (part_of(id) == 0 && key < first_parts.size()
        && first_parts[key] != nullptr)
      return first_parts[key];
    return find_in_map(id);
  }
  slice_state* find_in_map(slice_id id);

  // Drops every slice.
  void clear_slices();

  caf::error not_initialized(const char* op, slice_id id) const;

  // The error for a whole-value operation on row table `id`.
  caf::error a_table(const char* op, slice_id id) const;

  // -- updates ----------------------------------------------------------------

  // Replaces the update rule; every slice's state and step start afresh.
  void set_optimizer(const optimizer_config& x);

  void apply(slice_state& s, const float* merged);

  // A table's pushed rows (each row's gradient in `g`, row after row).
  void apply_rows(slice_state& s, const std::vector<uint64_t>& rows,
                  const float* g);

  // The local store's own update rule while one is set (else null).
  std::shared_ptr<const core::update_rule> own_rule() const;

  // Applies a merged push held in `merged`, which may be taken over: under
  // "assign" it becomes the value without a copy (readers of the old value
  // keep theirs).
  void apply(slice_state& s, std::vector<float>&& merged);

  bool round_complete(const round_sum& r) const;

  // An error if an answer of `floats` floats would not fit one message of
  // the job (cfg.message_cap).
  caf::error check_reply(const char* op, uint64_t floats) const;

  // True if every live worker but `except` contributed to `r`.
  bool others_in(const round_sum& r, uint32_t except) const;

  // True if `worker`'s push completes `r`: every other live worker pushed
  // into it and `worker` did not yet.
  bool completes(const round_sum& r, uint32_t worker) const;

  // Applies round `r` with its last push `g` (of the slice's size; `owned`,
  // if not null, holds it and may be taken over) and leaves `r.sum` empty.
  void finish_round(slice_state& s, round_sum& r, const float* g,
                    std::vector<float>* owned);

  // Applies a complete round: its sum, or on a table its rows' sums.
  void apply_round(slice_state& s, round_sum& r);

  // Applies every complete round in order and answers the pulls each
  // unblocks; with bounded staleness, answers the pulls the slowest live
  // worker's clock allows now.
  void advance_rounds(slice_state& s);
  // The entry of sync round `round` of `s`, opened if needed (from the
  // slice's spare entry if it has one).
  round_sum& open_round(slice_state& s, uint64_t round);
  // Closes the entry at `i`: kept as the slice's spare if small enough.
  void close_round(slice_state& s, std::map<uint64_t, round_sum>::iterator i);

  // Drops the pushes of every sync round not applied yet (see
  // kvstore::clear_pending).
  void clear_pending();

  // -- pushes ahead (rounds.cpp; see ahead_bytes) ---------------------------

  // Whether a push of `bytes` by `worker` to `s` waits for rounds to
  // complete first (and is then kept in held_ahead).
  bool holds_ahead(const slice_state& s, uint32_t worker, uint64_t bytes);
  // Counts a push of `bytes` by `worker` into round `round` of `s` (`r`)
  // against it, if the round is past the current one.
  void charge_ahead(const slice_state& s, round_sum& r, uint32_t worker,
                    uint64_t round, uint64_t bytes);
  // Takes the counts of round `r` (closing or dropped) off.
  void settle(round_sum& r);
  // Runs the pushes held ahead of workers now under the bound.
  void release_held();

  // Bounded staleness: the lowest clock of a live worker on `s` (no live
  // worker: no bound).
  uint64_t slowest_clock(const slice_state& s) const;

  // Answers the pulls waiting in `s` whose bound `reached` meets.
  void release_waiting(slice_state& s, uint64_t reached);

  // -- in-order processing ----------------------------------------------------

  // Checks the rows of an operation on a table slice: a table, each row in
  // range.
  caf::error check_rows(const char* op, const slice_state& s, slice_id id,
                        const std::vector<uint64_t>& rows) const;

  // Applies (async, bounded staleness) or adds to its round (sync) a push of
  // `n` floats to `rows` of table slice `s`, row by row (the rows of a row
  // named more than once summed first).
  // `rows` may be taken over (sync rounds); `owned`, if set, holds the
  // pushed floats and may be taken over too.
  caf::error do_push_rows(slice_state& s, slice_id id, uint32_t worker,
                          const float* g, std::size_t n,
                          std::vector<uint64_t>& rows,
                          std::vector<float>* owned);

  // Applies (async) or adds to its round (sync) one push of `n` floats.
  // `owned`, if set, holds those floats and may be taken over as the round's
  // sum instead of copying them.
  caf::error do_push(slice_state& s, slice_id id, uint32_t worker,
                     const float* g, std::size_t n, std::vector<float>* owned);

  void do_pull(slice_state& s, uint32_t worker, op_target& t);

  // Runs operation `seq` of `worker`, whose predecessors all ran (and
  // forwards it to the backup, if any).
  // `view`, if set, shares the pushed values `g` (a view of the worker's
  // shared-memory segment): a forward to the backup is sent from there.
  void run(slice_state& s, slice_id id, uint32_t worker, uint64_t seq,
           const float* g, std::size_t n, op_target& t,
           std::vector<float>* owned = nullptr,
           const shared_floats* view = nullptr);
  void run_op(slice_state& s, slice_id id, uint32_t worker, uint64_t seq,
              const float* g, std::size_t n, op_target& t,
              std::vector<float>* owned, const shared_floats* view);

  // Runs a batch's operation `seq` of `worker` on slice `id` (`s`) at once
  // when it is next and nothing waits before it: no early operation, no
  // push held ahead, a sync push into the slice's current round. The batch
  // checked the rest: no backup, no held answers, no restored clocks
  // awaited, not bounded staleness, the worker live, the push of the
  // slice's size. The same outcome as `submit`, without its chain of
  // checks; a sync push that completes its round alone (`lone`: its worker
  // is the only live one) with no round open and no pull waiting is
  // applied without an entry for its round. (A batch of 10000 one-float
  // keys spent a third of a shard's time on that chain and those entries.)
  // False, with nothing done, when the operation must go through `submit`.
  bool run_plain(slice_state& s, slice_id id, uint32_t worker, uint64_t seq,
                 const float* g, op_target& t, bool lone);

  // Counts a push of `n` floats by `worker` that is applied (its worker's
  // traffic; `stats.pushes` counts every push, refused ones too).
  void count_push(uint32_t worker, std::size_t n);

  // A promoted backup got operation `seq` again, which it ran as its
  // primary's forward: answers it without applying it twice.
  void answer_again(slice_state& s, uint32_t worker, op_target& t);

  // Runs the operations of `worker` stashed behind the one just processed.
  void drain(slice_state& s, slice_id id, uint32_t worker);

  // Orders one operation on slice `id` (`s`, null if the slice does not
  // exist here) among those of its worker: runs it now, or stashes it (with
  // its pushed values) until its predecessors ran. `owned`, if set, holds the
  // pushed values and may be taken over; `view`, if set, shares them (see
  // run). Errors go to the operation's target,
  // which is moved from when the operation waits (stashed, or a pull waiting
  // for its round); otherwise at most its gate and forward number change (a
  // backup's hold takes the gate), so that a batch resets those and reuses
  // it without touching its reference counts.
  void submit(const char* op, slice_state* s, slice_id id, uint32_t worker,
              uint64_t seq, const float* g, std::size_t n, op_target& t,
              std::vector<float>* owned = nullptr,
              const shared_floats* view = nullptr);

  // Submits a push or push_pull; the message's buffer may be taken over.
  void submit(const char* op, slice_push& msg, op_target t);

  // Checks a push or pull on slice `s` and orders it among the operations of
  // its worker: returns whether it runs now (true) or must wait for an
  // earlier one, or (a push of `push_bytes`) for rounds to complete
  // (false; see ahead_bytes).
  caf::expected<bool> admit(const char* op, slice_state& s, slice_id id,
                            uint32_t worker, uint64_t seq, uint64_t push_bytes);

  // -- handlers' work (state.cpp) ---------------------------------------------

  // Stores the initial value of a slice (its buffer is taken over).
  caf::error init(slice_init& msg);

  // Adds slice `id` holding `value`, its ordering and clocks at the start
  // (no optimizer state yet).
  slice_state& add_slice(slice_id id, std::vector<float> value);

  // Makes this shard's part of a row-sparse table.
  caf::error init(const table_init& msg);

  // Checks a batch and submits its operations, whose outcome goes to
  // `reply` (fresh: its promise or its sink set). An error returned here
  // submitted nothing: the caller fails `reply` with it.
  caf::error batch(const slice_batch& msg, const batch_ptr& reply);

  // -- saving and loading (snapshot.cpp) --------------------------------------

  // The optimizer and every slice, in slice id order.
  state_snapshot save() const;

  // Restores slices saved by `save`: all or nothing, checked first. The
  // saved buffers are taken over.
  caf::error load(state_snapshot& snap);

  std::map<uint64_t, save_session> saves;
  std::map<uint64_t, load_session> loads;

  // Begins save `session`: the state as it is now (as `save`).
  void open_save(uint64_t session);

  // The next records of save `session` (`position`: how many pieces were
  // taken before), at most save_piece_bytes but one record; `done` once
  // the last was taken, which ends the session.
  caf::expected<save_piece> save_next(uint64_t session, uint64_t position);

  // Begins load `session` with the optimizer the shards take (with
  // `weights`, the weights are loaded too).
  caf::error open_load(uint64_t session, const optimizer_config& opt,
                       bool weights);

  // Adds pieces to load `session`; an error ends the session.
  caf::error load_pieces(uint64_t session, std::vector<slice_record>& pieces);

  // Ends load `session`: with `commit`, every slice it touched must be
  // whole, then all are taken at once; without, it is dropped.
  caf::error end_load(uint64_t session, bool commit);

  // The workers still taking part; rounds stop waiting for the others.
  caf::error set_live(const std::vector<uint32_t>& workers);

  // Starts holding the workers' operations for their clocks (dist_sync and
  // dist_ssp; nothing to do in dist_async).
  void await_clocks();

  // Worker `worker` acknowledged pushes[i] pushes to slices[i] (others: 0);
  // `fresh`: a process that took a dead worker's rank without knowing
  // where the old shard had it, which joins where the others are. Counts
  // that do not check out are refused, and the worker then counts as
  // fresh (the shard does not wait for it forever).
  caf::error take_clocks(uint32_t worker, const std::vector<uint64_t>& slices,
                         const std::vector<uint64_t>& pushes, bool fresh);

  // Worker `worker`'s pushes per slice here (what a new process in its
  // rank starts counting from); refused while this shard waits for clocks.
  caf::expected<std::pair<std::vector<uint64_t>, std::vector<uint64_t>>>
  clocks_of(uint32_t worker) const;

  // Once every live worker told its clocks: rounds and clocks start there,
  // and the held operations run.
  void start_from_clocks();

  // -- rebuilt replicas (rebuild.cpp) -----------------------------------------

  // The whole state (update rule, live workers, every slice with its
  // sequence numbers, clocks and open rounds), in parts for a new backup.
  std::vector<replica_state> state_parts() const;

  // A backup takes one part of its primary's state (the first replaces
  // everything it held). An error may leave a part half taken: the primary
  // then drops this backup, which is never promoted.
  caf::error take_state(replica_state& x);
};

} // namespace actorps
