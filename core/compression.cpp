// SPDX-License-Identifier: BSD-3-Clause
#include "core/compression.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace actorps {

namespace {

uint32_t bits_of(float x) noexcept {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(uint32_t u) noexcept {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The upper half of `x`'s bits; a NaN keeps its sign and becomes the quiet
// NaN, so it stays a NaN whatever its payload.
uint16_t upper_half(float x) noexcept {
  auto u = bits_of(x);
  auto nan = ((u >> 16) & 0x8000u) | 0x7FC0u;
  // x != x only for a NaN; a select, not a branch.
  return static_cast<uint16_t>(x != x ? nan : u >> 16);
}

// The 2-bit pattern of a value: 11 (+t), 10 (-t) or 00.
uint32_t two_bit_pattern(float x, float t) noexcept {
  return (x >= t ? 3u : 0u) | (x <= -t ? 2u : 0u);
}

// The float of a 2-bit pattern (bits of +t in `t_bits`): 11 +t, 10 -t, 00
// and 01 +0.
uint32_t two_bit_value(uint32_t pattern, uint32_t t_bits) noexcept {
  auto keep = 0u - (pattern >> 1);
  auto sign = ((pattern & 1u) ^ 1u) << 31;
  return (t_bits | sign) & keep;
}

} // namespace

bool operator==(const compression& x, const compression& y) noexcept {
  if (x.kind != y.kind)
    return false;
  return x.kind != codec::two_bit || x.threshold == y.threshold;
}

std::string to_string(const compression& x) {
  switch (x.kind) {
    case codec::none:
      return "none";
    case codec::fp16:
      return "fp16";
    case codec::two_bit: {
      // Shortest text that reads back as the same float.
      char buf[32];
      for (int digits = 1; digits <= 9; ++digits) {
        std::snprintf(buf, sizeof buf, "%.*g", digits,
                      static_cast<double>(x.threshold));
        if (std::strtof(buf, nullptr) == x.threshold)
          break;
      }
      return std::string{"2bit:"} + buf;
    }
  }
  return "codec " + std::to_string(static_cast<int>(x.kind));
}

std::optional<compression> parse_compression(const std::string& text) {
  if (text == "none")
    return compression{};
  if (text == "fp16")
    return compression{codec::fp16, 0.5f};
  if (text == "2bit")
    return compression{codec::two_bit, 0.5f};
  const std::string prefix = "2bit:";
  if (text.compare(0, prefix.size(), prefix) != 0
      || text.size() == prefix.size())
    return std::nullopt;
  auto arg = text.substr(prefix.size());
  char* end = nullptr;
  auto t = std::strtof(arg.c_str(), &end);
  if (end != arg.c_str() + arg.size())
    return std::nullopt;
  compression c{codec::two_bit, t};
  if (!check(c).empty())
    return std::nullopt;
  return c;
}

std::string check(const compression& x) {
  switch (x.kind) {
    case codec::none:
    case codec::fp16:
      return {};
    case codec::two_bit:
      if (!(std::isfinite(x.threshold) && x.threshold > 0.0f))
        return "2-bit compression needs a finite threshold > 0, not "
               + std::to_string(x.threshold);
      return {};
  }
  return "unknown codec " + std::to_string(static_cast<int>(x.kind));
}

// The loops below are branch-free so that the compiler vectorizes them: a
// codec must cost far less per value than the bytes it saves on the wire.

void quantize_fp16(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    x[i] = float_of(uint32_t{upper_half(x[i])} << 16);
}

void quantize_two_bit(float* x, float* residual, std::size_t n,
                      float threshold) {
  for (std::size_t i = 0; i < n; ++i) {
    auto r = residual[i] + x[i];
    // +t, -t or 0 (at most one of the two terms is not 0, as t > 0); then
    // r - (+t) or r - (-t) as MXNet, r - 0 = r otherwise.
    auto sent = (r >= threshold ? threshold : 0.0f)
                + (r <= -threshold ? -threshold : 0.0f);
    x[i] = sent;
    residual[i] = r - sent;
  }
}

void quantize(const compression& c, float* x, float* residual, std::size_t n) {
  switch (c.kind) {
    case codec::none:
      return;
    case codec::fp16:
      quantize_fp16(x, n);
      return;
    case codec::two_bit:
      quantize_two_bit(x, residual, n, c.threshold);
      return;
  }
}

std::size_t encoded_size(const compression& c, std::size_t n) {
  switch (c.kind) {
    case codec::fp16:
      return 2 * n;
    case codec::two_bit:
      return 4 * ((n + 15) / 16);
    default:
      return 4 * n;
  }
}

void encode(const compression& c, const float* x, std::size_t n, uint8_t* out) {
  switch (c.kind) {
    case codec::none:
      if (n > 0)
        std::memcpy(out, x, n * sizeof(float));
      return;
    case codec::fp16:
      for (std::size_t i = 0; i < n; ++i) {
        auto h = upper_half(x[i]);
        std::memcpy(out + 2 * i, &h, sizeof h);
      }
      return;
    case codec::two_bit: {
      auto t = c.threshold;
      auto whole = n / 4;
      for (std::size_t j = 0; j < whole; ++j) {
        auto* v = x + 4 * j;
        out[j] = static_cast<uint8_t>(
          two_bit_pattern(v[0], t) << 6 | two_bit_pattern(v[1], t) << 4
          | two_bit_pattern(v[2], t) << 2 | two_bit_pattern(v[3], t));
      }
      auto bytes = encoded_size(c, n);
      if (bytes > whole)
        std::memset(out + whole, 0, bytes - whole);
      for (std::size_t i = 4 * whole; i < n; ++i)
        out[i / 4] |= static_cast<uint8_t>(two_bit_pattern(x[i], t)
                                           << (6 - 2 * (i % 4)));
      return;
    }
  }
}

void decode(const compression& c, const uint8_t* in, std::size_t n,
            float* out) {
  switch (c.kind) {
    case codec::none:
      if (n > 0)
        std::memcpy(out, in, n * sizeof(float));
      return;
    case codec::fp16:
      for (std::size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * i, sizeof h);
        out[i] = float_of(uint32_t{h} << 16);
      }
      return;
    case codec::two_bit: {
      auto t_bits = bits_of(c.threshold);
      auto whole = n / 4;
      // The four floats of every byte value, then one 16-byte copy a byte.
      // Kept per thread for the last threshold: payloads arrive in chunks.
      thread_local uint32_t table[256][4];
      thread_local uint32_t table_t_bits = 0;
      if (table_t_bits != t_bits || t_bits == 0) {
        for (uint32_t b = 0; b < 256; ++b)
          for (uint32_t k = 0; k < 4; ++k)
            table[b][k] = two_bit_value((b >> (6 - 2 * k)) & 3u, t_bits);
        table_t_bits = t_bits;
      }
      for (std::size_t j = 0; j < whole; ++j)
        std::memcpy(out + 4 * j, table[in[j]], sizeof table[0]);
      for (std::size_t i = 4 * whole; i < n; ++i) {
        auto pattern = (uint32_t{in[i / 4]} >> (6 - 2 * (i % 4))) & 3u;
        out[i] = float_of(two_bit_value(pattern, t_bits));
      }
      return;
    }
  }
}

} // namespace actorps
