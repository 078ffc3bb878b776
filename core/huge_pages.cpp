// SPDX-License-Identifier: BSD-3-Clause
#include "core/huge_pages.hpp"

#include <cstdint>

#if defined(__linux__)
#  include <sys/mman.h>
#endif

namespace actorps::core {

void advise_huge_pages(void* p, std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t huge = std::uintptr_t{2} << 20;
  if (p == nullptr || bytes < huge_page_min_bytes)
    return;
  auto begin = reinterpret_cast<std::uintptr_t>(p);
  auto first = (begin + huge - 1) & ~(huge - 1);
  auto last = (begin + bytes) & ~(huge - 1);
  if (last <= first)
    return;
  // Advice only: a kernel without THP answers EINVAL and nothing changes.
  (void) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void) p;
  (void) bytes;
#endif
}

} // namespace actorps::core
