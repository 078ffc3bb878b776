// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <actorps/core/checkpoint_stream.hpp>
#include <actorps/core/errc.hpp>
#include <actorps/core/file_system.hpp>
#include <actorps/core/values.hpp>

/// A checkpoint file read as the pieces of a load in pieces: what a client
/// (kvstore::load_optimizer_states) and the coordinator's runner (restoring
/// a replacement server) hand the coordinator, so that neither holds more
/// of the model than one piece. Free of CAF.
namespace actorps::core {

class load_pieces {
public:
  /// A key's row size in the store being loaded (0: dense), for records too
  /// large for one piece, which are cut into pieces of whole rows; an error
  /// if the store lacks the key.
  using row_size_fn
    = std::function<status(const std::string& key, uint64_t& dim)>;

  /// Opens the checkpoint at `path`; pieces hold at most `budget` bytes of
  /// records (but one record) and `max_records` records.
  status open(const std::string& path, uint64_t budget, std::size_t max_records,
              file_system& fs = posix_file_system());

  const optimizer_config& optimizer() const noexcept {
    return in_.optimizer();
  }

  bool optimizer_dumped() const noexcept {
    return in_.optimizer_dumped();
  }

  /// The next piece's records into `out` (replaced), and `done` once the
  /// file's end was read: `out` may then hold the last records or none.
  /// Records of files written before pieces get their part count (a whole
  /// read of the file, once). Errors: those of checkpoint_reader,
  /// `row_size`'s, and `checkpoint_mismatch` for a large record whose
  /// arrays do not fit rows of its key.
  status next(std::vector<slice_record>& out, bool& done,
              const row_size_fn& row_size);

private:
  status take(slice_record rec, const row_size_fn& row_size);

  checkpoint_reader in_;
  file_system* fs_ = nullptr;
  std::string path_;
  uint64_t budget_ = 0;
  std::size_t max_records_ = 1;
  std::map<std::string, uint32_t> parts_;
  bool counted_ = false;
  bool end_ = false;
  // Pieces of the last record read, not handed out yet.
  std::deque<slice_record> cut_;
};

/// The newest whole checkpoint of a folder (core::latest_checkpoint), read
/// piece by piece by several readers at once, each by its id: what the
/// coordinator's runner serves replacement servers' restores from.
class restore_reads {
public:
  /// Pieces as load_pieces cuts them (`budget` bytes, `max_records`).
  restore_reads(std::string dir, std::size_t max_readers, uint64_t budget,
                std::size_t max_records);

  /// Piece `index` of reader `id` (0 opens the folder's newest checkpoint
  /// that reads back whole; then each must be the next): `opt` the
  /// checkpoint's optimizer, `out` the records, `done` with the last. A
  /// reader is forgotten after its last piece or an error, the oldest one
  /// when there are `max_readers`. Errors: those of latest_checkpoint and
  /// load_pieces, `checkpoint_io` for a piece out of turn, and
  /// `checkpoint_mismatch` for a record larger than a piece (a file
  /// written before pieces: its rows are not known here).
  status next(uint64_t id, uint64_t index, optimizer_config& opt,
              std::vector<slice_record>& out, bool& done);

  /// The checkpoint the last reader read to its end.
  const std::string& last_path() const noexcept {
    return last_path_;
  }

private:
  struct reader {
    load_pieces in;
    std::string path;
    uint64_t next = 0;
  };
  std::string dir_;
  std::size_t max_readers_;
  uint64_t budget_;
  std::size_t max_records_;
  std::map<uint64_t, reader> readers_;
  std::string last_path_;
};

} // namespace actorps::core
