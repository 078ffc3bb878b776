// SPDX-License-Identifier: BSD-3-Clause
// The coordinator's record of the job's nodes: who is live, when the job is
// done, what happens when a node goes down, and the routing table.
#include "actors/coordinator/shards.hpp"
#include "actors/coordinator/state.hpp"

#include <algorithm>
#include <chrono>
#include <memory>

#include "caf/actor_cast.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/sec.hpp"
#include "caf/send.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/system_messages.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "actors/node.hpp"
#include "core/layout.hpp"
#include "core/link_proof.hpp"
#include "core/secret.hpp"
#include "messages/errors.hpp"

namespace actorps {

caf::error speaks_for(coordinator_ptr self, const char* op, uint32_t id) {
  auto& sender = self->current_sender();
  if (sender && sender->node() == self->node())
    return caf::none;
  auto& st = self->state;
  auto i = st.nodes.find(id);
  if (sender && i != st.nodes.end() && i->second.node == sender->node())
    return caf::none;
  return make_error(errc::unauthorized, std::string{op}
                                          + ": refused, the sender is not node "
                                          + std::to_string(id) + " of the job");
}

caf::result<caf::ok_atom> leave(coordinator_ptr self, uint32_t rank,
                                const std::string* why) {
  if (auto err = self->state.trusted.check(self, "leave"))
    return err;
  auto& st = self->state;
  if (rank >= st.cfg.num_workers)
    return make_error(errc::bad_config,
                      "leave: rank " + std::to_string(rank) + " out of range");
  if (auto err = speaks_for(self, "leave", worker_node_id(rank)))
    return err;
  auto i = st.nodes.find(worker_node_id(rank));
  bool first = i != st.nodes.end() && !i->second.left;
  if (i != st.nodes.end())
    i->second.left = true;
  if (why != nullptr && first && st.cfg.on_done)
    caf::anon_send(st.cfg.on_done, leave_atom::value, i->first, rank,
                   why->substr(0, 1000));
  // Shards hear of it without an answer being awaited: a shard of a
  // server that just died must not hold the leaving worker up.
  drop_worker(self, rank);
  return caf::ok_atom::value;
}

namespace {

// Observers remembered at most (the oldest is forgotten first).
constexpr size_t max_observers = 256;

// A joining worker's rank: the next one, or in a full job the one of a
// dead worker (`wish`, or the lowest but 0 if any_rank).
caf::expected<uint32_t> worker_rank_for(coordinator_state& st, uint32_t wish) {
  auto n = st.cfg.num_workers;
  auto full = st.workers_joined == n;
  if (wish == any_rank) {
    if (!full)
      return st.workers_joined++;
    auto r = st.dead_worker_rank();
    if (!r || st.done)
      return make_error(errc::bad_config, "join: the job already has its "
                                            + std::to_string(n)
                                            + " workers and none of them died");
    return *r;
  }
  auto rank = "join: rank " + std::to_string(wish);
  if (wish >= n)
    return make_error(errc::bad_config,
                      rank + ": the job has " + std::to_string(n)
                        + " workers (ranks 0.." + std::to_string(n - 1) + ")");
  if (!full)
    return make_error(errc::bad_config,
                      rank
                        + ": a rank is named only to take a dead worker's "
                          "place, and the job still waits for "
                        + std::to_string(n - st.workers_joined) + " of its "
                        + std::to_string(n)
                        + " workers (start without a rank)");
  if (st.done)
    return make_error(errc::bad_config, rank + ": the job is ending");
  if (wish == 0)
    return make_error(errc::bad_config,
                      rank
                        + " is not replaced (it writes every key's first "
                          "value and sets the optimizer)");
  auto i = st.nodes.find(worker_node_id(wish));
  if (i == st.nodes.end() || !i->second.dead)
    return make_error(errc::bad_config,
                      rank + " is alive (only a dead worker's rank is taken)");
  if (i->second.left)
    return make_error(errc::bad_config,
                      rank
                        + " left the job (only a dead worker's rank is taken)");
  return wish;
}

} // namespace

// A node joins (see coordinator.hpp): `wish` names the dead worker rank a
// worker takes, or is any_rank.
caf::result<job_info> join_job(coordinator_ptr self, uint8_t role_id,
                               const std::string& token,
                               const caf::actor& agent, uint8_t mode,
                               uint32_t version, uint32_t wish) {
  auto& st = self->state;
  if (!st.distributed())
    return make_error(errc::bad_config,
                      "join: this coordinator runs a local store");
  if (version != wire_version)
    return make_error(errc::bad_config,
                      "join: the node speaks actorps wire version "
                        + std::to_string(version) + ", the coordinator "
                        + std::to_string(wire_version)
                        + " (run one actorps version on every node)");
  if (role_id == role::server && !st.cfg.server_token.empty()) {
    if (!core::constant_time_equal(token, st.cfg.server_token))
      return make_error(errc::unauthorized,
                        "join: wrong server token (this job's servers prove "
                        "a token of their own, --server-token-file; the "
                        "coordinator refused this node)");
  } else if (!core::constant_time_equal(token, st.cfg.token)) {
    return make_error(errc::unauthorized,
                      "join: wrong job token (the coordinator refused "
                      "this node)");
  }
  auto ssp = !st.cfg.sync && st.cfg.staleness >= 0;
  auto job_mode = st.cfg.sync ? join_mode::sync
                  : ssp       ? join_mode::ssp
                              : join_mode::async;
  auto name = [](uint8_t m) {
    return m == join_mode::sync  ? "dist_sync"
           : m == join_mode::ssp ? "dist_ssp"
                                 : "dist_async";
  };
  auto wanted = join_mode::mode_of(mode);
  if (wanted != join_mode::any && wanted != job_mode)
    return make_error(errc::bad_config,
                      std::string{"join: this job runs "} + name(job_mode)
                        + ", the node asked for " + name(wanted));
  auto carrier = join_mode::transport_of(mode);
  auto transport_name = [](uint8_t t) {
    return t == transport::ucx ? "ucx" : "caf";
  };
  if (carrier != join_mode::any_transport && carrier != st.cfg.transport)
    return make_error(
      errc::bad_config,
      std::string{"join: this job's tensors travel over "}
        + transport_name(st.cfg.transport) + ", the node asked for "
        + (carrier == transport::ucx || carrier == transport::caf
             ? transport_name(carrier)
             : "an unknown transport"));
  job_info info;
  info.num_workers = st.cfg.num_workers;
  info.num_servers = st.cfg.num_servers;
  info.sync = st.cfg.sync;
  info.staleness = ssp ? st.cfg.staleness : -1;
  info.bigarray_bound = st.cfg.bigarray_bound;
  info.heartbeat_ms = static_cast<uint32_t>(st.cfg.heartbeat.count());
  info.transport = st.cfg.transport;
  info.data_salt = st.cfg.data_salt;
  info.message_cap = core::message_cap(st.cfg.bigarray_bound,
                                       st.cfg.slice_floats);
  info.loopback = st.cfg.loopback;
  // With replicas, calls to a dead server's shards wait for its
  // backups' promotion at least as long as any request.
  auto wait = st.cfg.recovery_timeout.count();
  if (st.cfg.replicas > 1)
    wait = std::max<int64_t>(wait, st.cfg.timeout.count());
  info.recovery_ms
    = static_cast<uint32_t>(std::min<int64_t>(wait, int64_t{1} << 31));
  info.replicas = st.cfg.replicas;
  bool replacing = false;
  if (role_id == role::worker) {
    // A full job: a worker takes the place of a dead rank.
    replacing = st.workers_joined == st.cfg.num_workers;
    auto r = worker_rank_for(st, wish);
    if (!r)
      return std::move(r.error());
    info.rank = *r;
    info.rejoined = replacing;
    info.node_id = worker_node_id(info.rank);
    info.rank_secret = core::worker_secret(st.cfg.rank_key, info.rank);
  } else if (role_id == role::server) {
    if (st.servers_joined == st.cfg.num_servers) {
      // A full job: a server takes the place of a dead one, whose shards
      // live on as promoted backups (it rebuilds their copies), or which
      // it restores from a checkpoint.
      if (auto r = rebuildable_server(self)) {
        info.rank = *r;
        info.rebuild = true;
      } else if (auto q = replaceable_server(self)) {
        info.rank = *q;
        replacing = true;
      } else if (st.cfg.replicas > 1 && !st.done) {
        // (The server tries again while this says "may be replaced".)
        return make_error(errc::bad_config,
                          "join: the job already has its "
                            + std::to_string(st.cfg.num_servers)
                            + " servers and none of them may be replaced "
                              "(none died, or its backups did not take over "
                              "its shards yet)");
      } else {
        return std::move(q.error());
      }
    } else {
      info.rank = st.servers_joined++;
    }
    info.node_id = server_node_id(info.rank);
    info.rank_key = st.cfg.rank_key;
  } else if (role_id == role::observer) {
    // Reads the status only: no rank, no data salt, no admission.
    auto& sender = self->current_sender();
    if (sender && sender->node() != self->node()) {
      if (st.observers.size() >= max_observers)
        st.observers.erase(st.observers.begin());
      st.observers.insert(sender->node());
    }
    info.data_salt.clear();
    info.coordinator = caf::actor_cast<caf::actor>(self);
    return info;
  } else {
    return make_error(errc::bad_config,
                      "join: unknown role " + std::to_string(role_id));
  }
  auto& node = st.nodes[info.node_id];
  if (replacing && role_id == role::server) {
    // Its shards take the dead server's place once restored.
    node = coordinator_state::node_entry{};
    node.replacing = true;
  } else if (replacing) {
    // The dead worker's entry starts afresh; its rank is live again,
    // and the shards hear it before the new node is admitted, so that
    // they restart the rank's sequence numbers before its first push.
    node = coordinator_state::node_entry{};
    // The new process declares its keys again (and finds them set).
    for (auto& [name, key] : st.keys)
      if (info.rank < key.declared.size())
        key.declared[info.rank] = false;
    st.live[info.rank] = true;
    st.at_barrier[info.rank] = false;
    announce_workers(self);
  }
  if (info.rebuild) {
    node = coordinator_state::node_entry{};
    node.rebuilding = true;
  }
  node.role = role_id;
  node.rank = info.rank;
  node.agent = agent;
  // The node proved the token: from now on its messages pass, and every
  // server's shards learn it before any worker gets the routing table.
  if (auto& sender = self->current_sender(); sender) {
    node.node = sender->node();
    if (st.cfg.address_of)
      node.address = st.cfg.address_of(node.node);
    st.trusted.add(node.node);
    ++st.admit_version;
    for (uint32_t r = 0; r < st.server_relays.size(); ++r)
      send_admissions(self, r);
  }
  info.coordinator = caf::actor_cast<caf::actor>(self);
  node.last_seen = caf::make_timestamp();
  if (agent)
    self->monitor(agent);
  if (st.cfg.on_done)
    caf::anon_send(st.cfg.on_done, join_atom::value, info.node_id, role_id,
                   info.rank);
  return info;
}

void record_shards(coordinator_ptr self, coordinator_state::node_entry& node,
                   const std::vector<caf::actor>& shards,
                   const std::vector<caf::actor>& relays,
                   const std::string& endpoint,
                   const std::string& data_address) {
  auto& st = self->state;
  auto rank = node.rank;
  st.server_shards[rank] = shards;
  st.server_relays[rank] = relays;
  st.server_endpoints[rank] = endpoint;
  if (st.cfg.transport == transport::ucx)
    st.server_data[rank] = data_address;
  for (auto& x : shards) {
    // (A rebuilding server's shards are backups: one that ends, say when
    // its primary drops it, is a lost copy, not a dead server.)
    if (!node.rebuilding)
      node.shards.push_back(x.address());
    self->monitor(x);
  }
}

void announce_workers(coordinator_ptr self) {
  auto& st = self->state;
  for (size_t i = 0; i < st.cfg.shards.size(); ++i)
    if (i >= st.shard_dead.size() || !st.shard_dead[i])
      self
        ->request(st.cfg.shards[i], st.timeout(), workers_atom::value,
                  st.live_ranks())
        .then([](caf::ok_atom) {}, [](caf::error&) {});
}

void finish(coordinator_ptr self) {
  auto& st = self->state;
  if (st.finished)
    return;
  st.finished = true;
  if (st.cfg.on_done)
    caf::anon_send(st.cfg.on_done, shutdown_atom::value);
}

void check_done(coordinator_ptr self) {
  auto& st = self->state;
  if (!st.distributed() || st.done)
    return;
  if (std::any_of(st.live.begin(), st.live.end(), [](bool b) { return b; }))
    return;
  if (st.checkpointing || st.checkpoint_streaming != 0) {
    // The job's last checkpoint is being taken from the servers: they end
    // once it was (checkpoint_settled).
    st.end_after_checkpoint = true;
    return;
  }
  st.done = true;
  bool waiting = false;
  for (auto& [id, node] : st.nodes) {
    if (node.role == role::server && !node.dead)
      self->send(caf::actor_cast<node_actor>(node.agent), shutdown_atom::value);
    waiting = waiting || !node.dead;
  }
  if (!waiting)
    finish(self);
  else
    self->delayed_send(self, std::chrono::seconds{5}, shutdown_atom::value);
}

void checkpoint_settled(coordinator_ptr self) {
  auto& st = self->state;
  if (!st.end_after_checkpoint || st.checkpointing
      || st.checkpoint_streaming != 0)
    return;
  st.end_after_checkpoint = false;
  check_done(self);
}

void drop_worker(coordinator_ptr self, uint32_t rank) {
  auto& st = self->state;
  if (rank >= st.live.size() || !st.live[rank])
    return;
  st.live[rank] = false;
  release_barrier(self);
  announce_workers(self);
  check_done(self);
}

void on_down(coordinator_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  // A backup went down (its server, or its primary ended it): it leaves
  // its shard's chain.
  cut_copy(self, dm.source);
  for (auto& [id, node] : st.nodes) {
    bool hit = node.agent && node.agent.address() == dm.source;
    for (size_t i = 0; !hit && i < node.shards.size(); ++i)
      hit = node.shards[i] == dm.source;
    if (!hit || node.dead)
      continue;
    node.dead = true;
    bool held_primaries = true;
    auto node_id = id;
    auto role_of = node.role;
    if (node.role == role::server) {
      // Mark the shards this server held dead in the global order (its
      // own, and backups it held that were promoted).
      auto held = node.shards;
      if (node.rank < st.server_backups.size())
        for (auto& b : st.server_backups[node.rank])
          held.push_back(b.address());
      if (node.rank < st.server_shards.size())
        for (auto& x : st.server_shards[node.rank])
          held.push_back(x.address());
      for (size_t g = 0; g < st.shard_dead.size() && g < st.table.shards.size();
           ++g)
        if (std::find(held.begin(), held.end(), st.table.shards[g].address())
            != held.end())
          st.shard_dead[g] = true;
      // (Whether it held a primary, before its backups take over.)
      held_primaries = st.cfg.replicas < 2 || !st.routing_ready
                       || holds_primaries(st, node.rank);
      server_lost(self, node.rank, node.replacing);
    }
    for (auto& [other_id, other] : st.nodes)
      if (!other.dead && other.agent)
        self->send(caf::actor_cast<node_actor>(other.agent),
                   node_down_atom::value, node_id, role_of);
    // A checkpoint being gathered from a dead server would hold the barrier
    // until its requests time out: give it up and let the barrier go.
    if (role_of == role::server
        && (st.checkpointing || st.checkpoint_streaming != 0)) {
      auto number = st.checkpointing ? st.barriers_done + 1
                                     : st.checkpoint_streaming;
      ++st.checkpoint_generation;
      st.checkpointing = false;
      st.checkpoint_streaming = 0;
      checkpoint_settled(self);
      if (st.cfg.on_done)
        caf::anon_send(st.cfg.on_done, save_atom::value, number,
                       make_error(errc::dead_node,
                                  "checkpoint: server node "
                                    + std::to_string(node_id)
                                    + " went down while it was gathered"));
      st.check_barrier();
    }
    release_routing(self);
    if (st.cfg.on_done && !st.finished) {
      // Lost: a worker that went down without leaving, a server before the
      // job was done.
      // (A replacement that dies before it served was never the job's.)
      // (A server rebuilding replicas that held no primary lost nothing.)
      bool lost = role_of == role::worker
                    ? !node.left
                    : !st.done && !node.replacing && held_primaries;
      caf::anon_send(st.cfg.on_done, node_down_atom::value, node_id, role_of,
                     lost);
    }
    if (role_of == role::worker && !node.left)
      drop_worker(self, node.rank);
    if (st.done && std::all_of(st.nodes.begin(), st.nodes.end(), [](auto& kvp) {
          return kvp.second.dead;
        }))
      finish(self);
    return;
  }
}

void complete_routing(coordinator_ptr self) {
  auto& st = self->state;
  for (auto& shards : st.server_shards)
    if (shards.empty())
      return;
  for (size_t r = 0; r < st.server_shards.size(); ++r) {
    for (auto& s : st.server_shards[r]) {
      st.table.shards.push_back(s);
      if (st.cfg.transport == transport::ucx)
        st.table.data_addresses.push_back(st.server_data[r]);
      st.cfg.shards.push_back(caf::actor_cast<shard_actor>(s));
    }
    for (auto& x : st.server_relays[r])
      st.table.relays.push_back(x);
    st.table.servers.push_back(st.server_endpoints[r]);
  }
  st.shard_dead.assign(st.cfg.shards.size(), false);
  st.table.restarted.assign(st.cfg.shards.size(), 0);
  st.routing_ready = true;
  pair_replicas(self);
  release_routing(self);
}

void send_admissions(coordinator_ptr self, uint32_t rank) {
  auto& st = self->state;
  if (rank >= st.server_relays.size() || st.server_relays[rank].empty())
    return;
  auto version = st.admit_version;
  std::vector<caf::node_id> nodes;
  // Which node each worker rank joined from (a replacement's, once it
  // took the rank).
  std::vector<caf::node_id> workers(st.cfg.num_workers);
  for (auto& [id, node] : st.nodes) {
    if (node.node)
      nodes.push_back(node.node);
    if (node.node && node.role == role::worker && node.rank < workers.size()
        && (!workers[node.rank] || !node.dead))
      workers[node.rank] = node.node;
  }
  // A server's backups learn them too (they serve once promoted).
  auto relays = st.server_relays[rank];
  if (rank < st.server_backup_relays.size())
    for (auto& x : st.server_backup_relays[rank])
      relays.push_back(x);
  auto pending = std::make_shared<size_t>(relays.size());
  auto answered = [self, rank, version, pending] {
    if (--*pending > 0)
      return;
    auto& acked = self->state.server_admitted[rank];
    acked = std::max(acked, version);
    release_routing(self);
  };
  for (auto& relay : relays)
    self->request(relay, st.timeout(), admit_atom::value, nodes, workers)
      .then([answered](caf::ok_atom) { answered(); },
            // A relay that is gone needs no telling (a backup ended after
            // its primary lost it). A server that cannot be told is dead or
            // dying: on_down deals with it, and release_routing skips dead
            // servers.
            [answered](caf::error& err) {
              if (err == caf::sec::request_receiver_down)
                answered();
            });
}

void release_routing(coordinator_ptr self) {
  auto& st = self->state;
  publish_recoveries(self);
  if (!st.routing_ready || st.pairing > 0 || st.routing_waiters.empty())
    return;
  // (A replacement being restored is not in the table yet: it does not
  // hold the others up.)
  for (auto& [id, node] : st.nodes)
    if (node.role == role::server && !node.dead && !node.replacing
        && st.server_admitted[node.rank] < st.admit_version)
      return;
  for (auto& w : st.routing_waiters)
    w.deliver(st.table);
  st.routing_waiters.clear();
}

} // namespace actorps
