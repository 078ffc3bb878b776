// SPDX-License-Identifier: BSD-3-Clause
#include "core/batch_ids.hpp"

#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "core/values.hpp"

using namespace actorps;
using actorps::core::pack_ids;
using actorps::core::unpack_ids;

namespace {

struct ids {
  std::vector<uint64_t> slices;
  std::vector<uint64_t> seqs;
};

std::vector<uint8_t> packed(const ids& x) {
  std::vector<uint8_t> out;
  pack_ids(x.slices.data(), x.seqs.data(), x.slices.size(), out);
  return out;
}

// Unpacks `bytes` as `n` slices; nothing if they are refused.
std::optional<ids> unpacked(const std::vector<uint8_t>& bytes, std::size_t n) {
  ids out;
  out.slices.resize(n);
  out.seqs.resize(n);
  if (!unpack_ids(bytes.data(), bytes.size(), n, out.slices.data(),
                  out.seqs.data()))
    return std::nullopt;
  return out;
}

// A varint as `pack_ids` writes it, by hand.
void varint(std::vector<uint8_t>& out, uint64_t x) {
  for (; x >= 0x80; x >>= 7)
    out.push_back(static_cast<uint8_t>(x | 0x80));
  out.push_back(static_cast<uint8_t>(x));
}

} // namespace

TEST_CASE("batch ids: packed ids and sequence numbers unpack as they were",
          "[core]") {
  std::mt19937_64 gen{7};
  auto any_key = std::uniform_int_distribution<uint64_t>{0, 0xFFFFFFFFu};
  auto near = std::uniform_int_distribution<int>{-3, 40};
  for (int round = 0; round < 200; ++round) {
    ids x;
    auto n = 1 + gen() % 300;
    uint64_t key = any_key(gen);
    uint64_t seq = round % 3 == 0 ? ~uint64_t{0} - gen() % 4 : gen() % 100;
    for (std::size_t i = 0; i < n; ++i) {
      // Keys in order, near each other, or anywhere; parts mostly 0, some
      // up to the largest; sequence numbers in runs, wrapping past 2^64.
      key = gen() % 4 == 0 ? any_key(gen)
                           : (key + near(gen)) & uint64_t{0xFFFFFFFF};
      auto part = gen() % 5 == 0 ? static_cast<uint32_t>(any_key(gen))
                                 : uint32_t{0};
      x.slices.push_back(make_slice_id(static_cast<uint32_t>(key), part));
      if (gen() % 7 == 0)
        seq += gen() % 3 == 0 ? -(gen() % 5) : gen();
      x.seqs.push_back(seq);
    }
    auto bytes = packed(x);
    CHECK(bytes.size() <= core::max_packed_ids(n));
    auto back = unpacked(bytes, n);
    REQUIRE(back);
    CHECK(back->slices == x.slices);
    CHECK(back->seqs == x.seqs);
    // Exactly these bytes: one more or one fewer is refused, as is the
    // same list read as one slice more or less.
    auto longer = bytes;
    longer.push_back(0);
    CHECK_FALSE(unpacked(longer, n));
    CHECK_FALSE(unpacked({bytes.begin(), bytes.end() - 1}, n));
    CHECK_FALSE(unpacked(bytes, n + 1));
    if (n > 1)
      CHECK_FALSE(unpacked(bytes, n - 1));
  }
}

TEST_CASE("batch ids: keys in order take a byte a slice, equal sequence "
          "numbers a few bytes in all",
          "[core]") {
  ids x;
  for (uint32_t k = 5000; k < 15000; ++k) {
    x.slices.push_back(make_slice_id(k, 0));
    x.seqs.push_back(123456);
  }
  // The first key's delta takes 3 bytes, the others 1; one run of 10000
  // numbers takes 3 + 2.
  CHECK(packed(x).size() == 3 + 9999 + 3 + 2);
  // Packing appends to what the buffer held.
  std::vector<uint8_t> out{1, 2, 3};
  pack_ids(x.slices.data(), x.seqs.data(), 1, out);
  CHECK(out.size() > 3);
  CHECK(out[0] == 1);
}

TEST_CASE("batch ids: bytes that are not one packed list are refused",
          "[core]") {
  // One slice: key 3, part 0; one run of seq 9, length 1.
  std::vector<uint8_t> good;
  varint(good, (3u * 2) << 1);
  varint(good, 9u * 2);
  varint(good, 1);
  auto ok = unpacked(good, 1);
  REQUIRE(ok);
  CHECK(ok->slices[0] == make_slice_id(3, 0));
  CHECK(ok->seqs[0] == 9);
  CHECK(packed(*ok) == good);
  auto refused = [](std::vector<uint8_t> bytes, std::size_t n) {
    CHECK_FALSE(unpacked(bytes, n));
  };
  // Empty, or cut inside a varint.
  refused({}, 1);
  refused({0x80}, 1);
  // A varint in a longer form than needed (0 as 0x80 0x00).
  refused({0x0C, 0x92, 0x00, 0x01}, 1);
  refused({0x0C, 0x12, 0x81, 0x00}, 1);
  // A varint of 10 bytes holds 64 bits (a run's sequence number delta);
  // one over 10 bytes or 64 bits is refused.
  {
    auto with_delta = [](std::vector<uint8_t> delta) {
      std::vector<uint8_t> b;
      varint(b, 3 * 2 << 1);
      for (auto x : delta)
        b.push_back(x);
      varint(b, 1);
      return b;
    };
    // (n bytes of 0xFF, the last one `last`.)
    auto ones = [](std::size_t n, uint8_t last) {
      std::vector<uint8_t> v(n, 0xFF);
      v[n - 1] = last;
      return v;
    };
    auto max = unpacked(with_delta(ones(10, 0x01)), 1);
    REQUIRE(max);
    CHECK(max->seqs[0] == ~uint64_t{0} / 2 + 1); // zigzag(2^64 - 1): -2^63
    refused(with_delta(ones(11, 0x01)), 1);
    refused(with_delta(ones(10, 0x02)), 1);
  }
  // Keys from the largest to 0 and back: deltas of 32 bits each way.
  {
    ids x;
    x.slices = {make_slice_id(0xFFFFFFFF, 0), make_slice_id(0, 0xFFFFFFFF),
                make_slice_id(0xFFFFFFFF, 1)};
    x.seqs = {0, 0, ~uint64_t{0}};
    auto back = unpacked(packed(x), 3);
    REQUIRE(back);
    CHECK(back->slices == x.slices);
    CHECK(back->seqs == x.seqs);
    CHECK(packed(x).size() <= core::max_packed_ids(3));
  }
  // A key below 0 or beyond 32 bits.
  {
    std::vector<uint8_t> b;
    varint(b, 1u << 1); // zigzag(-1)
    varint(b, 0);
    varint(b, 1);
    refused(b, 1);
    std::vector<uint8_t> c;
    varint(c, (uint64_t{0x100000000} * 2) << 1);
    varint(c, 0);
    varint(c, 1);
    refused(c, 1);
  }
  // A part flagged but 0, or beyond 32 bits.
  {
    std::vector<uint8_t> b;
    varint(b, 1);
    varint(b, 0);
    varint(b, 0);
    varint(b, 1);
    refused(b, 1);
    std::vector<uint8_t> c;
    varint(c, 1);
    varint(c, uint64_t{0x100000000});
    varint(c, 0);
    varint(c, 1);
    refused(c, 1);
  }
  // Runs: of length 0, longer than the slices left, short of them, or
  // equal to the run before.
  {
    auto with_runs = [](std::vector<std::pair<uint64_t, uint64_t>> runs) {
      std::vector<uint8_t> b;
      varint(b, 0);
      varint(b, 2 << 1);
      for (auto [delta, len] : runs) {
        varint(b, delta);
        varint(b, len);
      }
      return b;
    };
    CHECK(unpacked(with_runs({{4, 1}, {2, 1}}), 2));
    refused(with_runs({{4, 0}, {2, 2}}), 2);
    refused(with_runs({{4, 3}}), 2);
    refused(with_runs({{4, 1}}), 2);
    refused(with_runs({{4, 1}, {0, 1}}), 2);
  }
}
