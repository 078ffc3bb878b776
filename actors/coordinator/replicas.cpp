// SPDX-License-Identifier: BSD-3-Clause
// Replicas, the coordinator's half: backups register, are paired with their
// primaries before the routing table goes out, and are promoted when their
// primaries' server dies (see coordinator.hpp, "Replicas").
#include "actors/coordinator/state.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "caf/actor_cast.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/exit_reason.hpp"
#include "caf/send.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "messages/errors.hpp"

namespace actorps {

namespace {

// The server holding the backups of server `rank`'s shards.
uint32_t holder_of(const coordinator_state& st, uint32_t rank) {
  return (rank + 1) % st.cfg.num_servers;
}

bool server_dead(const coordinator_state& st, uint32_t rank) {
  auto i = st.nodes.find(server_node_id(rank));
  return i == st.nodes.end() || i->second.dead;
}

// The primaries backed up on server `rank` (those of the server before it)
// lost their backups: they go on alone.
void drop_backups_on(coordinator_ptr self, uint32_t rank) {
  auto& st = self->state;
  auto backed = (rank + st.cfg.num_servers - 1) % st.cfg.num_servers;
  if (backed == rank)
    return;
  auto first = st.first_shard(backed);
  for (uint32_t i = 0; i < st.server_shards[backed].size(); ++i) {
    auto g = first + i;
    if (g >= st.has_backup.size() || !st.has_backup[g])
      continue;
    st.has_backup[g] = false;
    // (A primary that is dead too hears nothing.)
    if (!st.shard_dead[g])
      self
        ->request(st.cfg.shards[g], st.timeout(), replica_atom::value,
                  caf::actor{}, true)
        .then([](caf::ok_atom) {}, [](caf::error&) {});
  }
}

} // namespace

caf::result<caf::ok_atom>
record_backups(coordinator_ptr self, uint32_t node_id,
               const std::vector<caf::actor>& backups,
               const std::vector<caf::actor>& relays) {
  auto& st = self->state;
  auto i = st.nodes.find(node_id);
  if (i == st.nodes.end() || i->second.role != role::server)
    return make_error(errc::bad_config, "replica: node "
                                          + std::to_string(node_id)
                                          + " did not join as a server");
  if (self->current_sender()->node() != i->second.node)
    return make_error(errc::unauthorized, "replica: node "
                                            + std::to_string(node_id)
                                            + " joined from another process");
  auto rank = i->second.rank;
  if (st.cfg.replicas < 2)
    return make_error(errc::bad_config,
                      "replica: server " + std::to_string(rank)
                        + " registers backups, but this job keeps no "
                          "replicas");
  // A replacement server's backups stay idle: the shards it would back up
  // have theirs, or went on without one.
  if (i->second.replacing)
    return caf::ok_atom::value;
  if (backups.empty() || relays.size() != backups.size())
    return make_error(errc::bad_config,
                      "replica: server " + std::to_string(rank) + " sent "
                        + std::to_string(backups.size()) + " backups and "
                        + std::to_string(relays.size()) + " relays");
  if (st.server_backups.empty()) {
    st.server_backups.resize(st.cfg.num_servers);
    st.server_backup_relays.resize(st.cfg.num_servers);
  }
  if (!st.server_backups[rank].empty())
    return make_error(errc::bad_config, "replica: server "
                                          + std::to_string(rank)
                                          + " registered its backups before");
  st.server_backups[rank] = backups;
  st.server_backup_relays[rank] = relays;
  for (auto& b : backups)
    self->monitor(b);
  return caf::ok_atom::value;
}

caf::result<caf::ok_atom> backup_lost(coordinator_ptr self, uint32_t shard) {
  auto& st = self->state;
  auto sender = self->current_sender();
  if (shard >= st.cfg.shards.size() || sender == nullptr
      || caf::actor_cast<caf::actor_addr>(sender)
           != st.cfg.shards[shard].address())
    return make_error(errc::unauthorized,
                      "backup_lost: the sender is not shard "
                        + std::to_string(shard));
  if (shard >= st.has_backup.size() || !st.has_backup[shard])
    return caf::ok_atom::value;
  st.has_backup[shard] = false;
  // The backup of shard `shard`: on the server after its primary's.
  for (uint32_t r = 0; r < st.server_shards.size(); ++r) {
    auto first = st.first_shard(r);
    if (shard < first || shard >= first + st.server_shards[r].size())
      continue;
    auto h = holder_of(st, r);
    auto i = shard - first;
    if (h < st.server_backups.size() && i < st.server_backups[h].size())
      self->send_exit(st.server_backups[h][i], caf::exit_reason::kill);
  }
  return caf::ok_atom::value;
}

void pair_replicas(coordinator_ptr self) {
  auto& st = self->state;
  st.has_backup.assign(st.cfg.shards.size(), false);
  if (st.cfg.replicas < 2 || st.cfg.num_servers < 2)
    return;
  for (uint32_t r = 0; r < st.cfg.num_servers; ++r) {
    auto h = holder_of(st, r);
    auto first = st.first_shard(r);
    auto& shards = st.server_shards[r];
    if (h >= st.server_backups.size()
        || st.server_backups[h].size() != shards.size()) {
      if (st.cfg.on_done)
        caf::anon_send(st.cfg.on_done, recover_atom::value, r,
                       recovery_event::unpaired,
                       std::string{"server "} + std::to_string(h)
                         + " registered none, or not as many (every server "
                           "needs the same --shards)");
      continue;
    }
    for (uint32_t i = 0; i < shards.size(); ++i) {
      auto g = first + i;
      auto primary = shards[i];
      auto backup = st.server_backups[h][i];
      ++st.pairing;
      // The backup learns its primary before the primary forwards anything.
      auto done = [self, h](bool ok, uint32_t g) {
        auto& st = self->state;
        // (A backup whose server died meanwhile holds nothing.)
        st.has_backup[g] = ok && !server_dead(st, h);
        if (--st.pairing == 0)
          release_routing(self);
      };
      self->request(backup, st.timeout(), replica_atom::value, primary, false)
        .then(
          [self, primary, backup, g, h, done](caf::ok_atom) {
            auto& st = self->state;
            // Over UCX, the forwards take the backup's server's plane (no
            // address: through CAF).
            auto address = st.cfg.transport == transport::ucx
                               && h < st.server_data.size()
                             ? st.server_data[h]
                             : std::string{};
            self
              ->request(primary, st.timeout(), replica_atom::value, backup,
                        true, address)
              .then([done, g](caf::ok_atom) { done(true, g); },
                    [done, g](caf::error&) { done(false, g); });
          },
          [done, g](caf::error&) { done(false, g); });
    }
  }
}

bool promote_backups(coordinator_ptr self, uint32_t rank) {
  auto& st = self->state;
  if (st.cfg.replicas < 2 || st.cfg.num_servers < 2 || !st.routing_ready
      || st.done || rank >= st.cfg.num_servers)
    return false;
  drop_backups_on(self, rank);
  auto h = holder_of(st, rank);
  auto first = st.first_shard(rank);
  std::vector<uint32_t> moving;
  for (uint32_t i = 0; i < st.server_shards[rank].size(); ++i) {
    auto g = first + i;
    // (Shards of this rank already promoted elsewhere died with this
    // server: nothing holds them now.)
    if (g < st.has_backup.size() && st.has_backup[g]
        && st.table.shards[g] == st.server_shards[rank][i])
      moving.push_back(i);
  }
  if (moving.empty() || server_dead(st, h)) {
    if (st.cfg.on_done)
      caf::anon_send(st.cfg.on_done, recover_atom::value, rank,
                     recovery_event::given_up,
                     std::string{"its shards' backups are gone too"});
    // Without replacements, the calls waiting for them fail now.
    if (st.cfg.recovery_timeout.count() <= 0)
      fail_reroutes(self, make_error(errc::dead_node,
                                     "server " + std::to_string(rank)
                                       + " went down and its shards' backups "
                                         "are gone too"));
    return false;
  }
  // Counts the answers; the table goes out once all came.
  struct progress {
    size_t pending = 0;
    size_t promoted = 0;
    caf::error failure;
  };
  auto p = std::make_shared<progress>();
  p->pending = moving.size();
  auto finish = [self, rank, h, p] {
    auto& st = self->state;
    if (p->promoted == 0) {
      auto err = make_error(errc::dead_node,
                            "server " + std::to_string(rank)
                              + " went down and its backups could not take "
                                "over: "
                              + render(p->failure));
      if (st.cfg.on_done)
        caf::anon_send(st.cfg.on_done, recover_atom::value, rank,
                       recovery_event::given_up, render(p->failure));
      fail_reroutes(self, err);
      return;
    }
    // Workers connect to the shards' server by this endpoint.
    st.table.servers[rank] = st.server_endpoints[h];
    ++st.table.version;
    announce_workers(self);
    if (st.cfg.on_done)
      caf::anon_send(
        st.cfg.on_done, recover_atom::value, rank, recovery_event::promoted,
        "server " + std::to_string(h)
          + (p->failure ? " (not every shard: " + render(p->failure) + ")"
                        : std::string{}));
    auto waiters = std::move(st.reroute_waiters);
    st.reroute_waiters.clear();
    for (auto& w : waiters)
      w.deliver(st.table);
  };
  for (auto i : moving) {
    auto g = first + i;
    st.has_backup[g] = false;
    // A server declared dead while it still runs (stopped, cut off) must
    // not serve beside its promoted backup when it comes back.
    self->send_exit(st.server_shards[rank][i], caf::exit_reason::kill);
    self->request(st.server_backups[h][i], st.timeout(), promote_atom::value)
      .then(
        [self, h, i, g, p, finish](caf::ok_atom) {
          auto& st = self->state;
          auto b = st.server_backups[h][i];
          st.table.shards[g] = b;
          st.table.relays[g] = st.server_backup_relays[h][i];
          if (st.cfg.transport == transport::ucx)
            st.table.data_addresses[g] = st.server_data[h];
          st.cfg.shards[g] = caf::actor_cast<shard_actor>(b);
          st.shard_dead[g] = false;
          // It saw every operation: workers keep their numbering.
          if (g < st.table.restarted.size())
            st.table.restarted[g] = 0;
          ++p->promoted;
          if (--p->pending == 0)
            finish();
        },
        [p, finish](caf::error& err) {
          p->failure = std::move(err);
          if (--p->pending == 0)
            finish();
        });
  }
  return true;
}

} // namespace actorps
