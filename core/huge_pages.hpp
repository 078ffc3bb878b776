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

/// An empty vector with room for `n` values in a fresh block, advised for
/// huge pages (when large) before anything is written to it.
template <class T>
std::vector<T> large_room(std::size_t n) {
  std::vector<T> v;
  v.reserve(n);
  advise_huge_pages(v.data(), n * sizeof(T));
  return v;
}

/// `v` becomes `n` copies of `fill`: in a fresh block advised for huge
/// pages when it is large, else in `v`'s own.
template <class T>
void assign_large(std::vector<T>& v, std::size_t n, const T& fill) {
  if (n * sizeof(T) < huge_page_min_bytes) {
    v.assign(n, fill);
    return;
  }
  auto fresh = large_room<T>(n);
  fresh.assign(n, fill);
  v = std::move(fresh);
}

/// A fresh copy of the `n` values at `first` (see large_room).
template <class T>
std::vector<T> large_copy(const T* first, std::size_t n) {
  auto v = large_room<T>(n);
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
