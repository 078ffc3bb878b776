// SPDX-License-Identifier: BSD-3-Clause
#include "messages/compression.hpp"

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
  if (std::isnan(x))
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7FC0u);
  return static_cast<uint16_t>(u >> 16);
}

// The 2-bit pattern of a value: 11 (+t), 10 (-t) or 00.
uint8_t two_bit_pattern(float x, float t) noexcept {
  if (x >= t)
    return 3;
  if (x <= -t)
    return 2;
  return 0;
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

void quantize_fp16(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    x[i] = float_of(uint32_t{upper_half(x[i])} << 16);
}

void quantize_two_bit(float* x, float* residual, std::size_t n,
                      float threshold) {
  for (std::size_t i = 0; i < n; ++i) {
    auto r = residual[i] + x[i];
    if (r >= threshold) {
      x[i] = threshold;
      r -= threshold;
    } else if (r <= -threshold) {
      x[i] = -threshold;
      r += threshold;
    } else {
      x[i] = 0.0f;
    }
    residual[i] = r;
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
      auto bytes = encoded_size(c, n);
      std::memset(out, 0, bytes);
      for (std::size_t i = 0; i < n; ++i)
        out[i / 4] |= static_cast<uint8_t>(two_bit_pattern(x[i], c.threshold)
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
      const float values[4] = {0.0f, 0.0f, -c.threshold, c.threshold};
      for (std::size_t i = 0; i < n; ++i)
        out[i] = values[(in[i / 4] >> (6 - 2 * (i % 4))) & 3];
      return;
    }
  }
}

} // namespace actorps
