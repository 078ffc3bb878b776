// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "caf/fwd.hpp"
#include "caf/replies_to.hpp"
#include "caf/typed_actor.hpp"

#include "actors/shard.hpp"
#include "messages/type_ids.hpp"

/// Protocol of the coordinator.
///
/// The coordinator owns the key registry (string names to compact ids, shapes
/// and the slice layout over the shards), init gating, barriers and the
/// job-wide control operations that fan out to every shard.
///
/// Messages:
/// - `(declare_atom, key, shape, rank)` -> `key_info`. The first declaration
///   of a key registers it and computes its layout. Rank 0 gets the reply at
///   once and must then write the initial value to the shards and send
///   `init_done`; any other rank gets the reply once that happened. Errors:
///   `shape_mismatch` (shape differs from the registered one or is empty),
///   `already_initialized` (this rank declared the key before), `bad_config`
///   (rank out of range).
/// - `(init_done_atom, key_id, ok)` -> `ok_atom`. With `ok`, marks the key
///   initialized and releases the waiting declarations; without, rank 0 failed
///   to write it: the waiters fail with `not_initialized` and rank 0 may
///   declare the key again. Error: `unknown_key`.
/// - `(lookup_atom, key)` -> `key_info` of an initialized key. Errors:
///   `unknown_key`, `not_initialized`.
/// - `(barrier_atom, rank)` -> `ok_atom` once every live worker arrived. A
///   rank entering again before the release (a retry after a timeout) just
///   waits again.
/// - `(leave_atom, rank)` -> `ok_atom`. The worker leaves the job: it no
///   longer counts for barriers, and every shard drops it from sync rounds,
///   so the others never wait for it.
/// - `(set_opt_atom, optimizer_config)` -> `ok_atom` once every shard applied
///   it. Error: `bad_optimizer` (checked before anything is sent).
/// - `(save_atom)` -> `state_snapshot` of all shards, key names and offsets
///   filled in, ordered by key name and part.
/// - `(load_atom, state_snapshot)` -> `ok_atom` once every shard loaded its
///   slices. Errors: `unknown_key` (key not initialized in this store),
///   `checkpoint_mismatch` (different slicing or sizes), `bad_optimizer`.
/// Failures of shards (errors, timeouts) are passed on to the requester.
namespace actorps {

/// Largest key the coordinator accepts, in floats (256 GiB of float32).
constexpr uint64_t max_key_floats = uint64_t{1} << 36;

/// Static configuration of the coordinator.
struct coordinator_config {
  uint32_t num_workers = 1;
  uint64_t bigarray_bound = uint64_t{1} << 20;
  /// Timeout of each request the coordinator sends to a shard.
  std::chrono::milliseconds timeout{60000};
  std::vector<shard_actor> shards;
};

/// Interface of the coordinator actor.
using coordinator_actor = caf::typed_actor<
  caf::replies_to<declare_atom, std::string, std::vector<uint64_t>,
                  uint32_t>::with<key_info>,
  caf::replies_to<init_done_atom, uint32_t, bool>::with<caf::ok_atom>,
  caf::replies_to<lookup_atom, std::string>::with<key_info>,
  caf::replies_to<barrier_atom, uint32_t>::with<caf::ok_atom>,
  caf::replies_to<leave_atom, uint32_t>::with<caf::ok_atom>,
  caf::replies_to<set_opt_atom, optimizer_config>::with<caf::ok_atom>,
  caf::replies_to<save_atom>::with<state_snapshot>,
  caf::replies_to<load_atom, state_snapshot>::with<caf::ok_atom>>;

/// Spawns a coordinator. The caller owns it: link to or monitor the handle.
coordinator_actor spawn_coordinator(caf::actor_system& sys,
                                    coordinator_config cfg);

} // namespace actorps
