// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Replicas over the UCX plane (actors/shard/shard.hpp, "Replicas"): a
// primary's forwards travel to its backup's server as replicate and
// replicate_change frames (frames.hpp) instead of through CAF's network
// layer, and the backup's answers come back as reply and failure frames.
// Both ends are servers: the frames go only between planes that proved the
// servers' identity (plane.hpp, server_identity). Internal to runtime/.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "caf/actor.hpp"
#include "caf/fwd.hpp"

#include "actors/shard/shard.hpp"
#include "runtime/ucx/frames.hpp"
#include "runtime/ucx/ingress.hpp"
#include "runtime/ucx/plane.hpp"

namespace actorps::ucx {

/// A server's replica_link over its plane. Thread-safe: the primaries send
/// on their threads, answers arrive on the plane's.
class plane_link : public replica_link,
                   public std::enable_shared_from_this<plane_link> {
public:
  explicit plane_link(caf::actor_system& sys);

  /// The plane, once it runs (until then `open` finds no way).
  void attach(std::weak_ptr<plane> p);

  uint64_t open(const std::string& address) override;

  uint64_t source(const std::string& address) override;

  void send(uint64_t to, uint32_t index, uint64_t number, replica_batch&& ops,
            const caf::actor& primary) override;

  void send(uint64_t to, uint32_t index, uint64_t number,
            const caf::message& change, const caf::actor& primary) override;

  void forget(uint64_t to, uint32_t index) override;

  /// A reply or failure frame `x` (fixed header `h`) from a server: the
  /// answer to a forward, for the primary that sent it (a frame from
  /// another peer than the forward went to is dropped).
  void on_reply(frame& x, const frame_header& h);

private:
  struct waiting {
    uint64_t to = 0;
    uint32_t index = 0;
    uint64_t number = 0;
    caf::actor primary;
  };

  std::shared_ptr<plane> current();

  void post(uint64_t to, uint32_t index, uint64_t number, frame_kind kind,
            payload body, const caf::actor& primary);

  caf::actor_system& sys_;
  std::mutex mtx_;
  std::weak_ptr<plane> plane_;
  uint64_t next_ = 1;
  // Forwards not answered yet, by request id.
  std::map<uint64_t, waiting> waiting_;
};

/// The backup's half: sends what the replicate or replicate_change frame
/// `x` (fixed header `h`) carries to backup shard `shard`, answered through
/// `reply`; false if the frame does not decode. The caller checked that a
/// server sent it.
bool deliver_forward(caf::actor_system& sys, frame& x, const frame_header& h,
                     const shard_actor& shard, plane_reply reply);

} // namespace actorps::ucx
