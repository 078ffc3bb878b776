// SPDX-License-Identifier: BSD-3-Clause
// The programs' operator new (apps/common/large_blocks.cpp, compiled into
// this test program as into the apps).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include <catch2/catch.hpp>

namespace {

uintptr_t address(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

} // namespace

TEST_CASE("large blocks: a block of 8 MiB or more starts on a cache line",
          "[apps]") {
  if (const char* v = std::getenv("ACTORPS_ALIGN_LARGE_BLOCKS");
      v != nullptr && v[0] == '0') {
    WARN("ACTORPS_ALIGN_LARGE_BLOCKS=0: alignment is off, nothing to check");
    return;
  }
  // (malloc alone starts such a block 16 bytes into a page.)
  for (std::size_t floats : {std::size_t{2} << 20, std::size_t{3} << 20,
                             (std::size_t{5} << 20) + 3}) {
    std::vector<float> table(floats, 1.0f);
    CHECK(address(table.data()) % 64 == 0);
    CHECK(table.back() == 1.0f);
  }
}

TEST_CASE("large blocks: small blocks, arrays and nothrow new still work",
          "[apps]") {
  std::vector<std::unique_ptr<int>> small;
  for (int i = 0; i < 1000; ++i)
    small.push_back(std::make_unique<int>(i));
  CHECK(*small[999] == 999);
  auto* array = new double[1 << 21];
  array[(1 << 21) - 1] = 2.5;
  CHECK(array[(1 << 21) - 1] == 2.5);
  delete[] array;
  auto* none = new (std::nothrow) char[0];
  CHECK(none != nullptr);
  delete[] none;
#if !defined(__SANITIZE_ADDRESS__) // (ASan stops the program there.)
  // Far more than any machine has: nothrow gives null, plain new throws.
  auto huge = std::size_t{1} << 62;
  CHECK(::operator new(huge, std::nothrow) == nullptr);
  CHECK_THROWS_AS(::operator new(huge), std::bad_alloc);
  // Sizes that would wrap when rounded up to a cache line (volatile: not
  // known to the compiler, which refuses such a constant size).
  volatile std::size_t biggest = SIZE_MAX;
  CHECK(::operator new(biggest, std::nothrow) == nullptr);
  CHECK(::operator new[](biggest - 1, std::nothrow) == nullptr);
#endif
}
