// SPDX-License-Identifier: BSD-3-Clause
#include "core/float_pool.hpp"

#include <algorithm>
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

// A pooled block for `n` floats (the smallest that fits, if not more than
// about twice as large), or an empty vector.
std::vector<float> reuse(std::size_t n) {
  auto& p = the_pool();
  std::vector<float> out;
  std::lock_guard<std::mutex> guard{p.mtx};
  auto best = p.blocks.end();
  for (auto i = p.blocks.begin(); i != p.blocks.end(); ++i) {
    auto c = i->capacity();
    if (c < n || c > 2 * n + (pooled_min_bytes / sizeof(float)))
      continue;
    if (best == p.blocks.end() || c < best->capacity())
      best = i;
  }
  if (best == p.blocks.end())
    return out;
  out = std::move(*best);
  *best = std::move(p.blocks.back());
  p.blocks.pop_back();
  p.held_bytes -= bytes_of(out);
  ++p.reused;
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
