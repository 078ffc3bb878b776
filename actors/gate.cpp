// SPDX-License-Identifier: BSD-3-Clause
#include "actors/gate.hpp"

#include <utility>

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/system_messages.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "actors/trust.hpp"
#include "messages/errors.hpp"

namespace actorps {

struct gate_state {
  static inline const char* name = "actorps.gate";

  // Empty: the gate serves anyone, but only its own process may stop it.
  trusted_nodes trusted;
};

namespace {

using gate_ptr = gate_actor::stateful_pointer<gate_state>;

// A join, passed on to the coordinator (a server's gate refuses it).
template <class Self, class... Ts>
caf::result<job_info>
pass_on(Self* self, const coordinator_actor& coordinator, Ts&&... xs) {
  if (!coordinator)
    return make_error(errc::bad_config,
                      "join: this is a server's port; nodes join through "
                      "the coordinator's address");
  return self->delegate(coordinator, std::forward<Ts>(xs)...);
}

gate_actor::behavior_type gate_impl(gate_ptr self,
                                    coordinator_actor coordinator) {
  ignore_strays(self, self->state.trusted);
  // Monitored, not linked: a peer that stops the gate must not take the
  // coordinator with it.
  if (coordinator) {
    self->monitor(coordinator);
    self->set_down_handler(
      [self](caf::down_msg& dm) { self->quit(dm.reason); });
  }
  return {
    // Both joins (with or without a rank) go on to the coordinator.
    [self, coordinator](join_atom a, uint8_t role_id, const std::string& token,
                        const caf::actor& agent, uint8_t mode,
                        uint32_t version) -> caf::result<job_info> {
      return pass_on(self, coordinator, a, role_id, token, agent, mode,
                     version);
    },
    [self, coordinator](join_atom a, uint8_t role_id, const std::string& token,
                        const caf::actor& agent, uint8_t mode, uint32_t version,
                        uint32_t rank) -> caf::result<job_info> {
      return pass_on(self, coordinator, a, role_id, token, agent, mode, version,
                     rank);
    },
  };
}

} // namespace

gate_actor spawn_gate(caf::actor_system& sys, coordinator_actor coordinator) {
  return sys.spawn(gate_impl, std::move(coordinator));
}

gate_actor spawn_server_gate(caf::actor_system& sys) {
  return sys.spawn(gate_impl, coordinator_actor{});
}

} // namespace actorps
