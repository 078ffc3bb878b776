// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "caf/actor.hpp"
#include "caf/actor_cast.hpp"
#include "caf/actor_system.hpp"
#include "caf/expected.hpp"

#include "actors/worker/worker.hpp"
#include "core/update_rule.hpp"
#include "runtime/kvstore.hpp"
#include "runtime/system.hpp"

/// Deployment wiring behind the client facade (internal: not installed):
/// the actors a store runs in this process, built as a local node set
/// (coordinator, shards and workers in one actor system) or as one worker
/// of a distributed job (joined through the coordinator).
namespace actorps {

/// Everything a store runs in this process: shared by all its handles.
namespace ucx {
class plane;
} // namespace ucx

struct store_runtime {
  system_config cfg;
  caf::actor_system sys;
  store_options opts;
  uint32_t num_workers = 0;
  std::map<uint32_t, worker_actor> workers;
  bool sync = false;
  /// Bounded staleness (>= 0; see shard_config::staleness), else -1.
  int32_t staleness = -1;
  /// Distributed stores: the job's transport (messages/control.hpp).
  uint8_t transport = transport::caf;
  /// How the workers batch slices; the facade lays values out by it.
  core::batching batching{};
  /// Local stores: the shards (for the metrics).
  std::vector<caf::actor> local_shards;
  /// Local stores: the hooks its own update rule is set through.
  std::shared_ptr<core::local_hooks> hooks;
  /// Handles not closed yet: the last one to close ends the update rule
  /// (which may hold a handle itself, as a Python closure over the store).
  std::atomic<uint32_t> open_handles{0};
  // Long-lived actors of this process, sent an exit in this order.
  std::vector<caf::actor> owned;
  // Distributed stores: the node agent the coordinator watches (also in
  // `owned`). Closing the store stops it, so that the coordinator sees this
  // node go at once and need not wait out its grace period for it.
  caf::actor agent;
  // The UCX data plane (transport ucx); closed before the actor system
  // goes (members end in reverse order).
  std::shared_ptr<ucx::plane> data_plane;
  // The worker's data channel over it: the facade writes large pushes into
  // room it lends (data_channel::lease).
  std::shared_ptr<data_channel> channel;
  // A thread that waits for its replies receives them itself over the
  // channel (data_channel::drive; ACTORPS_UCX_CALLER_PROGRESS).
  bool caller_progress = false;
  // Set once a compression other than none may apply to the workers'
  // pushes (by the options or through any handle): they then quantize
  // pushes into buffers of their own, so room lent for them in place would
  // only cost a copy.
  std::atomic<bool> compressed{false};
  // The /metrics endpoint (store_options::metrics); stopped first.
  std::unique_ptr<metrics_server> metrics;

  store_runtime(const system_options& so, const store_options& o)
    : cfg(so),
      sys(cfg),
      opts(o),
      compressed(o.compression.kind != codec::none) {
  }

  /// Sends every owned actor an exit, in order.
  ~store_runtime();

  template <class Handle>
  Handle own(Handle h) {
    owned.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }
};

/// The worker configuration that `o` asks for, for rank `rank` (without
/// coordinator and shards, which the deployment knows); `pulls_wait`:
/// sync or bounded staleness, where pulls may wait for other workers.
worker_config worker_config_of(const store_options& o, uint32_t rank,
                               bool pulls_wait);

/// Spawns a local store: coordinator, `o.num_shards` shards and
/// `o.num_workers` workers in one actor system; BSP with `sync`, bounded
/// staleness with `staleness` >= 0, else async.
std::shared_ptr<store_runtime> make_local(const store_options& o, bool sync,
                                          int32_t staleness = -1);

/// Joins the distributed job at `o.coordinator` as one worker, expecting
/// `mode` (a `join_mode::expect` byte: "any" takes the job's); fails with
/// `dead_node` when the coordinator or a server cannot be reached, or with the
/// coordinator's refusal. The runtime's `sync` is the job's mode.
caf::expected<std::shared_ptr<store_runtime>> make_dist(const store_options& o,
                                                        uint8_t mode);

/// Starts the /metrics endpoint that `rt->opts.metrics` asks for (nothing
/// if off): it shows `rt`'s workers and `shards`. Error: `bad_config` (it
/// cannot listen).
caf::error start_metrics(store_runtime& rt, std::vector<caf::actor> shards);

} // namespace actorps
