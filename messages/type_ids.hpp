// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "caf/node_id.hpp"
#include "caf/type_id.hpp"

#include <actorps/messages/control.hpp>
#include <actorps/messages/types.hpp>

// The project's only type-ID block: ids are numbered with __COUNTER__, so a
// second block in another header would collide. Every type that crosses a
// process boundary is listed, including the standard containers.
CAF_BEGIN_TYPE_ID_BLOCK(actorps, caf::first_custom_type_id)

CAF_ADD_TYPE_ID(actorps, (actorps::compression))
CAF_ADD_TYPE_ID(actorps, (actorps::floats))
CAF_ADD_TYPE_ID(actorps, (actorps::shared_floats))
CAF_ADD_TYPE_ID(actorps, (actorps::float_parts))
CAF_ADD_TYPE_ID(actorps, (actorps::slice_init))
CAF_ADD_TYPE_ID(actorps, (actorps::slice_push))
CAF_ADD_TYPE_ID(actorps, (actorps::slice_pull))
CAF_ADD_TYPE_ID(actorps, (actorps::slice_batch))
CAF_ADD_TYPE_ID(actorps, (actorps::optimizer_config))
CAF_ADD_TYPE_ID(actorps, (actorps::slice_record))
CAF_ADD_TYPE_ID(actorps, (actorps::state_snapshot))
CAF_ADD_TYPE_ID(actorps, (actorps::shard_stats))
CAF_ADD_TYPE_ID(actorps, (actorps::slice_range))
CAF_ADD_TYPE_ID(actorps, (actorps::key_info))
CAF_ADD_TYPE_ID(actorps, (actorps::job_info))
CAF_ADD_TYPE_ID(actorps, (actorps::routing_table))
CAF_ADD_TYPE_ID(actorps, (actorps::job_status))
CAF_ADD_TYPE_ID(actorps, (actorps::worker_stats))
CAF_ADD_TYPE_ID(actorps, (actorps::table_init))
CAF_ADD_TYPE_ID(actorps, (actorps::rows_push))
CAF_ADD_TYPE_ID(actorps, (actorps::rows_pull))
CAF_ADD_TYPE_ID(actorps, (actorps::save_cursor))
CAF_ADD_TYPE_ID(actorps, (actorps::save_piece))
CAF_ADD_TYPE_ID(actorps, (actorps::load_piece))
CAF_ADD_TYPE_ID(actorps, (actorps::replica_batch))
CAF_ADD_TYPE_ID(actorps, (actorps::replica_state))
CAF_ADD_TYPE_ID(actorps, (std::vector<uint32_t>) )
CAF_ADD_TYPE_ID(actorps, (std::vector<uint64_t>) )
CAF_ADD_TYPE_ID(actorps, (std::vector<actorps::slice_record>) )
CAF_ADD_TYPE_ID(actorps, (std::vector<actorps::slice_range>) )
CAF_ADD_TYPE_ID(actorps, (std::vector<caf::node_id>) )

CAF_ADD_ATOM(actorps, actorps, init_atom, "init")
CAF_ADD_ATOM(actorps, actorps, push_atom, "push")
CAF_ADD_ATOM(actorps, actorps, pull_atom, "pull")
CAF_ADD_ATOM(actorps, actorps, push_pull_atom, "push_pull")
CAF_ADD_ATOM(actorps, actorps, batch_atom, "batch")
CAF_ADD_ATOM(actorps, actorps, barrier_atom, "barrier")
CAF_ADD_ATOM(actorps, actorps, set_opt_atom, "set_opt")
CAF_ADD_ATOM(actorps, actorps, save_atom, "save_state")
CAF_ADD_ATOM(actorps, actorps, load_atom, "load_state")
CAF_ADD_ATOM(actorps, actorps, stats_atom, "stats")
CAF_ADD_ATOM(actorps, actorps, declare_atom, "declare")
CAF_ADD_ATOM(actorps, actorps, lookup_atom, "lookup")
CAF_ADD_ATOM(actorps, actorps, init_done_atom, "init_done")
CAF_ADD_ATOM(actorps, actorps, workers_atom, "workers")
CAF_ADD_ATOM(actorps, actorps, shutdown_atom, "shutdown")
CAF_ADD_ATOM(actorps, actorps, leave_atom, "leave_job")
CAF_ADD_ATOM(actorps, actorps, join_atom, "join_job")
CAF_ADD_ATOM(actorps, actorps, shards_atom, "shards")
CAF_ADD_ATOM(actorps, actorps, routing_atom, "routing")
CAF_ADD_ATOM(actorps, actorps, heartbeat_atom, "heartbeat")
CAF_ADD_ATOM(actorps, actorps, dead_atom, "dead_nodes")
CAF_ADD_ATOM(actorps, actorps, command_atom, "command")
CAF_ADD_ATOM(actorps, actorps, node_down_atom, "node_down")
CAF_ADD_ATOM(actorps, actorps, forwarded_atom, "forwarded")
CAF_ADD_ATOM(actorps, actorps, compress_atom, "compress")
CAF_ADD_ATOM(actorps, actorps, admit_atom, "admit")
CAF_ADD_ATOM(actorps, actorps, ucx_atom, "ucx")
CAF_ADD_ATOM(actorps, actorps, status_atom, "status")
CAF_ADD_ATOM(actorps, actorps, recover_atom, "recover")
CAF_ADD_ATOM(actorps, actorps, replica_atom, "replica")
CAF_ADD_ATOM(actorps, actorps, replicate_atom, "replicate")
CAF_ADD_ATOM(actorps, actorps, promote_atom, "promote")
CAF_ADD_ATOM(actorps, actorps, clocks_atom, "clocks")

CAF_END_TYPE_ID_BLOCK(actorps)
