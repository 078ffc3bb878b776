// SPDX-License-Identifier: BSD-3-Clause
#include "core/float_pool.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <utility>

#include "core/huge_pages.hpp"

namespace actorps::core {

namespace {

struct pool {
  pool() {
    blocks.reserve(pool_max_bytes / pooled_min_bytes);
  }

  std::mutex mtx;
  std::vector<std::vector<float>> blocks;
  std::size_t held_bytes = 0;
  uint64_t reused = 0;
  uint64_t kept = 0;
};

// Never destroyed: blocks are given back by objects destroyed during exit,
// in any order relative to this one.
pool& the_pool() {
  static auto* p = new pool;
  return *p;
}

std::size_t bytes_of(const std::vector<float>& x) {
  return x.capacity() * sizeof(float);
}

// A pooled block for `n` floats, or an empty vector: the one given last
// among those that hold at least `n` floats and at most about twice as many
// (as malloc's bins reuse the chunk freed last, whose lines the caches may
// still hold).
std::vector<float> reuse(std::size_t n) {
  auto& p = the_pool();
  std::vector<float> out;
  std::lock_guard<std::mutex> guard{p.mtx};
  auto limit = 2 * n + pooled_min_bytes / sizeof(float);
  for (auto i = p.blocks.size(); i-- > 0;) {
    auto c = p.blocks[i].capacity();
    if (c < n || c > limit)
      continue;
    out = std::move(p.blocks[i]);
    p.blocks.erase(p.blocks.begin() + static_cast<std::ptrdiff_t>(i));
    p.held_bytes -= bytes_of(out);
    ++p.reused;
    return out;
  }
  return out;
}

} // namespace

std::vector<float> take_floats(std::size_t n) {
  if (n * sizeof(float) >= pooled_min_bytes) {
    auto x = reuse(n);
    if (x.capacity() > 0) {
      // (A block's old size is kept while pooled: shrinking writes nothing,
      // and growing within its room fills only the new tail.)
      x.resize(n);
      return x;
    }
  }
  return large_vector(n, 0.0f);
}

std::vector<float> copy_floats(const float* first, std::size_t n) {
  if (n * sizeof(float) >= pooled_min_bytes) {
    auto x = reuse(n);
    if (x.capacity() > 0) {
      x.assign(first, first + n);
      return x;
    }
  }
  return large_copy(first, n);
}

std::vector<float> copy_float_bytes(const void* bytes, std::size_t n) {
  if (reinterpret_cast<std::uintptr_t>(bytes) % alignof(float) == 0)
    return copy_floats(static_cast<const float*>(bytes), n);
  if (n * sizeof(float) >= pooled_min_bytes) {
    auto x = reuse(n);
    if (x.capacity() > 0) {
      x.resize(n);
      std::memcpy(x.data(), bytes, n * sizeof(float));
      return x;
    }
  }
  // Fresh: filled a chunk at a time through a small buffer that stays in
  // the L1 cache, in one pass (resizing first would zero it all).
  std::vector<float> x;
  x.reserve(n);
  constexpr std::size_t chunk = 1024;
  float tmp[chunk];
  const auto* src = static_cast<const char*>(bytes);
  for (std::size_t i = 0; i < n; i += chunk) {
    auto k = std::min(chunk, n - i);
    std::memcpy(tmp, src + i * sizeof(float), k * sizeof(float));
    x.insert(x.end(), tmp, tmp + k);
  }
  return x;
}

void give_floats(std::vector<float>& x) noexcept {
  auto bytes = bytes_of(x);
  if (bytes < pooled_min_bytes) {
    x = std::vector<float>{};
    return;
  }
  auto& p = the_pool();
  {
    std::lock_guard<std::mutex> guard{p.mtx};
    if (p.held_bytes + bytes <= pool_max_bytes) {
      try {
        p.blocks.push_back(std::move(x));
      } catch (...) {
        // (No room for the entry: the block is freed below instead.)
      }
      if (x.capacity() == 0) {
        p.held_bytes += bytes;
        ++p.kept;
        return;
      }
    }
  }
  x = std::vector<float>{};
}

float_pool_stats pool_stats() {
  auto& p = the_pool();
  std::lock_guard<std::mutex> guard{p.mtx};
  return float_pool_stats{p.held_bytes, p.blocks.size(), p.reused, p.kept};
}

void drain_pool() noexcept {
  auto& p = the_pool();
  std::vector<std::vector<float>> gone;
  {
    std::lock_guard<std::mutex> guard{p.mtx};
    gone.swap(p.blocks);
    p.held_bytes = 0;
  }
}

} // namespace actorps::core
