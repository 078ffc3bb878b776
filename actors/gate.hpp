// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string>

#include "caf/actor.hpp"
#include "caf/fwd.hpp"
#include "caf/replies_to.hpp"
#include "caf/typed_actor.hpp"

#include <actorps/actors/coordinator/coordinator.hpp>
#include <actorps/messages/type_ids.hpp>

/// Protocol of a gate: the only actor a coordinator or a server publishes on
/// its port, so that a peer that has not proven the job's token reaches
/// nothing that reads or changes job state.
///
/// Messages:
/// - `(join_atom, role, token, agent, mode, wire_version)` -> `job_info`:
///   the coordinator's gate passes the join on to the coordinator (the
///   joining agent stays the sender) and answers what the coordinator
///   answers: on success a `job_info` that carries the coordinator's handle,
///   else `unauthorized` or `bad_config`. A server's gate refuses every join
///   with `bad_config`: workers connect to it only to open a direct
///   connection to the server.
namespace actorps {

/// Interface of a gate.
using gate_actor = caf::typed_actor<
  caf::replies_to<join_atom, uint8_t, std::string, caf::actor, uint8_t,
                  uint32_t>::with<job_info>,
  caf::replies_to<join_atom, uint8_t, std::string, caf::actor, uint8_t,
                  uint32_t, uint32_t>::with<job_info>>;

/// Spawns the gate of `coordinator` (it monitors the coordinator and goes
/// down with it).
gate_actor spawn_gate(caf::actor_system& sys, coordinator_actor coordinator);

/// Spawns a server's gate, which refuses every join. The caller owns it.
gate_actor spawn_server_gate(caf::actor_system& sys);

} // namespace actorps
