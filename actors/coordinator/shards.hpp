// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// The coordinator's requests to every shard (internal): a broadcast whose
// replies are merged into one answer, and the gathering of every shard's
// state (save, periodic checkpoints). Included by coordinator.cpp and
// membership.cpp only.

#include <algorithm>
#include <functional>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "caf/event_based_actor.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "actors/coordinator/state.hpp"
#include "actors/fan_in.hpp"
#include "messages/errors.hpp"

namespace actorps {

namespace detail {

using self_ptr = coordinator_ptr;

// Sends `msg...` to every shard and delivers `finish()` once all answered.
// With `live_only`, dead shards are skipped; otherwise a dead shard fails the
// whole operation at once.
template <class Reply, class Promise, class Finish, class OnReply, class... Ts>
void broadcast(self_ptr self, Promise rp, Finish finish, OnReply on_reply,
               bool live_only, Ts... xs) {
  auto& st = self->state;
  auto& shards = st.cfg.shards;
  std::vector<size_t> targets;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (i < st.shard_dead.size() && st.shard_dead[i]) {
      if (live_only)
        continue;
      rp.deliver(
        make_error(errc::dead_node, "shard " + std::to_string(i) + " is dead"));
      return;
    }
    targets.push_back(i);
  }
  if (targets.empty()) {
    rp.deliver(finish());
    return;
  }
  detail::fan_in<Promise> fan{std::move(rp), targets.size()};
  for (auto i : targets)
    self->request(shards[i], st.timeout(), xs...)
      .then(
        [=](Reply& reply) mutable {
          on_reply(i, reply);
          if (fan.arrive())
            fan.promise().deliver(finish());
        },
        [=](caf::error& err) { fan.fail(std::move(err)); });
}

// Gathers every shard's slices, named and ordered by key and part, with
// the optimizer, into `rp` (a response promise or a callback_promise).
template <class Promise>
void gather_snapshot(self_ptr self, Promise rp) {
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
    false, save_atom::value);
}

// A promise-like callback for internal requests (see broadcast).
template <class T>
struct callback_promise {
  std::function<void(T&&)> ok;
  std::function<void(caf::error)> failed;

  void deliver(T x) {
    ok(std::move(x));
  }

  void deliver(caf::error err) {
    failed(std::move(err));
  }
};

} // namespace detail

} // namespace actorps
