// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
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

} // namespace actorps::core
