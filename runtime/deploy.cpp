// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/deploy.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "caf/exit_reason.hpp"
#include "caf/io/middleman.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/send.hpp"

#include "actors/coordinator/coordinator.hpp"
#include "actors/gate.hpp"
#include "actors/node.hpp"
#include "actors/run_here.hpp"
#include "actors/shard/shard.hpp"
#include "core/link_proof.hpp"
#include "messages/errors.hpp"
#include "runtime/blocking.hpp"
#include "runtime/connect.hpp"
#include "runtime/network.hpp"
#include "runtime/observe.hpp"
#ifdef ACTORPS_HAVE_UCX
#  include "runtime/ucx/ingress.hpp"
#  include "runtime/ucx/plane.hpp"
#endif

namespace actorps {

namespace {

system_options system_options_of(const store_options& o) {
  system_options so;
  so.threads = o.threads;
  so.scheduler = o.scheduler;
  so.keep_freed_memory = o.keep_freed_memory;
  so.tls = o.tls;
  so.token = o.token;
  return so;
}

// A direct connection to the server at endpoint `server`, tried up to
// `tries` times; dead_node saying so if none went through.
caf::error reach_server_at(caf::actor_system& sys, const std::string& server,
                           int tries) {
  auto at = parse_endpoint(server);
  if (!at)
    return std::move(at.error());
  auto direct = connect_actor<gate_actor>(sys, at->host, at->port);
  for (int i = 1; !direct && i < tries; ++i)
    direct = connect_actor<gate_actor>(sys, at->host, at->port);
  if (!direct)
    return make_error(errc::dead_node, "cannot reach the server at " + server
                                         + " (" + render(direct.error()) + ")");
  return caf::none;
}

} // namespace

store_runtime::~store_runtime() {
  metrics.reset();
  for (auto& a : owned)
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
#ifdef ACTORPS_HAVE_UCX
  // Its callbacks reach into the actor system: stop them first.
  if (data_plane)
    data_plane->close();
#endif
}

worker_config worker_config_of(const store_options& o, uint32_t rank,
                               bool pulls_wait) {
  worker_config wc;
  wc.rank = rank;
  wc.timeout = o.timeout;
  wc.barrier_timeout = o.barrier_timeout;
  wc.max_bytes_in_flight = o.max_bytes_in_flight;
  wc.sync = pulls_wait;
  wc.compression = o.compression;
  return wc;
}

std::shared_ptr<store_runtime> make_local(const store_options& o, bool sync,
                                          int32_t staleness) {
  auto rt = std::make_shared<store_runtime>(system_options_of(o), o);
  rt->num_workers = o.num_workers;
  rt->sync = sync;
  rt->staleness = sync ? -1 : staleness;
  rt->hooks = std::make_shared<core::local_hooks>();
  std::vector<shard_actor> shards;
  for (uint32_t i = 0; i < o.num_shards; ++i) {
    shard_config sc;
    sc.index = i;
    sc.num_workers = o.num_workers;
    sc.sync = sync;
    sc.staleness = rt->staleness;
    sc.on_command = o.on_command;
    sc.hooks = rt->hooks;
    shards.push_back(spawn_shard(rt->sys, sc));
  }
  coordinator_config cc;
  cc.num_workers = o.num_workers;
  cc.bigarray_bound = o.bigarray_bound;
  cc.slice_floats = o.slice_floats;
  cc.timeout = o.timeout;
  cc.shards = shards;
  cc.hooks = rt->hooks;
  auto coordinator = spawn_coordinator(rt->sys, cc);
  for (uint32_t r = 0; r < o.num_workers; ++r) {
    auto wc = worker_config_of(o, r, sync || rt->staleness >= 0);
    wc.batching = rt->batching;
    wc.coordinator = coordinator;
    wc.shards = shards;
    rt->workers.emplace(r, rt->own(spawn_worker(rt->sys, wc)));
  }
  rt->own(coordinator);
  for (auto& x : shards)
    rt->local_shards.push_back(caf::actor_cast<caf::actor>(rt->own(x)));
  return rt;
}

caf::error start_metrics(store_runtime& rt, std::vector<caf::actor> shards) {
  if (!rt.opts.metrics.enabled())
    return caf::none;
  std::vector<caf::actor> workers;
  for (auto& [rank, w] : rt.workers)
    workers.push_back(caf::actor_cast<caf::actor>(w));
  std::string why;
  std::function<void(process_counters&)> more;
#ifdef ACTORPS_HAVE_UCX
  if (rt.data_plane)
    more = ucx::plane_metrics(rt.data_plane);
#endif
  rt.metrics = serve_metrics(rt.sys, rt.opts.metrics, rt.opts.token,
                             std::move(workers), std::move(shards), why,
                             std::move(more));
  if (!rt.metrics)
    return make_error(errc::bad_config, "create: " + why);
  return caf::none;
}

caf::expected<std::shared_ptr<store_runtime>> make_dist(const store_options& o,
                                                        uint8_t mode) {
  auto where = parse_endpoint(o.coordinator);
  if (!where)
    return std::move(where.error());
  if (auto err = check_tls(o.tls))
    return make_error(errc::bad_config, "create: " + context_of(err));
#ifdef ACTORPS_HAVE_UCX
  if (std::string why; !ucx::plane_settings_ok(why))
    return make_error(errc::bad_config, "create: " + why);
#endif
  auto so = system_options_of(o);
  so.network = true;
  so.heartbeat = o.heartbeat;
  so.connection_timeout = o.connection_timeout;
  auto rt = std::make_shared<store_runtime>(so, o);
  auto any = connect_coordinator(rt->sys, *where, o.connect_timeout);
  if (!any)
    return make_error(any.error() == errc::unauthorized ? errc::unauthorized
                                                        : errc::dead_node,
                      "create: " + context_of(any.error()));
  auto agent = rt->own(
    spawn_node_agent(rt->sys, caf::actor_cast<gate_actor>(*any), caf::actor{}));
  rt->agent = caf::actor_cast<caf::actor>(agent);
  caf::scoped_actor self{rt->sys, true};
  job_info job;
  if (auto err = detail::ask(
        self.ptr(), agent, o.timeout, [&](job_info& x) { job = x; },
        join_atom::value, role::worker, core::join_proof(o.token), mode,
        o.rank ? *o.rank : any_rank))
    return err;
  set_message_cap(job.message_cap);
  auto coord = caf::actor_cast<coordinator_actor>(job.coordinator);
  routing_table table;
  if (auto err = detail::ask(
        self.ptr(), coord, o.timeout,
        [&](routing_table& x) { table = std::move(x); }, routing_atom::value))
    return err;
  // Direct connections to every server (see routing_table::servers). A job
  // that outlives a server (replicas, replacement servers) may have handed
  // out a table naming one that just died: a newer table names where its
  // shards went, within the wait its calls would have.
  auto outlives = job.replicas > 1 || job.recovery_ms > 0;
  auto recovery = std::max(o.timeout,
                           std::chrono::milliseconds{job.recovery_ms});
  for (;;) {
    caf::error why;
    for (auto& server : table.servers)
      if ((why = reach_server_at(rt->sys, server, 1)))
        break;
    if (!why)
      break;
    auto what = "create: " + context_of(why);
    if (code_of(why) != errc::dead_node)
      return why;
    if (!outlives)
      return make_error(errc::dead_node, what);
    routing_table newer;
    if (auto err = detail::ask(
          self.ptr(), coord, recovery,
          [&](routing_table& x) { newer = std::move(x); }, routing_atom::value,
          table.version))
      return make_error(errc::dead_node,
                        what + ", and no newer routing table came ("
                          + render(err) + ")");
    table = std::move(newer);
  }
  auto wc = worker_config_of(o, job.rank, job.sync || job.staleness >= 0);
  wc.batching = rt->batching;
  wc.message_cap = job.message_cap;
  wc.coordinator = coord;
  wc.recovery = std::chrono::milliseconds{job.recovery_ms};
  wc.routing_version = table.version;
  wc.replicas = job.replicas > 1;
  // A replacement server: this process connects to it directly too.
  // (Seen once in ~20 chaos runs: one worker's first connection to a
  // server that had just taken over timed out while the others' went
  // through; more tries are cheap next to failing the worker's calls.)
  wc.reach_server = [sys = &rt->sys](const std::string& server) {
    return reach_server_at(*sys, server, 3);
  };
  for (auto& x : table.shards)
    wc.shards.push_back(caf::actor_cast<shard_actor>(x));
  for (auto& x : table.relays)
    wc.relays.push_back(caf::actor_cast<shard_actor>(x));
  wc.restarted = table.restarted;
  // A new process in a dead worker's rank of a dist_sync or dist_ssp job
  // that replaces servers from checkpoints: where each shard has this
  // rank's pushes, for a later replacement of that shard to line up with.
  // (Replicas jobs too: where both copies of a shard died, it is restored.)
  if (job.rejoined && job.recovery_ms > 0 && (job.sync || job.staleness >= 0)) {
    wc.clock_origins.resize(wc.shards.size());
    wc.clocks_unknown.assign(wc.shards.size(), false);
    for (size_t i = 0; i < wc.shards.size(); ++i) {
      auto& origin = wc.clock_origins[i];
      auto on_value = [&](std::vector<uint64_t>& ids,
                          std::vector<uint64_t>& pushes) {
        for (size_t k = 0; k < ids.size() && k < pushes.size(); ++k)
          origin[ids[k]] = pushes[k];
      };
      // (Dead, or restored and waiting: its replacement takes this process
      // where the others are.)
      if (detail::ask(self.ptr(), wc.shards[i], o.timeout, on_value,
                      clocks_atom::value, job.rank))
        wc.clocks_unknown[i] = true;
    }
  }
  rt->num_workers = job.num_workers;
  rt->sync = job.sync;
  rt->staleness = job.sync ? -1 : job.staleness;
  rt->transport = job.transport;
  rt->opts.bigarray_bound = job.bigarray_bound;
  // UCX transport: the data requests travel over a plane connected to
  // every server's address (one peer per server).
#ifdef ACTORPS_HAVE_UCX
  std::shared_ptr<ucx::frame_queue> replies;
#endif
  if (job.transport == transport::ucx) {
#ifdef ACTORPS_HAVE_UCX
    if (table.data_addresses.size() != table.shards.size())
      return make_error(errc::bad_config,
                        "create: the routing table names "
                          + std::to_string(table.data_addresses.size())
                          + " UCX addresses for "
                          + std::to_string(table.shards.size()) + " shards");
    replies = std::make_shared<ucx::frame_queue>();
    std::string why;
    rt->data_plane = ucx::start_plane(o.token, job, replies, why);
    if (!rt->data_plane)
      return make_error(errc::bad_config, "create: " + why);
    std::map<uint32_t, ucx::peer_id> peers;
    for (uint32_t i = 0; i < table.data_addresses.size(); ++i) {
      auto& a = table.data_addresses[i];
      peers.emplace(
        i, rt->data_plane->connect(std::vector<char>(a.begin(), a.end())));
    }
    wc.channel = ucx::make_worker_channel(rt->sys, rt->data_plane, replies,
                                          std::move(peers));
    rt->channel = wc.channel;
    // (Checked before the join: plane_settings_ok.) Under another scheduler
    // than work sharing, replies run the worker on CAF's threads, which
    // would not wake a caller that waits in the channel.
    if (std::string bad;
        !ucx::caller_progress_from_env(rt->caller_progress, bad))
      return make_error(errc::bad_config, "create: " + bad);
    rt->caller_progress = rt->caller_progress && detail::can_run_here(rt->sys);
#else
    return make_error(errc::bad_config,
                      "create: the job's transport is ucx, but this worker "
                      "was built without UCX (Debian: libucx-dev)");
#endif
  }
  auto worker = spawn_worker(rt->sys, wc);
#ifdef ACTORPS_HAVE_UCX
  if (replies)
    replies->set_target(caf::actor_cast<caf::actor>(worker));
#endif
  rt->owned.insert(rt->owned.begin(), caf::actor_cast<caf::actor>(worker));
  rt->workers.emplace(job.rank, worker);
  return rt;
}

} // namespace actorps
