// SPDX-License-Identifier: BSD-3-Clause
#include "actors/coordinator/shards.hpp"
#include "actors/coordinator/state.hpp"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <utility>

#include "caf/actor_cast.hpp"
#include "caf/actor_system.hpp"
#include "caf/duration.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/send.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/system_messages.hpp"
#include "caf/timestamp.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

#include "actors/fan_in.hpp"
#include "core/layout.hpp"
#include "core/link_proof.hpp"
#include "core/node_ids.hpp"
#include "core/optimizer.hpp"
#include "core/restore.hpp"
#include "core/secret.hpp"
#include "messages/errors.hpp"

namespace actorps {

namespace {

using self_ptr = coordinator_ptr;
using detail::broadcast;
using detail::gather_snapshot;

std::string quoted(const std::string& key) {
  return "'" + key + "'";
}

coordinator_actor::behavior_type coordinator_impl(self_ptr self,
                                                  coordinator_config cfg) {
  self->state.cfg = std::move(cfg);
  if (self->state.cfg.data_salt.empty())
    self->state.cfg.data_salt = core::random_bytes(32);
  if (self->state.cfg.rank_key.empty())
    self->state.cfg.rank_key = core::random_bytes(32);
  self->state.at_barrier.assign(self->state.cfg.num_workers, false);
  self->state.live.assign(self->state.cfg.num_workers, true);
  self->set_down_handler([self](caf::down_msg& dm) {
    if (sent_by_source(self->current_sender(), dm.source))
      on_down(self, dm);
  });
  ignore_strays(self, self->state.trusted);
  return {
    [self](declare_atom, const std::string& key,
           const std::vector<uint64_t>& shape,
           uint32_t rank) -> caf::result<key_info> {
      return declare_key(self, key, shape, rank, 0);
    },
    [self](declare_atom, const std::string& key,
           const std::vector<uint64_t>& shape, uint32_t rank,
           uint64_t dim) -> caf::result<key_info> {
      if (dim == 0 || shape.size() != 2 || shape[1] != dim)
        return make_error(errc::shape_mismatch,
                          "init: table " + quoted(key) + " of shape "
                            + core::shape_string(shape)
                            + " (need [rows, dim] with dim "
                            + std::to_string(dim) + " > 0)");
      return declare_key(self, key, shape, rank, dim);
    },
    [self](init_done_atom, uint32_t key_id,
           bool ok) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "init_done"))
        return err;
      auto& st = self->state;
      if (key_id >= st.names_by_id.size())
        return make_error(errc::unknown_key,
                          "init_done: no key has id " + std::to_string(key_id));
      auto& e = st.keys[st.names_by_id[key_id]];
      if (ok) {
        e.initialized = true;
        for (auto& w : e.waiters)
          w.deliver(e.info);
      } else {
        e.declared[0] = false;
        for (auto& w : e.waiters)
          w.deliver(make_error(errc::not_initialized,
                               "init: rank 0 failed to initialize key "
                                 + quoted(e.info.name)));
      }
      e.waiters.clear();
      return caf::ok_atom::value;
    },
    [self](lookup_atom, const std::string& key) -> caf::result<key_info> {
      if (auto err = self->state.trusted.check(self, "lookup"))
        return err;
      auto& st = self->state;
      auto i = st.keys.find(key);
      if (i == st.keys.end())
        return make_error(errc::unknown_key,
                          "key " + quoted(key) + " was never initialized");
      if (!i->second.initialized)
        return make_error(errc::not_initialized,
                          "key " + quoted(key)
                            + " is declared but rank 0 has not initialized it "
                              "yet");
      return i->second.info;
    },
    [self](barrier_atom, uint32_t rank) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "barrier"))
        return err;
      auto& st = self->state;
      if (rank >= st.cfg.num_workers)
        return make_error(errc::bad_config, "barrier: rank "
                                              + std::to_string(rank)
                                              + " out of range");
      if (auto err = speaks_for(self, "barrier", worker_node_id(rank)))
        return err;
      if (!st.live[rank])
        return make_error(errc::dead_node, "barrier: rank "
                                             + std::to_string(rank)
                                             + " left the job");
      st.at_barrier[rank] = true;
      auto rp = self->make_response_promise<caf::ok_atom>();
      st.barrier_waiters.push_back(rp);
      release_barrier(self);
      return rp;
    },
    [self](leave_atom, uint32_t rank) -> caf::result<caf::ok_atom> {
      return leave(self, rank, nullptr);
    },
    [self](leave_atom, uint32_t rank, const std::string& why)
      -> caf::result<caf::ok_atom> { return leave(self, rank, &why); },
    [self](set_opt_atom,
           const optimizer_config& opt) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "set_optimizer"))
        return err;
      if (auto err = to_error(core::validate(opt)))
        return err;
      auto rp = self->make_response_promise<caf::ok_atom>();
      broadcast<caf::ok_atom>(
        self, rp,
        [self, opt] {
          self->state.optimizer = opt;
          return caf::ok_atom::value;
        },
        [](size_t, caf::ok_atom) {}, false, set_opt_atom::value, opt);
      return rp;
    },
    [self](save_atom) -> caf::result<state_snapshot> {
      if (auto err = self->state.trusted.check(self, "save_optimizer_states"))
        return err;
      auto rp = self->make_response_promise<state_snapshot>();
      gather_snapshot(self, rp);
      return rp;
    },
    [self](save_atom, const save_cursor& at) -> caf::result<save_piece> {
      if (auto err = self->state.trusted.check(self, "save_optimizer_states"))
        return err;
      return save_next(self, at);
    },
    [self](load_atom, load_piece& piece) -> caf::result<uint64_t> {
      if (auto err = self->state.trusted.check(self, "load_optimizer_states"))
        return err;
      return load_next(self, piece);
    },
    [self](load_atom, const state_snapshot& snap) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "load_optimizer_states"))
        return err;
      return load_whole(self, snap);
    },
    [self](command_atom, int32_t head,
           const std::string& body) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "send_command_to_servers"))
        return err;
      // Head 0 sets the optimizer: checked before anything is sent, and
      // recorded like set_opt, so that a later save names the optimizer
      // the shards run (its state is saved beside it).
      optimizer_config opt;
      if (head == 0)
        if (auto err = to_error(core::parse_optimizer(body, opt)))
          return err;
      // A replacement restored from a checkpoint lines its rounds up with
      // the pushes each worker counted as acknowledged, which a dropped
      // round would no longer match.
      auto& cfg = self->state.cfg;
      if (head == command_head::clear_pending && cfg.sync
          && cfg.recovery_timeout.count() > 0)
        return make_error(errc::bad_config,
                          "clear_pending: not in a dist_sync job that "
                          "replaces dead servers from checkpoints "
                          "(--recovery-timeout): a replacement could not "
                          "line its rounds up with the workers' afterwards");
      auto rp = self->make_response_promise<caf::ok_atom>();
      broadcast<caf::ok_atom>(
        self, rp,
        [self, head, opt] {
          if (head == 0)
            self->state.optimizer = opt;
          return caf::ok_atom::value;
        },
        [](size_t, caf::ok_atom) {}, false, command_atom::value, head, body);
      return rp;
    },
    [self](join_atom, uint8_t role_id, const std::string& token,
           const caf::actor& agent, uint8_t mode,
           uint32_t version) -> caf::result<job_info> {
      return join_job(self, role_id, token, agent, mode, version, any_rank);
    },
    [self](join_atom, uint8_t role_id, const std::string& token,
           const caf::actor& agent, uint8_t mode, uint32_t version,
           uint32_t rank) -> caf::result<job_info> {
      return join_job(self, role_id, token, agent, mode, version, rank);
    },
    [self](shards_atom, uint32_t node_id, const std::vector<caf::actor>& shards,
           const std::vector<caf::actor>& relays, const std::string& endpoint,
           const std::string& data_address) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "register_shards"))
        return err;
      auto& st = self->state;
      auto i = st.nodes.find(node_id);
      if (i == st.nodes.end() || i->second.role != role::server)
        return make_error(errc::bad_config, "shards: node "
                                              + std::to_string(node_id)
                                              + " did not join as a server");
      auto rank = i->second.rank;
      if (self->current_sender()->node() != i->second.node)
        return make_error(errc::unauthorized,
                          "shards: node " + std::to_string(node_id)
                            + " joined from another process");
      if (shards.empty() || relays.size() != shards.size())
        return make_error(errc::bad_config,
                          "shards: server " + std::to_string(rank) + " sent "
                            + std::to_string(shards.size()) + " shards and "
                            + std::to_string(relays.size()) + " relays");
      if (st.cfg.transport == transport::ucx
          && (data_address.empty() || data_address.size() > (16 << 10)))
        return make_error(errc::bad_config,
                          "shards: server " + std::to_string(rank)
                            + " has no UCX address (the job's transport is "
                              "ucx; is the server built without UCX?)");
      if (st.server_shards.empty()) {
        st.server_data.resize(st.cfg.num_servers);
        st.server_shards.resize(st.cfg.num_servers);
        st.server_relays.resize(st.cfg.num_servers);
        st.server_endpoints.resize(st.cfg.num_servers);
        st.server_admitted.resize(st.cfg.num_servers);
      }
      if (i->second.rebuilding)
        return register_rebuild(self, i->second, shards, relays, endpoint,
                                data_address);
      if (i->second.replacing)
        return register_replacement(self, i->second, shards, relays, endpoint,
                                    data_address);
      if (!st.server_shards[rank].empty())
        return make_error(errc::bad_config,
                          "shards: server " + std::to_string(rank)
                            + " registered its shards before");
      record_shards(self, i->second, shards, relays, endpoint, data_address);
      send_admissions(self, rank);
      complete_routing(self);
      return caf::ok_atom::value;
    },
    [self](replica_atom, uint32_t node_id,
           const std::vector<caf::actor>& backups,
           const std::vector<caf::actor>& relays) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "register_backups"))
        return err;
      return record_backups(self, node_id, backups, relays);
    },
    [self](replica_atom, uint32_t shard) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "backup_lost"))
        return err;
      return backup_lost(self, shard);
    },
    [self](routing_atom) -> caf::result<routing_table> {
      if (auto err = self->state.trusted.check(self, "routing"))
        return err;
      auto& st = self->state;
      if (!st.distributed()) {
        routing_table local;
        for (auto& x : st.cfg.shards)
          local.shards.push_back(caf::actor_cast<caf::actor>(x));
        return local;
      }
      // Answered once routing is complete and every live server knows
      // every admitted node.
      auto rp = self->make_response_promise<routing_table>();
      st.routing_waiters.push_back(rp);
      release_routing(self);
      return rp;
    },
    [self](routing_atom, uint64_t version) -> caf::result<routing_table> {
      if (auto err = self->state.trusted.check(self, "routing"))
        return err;
      return newer_routing(self, version);
    },
    [self](recover_atom, uint32_t rank, uint64_t) {
      // The coordinator's own deadline (a trusted sender at most asks
      // early: the deadline itself is checked).
      if (self->state.trusted.check(self, "recover"))
        return;
      recovery_deadline(self, rank);
    },
    [self](shutdown_atom) {
      if (self->state.trusted.check(self, "shutdown"))
        return;
      finish(self);
    },
    [self](heartbeat_atom, uint32_t node_id) {
      if (self->state.trusted.check(self, "heartbeat")
          || speaks_for(self, "heartbeat", node_id))
        return;
      auto i = self->state.nodes.find(node_id);
      if (i != self->state.nodes.end())
        i->second.last_seen = caf::make_timestamp();
    },
    [self](dead_atom, int32_t node_or_group,
           int32_t timeout_s) -> caf::result<uint32_t> {
      auto& st = self->state;
      if (auto err = st.trusted.check(self, "num_dead_node"))
        return err;
      auto now = caf::make_timestamp();
      auto limit = std::chrono::seconds{std::max(timeout_s, 0)};
      uint32_t count = 0;
      for (auto& [id, node] : st.nodes) {
        bool match = node_or_group >= 8
                       ? id == static_cast<uint32_t>(node_or_group)
                       : (node.role & node_or_group) != 0;
        if (!match || node.left)
          continue;
        if (node.dead || now - node.last_seen > limit)
          ++count;
      }
      return count;
    },
    [self](status_atom) -> caf::result<job_status> {
      auto& st = self->state;
      auto& sender = self->current_sender();
      if (!sender || st.observers.count(sender->node()) == 0)
        if (auto err = st.trusted.check(self, "status"))
          return err;
      return job_status_of(self);
    },
  };
}

} // namespace

coordinator_actor spawn_coordinator(caf::actor_system& sys,
                                    coordinator_config cfg) {
  return sys.spawn(coordinator_impl, std::move(cfg));
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
  s->replicas = st.cfg.replicas;
  auto n_shards = st.cfg.shards.size();
  if (st.cfg.replicas > 1 && st.primary_on.size() == n_shards
      && st.backup_slots.size() == n_shards
      && st.table.shards.size() == n_shards) {
    // Each shard counts on the server that holds its primary now (a
    // promoted backup's on the server it lives on).
    for (auto& g : groups)
      g.clear();
    for (uint32_t g = 0; g < n_shards; ++g) {
      shard_copies c;
      c.shard = g;
      c.primary = st.primary_on[g];
      auto& chain = st.backup_slots[g];
      c.ready = !chain.empty();
      for (auto& slot : chain) {
        c.backups.push_back(slot.holder);
        c.ready = c.ready && slot.ready;
      }
      if (!chain.empty())
        c.backup = chain.front().holder;
      s->copies.push_back(c);
      if (c.primary < groups.size()
          && !(g < st.shard_dead.size() && st.shard_dead[g]))
        groups[c.primary].push_back(st.table.shards[g]);
    }
  }
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
