// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Internal to the worker (included by dispatch.cpp only): how a request
// reaches a shard.

#include <cstdint>
#include <functional>
#include <utility>

#include "caf/event_based_actor.hpp"
#include "caf/message_priority.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "actors/worker/state.hpp"

namespace actorps {

/// Sends one request to shard `index` and tracks it until it completes: the
/// one place where a worker's tensor bytes leave for a shard, and so the seam
/// a second data transport plugs into. Its contract, whatever carries the
/// bytes:
/// - exactly one of `on_ok` (with the reply) and `on_err` runs, once;
/// - a dead shard fails the request at once with `dead_shard`, and a shard
///   that goes down fails every request in flight to it (`on_down` in
///   worker.cpp runs the handlers kept in `in_flight`);
/// - the shard gets the same typed message, with priority > 0 overtaking its
///   normal backlog; order among one worker's operations on one slice is kept
///   by their sequence numbers, not by the transport.
/// Today CAF carries every request: priority > 0 goes through the shard's
/// relay when the shard is remote (CAF drops priorities over the network,
/// see actors/shard/relay.hpp), else with CAF's high priority.
template <class Reply, class OnOk, class... Ts>
void to_shard(worker_ptr self, uint32_t index, int32_t priority, OnOk on_ok,
              std::function<void(caf::error&)> on_err, Ts&&... xs) {
  auto& st = self->state;
  if (st.dead[index]) {
    auto err = dead_shard(index);
    on_err(err);
    return;
  }
  auto id = st.next_request++;
  st.in_flight[index].emplace(id, std::move(on_err));
  auto ok = [self, index, id, on_ok](Reply& x) mutable {
    if (self->state.in_flight[index].erase(id) > 0)
      on_ok(x);
  };
  auto fail = [self, index, id](caf::error& err) {
    auto& pending = self->state.in_flight[index];
    auto i = pending.find(id);
    if (i == pending.end())
      return;
    auto f = std::move(i->second);
    pending.erase(i);
    f(err);
  };
  if (priority > 0 && !st.cfg.relays.empty())
    self->request(st.cfg.relays[index], st.timeout(), std::forward<Ts>(xs)...)
      .then(ok, fail);
  else if (priority > 0)
    self
      ->request<caf::message_priority::high>(st.cfg.shards[index], st.timeout(),
                                             std::forward<Ts>(xs)...)
      .then(ok, fail);
  else
    self->request(st.cfg.shards[index], st.timeout(), std::forward<Ts>(xs)...)
      .then(ok, fail);
}

} // namespace actorps
