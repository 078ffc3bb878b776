// SPDX-License-Identifier: BSD-3-Clause
// The priority relay of a shard (see relay.hpp for the CAF limitation it
// works around).
#include "actors/shard/relay.hpp"

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/message_priority.hpp"
#include "caf/send.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

#include "actors/trust.hpp"

namespace actorps {

struct relay_state {
  static inline const char* name = "actorps.relay";

  trusted_nodes trusted;
};

namespace {

using relay_ptr = shard_actor::stateful_pointer<relay_state>;

const char* atom_name(push_atom) {
  return "push";
}

const char* atom_name(push_pull_atom) {
  return "push_pull";
}

const char* atom_name(pull_atom) {
  return "pull";
}

const char* atom_name(batch_atom) {
  return "batch";
}

slice_id first_slice(const slice_push& x) {
  return x.slice;
}

slice_id first_slice(const slice_pull& x) {
  return x.slice;
}

slice_id first_slice(const rows_push& x) {
  return x.slice;
}

slice_id first_slice(const rows_pull& x) {
  return x.slice;
}

slice_id first_slice(const slice_batch& x) {
  return x.slices.empty() ? 0 : x.slices.front();
}

// Re-sends `(atom, msg)` to `shard` with high priority; passes the reply back.
template <class Reply, class Atom, class Msg>
caf::result<Reply> relay_high(relay_ptr self, const shard_actor& shard,
                              const caf::actor& observer, Atom atom, Msg msg) {
  // The shard sees the relay as the sender: the rank is checked here.
  if (auto err = self->state.trusted.check(self, atom_name(atom), msg.worker))
    return err;
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

// Passes a data plane's message of this process on with high priority (the
// shard answers its sink).
template <class Atom, class... Ts>
void relay_plane(relay_ptr self, const shard_actor& shard, Atom atom,
                 Ts&... xs) {
  auto sender = self->current_sender();
  auto& r = std::get<sizeof...(Ts) - 1>(std::tie(xs...));
  if (r.sink == nullptr
      || (sender != nullptr && sender->node() != self->node()))
    return;
  caf::anon_send<caf::message_priority::high>(shard, atom, std::move(xs)...);
}

// `none` if the sender may use the relay (see trusted_nodes).
#define ACTORPS_RELAY_CHECK(op)                                                \
  if (auto err = self->state.trusted.check(self, op))                          \
    return err;

shard_actor::behavior_type relay_impl(relay_ptr self, shard_actor shard,
                                      caf::actor observer,
                                      std::vector<caf::node_id> trusted) {
  self->link_to(shard);
  self->state.trusted.add_admitters(trusted);
  ignore_strays(self, self->state.trusted);
  // Delegated messages keep their sender: the shard checks it again.
  using ok_result = caf::result<caf::ok_atom>;
  return {
    [=](init_atom a, slice_init& msg) -> ok_result {
      ACTORPS_RELAY_CHECK("init")
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
    [=](init_atom a, table_init& msg) -> ok_result {
      ACTORPS_RELAY_CHECK("init")
      return self->delegate(shard, a, std::move(msg));
    },
    [=](push_atom a, rows_push& msg) {
      return relay_high<caf::ok_atom>(self, shard, observer, a, std::move(msg));
    },
    [=](pull_atom a, rows_pull& msg) {
      return relay_high<shared_floats>(self, shard, observer, a,
                                       std::move(msg));
    },
    [=](push_atom a, rows_push& msg, plane_reply& r) {
      relay_plane(self, shard, a, msg, r);
    },
    [=](pull_atom a, rows_pull& msg, plane_reply& r) {
      relay_plane(self, shard, a, msg, r);
    },
    [=](set_opt_atom a, const optimizer_config& opt) -> ok_result {
      ACTORPS_RELAY_CHECK("set_optimizer")
      return self->delegate(shard, a, opt);
    },
    [=](save_atom a) -> caf::result<state_snapshot> {
      ACTORPS_RELAY_CHECK("save_optimizer_states")
      return self->delegate(shard, a);
    },
    [=](load_atom a, state_snapshot& snap) -> ok_result {
      ACTORPS_RELAY_CHECK("load_optimizer_states")
      return self->delegate(shard, a, std::move(snap));
    },
    [=](save_atom a, uint64_t session) -> ok_result {
      ACTORPS_RELAY_CHECK("save_optimizer_states")
      return self->delegate(shard, a, session);
    },
    [=](save_atom a, const save_cursor& at) -> caf::result<save_piece> {
      ACTORPS_RELAY_CHECK("save_optimizer_states")
      return self->delegate(shard, a, at);
    },
    [=](load_atom a, uint64_t session, const optimizer_config& opt,
        bool weights) -> ok_result {
      ACTORPS_RELAY_CHECK("load_optimizer_states")
      return self->delegate(shard, a, session, opt, weights);
    },
    [=](load_atom a, uint64_t session,
        std::vector<slice_record>& pieces) -> ok_result {
      ACTORPS_RELAY_CHECK("load_optimizer_states")
      return self->delegate(shard, a, session, std::move(pieces));
    },
    [=](load_atom a, uint64_t session, bool commit) -> ok_result {
      ACTORPS_RELAY_CHECK("load_optimizer_states")
      return self->delegate(shard, a, session, commit);
    },
    [=](workers_atom a, const std::vector<uint32_t>& live) -> ok_result {
      if (auto err = self->state.trusted.check_admitter(self, "workers"))
        return err;
      return self->delegate(shard, a, live);
    },
    [=](stats_atom a) -> caf::result<shard_stats> {
      ACTORPS_RELAY_CHECK("stats")
      return self->delegate(shard, a);
    },
    [=](command_atom a, int32_t head, const std::string& body) -> ok_result {
      ACTORPS_RELAY_CHECK("send_command_to_servers")
      return self->delegate(shard, a, head, body);
    },
    [=](admit_atom a, const std::vector<caf::node_id>& nodes,
        const std::vector<caf::node_id>& workers) -> ok_result {
      if (auto err = self->state.trusted.check_admitter(self, "admit"))
        return err;
      self->state.trusted.add(nodes);
      self->state.trusted.bind_workers(self->node(), workers);
      return self->delegate(shard, a, nodes, workers);
    },
    [=](push_atom a, slice_push& msg, plane_reply& r) {
      relay_plane(self, shard, a, msg, r);
    },
    [=](push_pull_atom a, slice_push& msg, plane_reply& r) {
      relay_plane(self, shard, a, msg, r);
    },
    [=](pull_atom a, slice_pull& msg, plane_reply& r) {
      relay_plane(self, shard, a, msg, r);
    },
    [=](batch_atom a, slice_batch& msg, plane_reply& r) {
      relay_plane(self, shard, a, msg, r);
    },
    // Replicas: the shard checks who sends them.
    [=](replica_atom a, caf::actor& peer, bool is_backup) -> ok_result {
      return self->delegate(shard, a, std::move(peer), is_backup);
    },
    [=](replica_atom a, caf::actor& peer, bool is_backup,
        std::string& address) -> ok_result {
      return self->delegate(shard, a, std::move(peer), is_backup,
                            std::move(address));
    },
    [=](replicate_atom a, replica_batch& batch) -> ok_result {
      return self->delegate(shard, a, std::move(batch));
    },
    [=](replicate_atom a, replica_state& x) -> ok_result {
      return self->delegate(shard, a, std::move(x));
    },
    // (The ingress sends a plane's forwards to the shard itself.)
    [=](replicate_atom a, uint64_t n, replica_batch& batch, plane_reply& r) {
      relay_plane(self, shard, a, n, batch, r);
    },
    [=](replicate_atom a, uint64_t n, caf::message& msg, plane_reply& r) {
      relay_plane(self, shard, a, n, msg, r);
    },
    // (Answers to forwards go to the shard that sent them, never here.)
    [=](replicate_atom, const replica_ack&) {},
    [=](promote_atom a) -> ok_result { return self->delegate(shard, a); },
    [=](clocks_atom a) -> ok_result {
      if (auto err = self->state.trusted.check_admitter(self, "clocks"))
        return err;
      return self->delegate(shard, a);
    },
    [=](clocks_atom a, uint32_t worker, std::vector<uint64_t>& slices,
        std::vector<uint64_t>& pushes, bool fresh) -> ok_result {
      if (auto err = self->state.trusted.check(self, "clocks", worker))
        return err;
      return self->delegate(shard, a, worker, std::move(slices),
                            std::move(pushes), fresh);
    },
    [=](clocks_atom a, uint32_t worker)
      -> caf::result<std::vector<uint64_t>, std::vector<uint64_t>> {
      if (auto err = self->state.trusted.check(self, "clocks", worker))
        return err;
      return self->delegate(shard, a, worker);
    },
  };
}

#undef ACTORPS_RELAY_CHECK

} // namespace

shard_actor spawn_priority_relay(caf::actor_system& sys, shard_actor shard,
                                 caf::actor observer, bool detached,
                                 std::vector<caf::node_id> trusted) {
  if (detached)
    return sys.spawn<caf::detached>(relay_impl, std::move(shard),
                                    std::move(observer), std::move(trusted));
  return sys.spawn(relay_impl, std::move(shard), std::move(observer),
                   std::move(trusted));
}

} // namespace actorps
