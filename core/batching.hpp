// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <algorithm>
#include <cstdint>

/// How the slices of one call are grouped into messages: the one owner of
/// that policy, read by the client facade (which lays a pushed value out so
/// that each slice travelling alone has a buffer of its own) and by the
/// worker (which sends those slices alone and batches the rest per shard).
namespace actorps::core {

/// Default of `batching::batch_floats`.
constexpr uint64_t default_batch_floats = uint64_t{1} << 16;

/// Most floats one batch message carries; a fuller batch is split.
constexpr uint64_t max_batch_floats = uint64_t{1} << 20;

/// Slices shorter than this on average are copied into one buffer when
/// batched, not referred to piece by piece: per piece, sharing a buffer costs
/// more than copying a few floats.
constexpr uint64_t min_shared_floats = 1024;

/// The batching policy of one worker.
struct batching {
  /// Slices of at most this many floats travel in one batch message per
  /// shard; larger ones alone. 0 sends every slice alone.
  uint64_t batch_floats = default_batch_floats;

  /// True if a slice of `length` floats travels in a message of its own.
  bool alone(uint64_t length) const noexcept {
    return length > batch_floats;
  }

  /// Most floats one batch message carries.
  uint64_t cap() const noexcept {
    return std::max(batch_floats, max_batch_floats);
  }

  /// True if `slices` batched slices of `floats` floats in all are long
  /// enough on average to be referred to in their buffers rather than copied.
  static bool share(uint64_t slices, uint64_t floats) noexcept {
    return floats >= slices * min_shared_floats;
  }
};

} // namespace actorps::core
