// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// A second carrier for a worker's data requests (push, pull, push_pull,
// batch, and rows of tables) to shards of other processes: the UCX plane,
// implemented in runtime/ucx. No CAF here. Without a channel, or for shards it
// does not carry, CAF carries every request.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <actorps/core/compression.hpp>
#include <actorps/core/values.hpp>

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
  /// `(push_atom, rows_push)`, answered with `ok_atom`.
  rows_push = 4,
  /// `(pull_atom, rows_pull)`, answered with the rows' floats.
  rows_pull = 5,
};

/// A data request to a shard, as a data channel takes it.
struct data_request {
  data_kind kind = data_kind::push;
  /// The shard (its index in the routing table).
  uint32_t shard = 0;
  /// Chosen by the worker; the reply names it.
  uint64_t request = 0;
  /// > 0: overtakes the shard's normal backlog.
  int32_t priority = 0;
  /// push, push_pull, pull and the row kinds: the fields of `slice_push`,
  /// `slice_pull`, `rows_push` or `rows_pull`; batch: the worker.
  uint64_t slice = 0;
  uint32_t worker = 0;
  uint64_t seq = 0;
  /// batch: the `op_kind` of its operations, and how many there are.
  uint8_t op = 0;
  uint32_t slices = 0;
  /// batch: bytes of its slice ids and sequence numbers, packed
  /// (core/batch_ids.hpp), at the end of `pieces`.
  uint32_t ids_size = 0;
  /// Pushes: `count` values, laid out by `encoding` (core/compression.hpp;
  /// raw float32 when uncompressed).
  compression encoding{};
  uint64_t count = 0;
  /// Row kinds: the number of rows named.
  uint64_t rows = 0;

  /// A run of bytes.
  struct piece {
    const void* data = nullptr;
    std::size_t size = 0;
  };

  /// The bytes, sent back to back: push kinds, the encoded values; batch,
  /// the encoded values (if it pushes), then its slice ids and sequence
  /// numbers, packed; rows_push, the encoded
  /// values then the rows (64-bit words); rows_pull, the rows; pull, none.
  /// Valid while `keep` lives.
  std::vector<piece> pieces;
  std::shared_ptr<const void> keep;
};

/// A reply that came back over a data channel.
struct data_reply {
  /// The request it answers (the id `send` was given).
  uint64_t request = 0;
  /// True if `error` holds a `caf::error` (CAF's binary format) instead of
  /// a value.
  bool failed = false;
  std::vector<char> error;
  /// The reply's values (none for `ok_atom`): possibly a view of memory
  /// another process may write (a server's shared-memory segment), to be
  /// copied where it goes, not checked where it lies.
  shared_floats values;
};

/// What a worker needs of a data transport. The transport wakes the worker
/// with `(ucx_atom)` when replies wait; the worker then `take`s them.
class data_channel {
public:
  virtual ~data_channel() = default;

  /// True if requests to shard `shard` (its index in the routing table)
  /// travel over this channel.
  virtual bool carries(uint32_t shard) const = 0;

  /// Sends `x`. A reply, or a failure if the request cannot leave, comes
  /// back later.
  virtual void send(data_request x) = 0;

  /// Shard `shard` went down (CAF's supervision said so): once every shard
  /// behind the same connection is down, the channel gives the connection
  /// up, failing what is still in flight on it.
  virtual void shard_down(uint32_t shard) = 0;

  /// Shard `shard` was replaced by one of the plane at `address` (the
  /// routing table's data address): requests to it go there from now on.
  /// False if this channel cannot carry them (CAF carries them then).
  virtual bool reroute(uint32_t shard, const std::string& address) {
    static_cast<void>(shard);
    static_cast<void>(address);
    return false;
  }

  /// The replies that arrived since the last call.
  virtual std::vector<data_reply> take() = 0;

  /// Room for the values of a push of `bytes` bytes to shard `shard` that
  /// travels alone in its request (a slice of its own, core/batching.hpp),
  /// for the caller to write them in place: a request whose values begin
  /// there leaves from there without a copy. Null data when there is no
  /// such room (the default). The room is the caller's while `keep` lives;
  /// the values stay readable there. Thread-safe: a client calls it on its
  /// own thread while the worker sends.
  struct lent_room {
    float* data = nullptr;
    std::shared_ptr<const void> keep;
  };

  virtual lent_room lease(uint32_t shard, std::size_t bytes) {
    static_cast<void>(shard);
    static_cast<void>(bytes);
    return {};
  }

  /// Lets the calling thread, about to wait for replies, receive them
  /// itself until `done()` holds (true) or `until` passes (false): replies
  /// then run the worker on this thread (actors/run_here.hpp) and wake no
  /// other thread on their way to it. False at once when the channel cannot
  /// (the default) or another thread does so already; the caller then
  /// waits as usual.
  virtual bool drive(const std::function<bool()>& done,
                     std::chrono::steady_clock::time_point until) {
    static_cast<void>(done);
    static_cast<void>(until);
    return false;
  }

  /// Wakes the thread in `drive`, if one sleeps there: for a thread that
  /// ran the worker, whose replies may be what that one waits for.
  virtual void wake_driver() {
    // nop
  }
};

} // namespace actorps
