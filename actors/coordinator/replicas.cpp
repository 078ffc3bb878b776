// SPDX-License-Identifier: BSD-3-Clause
// Replicas, the coordinator's half: backups register, are paired with their
// primaries before the routing table goes out, and are promoted when their
// primaries' server dies (see coordinator.hpp, "Replicas").
#include "actors/coordinator/state.hpp"

#include <functional>
#include <map>
#include <memory>
#include <optional>
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

// The server holding copy `j` (0: the first backup) of server `rank`'s
// shards at the start: the next servers after it.
uint32_t holder_of(const coordinator_state& st, uint32_t rank, uint32_t j) {
  return (rank + 1 + j) % st.cfg.num_servers;
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

using chain = std::vector<coordinator_state::backup_slot>;

// Where `backup` stands in shard `g`'s chain, or none.
std::optional<size_t> position(const coordinator_state& st, uint32_t g,
                               const caf::actor& backup) {
  if (g >= st.backup_slots.size() || !backup)
    return std::nullopt;
  auto& c = st.backup_slots[g];
  for (size_t j = 0; j < c.size(); ++j)
    if (c[j].backup == backup)
      return j;
  return std::nullopt;
}

// Who forwards to copy `j` of shard `g`: its primary, or the copy before.
caf::actor upstream_of(const coordinator_state& st, uint32_t g, size_t j) {
  if (j == 0)
    return caf::actor_cast<caf::actor>(st.cfg.shards[g]);
  return st.backup_slots[g][j - 1].backup;
}

void pair_one(coordinator_ptr self, uint32_t g, caf::actor backup,
              std::function<void(bool)> done);

// Copy `j` of shard `g` is gone (its server died, it failed or was lost):
// it leaves the chain (ended, unless `dead`: never promoted behind the
// others), the copy before it goes on without it, and the copy after it,
// if any, takes the whole state of the one before (see pair_one).
void cut(coordinator_ptr self, uint32_t g, size_t j, bool dead) {
  auto& st = self->state;
  auto& c = st.backup_slots[g];
  if (j >= c.size())
    return;
  auto gone = c[j];
  auto up = upstream_of(st, g, j);
  c.erase(c.begin() + static_cast<std::ptrdiff_t>(j));
  if (!dead)
    self->send_exit(gone.backup, caf::exit_reason::kill);
  // (A dead one hears nothing; one that already knows answers all the same.)
  if (up && !(j == 0 && st.shard_dead[g]))
    self->request(up, st.timeout(), replica_atom::value, caf::actor{}, true)
      .then([](caf::ok_atom) {}, [](caf::error&) {});
  if (j < c.size())
    pair_one(self, g, c[j].backup, [](bool) {});
}

// Pairs copy `backup` of shard `g` (in its chain already) with the copy
// before it (the backup learns who that is first, then that one sends it
// its whole state); `done` hears whether it worked. The copy counts for
// promotion only once it took the state.
void pair_one(coordinator_ptr self, uint32_t g, caf::actor backup,
              std::function<void(bool)> done) {
  auto& st = self->state;
  auto j = position(st, g, backup);
  if (!j) {
    done(false);
    return;
  }
  st.backup_slots[g][*j].ready = false;
  // (Handles travel untyped.)
  auto up = upstream_of(st, g, *j);
  // A copy cut meanwhile (it died, or was paired anew) is left.
  auto failed = [self, g, backup, up, done](caf::error&) {
    auto& st = self->state;
    auto j = position(st, g, backup);
    if (j && upstream_of(st, g, *j) == up)
      cut(self, g, *j, false);
    done(false);
  };
  // Over UCX, the forwards take the planes of the two copies' servers
  // (no address: through CAF); the backup takes them from its upstream's
  // server only.
  auto data_of = [&st](uint32_t holder) {
    return st.cfg.transport == transport::ucx && holder < st.server_data.size()
             ? st.server_data[holder]
             : std::string{};
  };
  auto up_holder = *j == 0 ? st.primary_on[g]
                           : st.backup_slots[g][*j - 1].holder;
  auto address = data_of(st.backup_slots[g][*j].holder);
  self
    ->request(backup, st.timeout(), replica_atom::value, up, false,
              data_of(up_holder))
    .then(
      [self, up, backup, g, done, failed, address](caf::ok_atom) {
        auto& st = self->state;
        auto j = position(st, g, backup);
        if (!j || upstream_of(st, g, *j) != up) {
          done(false);
          return;
        }
        self
          ->request(up, pairing_timeout(st), replica_atom::value, backup, true,
                    address)
          .then(
            [self, g, backup, up, done](caf::ok_atom) {
              auto& st = self->state;
              auto j = position(st, g, backup);
              // (A backup whose server died meanwhile holds nothing.)
              bool ok = j && upstream_of(st, g, *j) == up
                        && !server_dead(st, st.backup_slots[g][*j].holder);
              if (ok)
                st.backup_slots[g][*j].ready = true;
              done(ok);
            },
            failed);
      },
      failed);
}

// The copies held on server `rank` (dead) leave their chains.
void cut_copies_on(coordinator_ptr self, uint32_t rank) {
  auto& st = self->state;
  for (uint32_t g = 0; g < st.backup_slots.size(); ++g) {
    auto& c = st.backup_slots[g];
    for (size_t j = 0; j < c.size(); ++j)
      if (c[j].holder == rank) {
        cut(self, g, j, true);
        break;
      }
  }
}

} // namespace

void cut_copy(coordinator_ptr self, const caf::actor_addr& backup) {
  auto& st = self->state;
  for (uint32_t g = 0; g < st.backup_slots.size(); ++g) {
    auto& c = st.backup_slots[g];
    for (size_t j = 0; j < c.size(); ++j)
      if (c[j].backup.address() == backup) {
        cut(self, g, j, true);
        return;
      }
  }
}

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
  auto from = caf::actor_cast<caf::actor_addr>(sender);
  // The primary of the shard, or one of its copies (a chain's middle).
  std::optional<size_t> j;
  if (shard < st.cfg.shards.size() && sender != nullptr) {
    if (from == st.cfg.shards[shard].address())
      j = 0;
    else if (shard < st.backup_slots.size())
      for (size_t k = 0; k < st.backup_slots[shard].size(); ++k)
        if (st.backup_slots[shard][k].backup.address() == from)
          j = k + 1;
  }
  if (!j)
    return make_error(errc::unauthorized,
                      "backup_lost: the sender is no copy of shard "
                        + std::to_string(shard));
  // (A copy being paired with it is not the one it lost: the pairing says
  // itself whether it failed.)
  auto& c = st.backup_slots[shard];
  if (*j < c.size() && c[*j].ready)
    cut(self, shard, *j, false);
  return caf::ok_atom::value;
}

void pair_replicas(coordinator_ptr self) {
  auto& st = self->state;
  st.backup_slots.assign(st.cfg.shards.size(), {});
  st.primary_on.assign(st.cfg.shards.size(), 0);
  for (uint32_t r = 0; r < st.server_shards.size(); ++r)
    for (uint32_t i = 0; i < st.server_shards[r].size(); ++i)
      st.primary_on[st.first_shard(r) + i] = r;
  if (st.cfg.replicas < 2 || st.cfg.num_servers < st.cfg.replicas)
    return;
  for (uint32_t r = 0; r < st.cfg.num_servers; ++r) {
    auto first = st.first_shard(r);
    auto n = st.server_shards[r].size();
    bool complete = true;
    // Copy j of each shard lives on the j-th server after it; server h
    // registered its copies of the server before it first, then of the
    // one before that.
    for (uint32_t j = 0; j + 1 < st.cfg.replicas; ++j) {
      auto h = holder_of(st, r, j);
      if (h >= st.server_backups.size()
          || st.server_backups[h].size() != (st.cfg.replicas - 1) * n) {
        if (st.cfg.on_done)
          caf::anon_send(st.cfg.on_done, recover_atom::value, r,
                         recovery_event::unpaired,
                         std::string{"server "} + std::to_string(h)
                           + " registered none, or not as many (every server "
                             "needs the same --shards)");
        complete = false;
        break;
      }
      for (uint32_t i = 0; i < n; ++i)
        st.backup_slots[first + i].push_back(coordinator_state::backup_slot{
          st.server_backups[h][j * n + i],
          st.server_backup_relays[h][j * n + i], h, false});
    }
    if (!complete) {
      for (uint32_t i = 0; i < n; ++i)
        st.backup_slots[first + i].clear();
      continue;
    }
    for (uint32_t i = 0; i < n; ++i)
      for (auto& slot : st.backup_slots[first + i]) {
        ++st.pairing;
        pair_one(self, first + i, slot.backup, [self](bool) {
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
  cut_copies_on(self, rank);
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
    // Each shard's first copy takes over (its own copies stay behind it),
    // all on one server: workers find a rank's shards at one endpoint.
    std::vector<uint32_t> moving;
    std::optional<uint32_t> to;
    for (auto g : shards) {
      auto& c = st.backup_slots[g];
      if (c.empty() || !c.front().ready || server_dead(st, c.front().holder)
          || (to && *to != c.front().holder))
        break;
      to = c.front().holder;
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
    p->holder = st.backup_slots[moving.front()].front().holder;
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
      auto slot = st.backup_slots[g].front();
      st.backup_slots[g].erase(st.backup_slots[g].begin());
      // A server declared dead while it still runs (stopped, cut off) must
      // not serve beside its promoted backup when it comes back.
      self->send_exit(st.table.shards[g], caf::exit_reason::kill);
      // The chain's head from now on (its copies' pairings and reports
      // name it), even before it answers.
      st.cfg.shards[g] = caf::actor_cast<shard_actor>(slot.backup);
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
    // Every shard of the rank lives on elsewhere, short of a copy.
    bool all = !st.server_shards[r].empty();
    for (uint32_t i = 0; all && i < st.server_shards[r].size(); ++i) {
      auto g = st.first_shard(r) + i;
      all = g < st.backup_slots.size() && !st.shard_dead[g]
            && st.backup_slots[g].size() + 1 < st.cfg.replicas
            && !server_dead(st, st.primary_on[g]);
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
  auto n = st.server_shards[rank].size();
  if (shards.size() != n || rank >= st.server_backups.size()
      || st.server_backups[rank].size() != (st.cfg.replicas - 1) * n)
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
  // previous ranks, wherever their primaries are now, if they lack one.
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
  // Each copy joins the end of its shard's chain (after the primary or the
  // last copy, which sends it its whole state).
  auto pair_rank = [&](uint32_t r, const caf::actor* backups,
                       const caf::actor* backup_relays) {
    for (uint32_t i = 0; i < n; ++i) {
      auto g = st.first_shard(r) + i;
      // (Only behind a copy that holds its whole state: one still taking it
      // would pass on a part of it.)
      if (g >= st.backup_slots.size() || st.shard_dead[g]
          || st.backup_slots[g].size() + 1 >= st.cfg.replicas
          || (!st.backup_slots[g].empty() && !st.backup_slots[g].back().ready)
          || st.primary_on[g] == rank || server_dead(st, st.primary_on[g]))
        continue;
      ++p->pending;
      ++p->tried;
      st.backup_slots[g].push_back(coordinator_state::backup_slot{
        backups[i], backup_relays[i], rank, false});
      pair_one(self, g, backups[i], done);
    }
  };
  pair_rank(rank, shards.data(), relays.data());
  // Its backups: those of the server before it first, then of the one
  // before that (as at the start).
  auto& mine = st.server_backups[rank];
  auto& mine_relays = st.server_backup_relays[rank];
  for (uint32_t j = 0; j + 1 < st.cfg.replicas; ++j) {
    auto r = (rank + st.cfg.num_servers - 1 - j) % st.cfg.num_servers;
    if (r != rank)
      pair_rank(r, mine.data() + j * n, mine_relays.data() + j * n);
  }
  done(false);
  return rp;
}

} // namespace actorps
