// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

/// What a running job reports about itself (free of CAF): the counters a
/// shard keeps per worker, a worker's counters and latency histogram, and
/// the coordinator's view of the whole job that `actorps-status` prints.
/// messages/control.hpp and messages/types.hpp make them messages.
namespace actorps {

/// What one worker rank moved through one shard (or, summed, the job).
struct worker_traffic {
  uint64_t pushes = 0;
  uint64_t pulls = 0;
  /// Floats pushed to and pulled from the shards (4 bytes each).
  uint64_t floats_pushed = 0;
  uint64_t floats_pulled = 0;

  worker_traffic& operator+=(const worker_traffic& x) noexcept {
    pushes += x.pushes;
    pulls += x.pulls;
    floats_pushed += x.floats_pushed;
    floats_pulled += x.floats_pulled;
    return *this;
  }
};

/// Upper bounds (seconds) of the buckets of the request latency histogram;
/// a last bucket (+Inf) follows.
inline constexpr std::array<double, 14> latency_bounds{
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
  0.025,  0.05,    0.1,    0.25,  0.5,    1.0,   5.0};

/// Counters of one kind of data operation of a worker (push, pull or
/// push_pull): counted once it completed or failed.
struct op_stats {
  uint64_t count = 0;
  uint64_t errors = 0;
  /// Floats sent and received by the completed operations.
  uint64_t floats_out = 0;
  uint64_t floats_in = 0;
  /// Completed operations per latency bucket (not cumulative), one more
  /// than latency_bounds.
  std::vector<uint64_t> buckets
    = std::vector<uint64_t>(latency_bounds.size() + 1, 0);
  double latency_sum_s = 0;

  /// Records one operation that took `seconds`.
  void record(double seconds) noexcept;
};

/// Requests of one priority that wait in a worker's send queues.
struct queued_requests {
  int32_t priority = 0;
  uint64_t requests = 0;
  uint64_t bytes = 0;
};

/// Counters of one worker actor.
struct worker_stats {
  uint32_t rank = 0;
  /// By op_kind: push, pull, push_pull.
  std::vector<op_stats> ops = std::vector<op_stats>(3);
  /// Bytes of requests sent to shards and not answered yet.
  uint64_t bytes_in_flight = 0;
  /// Requests waiting for room under the bound, by priority (highest
  /// first).
  std::vector<queued_requests> queued;
};

/// One node of a distributed job, as the coordinator sees it.
struct node_status {
  uint32_t node_id = 0;
  /// A `role` value (core/node_ids.hpp).
  uint8_t role = 0;
  uint32_t rank = 0;
  /// "host:port" the node connected from, or the one it serves on.
  std::string address;
  /// Milliseconds since its last heartbeat (or join).
  uint64_t last_seen_ms = 0;
  bool dead = false;
  bool left = false;
};

/// One server's shards, summed.
struct server_status {
  uint32_t rank = 0;
  /// False if a shard did not answer (dead, or too slow): the counters
  /// then hold only the shards that did.
  bool answered = false;
  uint64_t shards = 0;
  uint64_t slices = 0;
  uint64_t floats_stored = 0;
  uint64_t pushes = 0;
  uint64_t pulls = 0;
  /// Optimizer updates applied (one per sync round and slice, or per push).
  uint64_t updates = 0;
  uint64_t waiting_pulls = 0;
  /// Workers' pushes held until the others complete rounds (dist_sync; per
  /// worker and slice).
  uint64_t held_pushes = 0;
};

/// Replicas (a job run with `--replicas 2` or 3): where one shard's copies
/// live.
struct shard_copies {
  /// `backup` when the shard has none.
  static constexpr uint32_t no_backup = 0xFFFFFFFF;

  uint32_t shard = 0;
  /// The server rank holding the shard's primary (its own server's, until
  /// a backup took over).
  uint32_t primary = 0;
  /// The server rank holding its first backup (the one that takes over),
  /// or no_backup.
  uint32_t backup = no_backup;
  /// Every backup's server, in the chain's order (the first is `backup`).
  std::vector<uint32_t> backups;
  /// Every backup holds the whole state (a rebuilt copy is still being
  /// sent until then, and could not take over yet).
  bool ready = false;
};

/// The coordinator's view of a job (`status_atom`).
struct job_status {
  bool sync = false;
  /// Bounded staleness (dist_ssp) when >= 0.
  int32_t staleness = -1;
  /// `transport::caf` or `transport::ucx`.
  uint8_t transport = 0;
  uint32_t num_workers = 0;
  uint32_t num_servers = 0;
  uint32_t workers_joined = 0;
  uint32_t servers_joined = 0;
  /// Keys registered.
  uint64_t keys = 0;
  std::vector<node_status> nodes;
  /// Whether a barrier is open, and the live ranks it still waits for.
  bool barrier_open = false;
  std::vector<uint32_t> barrier_waits_for;
  uint64_t barriers_done = 0;
  std::vector<server_status> servers;
  /// Per worker rank, summed over every shard that answered.
  std::vector<worker_traffic> workers;
  /// Copies of every shard (1, or 2 or 3 with backups); with more than 1,
  /// where each shard's copies are, in shard order (empty until the
  /// servers joined and the coordinator paired them).
  uint32_t replicas = 1;
  std::vector<shard_copies> copies;

  /// Nodes that died (not those that left).
  uint32_t dead_nodes() const noexcept;

  /// Replicas: shards whose backup is missing or still being sent (a
  /// second death of their primary's server would lose them).
  uint32_t shards_without_copy() const noexcept;
};

/// `s` as a table for people (one section each: job, nodes, barrier,
/// servers, workers).
std::string format_status(const job_status& s);

/// `s` as one JSON object (for scripts).
std::string status_json(const job_status& s);

} // namespace actorps
