// SPDX-License-Identifier: BSD-3-Clause
// Supervision of the worker's shards and coordinator, and replacement
// servers, the worker's half: requests to a shard that went down
// wait for the coordinator's newer routing table, then go to the
// replacement shard in the order they were first sent, numbered afresh
// (see worker_config::recovery).
#include "actors/worker/state.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "caf/actor_cast.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/sec.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/system_messages.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "core/routing.hpp"
#include "messages/errors.hpp"

namespace actorps {

namespace {

// Shard `index` is down and its replacement awaited: later requests park
// in to_shard, and those in flight (each kept with a way to send it again
// when the job replaces servers) wait too, in the order they were sent.
void start_waiting(worker_ptr self, uint32_t index) {
  auto& st = self->state;
  if (!st.recovering[index]) {
    st.dead[index] = true;
    st.recovering[index] = true;
    if (st.cfg.channel && st.cfg.channel->carries(index))
      st.cfg.channel->shard_down(index);
    std::fprintf(
      stderr,
      "actorps: worker %u: shard %u is down; its calls wait up to "
      "%lld ms for %s\n",
      st.cfg.rank, index, static_cast<long long>(st.cfg.recovery.count()),
      st.cfg.replicas ? "its backup to take over" : "a replacement server");
  }
  for (auto& [id, retry] : st.retries[index])
    st.parked[index].emplace(id, std::move(retry));
  st.retries[index].clear();
  st.in_flight[index].clear();
}

// Sends what waited for shard `index` again, in the order it was first
// sent: to the replacement, or (the shard dead for good) into failure.
void send_parked(worker_ptr self, uint32_t index, const char* what) {
  auto& st = self->state;
  auto parked = std::move(st.parked[index]);
  st.parked[index].clear();
  std::fprintf(stderr, "actorps: worker %u: shard %u %s (%zu)\n", st.cfg.rank,
               index, what, parked.size());
  for (auto& kvp : parked)
    kvp.second();
}

// No replacement came: every parked request fails (to_shard finds the
// shard dead and not awaited).
void give_up_recovery(worker_ptr self, const std::string& why) {
  auto& st = self->state;
  for (uint32_t i = 0; i < st.recovering.size(); ++i) {
    if (!st.recovering[i])
      continue;
    st.recovering[i] = false;
    st.unreplaced[i] = why;
    send_parked(self, i, "was not replaced; its waiting requests fail");
  }
}

void ask_reroute(worker_ptr self);

// The shards `table` moves this worker's requests to (see
// core::moved_shards).
std::vector<uint32_t> moved_by(worker_ptr self, const routing_table& table) {
  auto& st = self->state;
  return core::moved_shards(st.cfg.shards, table.shards, table.version,
                            st.adopted_version,
                            [](const shard_actor& mine, const caf::actor& x) {
                              return caf::actor_cast<caf::actor>(mine) == x;
                            });
}

// Routes the shards that `table` gives new handles to their replacements
// and sends them what waited. (Asked again here: a second answer with the
// same or a newer table may have been adopted while this one's servers
// were reached.)
void adopt(worker_ptr self, const routing_table& table) {
  auto& st = self->state;
  auto changed = moved_by(self, table);
  st.cfg.routing_version = std::max(st.cfg.routing_version, table.version);
  st.adopted_version = std::max(st.adopted_version, table.version);
  for (auto i : changed) {
    // (Replaced before this worker saw it go down: it waits first.)
    start_waiting(self, i);
    st.cfg.shards[i] = caf::actor_cast<shard_actor>(table.shards[i]);
    self->monitor(st.cfg.shards[i]);
    if (i < st.cfg.relays.size() && i < table.relays.size()) {
      st.cfg.relays[i] = caf::actor_cast<shard_actor>(table.relays[i]);
      self->monitor(st.cfg.relays[i]);
    }
    if (st.cfg.channel && i < table.data_addresses.size())
      st.cfg.channel->reroute(i, table.data_addresses[i]);
    st.dead[i] = false;
    st.recovering[i] = false;
    st.unreplaced[i].clear();
    // A restored replacement numbers from 0; a promoted backup saw every
    // number.
    bool restarted = i < table.restarted.size() && table.restarted[i] != 0;
    if (restarted) {
      st.renumbered[i] = true;
      st.renumber[i].clear();
      tell_clocks(self, i);
    } else {
      ++st.promotions[i];
    }
    send_parked(self, i,
                restarted ? "moved to its replacement server; its "
                            "waiting requests go there"
                          : "moved to its promoted backup; its waiting "
                            "requests go there");
  }
  // Shards still down wait on.
  if (std::find(st.recovering.begin(), st.recovering.end(), true)
      != st.recovering.end())
    ask_reroute(self);
}

void apply_routing(worker_ptr self, routing_table table) {
  auto& st = self->state;
  if (table.shards.size() != st.cfg.shards.size() || table.servers.empty()) {
    give_up_recovery(self, "the coordinator's routing table names "
                             + std::to_string(table.shards.size())
                             + " shards, this worker knows "
                             + std::to_string(st.cfg.shards.size()));
    return;
  }
  std::set<std::string> endpoints;
  auto per_server = table.shards.size() / table.servers.size();
  auto changed = moved_by(self, table);
  for (auto i : changed)
    if (per_server > 0 && i / per_server < table.servers.size())
      endpoints.insert(table.servers[i / per_server]);
  if (changed.empty() || !st.cfg.reach_server) {
    adopt(self, table);
    return;
  }
  // This process connects to each new server directly (see
  // routing_table::servers), on a thread of its own: connecting blocks.
  auto reach = st.cfg.reach_server;
  std::vector<std::string> where(endpoints.begin(), endpoints.end());
  auto helper = self->spawn<caf::detached>(
    [reach, where](caf::event_based_actor* h) -> caf::behavior {
      return {
        [h, reach, where](routing_atom) -> caf::result<caf::ok_atom> {
          h->quit();
          for (auto& e : where)
            if (auto err = reach(e))
              return err;
          return caf::ok_atom::value;
        },
      };
    });
  // (Up to three tries per server, each bounded by the connection timeout.)
  auto version = table.version;
  self->request(helper, caf::duration{3 * st.cfg.timeout}, routing_atom::value)
    .then(
      [self, table = std::move(table)](caf::ok_atom) {
        self->state.reach_failure.clear();
        adopt(self, table);
      },
      [self, version](caf::error& err) {
        // The server it names may have died since (a second death before
        // this worker moved): a newer table routes around it, if one comes
        // within the recovery wait.
        auto& st = self->state;
        st.cfg.routing_version = std::max(st.cfg.routing_version, version);
        st.reach_failure = "cannot reach the replacement server: "
                           + render(err);
        ask_reroute(self);
      });
}

void ask_reroute(worker_ptr self) {
  auto& st = self->state;
  if (st.rerouting)
    return;
  st.rerouting = true;
  ask_coordinator<routing_table>(
    self, caf::duration{st.cfg.recovery + st.cfg.timeout},
    [self](routing_table& table) {
      self->state.rerouting = false;
      apply_routing(self, std::move(table));
    },
    [self](caf::error& err) {
      auto& st = self->state;
      st.rerouting = false;
      auto why = st.reach_failure.empty()
                   ? render(err)
                   : st.reach_failure + "; no newer routing came ("
                       + render(err) + ")";
      st.reach_failure.clear();
      give_up_recovery(self, why);
    },
    routing_atom::value, st.cfg.routing_version);
}

void tell_clocks_until(worker_ptr self, uint32_t index,
                       std::chrono::steady_clock::time_point deadline) {
  auto& st = self->state;
  std::vector<uint64_t> slices;
  std::vector<uint64_t> pushes;
  for (auto& [id, n] : st.acked[index]) {
    slices.push_back(id);
    pushes.push_back(n);
  }
  auto shard = st.cfg.shards[index];
  self
    ->request(shard, st.timeout(), clocks_atom::value, st.cfg.rank,
              std::move(slices), std::move(pushes),
              static_cast<bool>(st.clocks_unknown[index]))
    .then([](caf::ok_atom) {},
          [self, index, shard, deadline](caf::error& err) {
            auto& st = self->state;
            // (Replaced again meanwhile: the next one is told.)
            if (st.cfg.shards[index] != shard)
              return;
            if (err == caf::sec::request_timeout
                && std::chrono::steady_clock::now() < deadline) {
              tell_clocks_until(self, index, deadline);
              return;
            }
            // Refused: the shard took this worker where the others are, so
            // these counts no longer match its own.
            st.clocks_unknown[index] = true;
            std::fprintf(stderr,
                         "actorps: worker %u: shard %u's replacement did not "
                         "take this worker's clocks: %s\n",
                         st.cfg.rank, index, to_string(err).c_str());
          });
}

} // namespace

void tell_clocks(worker_ptr self, uint32_t index) {
  tell_clocks_until(
    self, index, std::chrono::steady_clock::now() + self->state.cfg.recovery);
}

caf::error shard_down_error(worker_ptr self, uint32_t index) {
  auto& why = self->state.unreplaced[index];
  if (why.empty())
    return dead_shard(index);
  return make_error(errc::dead_node, "shard " + std::to_string(index)
                                       + " is down and was not replaced (" + why
                                       + ")");
}

bool shard_gone(const caf::error& err) {
  if (err == caf::sec::request_receiver_down)
    return true;
  // The data channel's own failure when the connection to a shard's server
  // broke (runtime/ucx: "shard N is unreachable (...)"), not a shard's
  // answer.
  return code_of(err) == errc::dead_node
         && render(err).find(" is unreachable (") != std::string::npos;
}

void await_replacement(worker_ptr self, uint32_t index) {
  auto& st = self->state;
  start_waiting(self, index);
  // Queued requests park as they are sent.
  st.queues[index].pump();
  ask_reroute(self);
}

void on_shard_down(worker_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  if (dm.source == st.cfg.coordinator.address() && !st.coordinator_down) {
    st.coordinator_down = true;
    auto calls = std::move(st.coordinator_calls);
    st.coordinator_calls.clear();
    for (auto& kvp : calls) {
      auto err = lost_coordinator();
      kvp.second(err);
    }
  }
  for (uint32_t i = 0; i < st.cfg.shards.size(); ++i) {
    bool hit = st.cfg.shards[i].address() == dm.source
               || (i < st.cfg.relays.size()
                   && st.cfg.relays[i].address() == dm.source);
    if (!hit || st.dead[i])
      continue;
    if (st.cfg.recovery.count() > 0 && !st.coordinator_down && !st.leaving) {
      // Waits for a replacement server.
      await_replacement(self, i);
      continue;
    }
    st.dead[i] = true;
    if (st.cfg.channel && st.cfg.channel->carries(i))
      st.cfg.channel->shard_down(i);
    // Nothing is sent again: each request fails once, here.
    st.retries[i].clear();
    auto pending = std::move(st.in_flight[i]);
    st.in_flight[i].clear();
    for (auto& kvp : pending) {
      auto err = dead_shard(i);
      kvp.second(err);
    }
    // Queued requests fail as they are sent (the shard is marked dead).
    st.queues[i].pump();
  }
}

} // namespace actorps
