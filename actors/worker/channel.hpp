// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// A second carrier for a worker's data requests (push, pull, push_pull and
// batch) to shards of other processes: the UCX plane, implemented in
// runtime/ucx. No CAF here. Without a channel, or for shards it does not
// carry, CAF carries every request.

#include <cstdint>
#include <vector>

namespace actorps {

/// What a data request asks of a shard (the kinds of runtime/ucx/frames.hpp).
enum class data_kind : uint8_t {
  /// `(push_atom, slice_push)`, answered with `ok_atom`.
  push = 0,
  /// `(pull_atom, slice_pull)`, answered with the slice's floats.
  pull = 1,
  /// `(push_pull_atom, slice_push)`, answered with the slice's floats.
  push_pull = 2,
  /// `(batch_atom, slice_batch)`, answered with the value's floats.
  batch = 3,
};

/// A reply that came back over a data channel.
struct data_reply {
  /// The request it answers (the id `send` was given).
  uint64_t request = 0;
  /// True if `body` holds a `caf::error` (CAF's binary format) instead of
  /// the reply's value (the raw floats, or nothing for `ok_atom`).
  bool failed = false;
  std::vector<char> body;
};

/// What a worker needs of a data transport. The transport wakes the worker
/// with `(ucx_atom)` when replies wait; the worker then `take`s them.
class data_channel {
public:
  virtual ~data_channel() = default;

  /// True if requests to shard `shard` (its index in the routing table)
  /// travel over this channel.
  virtual bool carries(uint32_t shard) const = 0;

  /// Sends request `request` of kind `kind` with `priority` and `body` (the
  /// request's value in CAF's binary format). A reply, or a failure if the
  /// request cannot leave, comes back later.
  virtual void send(uint32_t shard, uint64_t request, data_kind kind,
                    int32_t priority, std::vector<char> body)
    = 0;

  /// The replies that arrived since the last call.
  virtual std::vector<data_reply> take() = 0;
};

} // namespace actorps
