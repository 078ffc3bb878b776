// SPDX-License-Identifier: BSD-3-Clause
// The compression filters' exact rules: fp16 truncation (BigDL), 2-bit
// quantization with error feedback (MXNet), and their wire layouts. Every
// expected value here is worked out by hand from the rule, not taken from
// the code.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/compression.hpp"

using namespace actorps;

namespace {

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

const compression fp16{codec::fp16, 0.5f};

compression two_bit(float t) {
  return compression{codec::two_bit, t};
}

} // namespace

TEST_CASE("compression: fp16 keeps the upper 16 bits of each float",
          "[compression]") {
  std::vector<float> x{
    1.0f,                   // 0x3F800000: exact
    from_bits(0x3F808000u), // 1.00390625: the dropped half is not rounded
    from_bits(0xC0490FDBu), // -pi: -> 0xC0490000 = -3.140625
    from_bits(0x3F810000u), // 1.0078125: exact
    from_bits(0x00000001u), // smallest denormal: -> +0
    from_bits(0x7F7FFFFFu), // largest float: truncated, stays finite
    std::numeric_limits<float>::infinity(),
    from_bits(0xFF800001u), // a NaN whose payload lies in the lower half
  };
  quantize_fp16(x.data(), x.size());
  CHECK(x[0] == 1.0f);
  CHECK(x[1] == 1.0f);
  CHECK(x[2] == -3.140625f);
  CHECK(x[3] == 1.0078125f);
  CHECK(bits(x[4]) == 0u);
  CHECK(bits(x[5]) == 0x7F7F0000u);
  CHECK(std::isinf(x[6]));
  CHECK(std::isnan(x[7]));
  CHECK(std::signbit(x[7]));
}

TEST_CASE("compression: fp16 wire layout is one uint16 a value",
          "[compression]") {
  std::vector<float> x{1.0f, -2.0f, 0.0f};
  REQUIRE(encoded_size(fp16, x.size()) == 6);
  std::vector<uint8_t> wire(6);
  encode(fp16, x.data(), x.size(), wire.data());
  uint16_t halves[3];
  std::memcpy(halves, wire.data(), sizeof halves);
  CHECK(halves[0] == 0x3F80u);
  CHECK(halves[1] == 0xC000u);
  CHECK(halves[2] == 0u);
  std::vector<float> back(3);
  decode(fp16, wire.data(), 3, back.data());
  CHECK(back == x);
}

TEST_CASE("compression: packing fp16 truncates exactly as quantizing does",
          "[compression]") {
  // The worker leaves fp16 to the serializer when its shards are remote:
  // decode(encode(x)) must equal quantize_fp16(x) bit for bit.
  std::vector<float> x;
  for (uint32_t u = 0; u < 70000; ++u)
    x.push_back(from_bits(u * 61363u + 12345u));
  auto q = x;
  quantize_fp16(q.data(), q.size());
  std::vector<uint8_t> wire(encoded_size(fp16, x.size()));
  encode(fp16, x.data(), x.size(), wire.data());
  std::vector<float> back(x.size());
  decode(fp16, wire.data(), x.size(), back.data());
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i)
    differ += bits(back[i]) != bits(q[i]) ? 1 : 0;
  CHECK(differ == 0);
}

TEST_CASE("compression: 2-bit quantization carries the residual forward",
          "[compression]") {
  // Threshold 0.5 and values that are exact in binary, so every step of the
  // rule can be checked with ==.
  const std::vector<float> grad{0.25f, 0.75f, -1.0f, 0.5f, -0.5f, 0.0f};
  std::vector<float> residual(grad.size(), 0.0f);
  auto x = grad;
  quantize_two_bit(x.data(), residual.data(), x.size(), 0.5f);
  CHECK(x == std::vector<float>{0.0f, 0.5f, -0.5f, 0.5f, -0.5f, 0.0f});
  CHECK(residual == std::vector<float>{0.25f, 0.25f, -0.5f, 0.0f, 0.0f, 0.0f});
  SECTION("the next push adds what the first left out") {
    x = grad;
    quantize_two_bit(x.data(), residual.data(), x.size(), 0.5f);
    CHECK(x == std::vector<float>{0.5f, 0.5f, -0.5f, 0.5f, -0.5f, 0.0f});
    // 0.25 + 0.25 - 0.5; 0.25 + 0.75 - 0.5; -0.5 - 1.0 + 0.5.
    CHECK(residual == std::vector<float>{0.0f, 0.5f, -1.0f, 0.0f, 0.0f, 0.0f});
  }
  SECTION("no push ever sends more than one threshold a value") {
    std::vector<float> big{10.0f};
    std::vector<float> r{0.0f};
    for (int i = 0; i < 3; ++i) {
      auto y = big;
      quantize_two_bit(y.data(), r.data(), 1, 0.5f);
      CHECK(y[0] == 0.5f);
    }
    CHECK(r[0] == 30.0f - 1.5f);
  }
  SECTION("quantize dispatches on the codec") {
    auto y = grad;
    std::vector<float> r(grad.size(), 0.0f);
    quantize(two_bit(0.5f), y.data(), r.data(), y.size());
    CHECK(y == std::vector<float>{0.0f, 0.5f, -0.5f, 0.5f, -0.5f, 0.0f});
    auto z = grad;
    quantize(compression{}, z.data(), nullptr, z.size());
    CHECK(z == grad);
  }
}

TEST_CASE("compression: 2-bit wire layout packs four values a byte",
          "[compression]") {
  auto c = two_bit(0.5f);
  CHECK(encoded_size(c, 0) == 0);
  CHECK(encoded_size(c, 1) == 4);
  CHECK(encoded_size(c, 16) == 4);
  CHECK(encoded_size(c, 17) == 8);
  CHECK(encoded_size(fp16, 17) == 34);
  CHECK(encoded_size(compression{}, 17) == 68);
  std::vector<float> x{0.5f, -0.5f, 0.0f, 0.5f, -0.5f};
  std::vector<uint8_t> wire(encoded_size(c, x.size()), 0xFF);
  encode(c, x.data(), x.size(), wire.data());
  // 11 10 00 11 | 10 00 00 00 (padding) | 0 | 0
  CHECK(wire == std::vector<uint8_t>{0xE3, 0x80, 0x00, 0x00});
  std::vector<float> back(x.size());
  decode(c, wire.data(), x.size(), back.data());
  CHECK(back == x);
  SECTION("the unused pattern 01 reads as 0") {
    std::vector<uint8_t> odd{0x40, 0x00, 0x00, 0x00};
    float y = 1.0f;
    decode(c, odd.data(), 1, &y);
    CHECK(y == 0.0f);
  }
  SECTION("values 17 and on start the second block") {
    std::vector<float> v(18, 0.0f);
    v[16] = -0.5f;
    v[17] = 0.5f;
    std::vector<uint8_t> w(encoded_size(c, v.size()));
    encode(c, v.data(), v.size(), w.data());
    CHECK(w == std::vector<uint8_t>{0, 0, 0, 0, 0xB0, 0, 0, 0});
  }
}

TEST_CASE("compression: names and checks", "[compression]") {
  CHECK(parse_compression("none") == compression{});
  CHECK(parse_compression("fp16") == fp16);
  CHECK(parse_compression("2bit") == two_bit(0.5f));
  CHECK(parse_compression("2bit:0.25") == two_bit(0.25f));
  CHECK(!parse_compression("2bit:0"));
  CHECK(!parse_compression("2bit:-1"));
  CHECK(!parse_compression("2bit:nan"));
  CHECK(!parse_compression("2bit:0.5x"));
  CHECK(!parse_compression("2bit:"));
  CHECK(!parse_compression("fp8"));
  CHECK(to_string(compression{}) == "none");
  CHECK(to_string(fp16) == "fp16");
  CHECK(to_string(two_bit(0.25f)) == "2bit:0.25");
  CHECK(parse_compression(to_string(two_bit(0.1f))) == two_bit(0.1f));
  CHECK(check(two_bit(0.5f)).empty());
  CHECK(!check(two_bit(0.0f)).empty());
  CHECK(!check(two_bit(std::numeric_limits<float>::infinity())).empty());
  // The threshold matters to 2-bit only.
  CHECK(compression{codec::fp16, 1.0f} == compression{codec::fp16, 2.0f});
  CHECK(two_bit(1.0f) != two_bit(2.0f));
}
