// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <actorps/core/errc.hpp>
#include <actorps/core/file_system.hpp>
#include <actorps/core/values.hpp>

/// Checkpoints written and read record by record, in the format of
/// core/checkpoint.hpp: a model travels and lands in pieces, so neither a
/// saving nor a loading process holds more of it than one record at a
/// time. Free of CAF.
namespace actorps::core {

/// Writes a checkpoint to "<path>.tmp" and, at `finish`, syncs it and
/// renames it over `path` (a reader sees the old file or the whole new
/// one). A writer dropped before `finish` removes its temporary file.
class checkpoint_writer {
public:
  checkpoint_writer() = default;
  checkpoint_writer(const checkpoint_writer&) = delete;
  checkpoint_writer& operator=(const checkpoint_writer&) = delete;
  ~checkpoint_writer();

  /// Creates the temporary file and writes the magic and the optimizer
  /// (`dump_optimizer`: load_optimizer_states takes its settings too).
  status open(const std::string& path, const optimizer_config& opt,
              file_system& fs = posix_file_system(),
              bool dump_optimizer = false);

  /// Appends one slice record (or piece of one). `checkpoint_io` if it does
  /// not fit a record (4 GiB) or the write fails; the writer is then
  /// aborted.
  status add(const slice_record& rec);

  /// Writes the end record, syncs, closes, renames over the path and syncs
  /// its directory.
  status finish();

  /// Removes the temporary file; later calls fail.
  void abort();

  bool is_open() const noexcept {
    return file_ != nullptr;
  }

  /// Slice records written so far.
  uint64_t records() const noexcept {
    return count_;
  }

private:
  status fail(const char* step, int err);

  file_system* fs_ = nullptr;
  std::unique_ptr<writable_file> file_;
  std::string path_;
  std::vector<char> buf_;
  uint64_t count_ = 0;
};

/// Reads a checkpoint record by record. Every record's length is checked
/// against what is left of the file before anything is allocated for it,
/// and its CRC before it is parsed; errors are `checkpoint_io` (the file)
/// and `checkpoint_corrupt` (its bytes), each naming the path.
class checkpoint_reader {
public:
  /// Opens a regular file and reads its magic and optimizer record.
  status open(const std::string& path, file_system& fs = posix_file_system());

  const optimizer_config& optimizer() const noexcept {
    return optimizer_;
  }

  /// Whether the file was saved with dump_optimizer.
  bool optimizer_dumped() const noexcept {
    return dumped_;
  }

  /// The next slice record into `out`; `done` is set instead at the end
  /// record (after checking its count and that nothing follows it).
  status next(slice_record& out, bool& done);

private:
  status read_record(uint64_t index, std::vector<char>& payload);
  status corrupt(const std::string& what) const;

  std::unique_ptr<readable_file> file_;
  std::string path_;
  uint64_t left_ = 0;
  uint64_t index_ = 0;
  optimizer_config optimizer_;
  bool dumped_ = false;
  std::vector<char> payload_;
};

/// Reads the whole checkpoint at `path` (every record, CRCs and the end)
/// without keeping it: whether it reads back whole.
status verify_checkpoint(const std::string& path,
                         file_system& fs = posix_file_system());

/// For each key of the checkpoint at `path`, how many distinct parts its
/// records name (a table saved over S shards: S), reading every record.
/// For checkpoints written before records said it themselves.
status count_saved_parts(const std::string& path,
                         std::map<std::string, uint32_t>& out,
                         file_system& fs = posix_file_system());

} // namespace actorps::core
