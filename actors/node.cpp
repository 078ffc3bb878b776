// SPDX-License-Identifier: BSD-3-Clause
#include "actors/node.hpp"

#include <chrono>

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/send.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/system_messages.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

#include "actors/trust.hpp"
#include "core/float_pool.hpp"
#include "messages/errors.hpp"

namespace actorps {

struct node_state {
  static inline const char* name = "actorps.node";

  gate_actor gate;
  // Known once joined (job_info::coordinator).
  coordinator_actor coordinator;
  caf::actor owner;
  trusted_nodes trusted;
  job_info job;
  bool joined = false;
};

namespace {

using self_ptr = node_actor::stateful_pointer<node_state>;

void tell_owner(self_ptr self, caf::message msg) {
  if (self->state.owner)
    caf::anon_send(self->state.owner, std::move(msg));
}

// Joins through the gate (`rank`: the dead worker rank to take, or
// any_rank).
caf::result<job_info> join(self_ptr self, uint8_t role_id,
                           const std::string& token, uint8_t mode,
                           uint32_t rank) {
  if (auto err = self->state.trusted.check(self, "join"))
    return err;
  auto rp = self->make_response_promise<job_info>();
  auto me = caf::actor_cast<caf::actor>(self);
  self
    ->request(self->state.gate, caf::infinite, join_atom::value, role_id, token,
              me, mode, wire_version, rank)
    .then(
      [self, rp](job_info& info) mutable {
        auto& st = self->state;
        auto first = !st.joined;
        auto coordinator = caf::actor_cast<coordinator_actor>(info.coordinator);
        if (!coordinator || coordinator.node() != st.gate.node()) {
          rp.deliver(make_error(errc::bad_config,
                                "join: the coordinator's reply names no "
                                "coordinator on its node"));
          return;
        }
        if (first)
          self->monitor(coordinator);
        st.coordinator = coordinator;
        // What this node's connections to the servers prove from now on
        // (a worker), or what it checks of those it accepts (a server).
        if (!info.rank_secret.empty())
          set_worker_identity(self->node(), info.rank, info.rank_secret);
        if (!info.rank_key.empty())
          set_rank_key(self->node(), info.rank_key);
        st.job = info;
        st.joined = true;
        if (first && info.heartbeat_ms > 0)
          self->send(self, heartbeat_atom::value);
        rp.deliver(std::move(info));
      },
      [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

node_actor::behavior_type node_impl(self_ptr self, gate_actor gate,
                                    caf::actor owner) {
  self->state.gate = gate;
  self->state.owner = std::move(owner);
  self->state.trusted.add(gate.node());
  trust_routes_of(gate.node());
  ignore_strays(self, self->state.trusted);
  // The gate goes down with the coordinator's process.
  self->monitor(gate);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source == st.gate.address()
        || (st.coordinator && dm.source == st.coordinator.address())) {
      tell_owner(self, caf::make_message(node_down_atom::value, uint32_t{1},
                                         role::coordinator));
      self->quit(dm.reason);
    }
  });
  return {
    [self](join_atom, uint8_t role_id, const std::string& token,
           uint8_t mode) -> caf::result<job_info> {
      return join(self, role_id, token, mode, any_rank);
    },
    [self](join_atom, uint8_t role_id, const std::string& token, uint8_t mode,
           uint32_t rank) -> caf::result<job_info> {
      return join(self, role_id, token, mode, rank);
    },
    [self](heartbeat_atom) {
      auto& st = self->state;
      // The agent's own tick: a tick from elsewhere would add a timer.
      if (st.trusted.check(self, "heartbeat")
          || self->current_sender().get() != self->ctrl())
        return;
      self->send(st.coordinator, heartbeat_atom::value, st.job.node_id);
      std::chrono::milliseconds tick{st.job.heartbeat_ms};
      // Large blocks a flow left pooled a tick ago go back to malloc.
      core::trim_pool(tick);
      self->delayed_send(self, tick, heartbeat_atom::value);
    },
    [self](node_down_atom, uint32_t node_id, uint8_t role_id) {
      if (self->state.trusted.check(self, "node_down"))
        return;
      tell_owner(self,
                 caf::make_message(node_down_atom::value, node_id, role_id));
    },
    [self](shutdown_atom) {
      if (self->state.trusted.check(self, "shutdown"))
        return;
      tell_owner(self, caf::make_message(shutdown_atom::value));
      self->quit();
    },
  };
}

} // namespace

node_actor spawn_node_agent(caf::actor_system& sys, gate_actor gate,
                            caf::actor owner) {
  return sys.spawn(node_impl, std::move(gate), std::move(owner));
}

} // namespace actorps
