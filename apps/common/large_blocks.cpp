// SPDX-License-Identifier: BSD-3-Clause
// The programs' global operator new and delete (issue 25): a block of 8 MiB
// or more starts on a cache line. malloc starts a large block 16 bytes into
// a page, so a row of 16 floats of a row-sparse table spans two cache lines
// and a lazy update of random rows misses twice a row; on a 64-byte
// boundary it misses once (docs/benchmarks.md, "Large blocks on cache
// lines"). A std::vector cannot be asked for aligned memory, so the
// programs (the apps and the benches, never the libraries a user embeds)
// replace the global allocation functions instead. Smaller blocks come from
// malloc as before; every block goes back with free, which takes both.
// ACTORPS_ALIGN_LARGE_BLOCKS=0 in the environment turns the alignment off
// (for an A/B on one binary). Not in sanitizer builds: ASan's own operator
// new finds mismatched new and delete.
#include <cstdint>
#include <cstdlib>
#include <new>

#include "core/huge_pages.hpp"

namespace {

constexpr std::size_t line = 64;

bool aligning() noexcept {
  static const bool on = [] {
    const char* v = std::getenv("ACTORPS_ALIGN_LARGE_BLOCKS");
    return v == nullptr || v[0] != '0';
  }();
  return on;
}

void* try_allocate(std::size_t n) noexcept {
  if (n > SIZE_MAX - (line - 1))
    return nullptr; // (Rounded up below, it would wrap to a tiny block.)
  if (n >= actorps::core::huge_page_min_bytes && aligning())
    return std::aligned_alloc(line, (n + line - 1) / line * line);
  return std::malloc(n == 0 ? 1 : n);
}

// As the standard's operator new: the new-handler until it gives up.
void* allocate(std::size_t n) {
  for (;;) {
    if (void* p = try_allocate(n))
      return p;
    auto handler = std::get_new_handler();
    if (handler == nullptr)
      throw std::bad_alloc{};
    handler();
  }
}

void* allocate_or_null(std::size_t n) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}

} // namespace

void* operator new(std::size_t n) {
  return allocate(n);
}

void* operator new[](std::size_t n) {
  return allocate(n);
}

void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return allocate_or_null(n);
}

void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return allocate_or_null(n);
}

void operator delete(void* p) noexcept {
  std::free(p);
}

void operator delete[](void* p) noexcept {
  std::free(p);
}

void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}

void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
