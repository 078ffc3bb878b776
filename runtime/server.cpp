// SPDX-License-Identifier: BSD-3-Clause
// A server process: joins a job, hosts its shards until the job ends.
#include "runtime/network.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "caf/actor_cast.hpp"
#include "caf/actor_system.hpp"
#include "caf/after.hpp"
#include "caf/exit_reason.hpp"
#include "caf/io/middleman.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/send.hpp"
#include "caf/system_messages.hpp"

#include "actors/coordinator/coordinator.hpp"
#include "actors/gate.hpp"
#include "actors/node.hpp"
#include "actors/shard/relay.hpp"
#include "actors/shard/shard.hpp"
#include "core/link_proof.hpp"
#include "messages/errors.hpp"
#include "runtime/blocking.hpp"
#include "runtime/connect.hpp"
#include "runtime/guard.hpp"
#include "runtime/observe.hpp"
#ifdef ACTORPS_HAVE_UCX
#  include "runtime/ucx/ingress.hpp"
#  include "runtime/ucx/plane.hpp"
#  include "runtime/ucx/replicas.hpp"
#endif
#include "runtime/system.hpp"

namespace actorps {

caf::error run_server(const server_options& opts,
                      std::function<void(uint32_t)> on_joined) {
  if (opts.shards == 0)
    return make_error(errc::bad_config, "server: needs at least one shard");
  if (auto err = check_tls(opts.system.tls))
    return make_error(errc::bad_config, "server: " + context_of(err));
#ifdef ACTORPS_HAVE_UCX
  if (std::string why; !ucx::plane_settings_ok(why))
    return make_error(errc::bad_config, "server: " + why);
#endif
  auto sopts = opts.system;
  sopts.network = true;
  sopts.token = opts.token;
  system_config cfg{sopts};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto where = opts.coordinator.host + ":"
               + std::to_string(opts.coordinator.port);
  auto any = connect_coordinator(sys, opts.coordinator, opts.connect_timeout);
  if (!any)
    return std::move(any.error());
  auto agent = spawn_node_agent(sys, caf::actor_cast<gate_actor>(*any),
                                caf::actor_cast<caf::actor>(self));
  std::vector<caf::actor> owned{caf::actor_cast<caf::actor>(agent)};
  // Shards `self` monitors and has not seen go down yet.
  size_t monitored = 0;
  // Stops what this server spawned and, if its shards have threads of
  // their own, waits until each has quit and told its monitors (see
  // spawn_shard: else the actor system's end may wait forever).
  auto stop = [&] {
    for (auto& a : owned)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    auto give_up = std::chrono::steady_clock::now() + opts.timeout;
    for (bool waiting = monitored > 0; waiting;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        give_up - std::chrono::steady_clock::now());
      self->receive([&](caf::down_msg&) { waiting = --monitored > 0; },
                    caf::after(std::max(left, std::chrono::milliseconds{0})) >>
                      [&] { waiting = false; });
    }
  };
  job_info job;
  // A replacement started right after a server died may knock before the
  // coordinator saw the death: it tries again for --connect-timeout-ms.
  auto give_up = std::chrono::steady_clock::now() + opts.connect_timeout;
  caf::error err;
  for (;;) {
    err = detail::ask(
      self.ptr(), agent, opts.timeout, [&](job_info& x) { job = x; },
      join_atom::value, role::server,
      opts.server_token.empty() ? core::join_proof(opts.token)
                                : core::server_join_proof(opts.server_token),
      join_mode::any);
    if (!err || std::chrono::steady_clock::now() >= give_up
        || render(err).find("none of them may be replaced")
             == std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }
  if (err) {
    stop();
    return err;
  }
  on_joined(job.rank);
  set_message_cap(job.message_cap);
  auto coord = caf::actor_cast<coordinator_actor>(job.coordinator);
  // The shards and relays trust the coordinator, which tells them the nodes
  // it admits.
  std::vector<caf::node_id> trusted{coord.node()};
  // Replicas over UCX: the primaries' forwards take the plane.
  std::shared_ptr<replica_link> link;
#ifdef ACTORPS_HAVE_UCX
  if (job.transport == transport::ucx && job.replicas > 1)
    link = std::make_shared<ucx::plane_link>(sys);
#endif
  // Spawns shard `index` (a backup of another server's: `backup`) and its
  // priority relay into `into` and `relays_into`.
  auto spawn_one = [&](uint32_t index, bool backup,
                       std::vector<caf::actor>& into,
                       std::vector<caf::actor>& relays_into) {
    shard_config sc;
    sc.index = index;
    sc.num_workers = job.num_workers;
    sc.sync = job.sync;
    sc.staleness = job.staleness;
    sc.on_command = opts.on_command;
    sc.trusted = trusted;
    sc.backup = backup;
    sc.replica_timeout = opts.timeout;
    // (A backup forwards too once promoted and paired with a new one.)
    sc.link = link;
    sc.message_cap = job.message_cap;
    sc.own_thread = opts.shard_threads;
    auto shard = spawn_shard(sys, sc);
    if (sc.own_thread) {
      self->monitor(shard);
      ++monitored;
    }
    auto relay = spawn_priority_relay(sys, shard, {}, false, trusted);
    into.push_back(caf::actor_cast<caf::actor>(shard));
    relays_into.push_back(caf::actor_cast<caf::actor>(relay));
    owned.push_back(into.back());
    owned.push_back(relays_into.back());
  };
  std::vector<caf::actor> shards;
  std::vector<caf::actor> relays;
  // (Rebuilding replicas: its own shards start as backups of the shards
  // that took them over.)
  for (uint32_t i = 0; i < opts.shards; ++i)
    spawn_one(job.rank * opts.shards + i, job.rebuild, shards, relays);
  // Replicas: this server backs up the previous server's shards (as many
  // as its own), which take over when that server dies; with 3 copies also
  // those of the server before that (the second copy of each).
  std::vector<caf::actor> backups;
  std::vector<caf::actor> backup_relays;
  std::vector<uint32_t> backed;
  if (job.replicas > 1 && job.num_servers >= job.replicas)
    for (uint32_t j = 0; j + 1 < job.replicas; ++j)
      backed.push_back((job.rank + job.num_servers - 1 - j) % job.num_servers);
  for (auto r : backed)
    for (uint32_t i = 0; i < opts.shards; ++i)
      spawn_one(r * opts.shards + i, true, backups, backup_relays);
  // UCX transport: a plane whose request frames reach the shards through
  // an ingress; its address goes to the coordinator with the shards.
  std::string data_address;
  caf::actor ingress;
#ifdef ACTORPS_HAVE_UCX
  std::shared_ptr<ucx::plane> data_plane;
  // Closed on every way out, here: its thread runs shards, which hold it
  // for a moment, and must never be the one that lets go of it last (a
  // plane's thread cannot join itself).
  struct plane_closer {
    std::shared_ptr<ucx::plane>& plane;
    ~plane_closer() {
      if (plane)
        plane->close();
    }
  } close_plane{data_plane};
  if (job.transport == transport::ucx) {
    auto requests = std::make_shared<ucx::frame_queue>();
    std::string why;
    data_plane = ucx::start_plane(opts.token, job, requests, why,
                                  opts.inflight_bytes);
    if (!data_plane) {
      stop();
      return make_error(errc::bad_config, "server: " + why);
    }
    std::map<uint32_t, shard_actor> by_index;
    for (uint32_t i = 0; i < opts.shards; ++i)
      by_index.emplace(job.rank * opts.shards + i,
                       caf::actor_cast<shard_actor>(shards[i]));
    // (A backup answers workers only once promoted.)
    for (uint32_t k = 0; k < backups.size(); ++k)
      by_index.emplace(backed[k / opts.shards] * opts.shards + k % opts.shards,
                       caf::actor_cast<shard_actor>(backups[k]));
    auto plane_link = std::static_pointer_cast<ucx::plane_link>(link);
    if (plane_link)
      plane_link->attach(data_plane);
    // (Shards on the scheduler: the plane's thread runs them.)
    ingress = ucx::spawn_ingress(sys, requests, data_plane, std::move(by_index),
                                 plane_link, !opts.shard_threads);
    owned.push_back(ingress);
    data_address.assign(data_plane->address().begin(),
                        data_plane->address().end());
  }
#else
  if (job.transport == transport::ucx) {
    stop();
    return make_error(errc::bad_config,
                      "server: the job's transport is ucx, but this server "
                      "was built without UCX (Debian: libucx-dev)");
  }
#endif
  // Workers connect here directly, so that data does not detour through the
  // coordinator's node and a dying server is noticed at once. Only a gate
  // that refuses joins listens: the shards check every sender themselves.
  auto gate = spawn_server_gate(sys);
  owned.push_back(caf::actor_cast<caf::actor>(gate));
  auto port = publish_actor(sys, gate, opts.port, opts.listen_address());
  if (!port) {
    stop();
    return make_error(errc::bad_config, "server: cannot listen on "
                                          + opts.listen_address() + ":"
                                          + std::to_string(opts.port) + " ("
                                          + render(port.error()) + ")");
  }
  std::unique_ptr<metrics_server> metrics;
  if (opts.metrics.enabled()) {
    std::string why;
    std::function<void(process_counters&)> more;
#ifdef ACTORPS_HAVE_UCX
    if (data_plane)
      more = ucx::plane_metrics(data_plane);
#endif
    metrics = serve_metrics(sys, opts.metrics, opts.token, {}, shards, why,
                            std::move(more));
    if (!metrics) {
      stop();
      return make_error(errc::bad_config, "server: " + why);
    }
    if (opts.on_metrics)
      opts.on_metrics(metrics->port());
  }
  // A replacement server's registration is answered once its shards were
  // restored from the newest checkpoint: give that time. A rebuilding one's
  // once its shards took their primaries' states, bounded part by part by
  // the primaries (and by the coordinator's death).
  auto registration = job.rebuild ? std::chrono::milliseconds{86400000}
                      : job.recovery_ms > 0 ? 10 * opts.timeout
                                            : opts.timeout;
  if (!backups.empty())
    err = detail::ask(
      self.ptr(), coord, opts.timeout, [](caf::ok_atom) {}, replica_atom::value,
      job.node_id, backups, backup_relays);
  if (!err)
    err = detail::ask(
      self.ptr(), coord, registration, [](caf::ok_atom) {}, shards_atom::value,
      job.node_id, shards, relays, opts.host + ":" + std::to_string(*port),
      data_address);
  if (err) {
    stop();
    return err;
  }
  caf::error result;
  bool running = true;
  self->receive_while(running)(
    [&](shutdown_atom) { running = false; },
    [&](node_down_atom, uint32_t node_id, uint8_t role_id) {
      if (role_id == role::coordinator) {
        result = make_error(errc::dead_node,
                            "server: lost the coordinator at " + where);
        running = false;
      } else {
        if (role_id == role::worker && ingress && node_id >= worker_node_id(0))
          caf::anon_send(ingress, node_down_atom::value,
                         (node_id - worker_node_id(0)) / 2);
        if (opts.on_event)
          opts.on_event(describe_node(node_id, role_id) + " is down");
      }
    });
  metrics.reset();
  stop();
#ifdef ACTORPS_HAVE_UCX
  if (data_plane)
    data_plane->close();
#endif
  return result;
}

} // namespace actorps
