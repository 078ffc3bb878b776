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
#include "caf/send.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/system_messages.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "actors/node.hpp"
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
  // A backup went down (its server, or its primary ended it): that primary
  // has no copy any more.
  auto servers = static_cast<uint32_t>(st.server_backups.size());
  for (uint32_t h = 0; h < servers; ++h)
    for (size_t i = 0; i < st.server_backups[h].size(); ++i)
      if (st.server_backups[h][i].address() == dm.source) {
        auto g = st.first_shard((h + servers - 1) % servers) + i;
        if (g < st.has_backup.size())
          st.has_backup[g] = false;
      }
  for (auto& [id, node] : st.nodes) {
    bool hit = node.agent && node.agent.address() == dm.source;
    for (size_t i = 0; !hit && i < node.shards.size(); ++i)
      hit = node.shards[i] == dm.source;
    if (!hit || node.dead)
      continue;
    node.dead = true;
    auto node_id = id;
    auto role_of = node.role;
    if (node.role == role::server) {
      // Mark the shards this server held dead in the global order (its
      // own, and backups it held that were promoted).
      auto held = node.shards;
      if (node.rank < st.server_backups.size())
        for (auto& b : st.server_backups[node.rank])
          held.push_back(b.address());
      for (size_t g = 0; g < st.shard_dead.size() && g < st.table.shards.size();
           ++g)
        if (std::find(held.begin(), held.end(), st.table.shards[g].address())
            != held.end())
          st.shard_dead[g] = true;
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
      bool lost = role_of == role::worker ? !node.left
                                          : !st.done && !node.replacing;
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
  for (auto& relay : relays)
    self->request(relay, st.timeout(), admit_atom::value, nodes, workers)
      .then(
        [self, rank, version, pending](caf::ok_atom) {
          if (--*pending > 0)
            return;
          auto& acked = self->state.server_admitted[rank];
          acked = std::max(acked, version);
          release_routing(self);
        },
        // A server that cannot be told is dead or dying: on_down deals
        // with it, and release_routing skips dead servers.
        [](caf::error&) {});
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

namespace {

// The shards of each server rank (one rank holding every shard of a local
// store).
std::vector<std::vector<caf::actor>>
shards_by_server(const coordinator_state& st) {
  if (st.distributed())
    return st.server_shards;
  std::vector<caf::actor> all;
  for (auto& x : st.cfg.shards)
    all.push_back(caf::actor_cast<caf::actor>(x));
  return {std::move(all)};
}

// How long the status waits for a shard's counters.
constexpr auto status_wait = std::chrono::seconds{2};

// Status requests that may wait for one gathering.
constexpr size_t max_status_waiters = 1024;

} // namespace

caf::result<job_status> job_status_of(coordinator_ptr self) {
  auto& st = self->state;
  // One gathering at a time answers every request that came meanwhile, so
  // that many requests never mean many requests to every shard.
  if (st.status_waiters.size() >= max_status_waiters)
    return make_error(errc::bad_config,
                      "status: too many status requests at once");
  auto rp = self->make_response_promise<job_status>();
  st.status_waiters.push_back(rp);
  if (st.status_waiters.size() > 1)
    return rp;
  auto answer = [self](const job_status& x) {
    auto waiters = std::move(self->state.status_waiters);
    self->state.status_waiters.clear();
    for (auto& w : waiters)
      w.deliver(x);
  };
  auto s = std::make_shared<job_status>();
  s->sync = st.cfg.sync;
  s->staleness = st.cfg.sync ? -1 : st.cfg.staleness;
  s->transport = st.cfg.transport;
  s->num_workers = st.cfg.num_workers;
  s->num_servers = st.distributed() ? st.cfg.num_servers : 1;
  s->workers_joined = st.distributed() ? st.workers_joined : st.cfg.num_workers;
  s->servers_joined = st.distributed() ? st.servers_joined : 1;
  s->keys = st.keys.size();
  auto now = caf::make_timestamp();
  for (auto& [id, n] : st.nodes) {
    node_status x;
    x.node_id = id;
    x.role = n.role;
    x.rank = n.rank;
    if (n.role == role::server && n.rank < st.server_endpoints.size())
      x.address = st.server_endpoints[n.rank];
    if (x.address.empty())
      x.address = n.address;
    auto age = std::chrono::duration_cast<std::chrono::milliseconds>(
      now - n.last_seen);
    x.last_seen_ms = static_cast<uint64_t>(std::max<int64_t>(age.count(), 0));
    x.dead = n.dead;
    x.left = n.left;
    s->nodes.push_back(std::move(x));
  }
  s->barrier_open = !st.barrier_waiters.empty();
  if (s->barrier_open)
    for (uint32_t r = 0; r < st.live.size(); ++r)
      if (st.live[r] && !st.at_barrier[r])
        s->barrier_waits_for.push_back(r);
  s->barriers_done = st.barriers_done;
  s->workers.resize(st.cfg.num_workers);
  auto groups = shards_by_server(st);
  s->servers.resize(s->num_servers);
  size_t total = 0;
  for (uint32_t r = 0; r < s->servers.size(); ++r) {
    s->servers[r].rank = r;
    auto n = r < groups.size() ? groups[r].size() : 0;
    auto i = st.nodes.find(server_node_id(r));
    bool dead = st.distributed() && i != st.nodes.end() && i->second.dead;
    s->servers[r].answered = n > 0 && !dead;
    if (dead)
      groups[r].clear();
    total += r < groups.size() ? groups[r].size() : 0;
  }
  if (total == 0) {
    answer(*s);
    return rp;
  }
  auto remaining = std::make_shared<size_t>(total);
  auto arrive = [s, remaining, answer]() mutable {
    if (--*remaining == 0)
      answer(*s);
  };
  for (uint32_t r = 0; r < groups.size() && r < s->servers.size(); ++r)
    for (auto& shard : groups[r])
      self
        ->request(caf::actor_cast<shard_actor>(shard), status_wait,
                  stats_atom::value)
        .then(
          [s, r, arrive](const shard_stats& x) mutable {
            add_shard(s->servers[r], x);
            for (size_t w = 0; w < x.by_worker.size() && w < s->workers.size();
                 ++w)
              s->workers[w] += x.by_worker[w];
            arrive();
          },
          [s, r, arrive](caf::error&) mutable {
            s->servers[r].answered = false;
            arrive();
          });
  return rp;
}

} // namespace actorps
