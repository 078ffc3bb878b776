// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <vector>

/// Large tables on transparent huge pages (issue 25). A row-sparse table of
/// millions of rows is read and updated at random rows: on 4 KB pages
/// nearly every row costs a TLB miss and a page walk, on 2 MB pages the
/// whole table fits the TLB. Linux backs a range with huge pages on its
/// first touch when the range was advised (`MADV_HUGEPAGE`) and
/// /sys/kernel/mm/transparent_hugepage/enabled says `always` or `madvise`;
/// `never` there turns this off for every program.
namespace actorps::core {

/// Blocks of at least this many bytes are advised; smaller ones are left
/// alone (they hold no whole huge page worth the advice).
inline constexpr std::size_t huge_page_min_bytes = std::size_t{8} << 20;

/// Advises the whole 2 MB pages inside [p, p + bytes) for huge pages. Has
/// an effect on memory not touched yet; a no-op for small blocks, off
/// Linux, or when the kernel refuses.
void advise_huge_pages(void* p, std::size_t bytes) noexcept;

/// `v` becomes `n` copies of `fill`, in a fresh block advised for huge
/// pages before it is first written when it is large.
template <class T>
void assign_large(std::vector<T>& v, std::size_t n, const T& fill) {
  if (n * sizeof(T) < huge_page_min_bytes) {
    v.assign(n, fill);
    return;
  }
  std::vector<T> fresh;
  fresh.reserve(n);
  advise_huge_pages(fresh.data(), n * sizeof(T));
  fresh.assign(n, fill);
  v = std::move(fresh);
}

/// A fresh copy of the `n` values at `first`, advised for huge pages before
/// it is written when it is large.
template <class T>
std::vector<T> large_copy(const T* first, std::size_t n) {
  std::vector<T> v;
  v.reserve(n);
  if (n * sizeof(T) >= huge_page_min_bytes)
    advise_huge_pages(v.data(), n * sizeof(T));
  v.assign(first, first + n);
  return v;
}

/// A fresh vector of `n` copies of `fill` (see assign_large).
template <class T>
std::vector<T> large_vector(std::size_t n, const T& fill) {
  std::vector<T> v;
  assign_large(v, n, fill);
  return v;
}

} // namespace actorps::core
