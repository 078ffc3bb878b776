// SPDX-License-Identifier: BSD-3-Clause
#pragma once

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

/// Blocks of fewer bytes are neither pooled nor taken from the pool.
inline constexpr std::size_t pooled_min_bytes = std::size_t{1} << 20;

/// The pool holds at most this many bytes; a block given beyond them is
/// freed.
inline constexpr std::size_t pool_max_bytes = std::size_t{32} << 20;

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

/// Lets go of `x`'s block: kept for a later `take_floats` if it is large and
/// the pool has room, freed otherwise. `x` is left empty. Safe from any
/// thread, also during the process's exit.
void give_floats(std::vector<float>& x) noexcept;

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
