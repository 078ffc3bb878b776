// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// What a data request and its reply look like on the UCX plane: a fixed
// header (below) and a body, the request's or reply's value in CAF's binary
// format (the bytes BASP would carry). No CAF here.

#include <cstdint>
#include <optional>
#include <vector>

namespace actorps::ucx {

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
  /// The shard a request is for (its index in the job's routing table).
  uint32_t shard = 0;
  /// > 0: the request overtakes the shard's normal backlog.
  int32_t priority = 0;
};

/// The header's bytes (little-endian, 17 bytes).
std::vector<char> encode(const frame_header& x);

/// The header in `bytes`, or none if they are not one (wrong size, unknown
/// kind).
std::optional<frame_header> decode(const std::vector<char>& bytes);

} // namespace actorps::ucx
