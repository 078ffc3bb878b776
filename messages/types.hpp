// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "caf/error.hpp"
#include "caf/fwd.hpp"
#include "caf/meta/load_callback.hpp"
#include "caf/meta/type_name.hpp"
#include "caf/sec.hpp"

#include <actorps/core/status.hpp>
#include <actorps/core/values.hpp>

/// Plain message structs exchanged by the actors of actorps. Each has an
/// `inspect` overload beside it; all of them are registered once through
/// `messages/type_ids.hpp`. None of them holds Eigen types: payloads are
/// `std::vector<float>` inside `floats`, read through `Eigen::Map`.
namespace actorps {

/// A codec and its threshold (see core/compression.hpp).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, compression& x) {
  auto kind = static_cast<uint8_t>(x.kind);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (kind > static_cast<uint8_t>(codec::two_bit))
      return caf::make_error(caf::sec::invalid_argument,
                             "compression: unknown codec "
                               + std::to_string(kind));
    // CAF 0.17's float encoder never returns on an infinity.
    if (!std::isfinite(x.threshold))
      return caf::make_error(caf::sec::invalid_argument,
                             "compression: threshold is not finite");
    x.kind = static_cast<codec>(kind);
    return caf::none;
  });
  return f(caf::meta::type_name("compression"), kind, x.threshold, load);
}

/// Serialization of a payload: the codec (and threshold), one length, one
/// byte run of `encoded_size` bytes.
caf::error inspect(caf::serializer& f, floats& x);

/// Deserialization of a payload; fails on an unknown codec or a bad
/// threshold.
caf::error inspect(caf::deserializer& f, floats& x);

/// Generic inspection (printing, comparison): shows the element count only,
/// so logging a 64 MB tensor stays cheap.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, floats& x) {
  auto n = static_cast<uint64_t>(x.data.size());
  return f(caf::meta::type_name("floats"), n);
}

caf::error inspect(caf::serializer& f, shared_floats& x);

caf::error inspect(caf::deserializer& f, shared_floats& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shared_floats& x) {
  auto n = static_cast<uint64_t>(x.size());
  return f(caf::meta::type_name("shared_floats"), n);
}

/// Serialized as the flattened value: one length, one byte run.
caf::error inspect(caf::serializer& f, float_parts& x);

caf::error inspect(caf::deserializer& f, float_parts& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, float_parts& x) {
  return f(caf::meta::type_name("float_parts"), x.size);
}

/// Sets the initial value of one slice on its shard.
struct slice_init {
  slice_id slice = 0;
  floats value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, slice_init& x) {
  return f(caf::meta::type_name("slice_init"), x.slice, x.value);
}

/// One worker's contribution to one slice. `seq` numbers the operations
/// (pushes and pulls) of `worker` on `slice` from 0 without gaps: the shard
/// applies them in that order even when priorities reorder the mailbox.
struct slice_push {
  slice_id slice = 0;
  uint32_t worker = 0;
  uint64_t seq = 0;
  floats grad;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, slice_push& x) {
  return f(caf::meta::type_name("slice_push"), x.slice, x.worker, x.seq,
           x.grad);
}

/// Reads one slice; `seq` as in `slice_push`.
struct slice_pull {
  slice_id slice = 0;
  uint32_t worker = 0;
  uint64_t seq = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, slice_pull& x) {
  return f(caf::meta::type_name("slice_pull"), x.slice, x.worker, x.seq);
}

/// Creates the slice of a row-sparse table that one shard holds: `rows`
/// rows of `dim` floats, local row i being the table's row
/// `first + i * stride` (row r of a table over S shards lives on shard
/// r mod S, see core/rows.hpp). Every value starts at `low` (rule
/// `constant`), or drawn uniformly from [low, high) by a generator seeded
/// with `seed` and the row's id in the table (rule `uniform`), so that a
/// table starts the same whatever the number of shards. No values travel:
/// a table of 10M rows is made where it lives.
struct table_init {
  enum rule_kind : uint8_t { constant = 0, uniform = 1 };
  slice_id slice = 0;
  uint64_t rows = 0;
  uint64_t dim = 0;
  uint64_t first = 0;
  uint64_t stride = 1;
  uint8_t rule = constant;
  float low = 0.0f;
  float high = 0.0f;
  uint64_t seed = 0;
};

/// Decoding refuses bounds that are no finite numbers (see
/// optimizer_config).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, table_init& x) {
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (!std::isfinite(x.low) || !std::isfinite(x.high))
      return caf::make_error(caf::sec::invalid_argument,
                             "table_init: a bound is not finite");
    return caf::none;
  });
  return f(caf::meta::type_name("table_init"), x.slice, x.rows, x.dim, x.first,
           x.stride, x.rule, x.low, x.high, x.seed, load);
}

/// Pushes to some rows of a table slice: `values` holds one row of the
/// table's `dim` floats per entry of `rows` (local row indices, each at
/// most once), in that order; `seq` as in `slice_push` (a table slice's
/// operations are ordered with the worker's others on that slice).
struct rows_push {
  slice_id slice = 0;
  uint32_t worker = 0;
  uint64_t seq = 0;
  std::vector<uint64_t> rows;
  floats values;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rows_push& x) {
  return f(caf::meta::type_name("rows_push"), x.slice, x.worker, x.seq, x.rows,
           x.values);
}

/// Reads some rows of a table slice (local indices, in the order the
/// reply lays them out); `seq` as in `slice_push`.
struct rows_pull {
  slice_id slice = 0;
  uint32_t worker = 0;
  uint64_t seq = 0;
  std::vector<uint64_t> rows;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rows_pull& x) {
  return f(caf::meta::type_name("rows_pull"), x.slice, x.worker, x.seq, x.rows);
}

/// Several operations of one worker on slices of one shard, carried by one
/// message and answered by one reply (as ps-lite batches a key list per
/// server). Operation i acts on `slices[i]` with sequence number `seqs[i]`
/// (numbered as in `slice_push`, so it is ordered with that worker's single
/// pushes and pulls). For push kinds, the pushed values of all slices lie
/// back to back in `slices` order, in one of two places: `data`, a buffer of
/// the batch's own that may cross the network packed by its encoding; or
/// `parts` (with `data` empty), pieces in order and contiguous of buffers
/// shared with the sender, so that a worker batches many small keys without
/// copying them out of its caller's buffer (across the network `parts`
/// arrives as one buffer). The reply holds the pulled values back to back
/// in `slices` order (empty for pushes).
struct slice_batch {
  uint32_t worker = 0;
  /// An `op_kind`, as its number.
  uint8_t kind = 0;
  std::vector<slice_id> slices;
  std::vector<uint64_t> seqs;
  floats data;
  float_parts parts;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, slice_batch& x) {
  return f(caf::meta::type_name("slice_batch"), x.worker, x.kind, x.slices,
           x.seqs, x.data, x.parts);
}

/// One operation a primary shard ran, sent to its backup (a shard on
/// another server, see actors/shard/shard.hpp, "Replicas"), which runs it
/// again in the primary's order: `kind` an `op_kind` (pulls carry no values:
/// the backup only learns that the worker's sequence number was used);
/// `table` for a row-sparse slice, whose rows `rows` names.
struct replica_op {
  slice_id slice = 0;
  uint32_t worker = 0;
  uint64_t seq = 0;
  uint8_t kind = 0;
  bool table = false;
  std::vector<uint64_t> rows;
  floats values;
  /// Instead of `values`, never serialized (CAF's path copies it into
  /// `values`, the UCX link sends it from where it lies): the pushed values
  /// shared instead of copied. In the primary's process the slice's own
  /// value after the push (the "assign" rule), a view of the worker's
  /// segment, or a pushed buffer that the primary applies too; in the
  /// backup's, a view of the primary's segment that the forward came in.
  shared_floats shared;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_op& x) {
  return f(caf::meta::type_name("replica_op"), x.slice, x.worker, x.seq, x.kind,
           x.table, x.rows, x.values);
}

/// The operations a primary ran since it last wrote to its backup, in the
/// order it ran them.
struct replica_batch {
  std::vector<replica_op> ops;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_batch& x) {
  return f(caf::meta::type_name("replica_batch"), x.ops);
}

/// Decoding refuses infinite or NaN parameters: no optimizer uses one, and
/// CAF 0.17's float encoder never returns on an infinity (found by
/// fuzzing), so a node must not hold one it could send on.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, optimizer_config& x) {
  auto load = caf::meta::load_callback([&]() -> caf::error {
    for (float v : {x.learning_rate, x.momentum, x.weight_decay, x.rescale_grad,
                    x.clip_gradient, x.beta1, x.beta2, x.epsilon, x.rho,
                    x.lr_factor, x.lr_final})
      if (!std::isfinite(v))
        return caf::make_error(caf::sec::invalid_argument,
                               "optimizer_config: a parameter is not finite");
    return caf::none;
  });
  return f(caf::meta::type_name("optimizer_config"), x.name, x.learning_rate,
           x.momentum, x.weight_decay, x.rescale_grad, x.clip_gradient, x.beta1,
           x.beta2, x.epsilon, x.rho, x.ascent, x.lr_schedule, x.lr_updates,
           x.lr_factor, x.lr_final, load);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, slice_record& x) {
  return f(caf::meta::type_name("slice_record"), x.key_id, x.key, x.part,
           x.offset, x.step, x.value, x.state, x.row_steps, x.first, x.total,
           x.parts, x.rows);
}

/// Where a save stands: its session (0: start one), the shard whose
/// records come next and the position in that shard's saved state.
struct save_cursor {
  /// A position that gives the save up: every shard drops its copy.
  static constexpr uint64_t give_up = ~uint64_t{0};
  uint64_t session = 0;
  uint32_t shard = 0;
  uint64_t position = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, save_cursor& x) {
  return f(caf::meta::type_name("save_cursor"), x.session, x.shard, x.position);
}

/// Some records of a save (slices, or pieces of large ones: at most
/// `save_piece_bytes` of them but one record), the optimizer they belong
/// to, and where the save goes on (`done`: nothing follows).
struct save_piece {
  optimizer_config optimizer;
  std::vector<slice_record> records;
  save_cursor next;
  bool done = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, save_piece& x) {
  return f(caf::meta::type_name("save_piece"), x.optimizer, x.records, x.next,
           x.done);
}

/// Some records of a checkpoint being loaded (session 0: the first, which
/// opens the session and names the optimizer), or its end: `commit` (every
/// key seen must be whole, then every shard takes its slices at once) or
/// `give_up` (every shard drops what it assembled). `what` (read from the
/// first piece): `everything` (load_checkpoint: weights, states, steps and
/// the file's optimizer), `states` (load_optimizer_states as MXNet: the
/// weights stay, and so does the store's optimizer if it has one) or
/// `states_and_optimizer` (the same for a file saved with dump_optimizer:
/// the file's optimizer settings replace the store's).
struct load_piece {
  enum end_kind : uint8_t { more = 0, commit = 1, give_up = 2 };
  enum what_kind : uint8_t {
    everything = 0,
    states = 1,
    states_and_optimizer = 2,
  };
  uint64_t session = 0;
  optimizer_config optimizer;
  std::vector<slice_record> records;
  uint8_t end = more;
  uint8_t what = everything;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, load_piece& x) {
  return f(caf::meta::type_name("load_piece"), x.session, x.optimizer,
           x.records, x.end, x.what);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, state_snapshot& x) {
  return f(caf::meta::type_name("state_snapshot"), x.optimizer, x.slices);
}

/// One open synchronous round of a slice in a primary's state (see
/// replica_state): the workers that pushed into it and their sum (a table's
/// round: the rows pushed, and their sums row after row).
struct replica_round {
  uint64_t number = 0;
  std::vector<uint32_t> contributors;
  std::vector<uint64_t> rows;
  floats sum;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_round& x) {
  return f(caf::meta::type_name("replica_round"), x.number, x.contributors,
           x.rows, x.sum);
}

/// One slice of a primary's state without its values, its optimizer state
/// and its row steps, which follow as pieces: its row size (0: dense), their
/// sizes, its update count, each worker's next sequence number and clock,
/// and its open sync rounds.
struct replica_slice {
  slice_id slice = 0;
  uint64_t dim = 0;
  uint64_t value_floats = 0;
  uint64_t state_floats = 0;
  uint64_t step = 0;
  std::vector<uint64_t> next_seq;
  std::vector<uint64_t> pushes_of;
  uint64_t rounds_done = 0;
  std::vector<replica_round> rounds;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_slice& x) {
  return f(caf::meta::type_name("replica_slice"), x.slice, x.dim,
           x.value_floats, x.state_floats, x.step, x.next_seq, x.pushes_of,
           x.rounds_done, x.rounds);
}

/// A piece of one slice's values (`part` 0), optimizer state (1) or row
/// steps (2, in `steps`), from float (or row) `offset` on.
struct replica_piece {
  slice_id slice = 0;
  uint8_t part = 0;
  uint64_t offset = 0;
  floats data;
  std::vector<uint64_t> steps;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_piece& x) {
  return f(caf::meta::type_name("replica_piece"), x.slice, x.part, x.offset,
           x.data, x.steps);
}

/// A primary's whole state, sent to a backup paired with it after it began
/// to serve (a rebuilt replica), in parts that travel like its other
/// forwards, before them: the first (`first`) names the update rule and
/// the live workers and replaces whatever the backup held; each part adds
/// slices and pieces of them; the last (`last`) completes it.
struct replica_state {
  bool first = false;
  bool last = false;
  optimizer_config optimizer;
  std::vector<uint32_t> live;
  std::vector<replica_slice> slices;
  std::vector<replica_piece> pieces;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_state& x) {
  return f(caf::meta::type_name("replica_state"), x.first, x.last, x.optimizer,
           x.live, x.slices, x.pieces);
}

/// Counters of one shard.
struct shard_stats {
  uint64_t slices = 0;
  uint64_t floats_stored = 0;
  uint64_t pushes = 0;
  uint64_t pulls = 0;
  uint64_t updates = 0;
  /// Operations waiting for an earlier operation of the same worker.
  uint64_t reordered = 0;
  /// Pulls waiting for a synchronous round to complete.
  uint64_t waiting_pulls = 0;
  /// dist_sync: the (worker, slice) pairs whose next push waits until the
  /// other workers complete rounds (the worker's pushes ahead reached the
  /// bound: shard_config::max_stash_bytes).
  uint64_t held_pushes = 0;
  /// Batch messages received (each carries one or more operations, counted
  /// in `pushes` and `pulls` as well).
  uint64_t batches = 0;
  /// Per worker rank: what it pushed and pulled here.
  std::vector<worker_traffic> by_worker;
};

/// Adds the counters of one shard to its server's sum (and counts it).
inline void add_shard(server_status& sum, const shard_stats& x) noexcept {
  ++sum.shards;
  sum.slices += x.slices;
  sum.floats_stored += x.floats_stored;
  sum.pushes += x.pushes;
  sum.pulls += x.pulls;
  sum.updates += x.updates;
  sum.waiting_pulls += x.waiting_pulls;
  sum.held_pushes += x.held_pushes;
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_traffic& x) {
  return f(caf::meta::type_name("worker_traffic"), x.pushes, x.pulls,
           x.floats_pushed, x.floats_pulled);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_stats& x) {
  return f(caf::meta::type_name("shard_stats"), x.slices, x.floats_stored,
           x.pushes, x.pulls, x.updates, x.reordered, x.waiting_pulls,
           x.held_pushes, x.batches, x.by_worker);
}

/// Decoding refuses a latency sum that is no finite number >= 0: CAF
/// 0.17's float encoder never returns on an infinity, so a node must not
/// hold one it could send on (found by fuzzing, as for optimizer_config).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, op_stats& x) {
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (!std::isfinite(x.latency_sum_s) || x.latency_sum_s < 0)
      return caf::make_error(caf::sec::invalid_argument,
                             "op_stats: the latency sum is not a finite "
                             "number >= 0");
    return caf::none;
  });
  return f(caf::meta::type_name("op_stats"), x.count, x.errors, x.floats_out,
           x.floats_in, x.buckets, x.latency_sum_s, load);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, queued_requests& x) {
  return f(caf::meta::type_name("queued_requests"), x.priority, x.requests,
           x.bytes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_stats& x) {
  return f(caf::meta::type_name("worker_stats"), x.rank, x.ops,
           x.bytes_in_flight, x.queued);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, slice_range& x) {
  return f(caf::meta::type_name("slice_range"), x.part, x.shard, x.offset,
           x.length);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, key_info& x) {
  return f(caf::meta::type_name("key_info"), x.id, x.name, x.shape, x.size,
           x.slices, x.dim);
}

} // namespace actorps
