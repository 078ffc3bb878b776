// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <actorps/core/errc.hpp>
#include <actorps/core/values.hpp>

/// Placement of keys on shards, free of CAF.
///
/// A key of fewer than `bigarray_bound` floats lives whole on one shard,
/// chosen by jump consistent hashing (Lamping & Veach) of the key's 64-bit
/// hash: growing the shard count moves only the keys that must move. A key of
/// `bigarray_bound` floats or more is cut into contiguous slices spread over
/// all shards (BigDL's AllReduceParameter): max(num_shards,
/// ceil(size / slice_floats)) parts of near-equal length (lengths differ by at
/// most one, longer parts first), part i on shard (first + i) % num_shards
/// where first is the key's hashed shard, so big keys do not all start on
/// shard 0.
namespace actorps::core {

/// Default bound above which a key is sliced (MXNet's bigarray_bound).
constexpr uint64_t default_bigarray_bound = uint64_t{1} << 20;

/// Largest slice size one may configure, in floats: far below BASP's 4 GiB
/// message limit.
constexpr uint64_t max_slice_floats = uint64_t{1} << 25;

/// Default largest slice, in floats (4 MB): a big key becomes many slices
/// that stream over all shards instead of one huge message per shard, and
/// each message's buffers stay small enough for the allocator to reuse.
constexpr uint64_t default_slice_floats = uint64_t{1} << 20;

/// Least bound on one message between a job's processes, in bytes (the
/// routing table of a job of very many keys, a batch, a piece of a save).
constexpr uint64_t min_message_cap = uint64_t{256} << 20;

/// The largest message (BASP payload) a job's processes accept from each
/// other: the job's largest slice (an unsliced key below `bigarray_bound`,
/// or a slice of `slice_floats`) as float32, at least `min_message_cap`,
/// plus 1 MiB of headers; at most what a BASP header can announce. A
/// connection that announces more is closed before anything is allocated.
uint64_t message_cap(uint64_t bigarray_bound, uint64_t slice_floats) noexcept;

/// Stable 64-bit hash of a key name (FNV-1a with a final mix); the same on
/// every machine and every run.
uint64_t key_hash(std::string_view key) noexcept;

/// Jump consistent hash: maps `hash` to a bucket in [0, buckets).
/// Precondition: buckets > 0.
uint32_t jump_hash(uint64_t hash, uint32_t buckets) noexcept;

/// Slices of a key of `size` floats over `num_shards` shards, ordered by
/// part, covering [0, size) without gaps or overlap. No part is empty: with
/// a tiny `bigarray_bound`, a key of fewer floats than shards gets `size`
/// parts of one float each.
/// Preconditions: size > 0, num_shards > 0, bigarray_bound > 0,
/// 0 < slice_floats <= max_slice_floats.
std::vector<slice_range>
make_layout(std::string_view key, uint64_t size, uint32_t num_shards,
            uint64_t bigarray_bound = default_bigarray_bound,
            uint64_t slice_floats = default_slice_floats);

/// Product of the dimensions of `shape` (1 for an empty shape); saturates
/// at UINT64_MAX instead of wrapping around.
uint64_t shape_size(const std::vector<uint64_t>& shape) noexcept;

/// Renders a shape as "[256,784]".
std::string shape_string(const std::vector<uint64_t>& shape);

/// Checks that `got` floats fit key `info`; otherwise `errc::shape_mismatch`
/// with a message such as "push: key 'w' has shape [2,3] (6 floats) but the
/// push has 5 floats". `op` names the operation, `what` the offending buffer.
status check_size(const char* op, const key_info& info, uint64_t got,
                  const char* what);

} // namespace actorps::core
