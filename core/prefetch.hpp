// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>

/// Fetching the rows of a large table ahead of their use (issue 25). A row
/// of 16 floats in a table that starts 16 bytes into a page (as malloc's
/// large blocks do) spans two cache lines, a row of Adam's state three: a
/// prefetch of the row's first byte leaves the others to miss.
namespace actorps::core {

inline constexpr std::size_t cache_line = 64;

/// Prefetches every cache line of [p, p + bytes), for reading or (`write`)
/// for writing. Always inlined: GCC finds a function that only prefetches
/// free of effects and drops calls to it that it did not inline (a helper
/// around this one lost every prefetch of apply_rows: 3x slower rows).
template <bool Write = false>
[[gnu::always_inline]] inline void
prefetch_lines(const void* p, std::size_t bytes) noexcept {
  auto at = reinterpret_cast<std::uintptr_t>(p) & ~(cache_line - 1);
  auto end = reinterpret_cast<std::uintptr_t>(p) + bytes;
  for (; at < end; at += cache_line)
    __builtin_prefetch(reinterpret_cast<const void*>(at), Write ? 1 : 0);
}

} // namespace actorps::core
