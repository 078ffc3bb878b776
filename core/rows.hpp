// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <actorps/core/errc.hpp>
#include <actorps/core/values.hpp>

/// Row-sparse tables (issue 25, in progress: the CAF-free pieces). A table
/// of `rows` x `dim` floats is spread over the shards row by row: row r
/// lives on shard r mod S at local index r div S, so that a batch of random
/// row ids (or a run of consecutive ones) spreads evenly. A shard keeps its
/// rows back to back and, per row, the optimizer state of that row
/// (`state_size(cfg, dim)` floats) and its own step counter, so that an
/// update touches only the rows pushed (MXNet's lazy_update).
namespace actorps::core {

struct row_layout {
  uint64_t rows = 0;
  uint64_t dim = 0;
  uint32_t shards = 1;

  uint32_t shard_of(uint64_t row) const noexcept {
    return static_cast<uint32_t>(row % shards);
  }

  uint64_t local_of(uint64_t row) const noexcept {
    return row / shards;
  }

  /// Rows that shard `s` holds.
  uint64_t rows_on(uint32_t s) const noexcept {
    return rows > s ? (rows - s + shards - 1) / shards : 0;
  }
};

/// The rows of one request that one shard serves, in request order, and
/// where each lies in the request. An id named twice is there twice: the
/// shard sums the rows of a push named more than once (`sum_repeats`) and
/// answers a pull with every row asked for, so a worker splits a request
/// without hashing its ids.
struct shard_rows {
  /// Local indices (each below the shard's row count).
  std::vector<uint64_t> local;
  /// The request position of each entry of `local` (empty if `in_order`).
  std::vector<uint64_t> positions;
  /// Entry i is position i of the request, for every position: this shard
  /// serves the whole request as it is (`positions` is left empty).
  bool in_order = false;
};

/// Splits the row ids of a request by shard (`out` gets one entry per
/// shard). Errors: `bad_config` for an empty layout, `unknown_key` naming
/// the first id out of range.
status split_rows(const row_layout& layout, const std::vector<uint64_t>& ids,
                  std::vector<shard_rows>& out);

/// The pushes of one sync round to a shard's part of a table: each row
/// pushed once, in first-seen order, its values summed over the pushes that
/// named it. The first push's rows and values are taken over as they are;
/// an index of the rows is built only when a second push arrives.
class row_sum {
public:
  row_sum();
  row_sum(row_sum&&) noexcept;
  row_sum& operator=(row_sum&&) noexcept;
  ~row_sum();

  /// Adds a push of `rows` (distinct local indices, taken over or left
  /// alone) with `values` (one row of `dim` floats per entry of `rows`);
  /// `owned`, if set, holds those values and may be taken over.
  void add(std::vector<uint64_t>& rows, const float* values,
           std::vector<float>* owned, uint64_t dim);

  const std::vector<uint64_t>& rows() const noexcept {
    return rows_;
  }

  const float* values() const noexcept {
    return sum_.data();
  }

private:
  struct index;
  std::vector<uint64_t> rows_;
  std::vector<float> sum_;
  std::unique_ptr<index> index_;
};

/// A push's rows each once: if some row appears more than once in `rows`,
/// `rows` becomes its distinct rows in first-seen order and `summed` their
/// values, the rows of a repeated one added up in request order (`values`:
/// one row of `dim` floats per entry of `rows` as it was); returns true.
/// Else (the common case, one pass over the rows) leaves both alone and
/// returns false.
bool sum_repeats(std::vector<uint64_t>& rows, const float* values, uint64_t dim,
                 std::vector<float>& summed);

/// The values a push sends to one shard: the rows of `values` (one row of
/// `dim` floats per id of the request, in request order) that `rows` names,
/// in its order.
std::vector<float> shard_values(const shard_rows& rows, const float* values,
                                uint64_t dim);

/// The rows `rows` (local indices, each below the table's row count) of a
/// table of rows of `dim` floats, one after the other: a shard's answer to
/// a pull of rows. Fetches the rows ahead (they lie far apart in a large
/// table), and writes the answer once, without zero-filling it first.
std::vector<float> gather_rows(const float* table, uint64_t dim,
                               const std::vector<uint64_t>& rows);

/// Writes the rows a shard returned (`pulled`: one row per entry of
/// `rows.local`) to their request positions (`out`: request order).
void scatter_rows(const shard_rows& rows, const float* pulled, uint64_t dim,
                  float* out);

/// Cuts the saved parts of one table anew for `layout` (its shard count may
/// differ from the saved one): `saved` holds every saved part of the table
/// (part p holding rows p, p + P, ... of P parts), in any order;
/// `per_row_state` is `state_size(cfg, dim)`. Each row keeps its values,
/// optimizer state and step. `out` gets one record per shard holding rows,
/// in shard order (`part` = shard, `offset` = its first float in the
/// concatenation of the parts, as the coordinator numbers them). Errors
/// (`checkpoint_mismatch`, naming the key): parts missing or repeated,
/// another row count or row size, state or steps of the wrong size.
status reslice_rows(const std::vector<const slice_record*>& saved,
                    const row_layout& layout, uint64_t per_row_state,
                    std::vector<slice_record>& out);

} // namespace actorps::core
