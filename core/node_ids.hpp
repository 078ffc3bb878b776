// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>

/// Node ids and groups of a job, as ps-lite and MXNet number them (free of
/// CAF, so the client facade can offer them): what `kvstore::num_dead_node`
/// takes. The coordinator is node 1; server `r` is node 8 + 2r; worker `r`
/// is node 9 + 2r.
namespace actorps {

/// Heads of `send_command_to_servers` that actorps handles itself: 0 sets
/// the optimizer from text; negative heads are reserved.
namespace command_head {
constexpr int32_t set_optimizer = 0;
/// Drops the partial sums of unfinished sync rounds (clear_pending).
constexpr int32_t clear_pending = -1;
} // namespace command_head

/// Roles of the nodes of a job; also the group ids of `num_dead_node`, which
/// may be or-ed together (as in MXNet / ps-lite).
namespace role {
constexpr uint8_t coordinator = 1;
constexpr uint8_t server = 2;
constexpr uint8_t worker = 4;
/// Joins to read the job's status only (actorps-status): gets no rank,
/// counts for nothing, may send nothing but `status_atom`.
constexpr uint8_t observer = 8;
} // namespace role

/// The name of a role for people: "server", "worker", "coordinator",
/// "observer" ("node" for anything else).
constexpr const char* role_name(uint8_t r) noexcept {
  return r == role::server        ? "server"
         : r == role::worker      ? "worker"
         : r == role::coordinator ? "coordinator"
         : r == role::observer    ? "observer"
                                  : "node";
}

/// Node id of the coordinator.
constexpr uint32_t coordinator_node_id = 1;

/// Node id of server `rank` (ps-lite numbering: 8, 10, 12, ...).
constexpr uint32_t server_node_id(uint32_t rank) noexcept {
  return 8 + 2 * rank;
}

/// Node id of worker `rank` (ps-lite numbering: 9, 11, 13, ...).
constexpr uint32_t worker_node_id(uint32_t rank) noexcept {
  return 9 + 2 * rank;
}

} // namespace actorps
