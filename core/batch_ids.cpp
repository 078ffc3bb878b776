// SPDX-License-Identifier: BSD-3-Clause
#include "core/batch_ids.hpp"

#include <algorithm>

namespace actorps::core {

namespace {

uint64_t zigzag(int64_t x) noexcept {
  return (static_cast<uint64_t>(x) << 1) ^ static_cast<uint64_t>(x >> 63);
}

int64_t unzigzag(uint64_t x) noexcept {
  return static_cast<int64_t>(x >> 1) ^ -static_cast<int64_t>(x & 1);
}

uint8_t* put(uint8_t* at, uint64_t x) noexcept {
  while (x >= 0x80) {
    *at++ = static_cast<uint8_t>(x | 0x80);
    x >>= 7;
  }
  *at++ = static_cast<uint8_t>(x);
  return at;
}

// Reads one varint at `at` (before `end`) into `x`; nullptr if it runs
// past `end`, over 10 bytes or 64 bits, or ends in a 0 byte after others.
const uint8_t* get(const uint8_t* at, const uint8_t* end,
                   uint64_t& x) noexcept {
  // (The one-byte case first, out of the loop: nearly every id's.)
  if (at != end && *at < 0x80) {
    x = *at;
    return at + 1;
  }
  uint64_t v = 0;
  for (unsigned shift = 0; shift < 70 && at != end; shift += 7) {
    auto b = *at++;
    if (shift == 63 && b > 1)
      return nullptr;
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (b < 0x80) {
      if (b == 0 && shift > 0)
        return nullptr;
      x = v;
      return at;
    }
  }
  return nullptr;
}

} // namespace

void pack_ids(const uint64_t* slices, const uint64_t* seqs, std::size_t n,
              std::vector<uint8_t>& out) {
  // Room for 2 bytes a slice to start with (keys in order or near it take
  // 1), grown when a slice (10 bytes at most) or a run (20) might not fit.
  std::size_t used = out.size();
  out.resize(used + 2 * n + 64);
  auto room = [&](std::size_t bytes) {
    if (out.size() - used < bytes)
      out.resize(2 * out.size() + bytes);
  };
  int64_t key = 0;
  std::size_t i = 0;
  while (i < n) {
    room(10 * 64);
    auto* at = out.data() + used;
    // (Up to 64 slices between checks of the room left.)
    for (auto last = std::min(n, i + 64); i < last; ++i) {
      auto k = static_cast<int64_t>(slices[i] >> 32);
      auto part = slices[i] & 0xFFFFFFFFu;
      auto v = (zigzag(k - key) << 1) | (part != 0 ? 1 : 0);
      key = k;
      at = put(at, v);
      if (part != 0)
        at = put(at, part);
    }
    used = static_cast<std::size_t>(at - out.data());
  }
  uint64_t seq = 0;
  for (std::size_t i = 0; i < n;) {
    auto j = i + 1;
    while (j < n && seqs[j] == seqs[i])
      ++j;
    room(20);
    auto* at = out.data() + used;
    at = put(at, zigzag(static_cast<int64_t>(seqs[i] - seq)));
    at = put(at, j - i);
    used = static_cast<std::size_t>(at - out.data());
    seq = seqs[i];
    i = j;
  }
  out.resize(used);
}

bool unpack_ids(const uint8_t* data, std::size_t size, std::size_t n,
                uint64_t* slices, uint64_t* seqs) {
  const auto* at = data;
  const auto* end = data + size;
  int64_t key = 0;
  for (std::size_t i = 0; i < n; ++i) {
    uint64_t v = 0;
    if ((at = get(at, end, v)) == nullptr)
      return false;
    // (A delta beyond 2^33 cannot lead to a key of 32 bits.)
    if ((v >> 1) > (uint64_t{1} << 34))
      return false;
    key += unzigzag(v >> 1);
    if (static_cast<uint64_t>(key) > uint64_t{0xFFFFFFFF})
      return false;
    uint64_t part = 0;
    if ((v & 1) != 0
        && ((at = get(at, end, part)) == nullptr || part == 0
            || part > 0xFFFFFFFFu))
      return false;
    slices[i] = (static_cast<uint64_t>(key) << 32) | part;
  }
  uint64_t seq = 0;
  for (std::size_t i = 0; i < n;) {
    uint64_t delta = 0;
    uint64_t len = 0;
    if ((at = get(at, end, delta)) == nullptr
        || (at = get(at, end, len)) == nullptr || len == 0 || len > n - i
        || (i > 0 && delta == 0))
      return false;
    seq += static_cast<uint64_t>(unzigzag(delta));
    for (uint64_t j = 0; j < len; ++j)
      seqs[i + j] = seq;
    i += len;
  }
  return at == end;
}

} // namespace actorps::core
