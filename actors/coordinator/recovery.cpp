// SPDX-License-Identifier: BSD-3-Clause
// Replacement servers: a server that joins a job which lost one takes its
// rank; its shards are made, loaded with their part of the newest
// checkpoint and only then routed to, and workers waiting for them get the
// new routing table (see coordinator.hpp, "Replacement servers").
#include "actors/coordinator/shards.hpp"
#include "actors/coordinator/state.hpp"

#include <chrono>
#include <map>
#include <memory>
#include <utility>

#include "caf/actor_cast.hpp"
#include "caf/binary_serializer.hpp"
#include "caf/send.hpp"

#include "core/optimizer.hpp"
#include "core/restore.hpp"
#include "core/rows.hpp"
#include "messages/errors.hpp"

namespace actorps {

namespace {

// One restore of a replacement server's shards, from the first request to
// the commit.
struct restore_job {
  uint32_t rank = 0;
  uint64_t generation = 0;
  // The load session on the new shards, and the next piece to ask the
  // runner for.
  uint64_t session = 0;
  uint64_t next = 0;
  // The new shards: their indices in the job's order and their handles.
  std::vector<uint32_t> targets;
  std::vector<shard_actor> shards;
  // Floats of each key cut to the new shards so far.
  std::map<std::string, uint64_t> covered;
  optimizer_config optimizer;
};

using restore_ptr = std::shared_ptr<restore_job>;

bool same_optimizer(caf::actor_system& sys, const optimizer_config& a,
                    const optimizer_config& b) {
  std::vector<char> x;
  std::vector<char> y;
  caf::binary_serializer sx{sys, x};
  caf::binary_serializer sy{sys, y};
  auto& ca = const_cast<optimizer_config&>(a);
  auto& cb = const_cast<optimizer_config&>(b);
  return !sx(ca) && !sy(cb) && x == y;
}

// Gives a recovery up for good: the dead server's shards stay dead.
void close_recovery(coordinator_ptr self, uint32_t rank,
                    const caf::error& err) {
  auto& rec = self->state.recoveries[rank];
  rec.open = false;
  caf::anon_send(self->state.cfg.on_done, recover_atom::value, rank,
                 recovery_event::given_up, render(err));
  fail_reroutes(self, err);
}

bool stale(coordinator_ptr self, const restore_ptr& job) {
  auto& rec = self->state.recoveries[job->rank];
  return !rec.restoring || rec.generation != job->generation;
}

// The restore failed: the replacement's registration fails (its process
// ends), its shards drop what they assembled, and the rank may be
// replaced again until the deadline.
void fail_restore(coordinator_ptr self, const restore_ptr& job,
                  caf::error err) {
  if (stale(self, job))
    return;
  auto& st = self->state;
  auto& rec = st.recoveries[job->rank];
  rec.restoring = false;
  rec.claimed = false;
  ++rec.generation;
  for (auto& s : job->shards)
    self->request(s, st.timeout(), load_atom::value, job->session, false)
      .then([](caf::ok_atom) {}, [](caf::error&) {});
  rec.registration.deliver(err);
  if (std::chrono::steady_clock::now() >= rec.deadline)
    close_recovery(self, job->rank, err);
}

// Sends `xs...` to every new shard (`per_shard(i)` builds shard i's
// messages: any number of them) and runs `then` once all answered.
template <class Make>
void to_new_shards(coordinator_ptr self, const restore_ptr& job, Make make,
                   std::function<void()> then) {
  struct tally {
    size_t left = 1;
    bool failed = false;
  };
  auto t = std::make_shared<tally>();
  auto arrive = [self, job, t, then] {
    if (--t->left == 0 && !t->failed && !stale(self, job))
      then();
  };
  auto fail = [self, job, t](caf::error& err) {
    if (t->failed)
      return;
    t->failed = true;
    fail_restore(self, job, std::move(err));
  };
  auto send = [&](size_t i, auto... xs) {
    ++t->left;
    self->request(job->shards[i], self->state.timeout(), std::move(xs)...)
      .then([arrive](caf::ok_atom) { arrive(); }, fail);
  };
  for (size_t i = 0; i < job->shards.size(); ++i)
    make(i, send);
  arrive();
}

void ask_runner(coordinator_ptr self, restore_ptr job);

// Cuts the runner's records to the new shards and hands them over; asks for
// the next piece, or commits after the last.
void take_records(coordinator_ptr self, restore_ptr job, load_piece& piece) {
  auto& st = self->state;
  auto shards = static_cast<uint32_t>(st.cfg.shards.size());
  auto per_float = core::state_size(job->optimizer, 1);
  std::map<uint32_t, std::vector<slice_record>> per_target;
  std::vector<std::pair<uint32_t, slice_record>> cut;
  for (auto& rec : piece.records) {
    auto k = st.keys.find(rec.key);
    // A key of the checkpoint this job no longer has: nothing to restore.
    if (k == st.keys.end() || !k->second.initialized)
      continue;
    cut.clear();
    if (auto res = core::cut_piece(rec, k->second.info, shards, per_float, cut);
        !res.ok()) {
      fail_restore(self, job, to_error(res));
      return;
    }
    for (auto& [shard, p] : cut)
      for (size_t i = 0; i < job->targets.size(); ++i)
        if (job->targets[i] == shard) {
          job->covered[rec.key] += p.value.data.size();
          per_target[static_cast<uint32_t>(i)].push_back(std::move(p));
        }
  }
  auto last = piece.end == load_piece::commit;
  to_new_shards(
    self, job,
    [&](size_t i, auto& send) {
      auto p = per_target.find(static_cast<uint32_t>(i));
      if (p != per_target.end())
        send(i, load_atom::value, job->session, std::move(p->second));
    },
    [self, job, last] {
      if (!last) {
        ask_runner(self, job);
        return;
      }
      // Every key the checkpoint holds must be whole on the new shards.
      auto& st = self->state;
      for (auto& [name, covered] : job->covered) {
        auto& info = st.keys[name].info;
        uint64_t expected = 0;
        core::row_layout layout{info.dim == 0 ? 0 : info.shape[0], info.dim,
                                static_cast<uint32_t>(st.cfg.shards.size())};
        for (auto& s : info.slices)
          for (auto t : job->targets)
            if (s.shard == t)
              expected += info.dim == 0 ? s.length
                                        : layout.rows_on(t) * info.dim;
        if (covered != expected) {
          fail_restore(
            self, job,
            make_error(errc::checkpoint_mismatch,
                       "restore: key '" + name + "': the checkpoint holds "
                         + std::to_string(covered) + " of its floats on server "
                         + std::to_string(job->rank) + ", needed "
                         + std::to_string(expected)));
          return;
        }
      }
      to_new_shards(
        self, job,
        [&](size_t i, auto& send) {
          send(i, load_atom::value, job->session, true);
        },
        [self, job] {
          auto& st = self->state;
          auto finish = [self, job] {
            auto& rec = self->state.recoveries[job->rank];
            rec.restoring = false;
            rec.restored = true;
            rec.what = "its slices of " + std::to_string(job->covered.size())
                       + " keys";
            publish_recoveries(self);
          };
          if (same_optimizer(self->system(), st.optimizer, job->optimizer)) {
            finish();
            return;
          }
          // Changed since the checkpoint: as the other shards, the new ones
          // run the current optimizer (from a fresh state, as set_optimizer
          // leaves every slice).
          auto opt = st.optimizer;
          to_new_shards(
            self, job,
            [&](size_t i, auto& send) { send(i, set_opt_atom::value, opt); },
            finish);
        });
    });
}

// Asks the runner for the next piece of the newest checkpoint.
void ask_runner(coordinator_ptr self, restore_ptr job) {
  auto& st = self->state;
  auto index = job->next++;
  self
    ->request(st.cfg.on_done, st.timeout(), load_atom::value, job->session,
              index)
    .then(
      [self, job, index](load_piece& piece) {
        if (stale(self, job))
          return;
        if (index > 0) {
          take_records(self, job, piece);
          return;
        }
        // The first piece names the optimizer: the session opens with it.
        job->optimizer = piece.optimizer;
        auto first = std::make_shared<load_piece>(std::move(piece));
        to_new_shards(
          self, job,
          [&](size_t i, auto& send) {
            send(i, load_atom::value, job->session, job->optimizer, true);
          },
          [self, job, first] { take_records(self, job, *first); });
      },
      [self, job](caf::error& err) {
        fail_restore(self, job,
                     make_error(code_of(err),
                                "restore: no checkpoint to restore server "
                                  + std::to_string(job->rank) + " from ("
                                  + render(err) + ")"));
      });
}

// One slice to make on a new shard: dense (zeros of `length`) or a table's
// part.
struct slice_to_make {
  size_t target = 0;
  slice_id id = 0;
  uint64_t length = 0;
  bool table = false;
  table_init rows;
};

// Makes the slices of `todo` from `next` on, at most `budget` floats of
// zeros under way at once (the coordinator never holds a server's model),
// then asks the runner for the checkpoint.
struct slice_maker {
  std::vector<slice_to_make> todo;
  size_t next = 0;
  size_t answered = 0;
  uint64_t under_way = 0;
  bool failed = false;
};

constexpr uint64_t make_budget = save_piece_bytes / sizeof(float);

void make_slices(coordinator_ptr self, restore_ptr job,
                 std::shared_ptr<slice_maker> m) {
  auto& st = self->state;
  if (m->answered == m->todo.size()) {
    ask_runner(self, job);
    return;
  }
  while (m->next < m->todo.size() && m->under_way < make_budget) {
    auto& x = m->todo[m->next++];
    auto on_ok = [self, job, m, length = x.length](caf::ok_atom) {
      if (m->failed || stale(self, job))
        return;
      ++m->answered;
      m->under_way -= length;
      make_slices(self, job, m);
    };
    auto on_err = [self, job, m](caf::error& err) {
      if (m->failed)
        return;
      m->failed = true;
      fail_restore(self, job, std::move(err));
    };
    auto& shard = job->shards[x.target];
    if (x.table) {
      self->request(shard, st.timeout(), init_atom::value, x.rows)
        .then(on_ok, on_err);
      continue;
    }
    m->under_way += x.length;
    self
      ->request(shard, st.timeout(), init_atom::value,
                slice_init{x.id, floats{std::vector<float>(x.length, 0.0f)}})
      .then(on_ok, on_err);
  }
}

// Makes the new shards: the live workers, that they wait for the workers'
// clocks, and every initialized key's slices there; then the checkpoint.
void start_restore(coordinator_ptr self, restore_ptr job) {
  auto& st = self->state;
  auto live = st.live_ranks();
  auto shards = static_cast<uint32_t>(st.cfg.shards.size());
  auto m = std::make_shared<slice_maker>();
  for (size_t i = 0; i < job->targets.size(); ++i) {
    auto index = job->targets[i];
    for (auto& [name, key] : st.keys) {
      if (!key.initialized)
        continue;
      auto& info = key.info;
      for (auto& s : info.slices) {
        if (s.shard != index)
          continue;
        slice_to_make x;
        x.target = i;
        x.id = make_slice_id(info.id, s.part);
        x.length = s.length;
        if (info.dim != 0) {
          core::row_layout layout{info.shape[0], info.dim, shards};
          x.table = true;
          x.length = 0;
          x.rows.slice = x.id;
          x.rows.rows = layout.rows_on(index);
          x.rows.dim = info.dim;
          x.rows.first = index;
          x.rows.stride = shards;
        }
        m->todo.push_back(std::move(x));
      }
    }
  }
  to_new_shards(
    self, job,
    [&](size_t i, auto& send) {
      send(i, workers_atom::value, live);
      // Rounds (dist_sync) and clocks (dist_ssp) start where the workers
      // are, once each told its own.
      send(i, clocks_atom::value);
    },
    [self, job, m] { make_slices(self, job, m); });
}

} // namespace

void fail_reroutes(coordinator_ptr self, const caf::error& err) {
  auto waiters = std::move(self->state.reroute_waiters);
  self->state.reroute_waiters.clear();
  for (auto& w : waiters)
    w.deliver(err);
}

void server_lost(coordinator_ptr self, uint32_t rank, bool replacement) {
  auto& st = self->state;
  if (promote_backups(self, rank))
    return;
  // Before every server registered there is no routing to replace.
  if (st.cfg.recovery_timeout.count() <= 0 || st.done || !st.cfg.on_done
      || !st.routing_ready)
    return;
  if (st.recoveries.size() < st.cfg.num_servers)
    st.recoveries.resize(st.cfg.num_servers);
  if (rank >= st.recoveries.size())
    return;
  auto& rec = st.recoveries[rank];
  if (rec.restoring || rec.restored) {
    // The replacement went down before it was published: its restore
    // stops; the rank may be replaced again until the deadline.
    ++rec.generation;
    rec.restoring = false;
    rec.restored = false;
    rec.claimed = false;
    auto err = make_error(errc::dead_node,
                          "restore: the replacement server went down");
    rec.registration.deliver(err);
    if (std::chrono::steady_clock::now() >= rec.deadline)
      close_recovery(self, rank, err);
    return;
  }
  if (rec.open || replacement) {
    // A replacement that joined went down before it registered (or after
    // its recovery ended): the rank is not opened again.
    rec.claimed = false;
    return;
  }
  rec.open = true;
  rec.claimed = false;
  rec.deadline = std::chrono::steady_clock::now() + st.cfg.recovery_timeout;
  caf::anon_send(st.cfg.on_done, recover_atom::value, rank,
                 recovery_event::waiting,
                 std::to_string(st.cfg.recovery_timeout.count()) + " ms");
  self->delayed_send(self, st.cfg.recovery_timeout, recover_atom::value, rank,
                     rec.generation);
}

caf::expected<uint32_t> replaceable_server(coordinator_ptr self) {
  auto& st = self->state;
  auto full = "join: the job already has its "
              + std::to_string(st.cfg.num_servers) + " servers";
  if (st.done)
    return make_error(errc::bad_config, full + " and is ending");
  // (The job's settings first: they hold whatever the state.)
  if (st.cfg.recovery_timeout.count() <= 0 || !st.cfg.on_done)
    return make_error(errc::bad_config,
                      full
                        + " (a dead server is replaced only in a job whose "
                          "coordinator runs with --recovery-timeout and "
                          "--checkpoint-dir)");
  if (!st.routing_ready)
    return make_error(errc::bad_config,
                      full + " (not all of them registered their shards yet)");
  auto now = std::chrono::steady_clock::now();
  for (uint32_t r = 0; r < st.recoveries.size(); ++r) {
    auto& rec = st.recoveries[r];
    if (rec.open && !rec.claimed && now < rec.deadline) {
      // One replacement at a time holds the rank.
      rec.claimed = true;
      return r;
    }
  }
  return make_error(errc::bad_config,
                    full
                      + " and none of them may be replaced (none died, or "
                        "one died longer than --recovery-timeout ago)");
}

caf::result<caf::ok_atom>
register_replacement(coordinator_ptr self, coordinator_state::node_entry& node,
                     const std::vector<caf::actor>& shards,
                     const std::vector<caf::actor>& relays,
                     const std::string& endpoint,
                     const std::string& data_address) {
  auto& st = self->state;
  auto rank = node.rank;
  if (rank >= st.recoveries.size() || !st.recoveries[rank].open
      || !st.recoveries[rank].claimed || st.recoveries[rank].restoring
      || st.recoveries[rank].restored)
    return make_error(errc::bad_config, "shards: server " + std::to_string(rank)
                                          + " cannot be replaced now");
  if (shards.size() != st.server_shards[rank].size()) {
    // Another server may try.
    st.recoveries[rank].claimed = false;
    return make_error(
      errc::bad_config,
      "shards: the replacement of server " + std::to_string(rank) + " runs "
        + std::to_string(shards.size()) + " shards, the server it replaces ran "
        + std::to_string(st.server_shards[rank].size())
        + " (start it with --shards "
        + std::to_string(st.server_shards[rank].size()) + ")");
  }
  auto& rec = st.recoveries[rank];
  rec.restoring = true;
  rec.registration = self->make_response_promise<caf::ok_atom>();
  auto job = std::make_shared<restore_job>();
  job->rank = rank;
  job->generation = rec.generation;
  job->session = ++st.last_session;
  auto first = st.first_shard(rank);
  for (uint32_t i = 0; i < shards.size(); ++i) {
    job->targets.push_back(first + i);
    job->shards.push_back(caf::actor_cast<shard_actor>(shards[i]));
  }
  // The new handles wait beside the table until published.
  record_shards(self, node, shards, relays, endpoint, data_address);
  st.server_admitted[rank] = 0;
  send_admissions(self, rank);
  start_restore(self, job);
  return rec.registration;
}

void publish_recoveries(coordinator_ptr self) {
  auto& st = self->state;
  bool any = false;
  for (uint32_t rank = 0; rank < st.recoveries.size(); ++rank) {
    auto& rec = st.recoveries[rank];
    if (!rec.restored || st.server_admitted[rank] < st.admit_version)
      continue;
    auto first = st.first_shard(rank);
    auto& shards = st.server_shards[rank];
    for (uint32_t i = 0; i < shards.size(); ++i) {
      auto g = first + i;
      st.table.shards[g] = shards[i];
      st.table.relays[g] = st.server_relays[rank][i];
      if (st.cfg.transport == transport::ucx)
        st.table.data_addresses[g] = st.server_data[rank];
      st.cfg.shards[g] = caf::actor_cast<shard_actor>(shards[i]);
      st.shard_dead[g] = false;
      // A restored shard numbers every worker's operations from 0.
      if (g < st.table.restarted.size())
        st.table.restarted[g] = 1;
    }
    st.table.servers[rank] = st.server_endpoints[rank];
    rec.restored = false;
    rec.open = false;
    rec.claimed = false;
    auto i = st.nodes.find(server_node_id(rank));
    if (i != st.nodes.end())
      i->second.replacing = false;
    rec.registration.deliver(caf::ok_atom::value);
    caf::anon_send(st.cfg.on_done, recover_atom::value, rank,
                   recovery_event::replaced, rec.what);
    any = true;
  }
  if (!any)
    return;
  ++st.table.version;
  // Workers that died during the restore are dropped there too.
  announce_workers(self);
  auto waiters = std::move(st.reroute_waiters);
  st.reroute_waiters.clear();
  for (auto& w : waiters)
    w.deliver(st.table);
}

caf::result<routing_table> newer_routing(coordinator_ptr self,
                                         uint64_t version) {
  auto& st = self->state;
  if (st.table.version > version)
    return st.table;
  auto replaces = st.cfg.recovery_timeout.count() > 0 && st.cfg.on_done;
  if (st.done || (!replaces && st.cfg.replicas < 2))
    return make_error(errc::dead_node,
                      "routing: this job replaces no dead server");
  // A worker asks once per death it sees: more waiters than a few per
  // worker is a node that asks again and again.
  if (st.reroute_waiters.size() >= 4 * size_t{st.cfg.num_workers} + 64)
    return make_error(errc::bad_config,
                      "routing: too many requests for a newer routing table");
  // Also when the coordinator has not seen the death yet: the requester's
  // own timeout bounds the wait.
  auto rp = self->make_response_promise<routing_table>();
  st.reroute_waiters.push_back(rp);
  return rp;
}

void recovery_deadline(coordinator_ptr self, uint32_t rank) {
  auto& st = self->state;
  if (rank >= st.recoveries.size())
    return;
  auto& rec = st.recoveries[rank];
  if (!rec.open || std::chrono::steady_clock::now() < rec.deadline)
    return;
  auto err = make_error(errc::dead_node,
                        "server " + std::to_string(rank)
                          + " went down and no server replaced it within "
                            "the recovery timeout");
  if (rec.restoring || rec.restored) {
    // The timeout covers the restore too (workers wait no longer): the
    // replacement's registration fails, and its process ends.
    ++rec.generation;
    rec.restoring = false;
    rec.restored = false;
    rec.registration.deliver(err);
  }
  close_recovery(self, rank, err);
}

} // namespace actorps
