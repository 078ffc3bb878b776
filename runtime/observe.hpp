// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Asking this process's actors for their counters, for a scrape of
// /metrics (runtime/metrics.hpp). Internal: used by the runners and the
// facade's deployments.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "caf/actor.hpp"
#include "caf/fwd.hpp"

#include "runtime/metrics.hpp"

namespace actorps {

/// How long a scrape waits for each actor's counters.
constexpr auto observe_wait = std::chrono::seconds{2};

/// Adds the counters of `shards` (shard actors of this process) to `c`:
/// `c.shards` counts those that answered within `observe_wait`.
void gather_shards(caf::actor_system& sys,
                   const std::vector<caf::actor>& shards, process_counters& c);

/// Appends the counters of `workers` (worker actors) that answered.
void gather_workers(caf::actor_system& sys,
                    const std::vector<caf::actor>& workers,
                    process_counters& c);

/// Starts the /metrics endpoint of a process whose counters are those of
/// its `workers` and `shards` (either may be empty), and whatever `more`
/// adds (if set: the data plane's), guarded by the job's `token`; null,
/// with the reason in `why`, if it cannot listen.
std::unique_ptr<metrics_server>
serve_metrics(caf::actor_system& sys, metrics_options opts,
              const std::string& token, std::vector<caf::actor> workers,
              std::vector<caf::actor> shards, std::string& why,
              std::function<void(process_counters&)> more = {});

/// Sets `c.job` from `coordinator`'s status, if it answered.
void gather_job(caf::actor_system& sys, const caf::actor& coordinator,
                process_counters& c);

} // namespace actorps
