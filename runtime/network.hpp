// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "caf/actor.hpp"
#include "caf/error.hpp"
#include "caf/expected.hpp"
#include "caf/fwd.hpp"

#include <actorps/core/status.hpp>
#include <actorps/runtime/kvstore.hpp>
#include <actorps/runtime/metrics.hpp>
#include <actorps/runtime/system_options.hpp>

/// The coordinator and server processes of a distributed job. Each call runs
/// a whole process role and returns when the job is over; the apps wrap them
/// with a command line.
namespace actorps {

/// A "host:port" pair.
struct endpoint {
  std::string host;
  uint16_t port = 0;
};

/// Parses "host:port" (port 1..65535); `bad_config` naming the text if not.
caf::expected<endpoint> parse_endpoint(const std::string& text);

/// Connects to the coordinator at `where`, retrying for `retry_for` (nodes
/// may start before the coordinator listens), and returns the coordinator's
/// gate (a `gate_actor`: the one handle a node gets before it joined).
/// Error: `dead_node` naming the address and CAF's last error.
caf::expected<caf::actor>
connect_coordinator(caf::actor_system& sys, const endpoint& where,
                    std::chrono::milliseconds retry_for);

/// Options of the coordinator process.
struct coordinator_options {
  /// Address to listen on; "" listens on every interface.
  std::string host = "127.0.0.1";
  /// Port to listen on; 0 picks a free one.
  uint16_t port = 0;
  /// Token every node must present.
  std::string token;
  /// A token of the servers' own (empty: none): a server must prove it to
  /// join, and the job token alone does not let a node join as a server.
  std::string server_token;
  bool sync = true;
  /// With `sync` off and >= 0: bounded staleness (dist_ssp, see
  /// shard_config::staleness).
  int32_t staleness = -1;
  uint32_t num_workers = 1;
  uint32_t num_servers = 1;
  uint64_t bigarray_bound = uint64_t{1} << 20;
  /// Largest slice of a sliced key, in floats (at most 2^25).
  uint64_t slice_floats = uint64_t{1} << 20;
  /// Timeout of the coordinator's requests to shards.
  std::chrono::milliseconds timeout{60000};
  /// What carries tensor bytes between workers and servers:
  /// `transport::caf` (CAF's connections) or `transport::ucx` (the UCX
  /// data plane; needs a build with UCX on every node).
  uint8_t transport = 0;
  system_options system;
  /// Gets a line for each node that goes down (called on the caller's
  /// thread, inside run_coordinator).
  std::function<void(const std::string&)> on_event;
  /// While nodes are missing, gets a line such as "waiting for 1 of 2
  /// workers (joined: 0) and 1 of 1 servers (joined: none)" whenever
  /// `status_interval` passed without a join, then "all 2 workers and 1
  /// servers joined" once (caller's thread, inside run_coordinator).
  std::function<void(const std::string&)> on_status;
  std::chrono::milliseconds status_interval{5000};
  /// Prometheus metrics of the job (runtime/metrics.hpp); `token` is
  /// taken from the job's.
  metrics_options metrics;
  /// Gets the metrics port once it listens (caller's thread).
  std::function<void(uint16_t)> on_metrics;
  /// Periodic checkpoints into this folder (none if empty): at the first
  /// barrier after `checkpoint_every` passed since the last one (0: at
  /// every barrier; the first one at the first barrier after the interval),
  /// with every worker waiting there, the coordinator
  /// gathers every shard's state and writes checkpoint-N.actorps (N: the
  /// barrier's number, after the highest already in the folder; the
  /// format of save_optimizer_states, which
  /// load_optimizer_states and --resume read), atomically, keeping the
  /// newest `checkpoint_keep`.
  std::string checkpoint_dir;
  std::chrono::milliseconds checkpoint_every{60000};
  uint32_t checkpoint_keep = 2;
  /// Replacement servers (needs `checkpoint_dir`): for this long after a
  /// server went down, a new server may take its place, restored from the
  /// newest checkpoint, and the workers' calls to its shards wait for it
  /// (see coordinator.hpp, "Replacement servers"); 0: never.
  std::chrono::milliseconds recovery_timeout{0};
  /// Copies of each slice: 1, or 2 (a backup of each server's shards on
  /// the next server, promoted when that server dies; needs 2 servers or
  /// more; see coordinator.hpp, "Replicas").
  uint32_t replicas = 1;
  /// Gets a line when a dead server's replacement is awaited or done
  /// (`ok`), or given up (caller's thread).
  std::function<void(const std::string& line, bool ok)> on_recovery;
  /// Gets a line for each checkpoint written (`ok`) or failed (caller's
  /// thread).
  std::function<void(const std::string& line, bool ok)> on_checkpoint;
};

/// For a process that exits when its job ends (the apps): its UCX data
/// plane then closes its connections but leaves UCX's own teardown to the
/// process's exit. UCX 1.13 can abort in that teardown when a peer vanished
/// while a connection to it was being set up (openucx/ucx#8175, fixed after
/// 1.13): a server whose last worker exited at once would crash at its own
/// end. No effect without UCX.
void leave_ucx_to_exit();

/// True if this build can carry tensors over UCX (built with libucx-dev).
bool built_with_ucx();

/// The transport of a job whose coordinator names none: `transport::ucx`
/// when built with UCX and the job runs without TLS (UCX encrypts nothing;
/// it was faster than CAF in every case of docs/benchmarks.md), else
/// `transport::caf`.
uint8_t default_transport(bool tls);

/// Runs the coordinator: publishes it, calls `on_listening` with the port it
/// listens on, and returns once every worker left or died (then every server
/// has been told to shut down). Errors: `bad_config` (cannot listen),
/// `dead_node` (the job ended, but a worker went down before it finished, or
/// a server before the job was done; the message counts them).
caf::error run_coordinator(const coordinator_options& opts,
                           std::function<void(uint16_t)> on_listening);

/// Default of `server_options::inflight_bytes`: two of the largest messages
/// a worker sends by default (a 4 MB slice or batch).
constexpr std::size_t default_server_inflight_bytes = std::size_t{8} << 20;

/// Options of a server process.
struct server_options {
  endpoint coordinator;
  /// How long to keep trying to reach the coordinator.
  std::chrono::milliseconds connect_timeout{5000};
  /// Address on which workers reach this server directly (it listens there
  /// unless `bind` is set).
  std::string host = "127.0.0.1";
  /// Address to listen on, if not `host` ("0.0.0.0": every interface).
  std::string bind;
  /// Port for the workers' direct connections; 0 picks a free one.
  uint16_t port = 0;
  std::string token;
  /// The servers' own token, if the coordinator asks for one
  /// (coordinator_options::server_token); it joins with it.
  std::string server_token;
  /// Shard actors this server hosts.
  uint32_t shards = 1;
  /// Each shard (and each backup) on a thread of its own instead of on
  /// CAF's scheduler: with several workers a server then keeps less freed
  /// memory in glibc's per-thread arenas, and rounds of large values and
  /// of many keys ran faster (docs/benchmarks.md). False: on CAF's
  /// scheduler, where over ucx under work sharing (the default with the
  /// network layer) the data plane's thread runs a shard for the requests
  /// it receives (those of one shard per pass of receiving; the others
  /// go to scheduler threads): one hand-off between threads fewer, rounds
  /// of 4 KB to 256 KB 1.1-1.4x as fast.
  bool shard_threads = true;
  /// UCX transport: most bytes of workers' large messages (pushes, batches)
  /// this server holds received and not yet handled by its shards, over
  /// all workers; further ones wait in their workers until some are
  /// handled (a message larger than this alone, once nothing is held).
  /// Bounds the server's memory with many workers, where each worker's
  /// own bound (store_options::max_bytes_in_flight) does not. 0: no bound.
  std::size_t inflight_bytes = default_server_inflight_bytes;
  /// Timeout of the join and registration requests.
  std::chrono::milliseconds timeout{30000};
  system_options system;
  /// Gets a line for each other node that goes down.
  std::function<void(const std::string&)> on_event;
  /// The shards' handler of commands with a head other than 0 (see
  /// `command_handler` in runtime/kvstore.hpp).
  command_handler on_command;
  /// Prometheus metrics of this server's shards (runtime/metrics.hpp);
  /// `token` is taken from the job's.
  metrics_options metrics;
  /// Gets the metrics port once it listens (caller's thread).
  std::function<void(uint16_t)> on_metrics;

  /// Where the server listens: `bind`, else `host`.
  const std::string& listen_address() const noexcept {
    return bind.empty() ? host : bind;
  }
};

/// Options of a status query (actorps-status).
struct status_options {
  endpoint coordinator;
  std::string token;
  /// How long to try reaching the coordinator, and to wait for its answer.
  std::chrono::milliseconds timeout{10000};
  system_options system;
};

/// Joins the job at `opts.coordinator` as an observer (it takes no rank
/// and holds nothing up) and returns the coordinator's `job_status`.
/// Errors: `dead_node` (unreachable), `unauthorized` (wrong token),
/// `bad_config` (another wire version, a local coordinator), `timeout`.
caf::expected<job_status> query_status(const status_options& opts);

/// Describes a node for humans: "worker 2 (node 13)".
std::string describe_node(uint32_t node_id, uint8_t role);

/// Runs a server: joins the job, hosts its shards, and returns when the
/// coordinator ends the job. `on_joined` gets the server's rank.
/// Errors: `dead_node` (coordinator unreachable or gone), `unauthorized`,
/// `bad_config`, `timeout`.
caf::error run_server(const server_options& opts,
                      std::function<void(uint32_t rank)> on_joined);

} // namespace actorps
