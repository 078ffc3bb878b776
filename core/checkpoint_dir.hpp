// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string>

#include <actorps/core/errc.hpp>
#include <actorps/core/values.hpp>

/// A folder of numbered checkpoints (periodic checkpoints of a job), in
/// the format of core/checkpoint.hpp. Free of CAF.
namespace actorps::core {

/// The file name of checkpoint `number`: "checkpoint-000042.actorps"
/// (zero-padded, so that names sort as numbers).
std::string checkpoint_name(uint64_t number);

/// The highest number of a checkpoint file in `dir` (0 if none or no such
/// folder): a new job that checkpoints into the same folder numbers its
/// checkpoints after it, so that pruning keeps the newest.
uint64_t highest_checkpoint_number(const std::string& dir);

/// The path of checkpoint `number` in `dir`, which is created if missing
/// (`checkpoint_io` if it cannot be).
status numbered_checkpoint_path(const std::string& dir, uint64_t number,
                                std::string& path);

/// Removes the oldest checkpoints of `dir` beyond the newest `keep` (at
/// least 1).
void prune_checkpoints(const std::string& dir, uint32_t keep);

/// Writes `snap` as checkpoint `number` into `dir` (created if missing),
/// atomically, then removes the oldest checkpoints beyond the newest
/// `keep` (at least 1). `path` gets the file written. Errors:
/// `checkpoint_io`.
status write_numbered_checkpoint(const std::string& dir, uint64_t number,
                                 const state_snapshot& snap, uint32_t keep,
                                 std::string& path);

/// The checkpoint to resume from at `path`: the file itself, or in a
/// folder the newest checkpoint file that reads back whole (a file cut
/// short or corrupted by a crash is skipped). Errors: `checkpoint_io`
/// (nothing there), `checkpoint_corrupt` (no file in the folder is whole).
status latest_checkpoint(const std::string& path, std::string& out);

} // namespace actorps::core
