// SPDX-License-Identifier: BSD-3-Clause
#include "core/layout.hpp"

#include <cstdint>

#include <algorithm>
#include <string>

namespace actorps::core {

namespace {

constexpr uint64_t fnv_offset_basis = 14695981039346656037ull;
constexpr uint64_t fnv_prime = 1099511628211ull;

// splitmix64's finalizer. FNV-1a alone leaves the high bits of short, similar
// names (key0, key1, ...) poorly mixed, and jump_hash draws from all 64 bits.
constexpr uint64_t mix64(uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

} // namespace

uint64_t key_hash(std::string_view key) noexcept {
  uint64_t h = fnv_offset_basis;
  for (char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= fnv_prime;
  }
  return mix64(h);
}

uint32_t jump_hash(uint64_t hash, uint32_t buckets) noexcept {
  // Lamping & Veach, "A Fast, Minimal Memory, Consistent Hash Algorithm"
  // (2014), figure 1. The next candidate is compared as a double before the
  // conversion: with up to 2^32 buckets it can exceed int64's range.
  int64_t b = -1;
  int64_t j = 0;
  const auto limit = static_cast<double>(buckets);
  while (j < static_cast<int64_t>(buckets)) {
    b = j;
    hash = hash * 2862933555777941757ull + 1;
    double next = static_cast<double>(b + 1)
                  * (static_cast<double>(int64_t{1} << 31)
                     / static_cast<double>((hash >> 33) + 1));
    if (!(next < limit))
      break;
    j = static_cast<int64_t>(next);
  }
  return static_cast<uint32_t>(b);
}

std::vector<slice_range>
make_layout(std::string_view key, uint64_t size, uint32_t num_shards,
            uint64_t bigarray_bound, uint64_t slice_floats) {
  const uint32_t first = jump_hash(key_hash(key), num_shards);
  if (size < bigarray_bound)
    return {slice_range{0, first, 0, size}};
  uint64_t parts = std::max<uint64_t>(
    num_shards, size / slice_floats + (size % slice_floats != 0));
  // Only a tiny bigarray_bound makes size < num_shards; an empty part would
  // be a slice nobody can push to, so such keys get one float per part.
  parts = std::min(parts, size);
  const uint64_t base = size / parts;
  const uint64_t longer = size % parts;
  std::vector<slice_range> result;
  result.reserve(parts);
  uint64_t offset = 0;
  for (uint64_t i = 0; i < parts; ++i) {
    slice_range r;
    r.part = static_cast<uint32_t>(i);
    r.shard = static_cast<uint32_t>((first + i) % num_shards);
    r.offset = offset;
    r.length = base + (i < longer ? 1 : 0);
    offset += r.length;
    result.push_back(r);
  }
  return result;
}

uint64_t shape_size(const std::vector<uint64_t>& shape) noexcept {
  uint64_t result = 1;
  for (auto dim : shape) {
    // Saturate instead of wrapping, so an absurd shape never matches a
    // real buffer's length.
    if (dim != 0 && result > UINT64_MAX / dim)
      return UINT64_MAX;
    result *= dim;
  }
  return result;
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string result = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0)
      result += ',';
    result += std::to_string(shape[i]);
  }
  result += ']';
  return result;
}

status check_size(const char* op, const key_info& info, uint64_t got,
                  const char* what) {
  if (got == info.size)
    return {};
  return {errc::shape_mismatch, std::string{op} + ": key '" + info.name
                                  + "' has shape " + shape_string(info.shape)
                                  + " (" + std::to_string(info.size)
                                  + " floats) but the " + what + " has "
                                  + std::to_string(got) + " floats"};
}

uint64_t message_cap(uint64_t bigarray_bound, uint64_t slice_floats) noexcept {
  constexpr uint64_t most = uint64_t{0xFFFFFFFF};
  constexpr uint64_t headers = uint64_t{1} << 20;
  auto floats = std::max(bigarray_bound, slice_floats);
  if (floats > (most - headers) / 4)
    return most;
  return std::max(min_message_cap, 4 * floats) + headers;
}

} // namespace actorps::core
