// SPDX-License-Identifier: BSD-3-Clause
#include "core/float_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <utility>

#include "core/huge_pages.hpp"

namespace actorps::core {

namespace {

// A block the pool holds, with the operation count when it was given.
struct entry {
  std::vector<float> block;
  uint64_t given = 0;
  std::chrono::steady_clock::time_point at;
};

struct pool {
  pool() {
    blocks.reserve(pool_max_bytes / pooled_min_bytes);
  }

  std::mutex mtx;
  // In the order they were given (oldest first).
  std::vector<entry> blocks;
  std::size_t held_bytes = 0;
  // Bytes asked for and not yet matched by a block given back: what the
  // pool may keep (a flow that only gives keeps nothing here).
  std::size_t demand = 0;
  // Large takes and gives so far.
  uint64_t ops = 0;
  uint64_t reused = 0;
  uint64_t kept = 0;

  // Moves the blocks not taken within pool_max_age operations into `gone`
  // (freed by the caller once the lock is released).
  void age(std::vector<std::vector<float>>& gone) {
    std::size_t k = 0;
    while (k < blocks.size() && blocks[k].given + pool_max_age < ops)
      ++k;
    if (k == 0)
      return;
    for (std::size_t i = 0; i < k; ++i) {
      held_bytes -= blocks[i].block.capacity() * sizeof(float);
      gone.push_back(std::move(blocks[i].block));
    }
    blocks.erase(blocks.begin(),
                 blocks.begin() + static_cast<std::ptrdiff_t>(k));
  }
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
  std::vector<std::vector<float>> gone;
  std::lock_guard<std::mutex> guard{p.mtx};
  ++p.ops;
  p.demand = std::min(p.demand + n * sizeof(float), pool_max_bytes);
  p.age(gone);
  auto limit = 2 * n + pooled_min_bytes / sizeof(float);
  for (auto i = p.blocks.size(); i-- > 0;) {
    auto c = p.blocks[i].block.capacity();
    if (c < n || c > limit)
      continue;
    out = std::move(p.blocks[i].block);
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
  if (n == 0)
    return {};
  if (reinterpret_cast<std::uintptr_t>(bytes) % alignof(float) == 0)
    return copy_floats(static_cast<const float*>(bytes), n);
  // Unaligned (rare): into a pooled block, or a fresh one zeroed first.
  auto x = take_floats(n);
  std::memcpy(x.data(), bytes, n * sizeof(float));
  return x;
}

void give_floats(std::vector<float>& x) noexcept {
  auto bytes = bytes_of(x);
  if (bytes < pooled_min_bytes) {
    x = std::vector<float>{};
    return;
  }
  auto& p = the_pool();
  std::vector<std::vector<float>> gone;
  try {
    std::lock_guard<std::mutex> guard{p.mtx};
    ++p.ops;
    p.age(gone);
    if (p.demand > 0 && p.held_bytes + bytes <= pool_max_bytes) {
      p.blocks.push_back(
        entry{std::move(x), p.ops, std::chrono::steady_clock::now()});
      p.held_bytes += bytes;
      p.demand = p.demand > bytes ? p.demand - bytes : 0;
      ++p.kept;
    }
  } catch (...) {
    // (No room for an entry: the block is freed below instead.)
  }
  x = std::vector<float>{};
}

void trim_pool(std::chrono::nanoseconds older_than) noexcept {
  auto& p = the_pool();
  std::vector<std::vector<float>> gone;
  auto cut = std::chrono::steady_clock::now() - older_than;
  try {
    std::lock_guard<std::mutex> guard{p.mtx};
    std::size_t k = 0;
    while (k < p.blocks.size() && p.blocks[k].at <= cut)
      ++k;
    for (std::size_t i = 0; i < k; ++i) {
      p.held_bytes -= bytes_of(p.blocks[i].block);
      gone.push_back(std::move(p.blocks[i].block));
    }
    p.blocks.erase(p.blocks.begin(),
                   p.blocks.begin() + static_cast<std::ptrdiff_t>(k));
  } catch (...) {
    // (No room to collect them: they stay pooled until the next trim.)
  }
}

float_pool_stats pool_stats() {
  auto& p = the_pool();
  std::lock_guard<std::mutex> guard{p.mtx};
  return float_pool_stats{p.held_bytes, p.blocks.size(), p.reused, p.kept};
}

void drain_pool() noexcept {
  auto& p = the_pool();
  std::vector<entry> gone;
  {
    std::lock_guard<std::mutex> guard{p.mtx};
    gone.swap(p.blocks);
    p.held_bytes = 0;
    p.demand = 0;
  }
}

} // namespace actorps::core
