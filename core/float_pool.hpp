// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

/// Large float buffers kept for reuse by any thread of the process. glibc
/// keeps what a thread frees in that thread's arena (and, tuned by
/// `tune_malloc`, never gives it back), so a large block made on one thread
/// and let go of when another thread's block took its place stays resident
/// in an arena that may never reuse it: a server's initial values, made
/// where CAF read them, replaced by bodies the data plane's thread received,
/// held the weights a second time (docs/benchmarks.md, "Server memory over
/// TCP: large blocks pooled"). A block given here is taken by the next
/// large request of any thread instead. Free of CAF.
namespace actorps::core {

/// Blocks of fewer bytes are neither pooled nor taken from the pool: the
/// slices of large tensors (4 MiB by default) are, the batches of small keys
/// and the slices of a 4 MB key are not (pooling those raised the server's
/// peak in the many-key cases, docs/benchmarks.md).
inline constexpr std::size_t pooled_min_bytes = std::size_t{4} << 20;

/// The pool holds at most this many bytes; a block given beyond them is
/// freed.
inline constexpr std::size_t pool_max_bytes = std::size_t{16} << 20;

/// A pooled block not taken within this many later large takes and gives
/// is freed (a flow that stopped leaves nothing behind).
inline constexpr uint64_t pool_max_age = 64;

/// A vector of `n` floats whose values are unspecified (a pooled block's
/// old contents, zeros in a fresh one): for a caller that writes them all.
/// Reuses a pooled block that holds at least `n` floats and at most about
/// twice as many; a fresh vector otherwise, or when `n` floats are fewer
/// than `pooled_min_bytes`.
std::vector<float> take_floats(std::size_t n);

/// A copy of the `n` floats at `first`, in a pooled block when one fits
/// (see take_floats).
std::vector<float> copy_floats(const float* first, std::size_t n);

/// A vector of the `n` floats whose bytes lie at `bytes`, at any alignment
/// (in a pooled block when one fits).
std::vector<float> copy_float_bytes(const void* bytes, std::size_t n);

/// Lets go of `x`'s block: kept for a later `take_floats` if it is large,
/// the pool has room, and large requests were made that blocks given back
/// have not matched yet (so that a flow that only gives, or one whose
/// blocks are never asked for again, keeps nothing); freed otherwise. `x` is
/// left empty. Safe from any thread, also during the process's exit.
void give_floats(std::vector<float>& x) noexcept;

/// Frees the pooled blocks given back longer ago than `older_than`: called
/// now and then (a node's heartbeat), so that blocks a flow of large values
/// left behind go back to malloc once the process moved on to small ones.
void trim_pool(std::chrono::nanoseconds older_than) noexcept;

/// What the pool did so far (tests, benchmarks).
struct float_pool_stats {
  /// Bytes held now, blocks held now.
  std::size_t held_bytes = 0;
  std::size_t held_blocks = 0;
  /// Requests served from the pool, and blocks kept.
  uint64_t reused = 0;
  uint64_t kept = 0;
};

float_pool_stats pool_stats();

/// Frees every pooled block (tests).
void drain_pool() noexcept;

} // namespace actorps::core
