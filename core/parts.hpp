// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <actorps/core/errc.hpp>
#include <actorps/core/values.hpp>

/// Reading and writing values held as `float_parts` (pieces of shared
/// buffers), free of CAF: how a worker cuts a pushed value into slices and
/// assembles pulled slices into one value, and how a shard reads a batch,
/// without copying a float that need not be copied.
namespace actorps::core {

/// Reads a pushed value (pieces in order and contiguous, checked before)
/// front to back, slice by slice. Holds a reference to `src`, which it may
/// empty of buffers it hands over.
class parts_reader {
public:
  explicit parts_reader(float_parts& src);

  /// The next `n` floats as a buffer of their own: a buffer that holds
  /// exactly them (and nothing else refers to) is taken over, else they are
  /// copied.
  std::vector<float> take(uint64_t n);

  /// Appends the next `n` floats to `out` as pieces of the buffers that hold
  /// them, shared, not copied (a piece that continues the last one of `out`
  /// in the same buffer lengthens it). A buffer whose last piece this reads
  /// moves to `out`, so that `out` may become its only holder.
  void share(float_parts& out, uint64_t n);

  /// Appends the next `n` floats to `out`.
  void append(std::vector<float>& out, uint64_t n);

  /// True if the next `n` floats are all of one view (shared_floats::
  /// is_view), which `take` would copy and `share` passes on as it is.
  bool next_is_view(uint64_t n);

private:
  void skip_empty();

  float_parts& src_;
  std::vector<uint32_t> uses_;
  std::size_t i_ = 0;
  uint64_t pos_ = 0;
};

/// Reads the floats of a pushed batch held in pieces (in order and
/// contiguous, checked before), slice after slice: each in place when one
/// piece holds it, else gathered into a buffer of its own that stays valid
/// until the next read.
class parts_cursor {
public:
  explicit parts_cursor(const float_parts& src) : src_(src) {
    // Nothing else to do.
  }

  /// The floats [at, at + n) of the value, or null past its end; `at` never
  /// decreases from one call to the next.
  const float* read(uint64_t at, uint64_t n);

private:
  const float_parts& src_;
  std::size_t i_ = 0;
  std::vector<float> scratch_;
};

/// The floats of `x` as one vector: its one buffer, taken over when nothing
/// else refers to it and it holds exactly them, else a copy.
std::vector<float> take_all(float_parts& x);

/// `length` floats of a reply that belong at `offset` of the output.
struct piece {
  uint64_t offset = 0;
  uint64_t length = 0;
};

/// Places one pulled slice `x` of `expected` floats at `at` of `out`, shared
/// as it is. Fails with `shape_mismatch` on another size.
status place(float_parts& out, uint64_t at, uint64_t expected,
             shared_floats& x);

/// Places a batch reply `x`: the slices of `pieces` back to back, as pieces
/// of any number of buffers (one per slice from a local shard, one in all
/// from a remote one), `expected` floats in all. Each piece of the reply is
/// cut where the slices meet and placed, still shared, where its slice
/// belongs in `out`. Fails with `shape_mismatch` on another size or on
/// pieces outside their buffers.
status place(float_parts& out, const std::vector<piece>& pieces,
             uint64_t expected, float_parts& x);

/// Copies one pulled slice `x` of `expected` floats to `out + at` (`out`
/// holds `out_size` floats). Fails with `shape_mismatch` on another size.
status place_flat(float* out, uint64_t out_size, uint64_t at, uint64_t expected,
                  const shared_floats& x);

/// Copies a batch reply `x` (as for `place`) slice by slice to where each
/// slice belongs in `out` (`out_size` floats): for many short slices, where
/// a piece per slice costs more than copying its floats. Fails as `place`,
/// and on a slice outside `out`.
status place_flat(float* out, uint64_t out_size,
                  const std::vector<piece>& pieces, uint64_t expected,
                  const float_parts& x);

} // namespace actorps::core
