// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string>

#include "caf/actor.hpp"
#include "caf/fwd.hpp"
#include "caf/replies_to.hpp"
#include "caf/typed_actor.hpp"

#include <actorps/actors/coordinator/coordinator.hpp>
#include <actorps/actors/gate.hpp>
#include <actorps/messages/type_ids.hpp>

/// Protocol of a node agent: one per server or worker process.
///
/// The agent joins the job on behalf of its process, so the coordinator
/// monitors it: when the process dies (or its connection times out), the
/// coordinator sees the agent go down. It then sends a heartbeat every
/// `job_info::heartbeat_ms` and passes what the coordinator says on to its
/// owner (the process's main loop).
///
/// Messages:
/// - `(join_atom, role, token, mode)` -> `job_info`: joins the job through
///   the coordinator's gate; the reply carries the coordinator's handle, to
///   which the agent then sends its heartbeats. Errors: those of the
///   coordinator's join (`unauthorized`, `bad_config`).
/// - `(join_atom, role, token, mode, rank)` -> `job_info`: the same for a
///   worker that takes the place of dead worker `rank` (see the gate).
/// - `(heartbeat_atom)`: internal tick; sends one heartbeat and schedules the
///   next.
/// - `(node_down_atom, node_id, role)`: another node died; forwarded to the
///   owner.
/// - `(shutdown_atom)`: the job is over; forwarded to the owner, then the
///   agent quits.
/// Trust: `join` is answered, and `node_down` and `shutdown` count, only from
/// the agent's own process or the coordinator's node; a foreign `join` gets
/// `unauthorized`, the others are dropped (the first logged). If the
/// coordinator goes down, the owner receives
/// `(node_down_atom, 1, role::coordinator)` and the agent quits.
namespace actorps {

/// Interface of a node agent.
using node_actor = caf::typed_actor<
  caf::replies_to<join_atom, uint8_t, std::string, uint8_t>::with<job_info>,
  caf::replies_to<join_atom, uint8_t, std::string, uint8_t,
                  uint32_t>::with<job_info>,
  caf::reacts_to<heartbeat_atom>,
  caf::reacts_to<node_down_atom, uint32_t, uint8_t>,
  caf::reacts_to<shutdown_atom>>;

/// Spawns the agent of a node that joins through `gate`. `owner` (may be empty)
/// receives the agent's notices; the caller owns the agent: monitor it or send
/// it an exit.
node_actor spawn_node_agent(caf::actor_system& sys, gate_actor gate,
                            caf::actor owner);

} // namespace actorps
