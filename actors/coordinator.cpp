// SPDX-License-Identifier: BSD-3-Clause
#include "actors/coordinator.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

#include "caf/actor_system.hpp"
#include "caf/duration.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

#include "actors/fan_in.hpp"
#include "messages/errors.hpp"
#include "runtime/core/layout.hpp"
#include "runtime/core/optimizer.hpp"

namespace actorps {

namespace {

struct key_entry {
  key_info info;
  bool initialized = false;
  std::vector<bool> declared;
  std::vector<caf::typed_response_promise<key_info>> waiters;
};

} // namespace

struct coordinator_state {
  static inline const char* name = "actorps.coordinator";

  coordinator_config cfg;
  std::unordered_map<std::string, key_entry> keys;
  std::vector<std::string> names_by_id;
  std::vector<bool> live;
  std::vector<bool> at_barrier;
  std::vector<caf::typed_response_promise<caf::ok_atom>> barrier_waiters;
  optimizer_config optimizer;

  caf::duration timeout() const {
    return caf::duration{cfg.timeout};
  }

  // Releases the barrier once every live worker is in it.
  void check_barrier() {
    if (barrier_waiters.empty())
      return;
    for (size_t r = 0; r < live.size(); ++r)
      if (live[r] && !at_barrier[r])
        return;
    for (auto& w : barrier_waiters)
      w.deliver(caf::ok_atom::value);
    barrier_waiters.clear();
    at_barrier.assign(cfg.num_workers, false);
  }

  std::vector<uint32_t> live_ranks() const {
    std::vector<uint32_t> result;
    for (uint32_t r = 0; r < live.size(); ++r)
      if (live[r])
        result.push_back(r);
    return result;
  }
};

namespace {

using self_ptr = coordinator_actor::stateful_pointer<coordinator_state>;

std::string quoted(const std::string& key) {
  return "'" + key + "'";
}

// Sends `msg...` to every shard and delivers `finish()` once all answered.
template <class Reply, class Promise, class Finish, class OnReply, class... Ts>
void broadcast(self_ptr self, Promise rp, Finish finish, OnReply on_reply,
               Ts... xs) {
  auto& shards = self->state.cfg.shards;
  detail::fan_in<Promise> fan{std::move(rp), shards.size()};
  for (size_t i = 0; i < shards.size(); ++i)
    self->request(shards[i], self->state.timeout(), xs...)
      .then(
        [=](Reply& reply) mutable {
          on_reply(i, reply);
          if (fan.arrive())
            fan.promise().deliver(finish());
        },
        [=](caf::error& err) { fan.fail(std::move(err)); });
}

coordinator_actor::behavior_type coordinator_impl(self_ptr self,
                                                  coordinator_config cfg) {
  self->state.cfg = std::move(cfg);
  self->state.at_barrier.assign(self->state.cfg.num_workers, false);
  self->state.live.assign(self->state.cfg.num_workers, true);
  return {
    [self](declare_atom, const std::string& key,
           const std::vector<uint64_t>& shape,
           uint32_t rank) -> caf::result<key_info> {
      auto& st = self->state;
      if (rank >= st.cfg.num_workers)
        return make_error(errc::bad_config,
                          "init: rank " + std::to_string(rank)
                            + " out of range (job has "
                            + std::to_string(st.cfg.num_workers) + " workers)");
      auto size = core::shape_size(shape);
      if (shape.empty() || size == 0)
        return make_error(errc::shape_mismatch, "init: key " + quoted(key)
                                                  + " has empty shape "
                                                  + core::shape_string(shape));
      auto i = st.keys.find(key);
      if (i == st.keys.end()) {
        key_entry e;
        e.info.id = static_cast<uint32_t>(st.names_by_id.size());
        e.info.name = key;
        e.info.shape = shape;
        e.info.size = size;
        e.info.slices = core::make_layout(
          key, size, static_cast<uint32_t>(st.cfg.shards.size()),
          st.cfg.bigarray_bound);
        e.declared.assign(st.cfg.num_workers, false);
        st.names_by_id.push_back(key);
        i = st.keys.emplace(key, std::move(e)).first;
      }
      auto& e = i->second;
      if (e.info.shape != shape)
        return make_error(errc::shape_mismatch,
                          "init: key " + quoted(key) + " has shape "
                            + core::shape_string(e.info.shape) + " but rank "
                            + std::to_string(rank) + " declared "
                            + core::shape_string(shape));
      if (e.declared[rank] && (rank != 0 || e.initialized))
        return make_error(errc::already_initialized,
                          "init: key " + quoted(key)
                            + " was already initialized by rank "
                            + std::to_string(rank));
      e.declared[rank] = true;
      if (rank == 0 || e.initialized)
        return e.info;
      auto rp = self->make_response_promise<key_info>();
      e.waiters.push_back(rp);
      return rp;
    },
    [self](init_done_atom, uint32_t key_id,
           bool ok) -> caf::result<caf::ok_atom> {
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
      auto& st = self->state;
      if (rank >= st.cfg.num_workers)
        return make_error(errc::bad_config, "barrier: rank "
                                              + std::to_string(rank)
                                              + " out of range");
      if (!st.live[rank])
        return make_error(errc::dead_node, "barrier: rank "
                                             + std::to_string(rank)
                                             + " left the job");
      st.at_barrier[rank] = true;
      auto rp = self->make_response_promise<caf::ok_atom>();
      st.barrier_waiters.push_back(rp);
      st.check_barrier();
      return rp;
    },
    [self](leave_atom, uint32_t rank) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (rank >= st.cfg.num_workers)
        return make_error(errc::bad_config, "leave: rank "
                                              + std::to_string(rank)
                                              + " out of range");
      if (!st.live[rank])
        return caf::ok_atom::value;
      st.live[rank] = false;
      st.check_barrier();
      auto rp = self->make_response_promise<caf::ok_atom>();
      broadcast<caf::ok_atom>(
        self, rp, [] { return caf::ok_atom::value; },
        [](size_t, caf::ok_atom) {}, workers_atom::value, st.live_ranks());
      return rp;
    },
    [self](set_opt_atom,
           const optimizer_config& opt) -> caf::result<caf::ok_atom> {
      if (auto err = to_error(core::validate(opt)))
        return err;
      auto rp = self->make_response_promise<caf::ok_atom>();
      broadcast<caf::ok_atom>(
        self, rp,
        [self, opt] {
          self->state.optimizer = opt;
          return caf::ok_atom::value;
        },
        [](size_t, caf::ok_atom) {}, set_opt_atom::value, opt);
      return rp;
    },
    [self](save_atom) -> caf::result<state_snapshot> {
      auto rp = self->make_response_promise<state_snapshot>();
      auto merged = std::make_shared<state_snapshot>();
      broadcast<state_snapshot>(
        self, rp,
        [self, merged] {
          auto& st = self->state;
          merged->optimizer = st.optimizer;
          // Shards report ids only; skip records this coordinator never
          // registered (a shard that outlived an earlier coordinator).
          auto known = [&](const slice_record& rec) {
            if (rec.key_id >= st.names_by_id.size())
              return false;
            auto& info = st.keys[st.names_by_id[rec.key_id]].info;
            return rec.part < info.slices.size();
          };
          auto& recs = merged->slices;
          recs.erase(
            std::remove_if(recs.begin(), recs.end(),
                           [&](const slice_record& r) { return !known(r); }),
            recs.end());
          for (auto& rec : recs) {
            auto& info = st.keys[st.names_by_id[rec.key_id]].info;
            rec.key = info.name;
            rec.offset = info.slices[rec.part].offset;
          }
          std::sort(merged->slices.begin(), merged->slices.end(),
                    [](const slice_record& a, const slice_record& b) {
                      return std::tie(a.key, a.part) < std::tie(b.key, b.part);
                    });
          return std::move(*merged);
        },
        [merged](size_t, state_snapshot& part) {
          for (auto& rec : part.slices)
            merged->slices.push_back(std::move(rec));
        },
        save_atom::value);
      return rp;
    },
    [self](load_atom, const state_snapshot& snap) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (auto err = to_error(core::validate(snap.optimizer)))
        return err;
      // Map names to this store's ids and check the slicing matches.
      std::vector<state_snapshot> per_shard(st.cfg.shards.size());
      for (auto& part : per_shard)
        part.optimizer = snap.optimizer;
      for (auto& rec : snap.slices) {
        auto i = st.keys.find(rec.key);
        if (i == st.keys.end() || !i->second.initialized)
          return make_error(errc::unknown_key,
                            "load_state: key " + quoted(rec.key)
                              + " of the checkpoint is not initialized in "
                                "this store");
        auto& info = i->second.info;
        if (rec.part >= info.slices.size()
            || info.slices[rec.part].offset != rec.offset
            || info.slices[rec.part].length != rec.value.data.size())
          return make_error(errc::checkpoint_mismatch,
                            "load_state: key " + quoted(rec.key) + " part "
                              + std::to_string(rec.part)
                              + " was sliced differently when saved (was "
                                "the number of shards or the slicing bound "
                                "changed?)");
        auto want = core::state_size(snap.optimizer, rec.value.data.size());
        if (rec.state.data.size() != want)
          return make_error(errc::checkpoint_mismatch,
                            "load_state: key " + quoted(rec.key) + " part "
                              + std::to_string(rec.part) + " needs "
                              + std::to_string(want) + " state floats for '"
                              + snap.optimizer.name + "' but has "
                              + std::to_string(rec.state.data.size()));
        auto copy = rec;
        copy.key_id = info.id;
        per_shard[info.slices[rec.part].shard].slices.push_back(
          std::move(copy));
      }
      auto rp = self->make_response_promise<caf::ok_atom>();
      auto& shards = st.cfg.shards;
      detail::fan_in<decltype(rp)> fan{rp, shards.size()};
      auto opt = snap.optimizer;
      for (size_t i = 0; i < shards.size(); ++i)
        self
          ->request(shards[i], st.timeout(), load_atom::value,
                    std::move(per_shard[i]))
          .then(
            [=](caf::ok_atom) {
              if (fan.arrive()) {
                self->state.optimizer = opt;
                fan.promise().deliver(caf::ok_atom::value);
              }
            },
            [=](caf::error& err) { fan.fail(std::move(err)); });
      return rp;
    },
  };
}

} // namespace

coordinator_actor spawn_coordinator(caf::actor_system& sys,
                                    coordinator_config cfg) {
  return sys.spawn(coordinator_impl, std::move(cfg));
}

} // namespace actorps
