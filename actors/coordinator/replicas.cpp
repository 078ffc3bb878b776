// SPDX-License-Identifier: BSD-3-Clause
// Replicas, the coordinator's half: backups register, are paired with their
// primaries before the routing table goes out, and are promoted when their
// primaries' server dies (see coordinator.hpp, "Replicas").
#include "actors/coordinator/state.hpp"

#include <functional>
#include <map>
#include <memory>
#include <set>
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

// The server holding the backups of server `rank`'s shards at the start.
uint32_t holder_of(const coordinator_state& st, uint32_t rank) {
  return (rank + 1) % st.cfg.num_servers;
}

bool server_dead(const coordinator_state& st, uint32_t rank) {
  auto i = st.nodes.find(server_node_id(rank));
  return i == st.nodes.end() || i->second.dead;
}

// How long a primary may take to answer its pairing: it first sends its
// whole state to the backup, part after part, each within the replica
// timeout (it answers with an error if one is late), so no bound here.
caf::duration pairing_timeout(const coordinator_state&) {
  return caf::duration{std::chrono::seconds{86400}};
}

// The primaries backed up on server `rank` lost their backups: they go on
// alone.
void drop_backups_on(coordinator_ptr self, uint32_t rank) {
  auto& st = self->state;
  for (uint32_t g = 0; g < st.backup_slots.size(); ++g) {
    auto& slot = st.backup_slots[g];
    if (!slot.backup || slot.holder != rank)
      continue;
    slot = coordinator_state::backup_slot{};
    // (A primary that is dead too hears nothing.)
    if (!st.shard_dead[g])
      self
        ->request(st.cfg.shards[g], st.timeout(), replica_atom::value,
                  caf::actor{}, true)
        .then([](caf::ok_atom) {}, [](caf::error&) {});
  }
}

// Pairs the primary of shard `g` with `backup` on server `holder` (the
// backup learns its primary first, then the primary sends it its state);
// `done` hears whether it worked. The backup counts for promotion only
// once the primary answered.
void pair_one(coordinator_ptr self, uint32_t g, caf::actor backup,
              caf::actor relay, uint32_t holder,
              std::function<void(bool)> done) {
  auto& st = self->state;
  // (Handles travel untyped.)
  auto primary = caf::actor_cast<caf::actor>(st.cfg.shards[g]);
  st.backup_slots[g] = coordinator_state::backup_slot{backup, relay, holder,
                                                      false};
  // A slot taken over meanwhile (the backup died, another pairing) is left.
  auto failed = [self, g, backup, done](caf::error&) {
    auto& slot = self->state.backup_slots[g];
    if (slot.backup == backup)
      slot = coordinator_state::backup_slot{};
    done(false);
  };
  self->request(backup, st.timeout(), replica_atom::value, primary, false)
    .then(
      [self, primary, backup, g, holder, done, failed](caf::ok_atom) {
        auto& st = self->state;
        // Over UCX, the forwards take the backup's server's plane (no
        // address: through CAF).
        auto address = st.cfg.transport == transport::ucx
                           && holder < st.server_data.size()
                         ? st.server_data[holder]
                         : std::string{};
        self
          ->request(primary, pairing_timeout(st), replica_atom::value, backup,
                    true, address)
          .then(
            [self, g, backup, holder, done](caf::ok_atom) {
              auto& st = self->state;
              auto& slot = st.backup_slots[g];
              // (A backup whose server died meanwhile holds nothing.)
              bool ok = slot.backup == backup && !server_dead(st, holder);
              if (slot.backup == backup)
                slot.ready = ok;
              done(ok);
            },
            failed);
      },
      failed);
}

} // namespace

bool holds_primaries(const coordinator_state& st, uint32_t rank) {
  for (uint32_t g = 0; g < st.primary_on.size(); ++g)
    if (st.primary_on[g] == rank)
      return true;
  return false;
}

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
  // (A server rebuilding replicas takes the place of the dead one's.)
  if (!st.server_backups[rank].empty() && !i->second.rebuilding)
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
  if (shard >= st.backup_slots.size() || !st.backup_slots[shard].backup)
    return caf::ok_atom::value;
  // Ended, so that it is never promoted behind its primary.
  self->send_exit(st.backup_slots[shard].backup, caf::exit_reason::kill);
  st.backup_slots[shard] = coordinator_state::backup_slot{};
  return caf::ok_atom::value;
}

void pair_replicas(coordinator_ptr self) {
  auto& st = self->state;
  st.backup_slots.assign(st.cfg.shards.size(), {});
  st.primary_on.assign(st.cfg.shards.size(), 0);
  for (uint32_t r = 0; r < st.server_shards.size(); ++r)
    for (uint32_t i = 0; i < st.server_shards[r].size(); ++i)
      st.primary_on[st.first_shard(r) + i] = r;
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
      ++st.pairing;
      pair_one(self, first + i, st.server_backups[h][i],
               st.server_backup_relays[h][i], h, [self](bool) {
                 if (--self->state.pairing == 0)
                   release_routing(self);
               });
    }
  }
}

bool promote_backups(coordinator_ptr self, uint32_t rank) {
  auto& st = self->state;
  if (st.cfg.replicas < 2 || st.cfg.num_servers < 2 || !st.routing_ready
      || st.done || rank >= st.cfg.num_servers)
    return false;
  drop_backups_on(self, rank);
  // The primaries the dead server held, by the rank whose shards they
  // are (their own server's, or another's it had taken over).
  std::map<uint32_t, std::vector<uint32_t>> held;
  for (uint32_t r = 0; r < st.server_shards.size(); ++r)
    for (uint32_t i = 0; i < st.server_shards[r].size(); ++i) {
      auto g = st.first_shard(r) + i;
      if (g < st.primary_on.size() && st.primary_on[g] == rank)
        held[r].push_back(g);
    }
  // (A server that held no primary, one rebuilding replicas, lost nothing.)
  if (held.empty())
    return true;
  bool own_lost = false;
  // One event for the dead server once every rank it held moved (a loss
  // then counts as made up for), none if one did not.
  struct overall {
    size_t ranks = 0;
    bool lost = false;
    std::set<uint32_t> holders;
  };
  auto all = std::make_shared<overall>();
  for (auto& [r, shards] : held) {
    std::vector<uint32_t> moving;
    for (auto g : shards) {
      auto& slot = st.backup_slots[g];
      if (slot.backup && slot.ready && !server_dead(st, slot.holder))
        moving.push_back(g);
    }
    if (moving.size() != shards.size()) {
      if (st.cfg.on_done)
        caf::anon_send(st.cfg.on_done, recover_atom::value, r,
                       recovery_event::given_up,
                       std::string{"its shards' backups are gone too"});
      // Without replacements, the calls waiting for them fail now.
      if (st.cfg.recovery_timeout.count() <= 0)
        fail_reroutes(self, make_error(errc::dead_node,
                                       "server " + std::to_string(r)
                                         + " went down and its shards' "
                                           "backups are gone too"));
      // A replacement restores this rank from its checkpoint (its own
      // server's shards only: those of another rank stay lost).
      own_lost = own_lost || r == rank;
      all->lost = true;
      continue;
    }
    // Counts the answers; the table goes out once all came.
    struct progress {
      size_t pending = 0;
      size_t promoted = 0;
      caf::error failure;
      uint32_t holder = 0;
    };
    auto p = std::make_shared<progress>();
    p->pending = moving.size();
    p->holder = st.backup_slots[moving.front()].holder;
    ++all->ranks;
    auto finish = [self, r, p, all, rank] {
      auto& st = self->state;
      auto settle = [&] {
        if (--all->ranks > 0 || all->lost || !st.cfg.on_done)
          return;
        std::string what;
        for (auto h : all->holders)
          what += (what.empty() ? "server " : " and server ")
                  + std::to_string(h);
        caf::anon_send(st.cfg.on_done, recover_atom::value, rank,
                       recovery_event::promoted, what);
      };
      if (p->failure)
        all->lost = true;
      if (p->promoted == 0) {
        settle();
        auto err = make_error(errc::dead_node,
                              "server " + std::to_string(r)
                                + " went down and its backups could not take "
                                  "over: "
                                + render(p->failure));
        if (st.cfg.on_done)
          caf::anon_send(st.cfg.on_done, recover_atom::value, r,
                         recovery_event::given_up, render(p->failure));
        fail_reroutes(self, err);
        return;
      }
      // Workers connect to the shards' server by this endpoint.
      st.table.servers[r] = st.server_endpoints[p->holder];
      ++st.table.version;
      announce_workers(self);
      all->holders.insert(p->holder);
      if (p->failure && st.cfg.on_done)
        caf::anon_send(st.cfg.on_done, recover_atom::value, r,
                       recovery_event::given_up,
                       "not every shard: " + render(p->failure));
      settle();
      auto waiters = std::move(st.reroute_waiters);
      st.reroute_waiters.clear();
      for (auto& w : waiters)
        w.deliver(st.table);
    };
    for (auto g : moving) {
      auto slot = st.backup_slots[g];
      st.backup_slots[g] = coordinator_state::backup_slot{};
      // A server declared dead while it still runs (stopped, cut off) must
      // not serve beside its promoted backup when it comes back.
      self->send_exit(st.table.shards[g], caf::exit_reason::kill);
      self->request(slot.backup, st.timeout(), promote_atom::value)
        .then(
          [self, slot, g, p, finish](caf::ok_atom) {
            auto& st = self->state;
            st.table.shards[g] = slot.backup;
            st.table.relays[g] = slot.relay;
            if (st.cfg.transport == transport::ucx)
              st.table.data_addresses[g] = st.server_data[slot.holder];
            st.cfg.shards[g] = caf::actor_cast<shard_actor>(slot.backup);
            st.shard_dead[g] = false;
            st.primary_on[g] = slot.holder;
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
  }
  return !own_lost;
}

caf::expected<uint32_t> rebuildable_server(coordinator_ptr self) {
  auto& st = self->state;
  if (st.cfg.replicas < 2 || st.done || !st.routing_ready)
    return make_error(errc::bad_config, "join: no replica to rebuild");
  for (uint32_t r = 0; r < st.server_shards.size(); ++r) {
    if (!server_dead(st, r) || holds_primaries(st, r))
      continue;
    // Every shard of the rank lives on elsewhere, without a backup.
    bool all = !st.server_shards[r].empty();
    for (uint32_t i = 0; all && i < st.server_shards[r].size(); ++i) {
      auto g = st.first_shard(r) + i;
      all = g < st.backup_slots.size() && !st.shard_dead[g]
            && !st.backup_slots[g].backup && !server_dead(st, st.primary_on[g]);
    }
    if (all)
      return r;
  }
  return make_error(errc::bad_config,
                    "join: no dead server's shards lack a backup");
}

caf::result<caf::ok_atom>
register_rebuild(coordinator_ptr self, coordinator_state::node_entry& node,
                 const std::vector<caf::actor>& shards,
                 const std::vector<caf::actor>& relays,
                 const std::string& endpoint, const std::string& data_address) {
  auto& st = self->state;
  auto rank = node.rank;
  auto prev = (rank + st.cfg.num_servers - 1) % st.cfg.num_servers;
  if (shards.size() != st.server_shards[rank].size()
      || rank >= st.server_backups.size()
      || st.server_backups[rank].size() != st.server_shards[prev].size())
    return make_error(
      errc::bad_config,
      "shards: server " + std::to_string(rank) + " rebuilds replicas with "
        + std::to_string(shards.size()) + " shards, the server it replaces ran "
        + std::to_string(st.server_shards[rank].size())
        + " (start it with --shards "
        + std::to_string(st.server_shards[rank].size()) + ")");
  record_shards(self, node, shards, relays, endpoint, data_address);
  st.server_admitted[rank] = 0;
  send_admissions(self, rank);
  // Its shards back up those of its rank, its backups those of the
  // previous rank, wherever their primaries are now, if they lack one.
  struct progress {
    size_t pending = 1;
    size_t paired = 0;
    size_t tried = 0;
  };
  auto p = std::make_shared<progress>();
  auto rp = self->make_response_promise<caf::ok_atom>();
  auto done = [self, rank, p, rp, who = node.node](bool ok) mutable {
    if (ok)
      ++p->paired;
    if (--p->pending > 0)
      return;
    auto& st = self->state;
    // (A server that died meanwhile may have been followed by another for
    // the same rank: that one is left alone.)
    auto i = st.nodes.find(server_node_id(rank));
    if (i == st.nodes.end() || i->second.node != who || i->second.dead) {
      rp.deliver(make_error(errc::dead_node, "shards: the server went down"));
      return;
    }
    i->second.rebuilding = false;
    if (p->paired < p->tried) {
      // A rank is promoted whole or not at all: a partial copy would not
      // survive the next death, and this rank could not be rebuilt again
      // while this server lives. The server ends; another may try.
      rp.deliver(
        make_error(errc::dead_node, "shards: only " + std::to_string(p->paired)
                                      + " of " + std::to_string(p->tried)
                                      + " copies could be rebuilt"));
      return;
    }
    if (st.cfg.on_done)
      caf::anon_send(st.cfg.on_done, recover_atom::value, rank,
                     recovery_event::rebuilt,
                     std::to_string(p->paired) + " of "
                       + std::to_string(p->tried) + " shards");
    rp.deliver(caf::ok_atom::value);
  };
  auto pair_rank = [&](uint32_t r, const std::vector<caf::actor>& backups,
                       const std::vector<caf::actor>& backup_relays) {
    for (uint32_t i = 0; i < backups.size(); ++i) {
      auto g = st.first_shard(r) + i;
      if (g >= st.backup_slots.size() || st.shard_dead[g]
          || st.backup_slots[g].backup || st.primary_on[g] == rank
          || server_dead(st, st.primary_on[g]))
        continue;
      ++p->pending;
      ++p->tried;
      pair_one(self, g, backups[i], backup_relays[i], rank, done);
    }
  };
  pair_rank(rank, shards, relays);
  if (prev != rank)
    pair_rank(prev, st.server_backups[rank], st.server_backup_relays[rank]);
  done(false);
  return rp;
}

} // namespace actorps
