// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "caf/actor.hpp"
#include "caf/meta/type_name.hpp"

#include <actorps/core/node_ids.hpp>
#include <actorps/core/status.hpp>
#include <actorps/messages/types.hpp>

/// Control-plane messages of a distributed job: membership and routing.
/// Kept apart from messages/types.hpp so that the data-plane structs (and the
/// client facade that includes them) do not pull in actor handles.
namespace actorps {

/// Version of the layout of actorps's messages on the network. It goes up
/// whenever a message that crosses the network changes (2: batches gained
/// `slice_batch::parts`; 3: nodes join through a gate, `job_info` carries
/// the coordinator's handle, shards learn the admitted nodes). A node joins
/// only a coordinator of its own version: peers of different versions would
/// misread each other's messages. 4: the job's data transport, and the
/// servers' UCX addresses in the routing table. 5: the data salt. 6: the
/// job's status, shards' counters per worker, bounded staleness. 7: batch
/// frames on the UCX plane carry raw values and ids, not CAF's format; the
/// join's expectation names a transport too (join_mode::expect). 8: saved
/// slices carry each table row's step (slice_record::row_steps). 9: saves
/// and loads move in pieces (save_cursor, save_piece, load_piece; a
/// slice_record may be a piece of a slice; job_info::message_cap). 10: a
/// server may be replaced (job_info::recovery_ms, routing_table::version).
/// 11: replicas (job_info::replicas; backups register with replica_atom).
/// 12: a primary's forwards over the UCX plane (replica_atom with the
/// backup's data address; replicate frames; servers prove an identity).
/// 13: rebuilt replicas (replica_state; job_info::rebuild).
/// 14: the job's status names where each shard's copies are (replicas).
/// 15: a restored shard of a dist_sync or dist_ssp job takes the workers'
///     clocks (clocks_atom, with a fresh flag), a new worker process asks
///     a shard for its rank's (clocks_atom, rank; job_info::rejoined).
/// 16: chains of copies (replicas 3): a server registers a set of backups
///     per copy; shard_copies names every backup.
/// 17: shard_stats::held_pushes and server_status::held_pushes (a
///     dist_sync worker's pushes held ahead).
constexpr uint32_t wire_version = 17;

/// Most bytes of records one save or load message carries (one record
/// more when a single one is larger: a dense slice is never cut below a
/// piece of this size).
constexpr uint64_t save_piece_bytes = uint64_t{16} << 20;

/// Most records one save or load message carries (with their key names,
/// each at most 64 KiB: far below the job's message bound).
constexpr std::size_t max_piece_records = 1024;

/// What carries tensor bytes between worker and server processes.
namespace transport {
/// CAF's own connections (BASP).
constexpr uint8_t caf = 0;
/// The UCX data plane (runtime/ucx); control stays on CAF.
constexpr uint8_t ucx = 1;
} // namespace transport

/// What a joining node expects of the job: a mode (the low 4 bits of the
/// join's expectation byte) and a transport (the high 4 bits).
namespace join_mode {
constexpr uint8_t any = 0;
constexpr uint8_t sync = 1;
constexpr uint8_t async = 2;
/// Bounded staleness (dist_ssp).
constexpr uint8_t ssp = 3;

/// The expectation byte of a node that expects `mode` (one of the above)
/// and, unless `transport` is `any_transport`, data over `transport`.
constexpr uint8_t any_transport = 0xFF;
constexpr uint8_t expect(uint8_t mode, uint8_t transport) {
  auto wish = transport == any_transport ? 0 : transport + 1;
  return static_cast<uint8_t>((mode & 0x0F) | (wish << 4));
}

/// The mode an expectation byte names.
constexpr uint8_t mode_of(uint8_t expectation) {
  return expectation & 0x0F;
}

/// The transport an expectation byte names, or `any_transport`.
constexpr uint8_t transport_of(uint8_t expectation) {
  auto wish = expectation >> 4;
  return wish == 0 ? any_transport : static_cast<uint8_t>(wish - 1);
}
} // namespace join_mode

/// A join that names no rank: the coordinator gives the next one (or, in a
/// full job, the lowest dead worker rank).
constexpr uint32_t any_rank = 0xFFFFFFFF;

/// What the coordinator tells a node that joined the job.
struct job_info {
  uint32_t node_id = 0;
  uint32_t rank = 0;
  uint32_t num_workers = 0;
  uint32_t num_servers = 0;
  bool sync = false;
  /// Bounded staleness of the job (>= 0, `sync` off: dist_ssp); -1 none.
  int32_t staleness = -1;
  uint64_t bigarray_bound = 0;
  /// How often the node must send a heartbeat to the coordinator.
  uint32_t heartbeat_ms = 0;
  /// The job's data transport (`transport::caf` or `transport::ucx`).
  uint8_t transport = 0;
  /// UCX transport: random bytes of this job, mixed with the token into
  /// the data plane's secret (see ucx::data_secret). Only admitted nodes
  /// get them: a job over TLS without a token still has a secret plane.
  std::string data_salt;
  /// The coordinator itself (untyped; cast back). A node reaches only the
  /// job's gate before it joins and gets this handle in the join's reply.
  caf::actor coordinator;
  /// The largest message the job's processes accept from each other
  /// (core::message_cap); 0: not said.
  uint64_t message_cap = 0;
  /// UCX transport, a server's: the job's rank key, from which each
  /// worker's secret derives (core::worker_secret); a worker's: its own
  /// rank's secret only. A worker's plane connections prove its secret, so
  /// a server takes a frame in worker r's name only from worker r.
  std::string rank_key;
  std::string rank_secret;
  /// The coordinator listens on a loopback address: every node of the job
  /// is on its host (UCX planes then listen on loopback only).
  bool loopback = false;
  /// How long the workers' calls to a dead server's shards wait for a
  /// replacement server (restored from the newest checkpoint) before they
  /// fail; 0: they fail at once.
  uint32_t recovery_ms = 0;
  /// Copies of each slice on distinct servers (1: none; 2: a primary and
  /// a backup on the next server, see actors/shard/shard.hpp, "Replicas").
  /// Workers then keep the sequence numbers of what they send again to a
  /// promoted backup.
  uint32_t replicas = 1;
  /// A server that joined a replicas job after a server died, whose shards
  /// were promoted elsewhere: all its shards start as backups, of the
  /// shards the dead server's rank had and of those it backed up, and
  /// receive their primaries' whole state (a rebuilt replica).
  bool rebuild = false;
  /// A worker that took a dead worker's rank (a new process): in a job
  /// that replaces servers, it asks the shards where its pushes stand.
  bool rejoined = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_info& x) {
  return f(caf::meta::type_name("job_info"), x.node_id, x.rank, x.num_workers,
           x.num_servers, x.sync, x.staleness, x.bigarray_bound, x.heartbeat_ms,
           x.transport, x.data_salt, x.coordinator, x.message_cap, x.rank_key,
           x.rank_secret, x.loopback, x.recovery_ms, x.replicas, x.rebuild,
           x.rejoined);
}

/// Every shard of the job in global order, plus one priority relay per shard
/// (see actors/shard/shard.hpp). Handles travel untyped and are cast back.
struct routing_table {
  std::vector<caf::actor> shards;
  std::vector<caf::actor> relays;
  /// "host:port" of each server, in server rank order. Workers connect to
  /// each directly: without that, CAF routes their traffic through the
  /// coordinator's node, and a server's death never reaches them.
  std::vector<std::string> servers;
  /// With the UCX transport, for each shard the UCX address (bytes) of the
  /// server hosting it; empty otherwise.
  std::vector<std::string> data_addresses;
  /// Counts the replacements of servers: a table of a higher version routes
  /// a replaced server's shards to its replacement.
  uint64_t version = 0;
  /// Per shard: 1 if it is a replacement restored from a checkpoint, which
  /// numbers every worker's operations from 0; 0 otherwise (an original, or
  /// a promoted backup, which saw every operation's number). Not bytes:
  /// CAF 0.17 sizes a byte sequence by its declared length before reading
  /// it (found by fuzzing: 1 GB for a 25-byte message).
  std::vector<uint32_t> restarted;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, routing_table& x) {
  return f(caf::meta::type_name("routing_table"), x.shards, x.relays, x.servers,
           x.data_addresses, x.version, x.restarted);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_status& x) {
  return f(caf::meta::type_name("node_status"), x.node_id, x.role, x.rank,
           x.address, x.last_seen_ms, x.dead, x.left);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, server_status& x) {
  return f(caf::meta::type_name("server_status"), x.rank, x.answered, x.shards,
           x.slices, x.floats_stored, x.pushes, x.pulls, x.updates,
           x.waiting_pulls, x.held_pushes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_copies& x) {
  return f(caf::meta::type_name("shard_copies"), x.shard, x.primary, x.backup,
           x.backups, x.ready);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_status& x) {
  return f(caf::meta::type_name("job_status"), x.sync, x.staleness, x.transport,
           x.num_workers, x.num_servers, x.workers_joined, x.servers_joined,
           x.keys, x.nodes, x.barrier_open, x.barrier_waits_for,
           x.barriers_done, x.servers, x.workers, x.replicas, x.copies);
}

} // namespace actorps
