// SPDX-License-Identifier: BSD-3-Clause
// The priority relay of a shard (see relay.hpp for the CAF limitation it
// works around).
#include "actors/shard/relay.hpp"

#include <string>
#include <utility>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/message_priority.hpp"
#include "caf/send.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

namespace actorps {

namespace {

slice_id first_slice(const slice_push& x) {
  return x.slice;
}

slice_id first_slice(const slice_pull& x) {
  return x.slice;
}

slice_id first_slice(const slice_batch& x) {
  return x.slices.empty() ? 0 : x.slices.front();
}

// Re-sends `(atom, msg)` to `shard` with high priority; passes the reply back.
template <class Reply, class Atom, class Msg>
caf::result<Reply> relay_high(shard_actor::pointer self,
                              const shard_actor& shard,
                              const caf::actor& observer, Atom atom, Msg msg) {
  auto rp = self->make_response_promise<Reply>();
  auto id = first_slice(msg);
  // caf::infinite keeps the high priority in CAF 0.17 (a std::chrono timeout
  // silently drops it); the requester bounds the wait with its own timeout.
  self
    ->request<caf::message_priority::high>(shard, caf::infinite, atom,
                                           std::move(msg))
    .then([rp](Reply& x) mutable { rp.deliver(std::move(x)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  if (observer)
    caf::anon_send(observer, forwarded_atom::value, id);
  return rp;
}

shard_actor::behavior_type relay_impl(shard_actor::pointer self,
                                      shard_actor shard, caf::actor observer) {
  self->link_to(shard);
  return {
    [=](init_atom a, slice_init& msg) {
      return self->delegate(shard, a, std::move(msg));
    },
    [=](push_atom a, slice_push& msg) {
      return relay_high<caf::ok_atom>(self, shard, observer, a, std::move(msg));
    },
    [=](push_pull_atom a, slice_push& msg) {
      return relay_high<shared_floats>(self, shard, observer, a,
                                       std::move(msg));
    },
    [=](pull_atom a, slice_pull& msg) {
      return relay_high<shared_floats>(self, shard, observer, a,
                                       std::move(msg));
    },
    [=](batch_atom a, slice_batch& msg) {
      return relay_high<float_parts>(self, shard, observer, a, std::move(msg));
    },
    [=](set_opt_atom a, const optimizer_config& opt) {
      return self->delegate(shard, a, opt);
    },
    [=](save_atom a) { return self->delegate(shard, a); },
    [=](load_atom a, state_snapshot& snap) {
      return self->delegate(shard, a, std::move(snap));
    },
    [=](workers_atom a, const std::vector<uint32_t>& live) {
      return self->delegate(shard, a, live);
    },
    [=](stats_atom a) { return self->delegate(shard, a); },
    [=](command_atom a, int32_t head, const std::string& body) {
      return self->delegate(shard, a, head, body);
    },
  };
}

} // namespace

shard_actor spawn_priority_relay(caf::actor_system& sys, shard_actor shard,
                                 caf::actor observer, bool detached) {
  if (detached)
    return sys.spawn<caf::detached>(relay_impl, std::move(shard),
                                    std::move(observer));
  return sys.spawn(relay_impl, std::move(shard), std::move(observer));
}

} // namespace actorps
