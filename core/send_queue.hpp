// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include <actorps/core/values.hpp>

/// A worker's queue of requests to one shard, free of CAF: highest priority
/// first, with a bound on the bytes sent and not answered yet (P3,
/// ByteScheduler). Under backlog a high-priority request overtakes queued
/// low-priority ones here instead of waiting behind them in network buffers,
/// and what a server holds for one worker stays bounded.
///
/// Ordering: a request never overtakes an earlier one on a slice it shares
/// (the earlier one is raised to its priority first), so the shard never
/// waits for a request still queued here. Among equal priorities, requests
/// leave in the order they were queued.
namespace actorps::core {

/// What one request holds of its shard's bounds while in flight.
struct request_cost {
  /// Bytes held of the bound (0: none).
  uint64_t bytes = 0;
  /// Bytes of a sync push-pull: counted while in flight, but never keeping
  /// another request back (see `send_queue::fits`).
  uint64_t soft = 0;
  /// Bytes of a sync pull: held of the shard's bound on pulls while in
  /// flight. Its reply waits for its round, so it never keeps a push or
  /// push-pull back: one on its slices sends it first, over the bound.
  uint64_t pull_bytes = 0;
};

/// The cost of a request of `kind` carrying `floats` floats there and back.
/// Requests whose reply may wait for other workers (pulls and push-pulls in
/// sync mode wait for their round) hold no bytes of the bound, so that they
/// never keep this worker's pushes, which those rounds need, from being sent:
/// sync pulls are bounded on their own instead, sync push-pulls are `soft`.
request_cost cost_of(op_kind kind, uint64_t floats, bool sync) noexcept;

/// One request waiting to be sent.
struct outgoing {
  int32_t priority = 0;
  request_cost cost;
  /// The slices it acts on.
  std::vector<slice_id> slices;
  /// Sends the request; its reply (or error) must call `send_queue::release`
  /// with its cost. May call `release` at once (a send that fails at once).
  std::function<void()> send;
};

/// Requests to one shard not sent yet, and the bytes of those in flight.
class send_queue {
public:
  /// `bound`: bytes in flight beyond which further requests wait here (a
  /// single larger request still goes alone when nothing is in flight).
  explicit send_queue(uint64_t bound = 0) noexcept : bound_(bound) {
    // Nothing else to do.
  }

  /// Queues `x` behind requests of higher priority and earlier ones of equal
  /// priority, raising queued requests of lower priority on its slices to
  /// its priority (priority inheritance), then sends what fits.
  void enqueue(outgoing x);

  /// A request of cost `c` was answered (or failed); sends what now fits.
  void release(const request_cost& c);

  /// Sends the requests at the head of the queue while they fit under the
  /// bound (one always may go if none is in flight, however large). Sync
  /// pulls have a bound of their own, so that a burst of pulls never makes a
  /// server serialize all their replies at once: one that must wait holds
  /// later sync pulls back, but no other request; a request on one of its
  /// slices sends it first (over the bound), so requests on a slice keep
  /// their order. Re-entrant calls (from a `send` that fails at once) return
  /// at once.
  void pump();

  /// True if a request of `bytes` would be sent at once, with nothing queued
  /// before it (sync push-pulls in flight count here).
  bool fits(uint64_t bytes) const noexcept;

  /// Requests waiting.
  std::size_t size() const noexcept {
    return queue_.size();
  }

  /// Bytes of the requests in flight that hold the bound.
  uint64_t in_flight() const noexcept {
    return in_flight_;
  }

  /// Calls `f(priority, bytes)` for each request waiting, in sending order
  /// (`bytes`: what it would carry there and back).
  template <class F>
  void each_queued(F&& f) const {
    for (auto& [k, e] : queue_)
      f(e.x.priority, e.x.cost.bytes + e.x.cost.soft + e.x.cost.pull_bytes);
  }

private:
  // Key: (-priority, issue order).
  using key = std::pair<int64_t, uint64_t>;
  struct entry {
    outgoing x;
    uint64_t order = 0;
  };
  using map = std::map<key, entry>;

  void send(map::iterator i);

  uint64_t bound_;
  map queue_;
  uint64_t next_order_ = 0;
  uint64_t in_flight_ = 0;
  uint64_t soft_ = 0;
  uint64_t pulls_in_flight_ = 0;
  bool pumping_ = false;
};

} // namespace actorps::core
