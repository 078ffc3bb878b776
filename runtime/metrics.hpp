// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <actorps/core/status.hpp>

/// Prometheus metrics of one process (text format at /metrics, served by
/// Debian's prometheus-cpp pull exposer). Free of CAF: what a process
/// shows comes from a `metrics_gatherer` that asks its actors
/// (runtime/observe.hpp) at each scrape.
namespace actorps {

/// Where a process serves its metrics.
struct metrics_options {
  /// Address to listen on (loopback unless set otherwise).
  std::string host = "127.0.0.1";
  /// Port; 0 picks a free one; -1: no metrics.
  int port = -1;
  /// The job's token: if set, a scrape must log in (HTTP basic auth, any
  /// user name) with `metrics_password(token)`, never the token itself.
  std::string token;

  bool enabled() const noexcept {
    return port >= 0;
  }
};

/// What one scrape shows; each part is left out when absent.
struct process_counters {
  /// This process's shards, summed (a server, a local store).
  std::optional<server_status> shards;
  /// What every worker moved through this process's shards.
  worker_traffic shard_traffic;
  /// This process's worker actors.
  std::vector<worker_stats> workers;
  /// The job, as the coordinator in this process sees it.
  std::optional<job_status> job;
  /// This process's UCX data plane (runtime/ucx/plane.hpp), if it has one.
  struct plane_counters {
    /// Large messages sent through shared-memory segments to peers of
    /// this host, and of those, pushes that left from where the client
    /// wrote them (plane::in_place_sends).
    uint64_t segment_sends = 0;
    uint64_t in_place_sends = 0;
    /// Large messages announced to this plane and not received yet.
    uint64_t waiting = 0;
    /// Replies a waiting client thread received itself (plane::drive).
    uint64_t caller_receives = 0;
    /// Requests whose shard the plane's thread ran itself (a server's,
    /// plane::thread_runs).
    uint64_t thread_runs = 0;
  };
  std::optional<plane_counters> plane;
};

/// Gathers the counters for one scrape (called on the exposer's threads).
using metrics_gatherer = std::function<process_counters()>;

/// The password of a job's metrics endpoints: derived from the token, so
/// that a scrape over plain HTTP never shows the token, and what it shows
/// opens nothing but the metrics. Empty for an empty token.
std::string metrics_password(std::string_view token);

/// `c` (and this process's resident memory) in Prometheus's text format.
std::string render_metrics(const process_counters& c);

/// An HTTP endpoint serving `/metrics` until destroyed.
class metrics_server {
public:
  /// Listens at `opts`; null with `why` set if it cannot.
  static std::unique_ptr<metrics_server>
  start(const metrics_options& opts, metrics_gatherer gather, std::string& why);

  ~metrics_server();

  /// The port it listens on.
  uint16_t port() const noexcept {
    return port_;
  }

private:
  struct impl;
  explicit metrics_server(std::unique_ptr<impl> x, uint16_t port);
  std::unique_ptr<impl> impl_;
  uint16_t port_ = 0;
};

} // namespace actorps
