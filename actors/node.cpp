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

#include "messages/errors.hpp"

namespace actorps {

struct node_state {
  static inline const char* name = "actorps.node";

  coordinator_actor coordinator;
  caf::actor owner;
  job_info job;
  bool joined = false;
};

namespace {

using self_ptr = node_actor::stateful_pointer<node_state>;

void tell_owner(self_ptr self, caf::message msg) {
  if (self->state.owner)
    caf::anon_send(self->state.owner, std::move(msg));
}

node_actor::behavior_type
node_impl(self_ptr self, coordinator_actor coordinator, caf::actor owner) {
  self->state.coordinator = coordinator;
  self->state.owner = std::move(owner);
  self->monitor(coordinator);
  self->set_down_handler([self](caf::down_msg& dm) {
    if (dm.source == self->state.coordinator.address()) {
      tell_owner(self, caf::make_message(node_down_atom::value, uint32_t{1},
                                         role::coordinator));
      self->quit(dm.reason);
    }
  });
  return {
    [self](join_atom, uint8_t role_id, const std::string& token,
           uint8_t mode) -> caf::result<job_info> {
      auto rp = self->make_response_promise<job_info>();
      auto me = caf::actor_cast<caf::actor>(self);
      self
        ->request(self->state.coordinator, caf::infinite, join_atom::value,
                  role_id, token, me, mode, wire_version)
        .then(
          [self, rp](job_info& info) mutable {
            auto first = !self->state.joined;
            self->state.job = info;
            self->state.joined = true;
            if (first && info.heartbeat_ms > 0)
              self->send(self, heartbeat_atom::value);
            rp.deliver(std::move(info));
          },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [self](heartbeat_atom) {
      auto& st = self->state;
      self->send(st.coordinator, heartbeat_atom::value, st.job.node_id);
      self->delayed_send(self, std::chrono::milliseconds{st.job.heartbeat_ms},
                         heartbeat_atom::value);
    },
    [self](node_down_atom, uint32_t node_id, uint8_t role_id) {
      tell_owner(self,
                 caf::make_message(node_down_atom::value, node_id, role_id));
    },
    [self](shutdown_atom) {
      tell_owner(self, caf::make_message(shutdown_atom::value));
      self->quit();
    },
  };
}

} // namespace

node_actor spawn_node_agent(caf::actor_system& sys,
                            coordinator_actor coordinator, caf::actor owner) {
  return sys.spawn(node_impl, std::move(coordinator), std::move(owner));
}

} // namespace actorps
