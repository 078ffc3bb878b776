// SPDX-License-Identifier: BSD-3-Clause
// The coordinator's registry of keys: where a key lives, and the
// collective `init` (each rank declares; rank 0's shape and value win).
#include <string>
#include <vector>

#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

#include "actors/coordinator/coordinator.hpp"
#include "actors/coordinator/state.hpp"
#include "core/layout.hpp"
#include "core/node_ids.hpp"
#include "core/rows.hpp"
#include "core/update_rule.hpp"
#include "messages/errors.hpp"

namespace actorps {

namespace {

std::string quoted(const std::string& key) {
  return "'" + key + "'";
}

// The largest number of slices one key may be cut into.
constexpr uint64_t max_key_slices = uint64_t{1} << 20;

// Where key `key` of `shape` (`size` floats; a table of row size `dim`, or
// dense when 0) lives, under id `id`.
key_info layout_of(const coordinator_state& st, uint32_t id,
                   const std::string& key, const std::vector<uint64_t>& shape,
                   uint64_t size, uint64_t dim) {
  key_info info;
  info.id = id;
  info.name = key;
  info.shape = shape;
  info.size = size;
  auto num_shards = static_cast<uint32_t>(st.cfg.shards.size());
  if (dim > 0) {
    // A table: shard s holds rows s, s + S, ... (core/rows.hpp).
    core::row_layout rows{shape[0], dim, num_shards};
    info.dim = dim;
    // Offsets count shard by shard: the slices tile [0, size) as a dense
    // key's do (checkpoints check that), though row r lies at r mod S,
    // not at r * dim.
    uint64_t at = 0;
    for (uint32_t sh = 0; sh < num_shards && sh < shape[0]; ++sh) {
      auto len = rows.rows_on(sh) * dim;
      info.slices.push_back(slice_range{sh, sh, at, len});
      at += len;
    }
  } else {
    info.slices = core::make_layout(key, size, num_shards,
                                    st.cfg.bigarray_bound, st.cfg.slice_floats);
  }
  return info;
}

} // namespace

caf::result<key_info> declare_key(coordinator_ptr self, const std::string& key,
                                  const std::vector<uint64_t>& shape,
                                  uint32_t rank, uint64_t dim) {
  if (auto err = self->state.trusted.check(self, "init"))
    return err;
  auto& st = self->state;
  if (rank >= st.cfg.num_workers)
    return make_error(errc::bad_config, "init: rank " + std::to_string(rank)
                                          + " out of range (job has "
                                          + std::to_string(st.cfg.num_workers)
                                          + " workers)");
  if (auto err = speaks_for(self, "init", worker_node_id(rank)))
    return err;
  if (key.size() > max_key_name)
    return make_error(errc::bad_config, "init: a key name of "
                                          + std::to_string(key.size())
                                          + " bytes (at most "
                                          + std::to_string(max_key_name) + ")");
  auto size = core::shape_size(shape);
  if (shape.empty() || size == 0)
    return make_error(errc::shape_mismatch, "init: key " + quoted(key)
                                              + " has empty shape "
                                              + core::shape_string(shape));
  if (size > max_key_floats)
    return make_error(errc::shape_mismatch,
                      "init: key " + quoted(key) + " of shape "
                        + core::shape_string(shape)
                        + " is larger than the largest key ("
                        + std::to_string(max_key_floats) + " floats)");
  if (dim == 0 && size >= st.cfg.bigarray_bound && st.cfg.slice_floats > 0
      && size / st.cfg.slice_floats >= max_key_slices)
    return make_error(errc::shape_mismatch,
                      "init: key " + quoted(key) + " of shape "
                        + core::shape_string(shape) + " would be cut into "
                        + std::to_string(size / st.cfg.slice_floats)
                        + " slices, more than " + std::to_string(max_key_slices)
                        + " (a larger slice_floats cuts it into fewer)");
  auto i = st.keys.find(key);
  if (i == st.keys.end()) {
    key_entry e;
    e.info = layout_of(st, static_cast<uint32_t>(st.names_by_id.size()), key,
                       shape, size, dim);
    e.declared.assign(st.cfg.num_workers, false);
    // A local store's own update rule gets keys by name.
    if (st.cfg.hooks)
      st.cfg.hooks->name_key(e.info.id, key);
    st.names_by_id.push_back(key);
    i = st.keys.emplace(key, std::move(e)).first;
  }
  auto& e = i->second;
  // Rank 0's declaration is the key's (MXNet: only rank 0's value is used):
  // other ranks that declared another shape before it fail now.
  if (rank == 0 && !e.declared[0] && !e.initialized
      && (e.info.dim != dim || e.info.shape != shape)) {
    auto err = make_error(
      errc::shape_mismatch,
      "init: key " + quoted(key) + " has shape " + core::shape_string(shape)
        + " as rank 0 declared it, not " + core::shape_string(e.info.shape));
    for (auto& w : e.waiters)
      w.deliver(err);
    e.waiters.clear();
    e.declared.assign(st.cfg.num_workers, false);
    e.info = layout_of(st, e.info.id, key, shape, size, dim);
  }
  if (e.info.dim != dim)
    return make_error(errc::shape_mismatch,
                      "init: key " + quoted(key) + " is "
                        + (e.info.dim > 0 ? "a row table" : "a dense key")
                        + " but rank " + std::to_string(rank)
                        + " declared it as "
                        + (dim > 0 ? "a row table" : "a dense key"));
  if (e.info.shape != shape)
    return make_error(errc::shape_mismatch,
                      "init: key " + quoted(key) + " has shape "
                        + core::shape_string(e.info.shape) + " but rank "
                        + std::to_string(rank) + " declared "
                        + core::shape_string(shape));
  // Rank 0 may declare again until its init is done (a retry). Another
  // rank's declaration only waits for that: declaring again (after its
  // call timed out, or from a new process in its place) waits again, or
  // takes the key (its worker refuses an init it saw done).
  if (rank == 0 && e.declared[0] && e.initialized)
    return make_error(errc::already_initialized,
                      "init: key " + quoted(key)
                        + " was already initialized by rank 0");
  e.declared[rank] = true;
  if (rank == 0 || e.initialized)
    return e.info;
  auto rp = self->make_response_promise<key_info>();
  e.waiters.push_back(rp);
  return rp;
}

} // namespace actorps
