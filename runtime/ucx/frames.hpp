// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// What a data request and its reply look like on the UCX plane: a header
// (a fixed part, then for single-slice requests the slice's fields) and a
// body. Bodies:
// - push, push_pull: the pushed values, as their codec lays them out
//   (core/compression.hpp: raw float32 when uncompressed);
// - pull: none;
// - batch: the pushed values as their codec lays them out (none for a
//   batch of pulls), then the slice ids and sequence numbers, packed
//   (core/batch_ids.hpp, `batch_meta::ids_size` bytes), then zeros up to
//   a multiple of 4 bytes;
// - rows_push: the pushed rows' values as their codec lays them out, then
//   the rows (`slice_meta::rows` little-endian 64-bit local row indices);
// - rows_pull: the rows;
// - replicate: the forwarded values back to back (raw float32), then the
//   operations without their values in CAF's binary format (each
//   `replica_op` and its count of values), padded to 4 bytes, then that
//   part's length (little-endian 64-bit word);
// - replicate_change: the change, a `caf::message` in CAF's binary format;
// - reply: the values, raw float32 (none for `ok_atom`);
// - failure: a `caf::error` in CAF's binary format.
// No CAF here.

#include <cstdint>
#include <optional>
#include <vector>

#include "core/compression.hpp"

namespace actorps::ucx {

/// Most values one request frame may carry: as many floats as the plane's
/// largest body holds raw (plane_options::max_body, 1 GiB), so that a
/// compressed body (fp16: 2x, 2-bit: 16x) never decodes into more memory
/// than a raw one could take.
constexpr uint64_t max_frame_floats = (uint64_t{1} << 30) / sizeof(float);

/// What a frame carries.
enum class frame_kind : uint8_t {
  /// `slice_push`, answered with `ok_atom`.
  push = 0,
  /// `slice_pull`, answered with `shared_floats`.
  pull = 1,
  /// `slice_push`, answered with `shared_floats`.
  push_pull = 2,
  /// `slice_batch`, answered with `float_parts`.
  batch = 3,
  /// `rows_push`, answered with `ok_atom`.
  rows_push = 4,
  /// `rows_pull`, answered with `shared_floats`.
  rows_pull = 5,
  /// Between servers (replicas, actors/shard/shard.hpp): a primary's
  /// forward number `replicate_meta::number` to the backup of shard
  /// `shard`, operations (`replica_batch`), answered with no values; only
  /// from a peer that proved the servers' identity (plane.hpp).
  replicate = 6,
  /// The same, a change: a `caf::message` in CAF's binary format.
  replicate_change = 7,
  /// The reply to request `request`: its value.
  reply = 16,
  /// The reply to request `request`: a `caf::error`.
  failure = 17,
};

/// The fixed part of a frame.
struct frame_header {
  frame_kind kind = frame_kind::push;
  /// Chosen by the requester; a reply names its request.
  uint64_t request = 0;
  /// The shard a request is for (its index in the job's routing table); in
  /// a reply or failure, the identity whose connection sent the request
  /// (plane_options::identity), which the requester checks: a reply for
  /// another worker is dropped.
  uint32_t shard = 0;
  /// > 0: the request overtakes the shard's normal backlog.
  int32_t priority = 0;
};

/// What follows the fixed part of a push, push_pull or pull request: the
/// fields of `slice_push` or `slice_pull` but the values; of a rows_push or
/// rows_pull request, the fields of `rows_push` or `rows_pull` but the
/// values and rows, and how many rows the body holds.
struct slice_meta {
  uint64_t slice = 0;
  uint32_t worker = 0;
  uint64_t seq = 0;
  /// Push kinds: how the body lays out the values, and how many there are
  /// (the body holds exactly `encoded_size(encoding, count)` bytes).
  compression encoding{};
  uint64_t count = 0;
  /// Row kinds: the rows in the body (at most `max_frame_rows`; a
  /// rows_pull carries no values, its `count` is 0).
  uint64_t rows = 0;
};

/// Most rows one request frame may name (1 GiB of row indices).
constexpr uint64_t max_frame_rows = (uint64_t{1} << 30) / sizeof(uint64_t);

/// Bytes of a rows_push or rows_pull body that `meta` describes.
uint64_t rows_body_size(const slice_meta& meta);

/// What follows the fixed part of a batch request's header: the fields of
/// `slice_batch` but the slices, their sequence numbers and the values.
struct batch_meta {
  uint32_t worker = 0;
  /// An `op_kind`, as its number.
  uint8_t op = 0;
  /// Operations in the batch (at least one).
  uint32_t slices = 0;
  /// Bytes of the slice ids and sequence numbers, packed (at least
  /// `slices` + 2, at most `core::max_packed_ids(slices)`).
  uint32_t ids_size = 0;
  /// How the body lays out the pushed values, and how many there are.
  compression encoding{};
  uint64_t count = 0;
};

/// Bytes of a batch body that `meta` describes.
uint64_t body_size(const batch_meta& meta);

/// The header's bytes followed by a replicate frame's forward number (25
/// bytes in all).
std::vector<char> encode(const frame_header& x, uint64_t number);

/// The forward number after the fixed part of a replicate or
/// replicate_change frame's header, or none if it is no such frame.
std::optional<uint64_t> decode_number(const std::vector<char>& bytes);

/// The header's bytes (little-endian, 17 bytes).
std::vector<char> encode(const frame_header& x);

/// The header's bytes followed by `meta`'s (push kinds: 50 bytes in all;
/// pull: 37, without the encoding and count; row kinds: 58, with the
/// count of rows).
std::vector<char> encode(const frame_header& x, const slice_meta& meta);

/// The header's bytes followed by `meta`'s (43 bytes in all).
std::vector<char> encode(const frame_header& x, const batch_meta& meta);

/// The fixed part of the header in `bytes`, or none if they are not one
/// (too short, unknown kind, or more bytes than the kind carries).
std::optional<frame_header> decode(const std::vector<char>& bytes);

/// The slice's fields after the fixed part of a push, push_pull, pull,
/// rows_push or rows_pull request's header, or none if they are not there
/// (wrong size, unknown codec, a threshold that is no finite number > 0,
/// more than `max_frame_floats` values or `max_frame_rows` rows, values in
/// a rows_pull).
std::optional<slice_meta> decode_meta(const std::vector<char>& bytes);

/// The batch's fields after the fixed part of a batch request's header, or
/// none if they are not there (wrong size, unknown codec or operation, no
/// slices, more than 2^24 of them or more than `max_frame_floats` values,
/// packed ids of a size they cannot have).
std::optional<batch_meta> decode_batch_meta(const std::vector<char>& bytes);

} // namespace actorps::ucx
