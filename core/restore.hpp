// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <actorps/core/errc.hpp>
#include <actorps/core/values.hpp>

/// Restoring a checkpoint into a store whose layout may differ from the one
/// that saved it (another number of shards, slice size or slicing bound).
/// Free of CAF.
namespace actorps::core {

/// Cuts the saved slices of one key anew, for a store that slices it
/// differently (another number of shards, slice size or slicing bound).
/// `saved` holds every record of the key, in any order; `size` and `target`
/// are the key's size and slices in this store; `per_float` is the optimizer
/// state per weight (`state_size(cfg, 1)`: 0, 1 or 2 blocks, each as long as
/// the slice). On success `out` holds one record per target slice, in
/// `target` order: value and state cut from the saved ones, the step of the
/// saved ones it is cut from, `key_id` and `key` of the first saved record.
/// A layout equal to the saved one comes back as saved. Errors are
/// `errc::checkpoint_mismatch`: saved slices that leave a gap, overlap, or do
/// not cover exactly `size` floats; state of the wrong size; a target slice
/// cut from saved slices that saw different numbers of updates (no one step
/// describes it). On failure `out` is left unchanged.
status reslice(const std::vector<const slice_record*>& saved, uint64_t size,
               const std::vector<slice_range>& target, std::size_t per_float,
               std::vector<slice_record>& out);

/// Cuts a whole checkpoint to a store's layout: `find(name)` gives the
/// key_info of an initialized key of the store (null if there is none);
/// `shards` is the store's number of shards. On success `out` holds one
/// snapshot per shard, each with the checkpoint's optimizer and the records
/// its shard holds (ids of this store; dense keys cut by `reslice`, row
/// tables by `reslice_rows`). Errors: `unknown_key` for a saved key the store
/// lacks, and those of `reslice` and `reslice_rows`. On failure `out` is
/// left unchanged.
status
split_snapshot(const state_snapshot& snap, uint32_t shards,
               const std::function<const key_info*(const std::string&)>& find,
               std::vector<state_snapshot>& out);

/// A piece of `whole` (a slice record) from float `from` on (a multiple of
/// `dim` for a table, whose pieces hold whole rows; `dim` 0 for a dense
/// slice) of at most `budget` bytes of values, state and row steps, but at
/// least one float (one row): key, part, offset, step and parts as in
/// `whole`, `first` and `total` set (both 0 when the piece is the whole
/// slice). Returns where the next piece starts (the slice's size after the
/// last). Precondition: `whole` is well formed (`shape_fits`); a `from`
/// past its last whole float (row) returns the slice's size.
uint64_t take_piece(const slice_record& whole, uint64_t from, uint64_t budget,
                    uint64_t dim, slice_record& out);

/// Whether `rec`'s arrays fit each other for a slice of rows of `dim`
/// floats (0: dense): whole rows, state a whole number of floats per float
/// (per row), row steps none or one per row. What take_piece needs of a
/// record read from a file.
bool shape_fits(const slice_record& rec, uint64_t dim) noexcept;

/// Cuts one saved record (a slice of a checkpoint, or a piece of one,
/// named) into pieces of this store's slices of the key `info` describes:
/// `out` gets (shard, piece) pairs, each piece with this store's key id,
/// part, `first` and `total` (and `rows` for a table that another number
/// of shards saved: each row goes where this store keeps it). `per_float`
/// is the optimizer state per weight (`state_size(cfg, 1)`). Errors:
/// `checkpoint_mismatch` for a record that does not fit the key (outside
/// it, a table part or row count that does not match, state of the wrong
/// size, a table record whose number of parts is unknown). Appends to
/// `out`; on failure `out` is left as it was.
status cut_piece(const slice_record& saved, const key_info& info,
                 uint32_t shards, std::size_t per_float,
                 std::vector<std::pair<uint32_t, slice_record>>& out);

/// A shard's slice loaded in pieces: allocated to the slice's own size
/// (never to a size a piece names; a dense slice that comes whole in one
/// piece keeps that piece's buffers), filled piece by piece, each float or
/// row at most once.
class slice_assembly {
public:
  /// Prepares for a slice of `length` floats: dense (`dim` 0) with
  /// `state_per` state floats per weight, or a table of rows of `dim`
  /// floats with `state_per` state floats per row.
  void reset(uint64_t length, uint64_t dim, std::size_t state_per);

  /// Adds a piece (its buffers are taken). Errors (`checkpoint_mismatch`,
  /// naming `name`): a piece of another slice size, outside the slice, of
  /// the wrong state size, overlapping what arrived before, or a dense
  /// piece whose step differs from the others' (no one step would describe
  /// the slice).
  status add(slice_record& piece, const std::string& name);

  /// Whether every float (row) arrived.
  bool complete() const noexcept {
    return have_count_ == units_;
  }

  /// Floats (rows) still missing.
  uint64_t missing() const noexcept {
    return units_ - have_count_;
  }

  std::vector<float> value;
  std::vector<float> state;
  std::vector<uint64_t> row_steps;
  uint64_t step = 0;

private:
  // Sizes the buffers to the slice (zeros) unless they are.
  void allocate();

  uint64_t length_ = 0;
  uint64_t dim_ = 0;
  std::size_t per_ = 0;
  // Floats of a dense slice, rows of a table.
  uint64_t units_ = 0;
  // A table's rows that arrived.
  std::vector<bool> have_;
  // A dense slice's ranges that arrived: first float -> one past the last.
  std::map<uint64_t, uint64_t> ranges_;
  uint64_t have_count_ = 0;
  bool stepped_ = false;
};

} // namespace actorps::core
