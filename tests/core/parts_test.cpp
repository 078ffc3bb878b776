// SPDX-License-Identifier: BSD-3-Clause
#include "core/parts.hpp"

#include <memory>
#include <numeric>
#include <vector>

#include <catch2/catch.hpp>

using actorps::errc;
using actorps::float_parts;
using actorps::float_piece;
using actorps::shared_floats;
using namespace actorps::core;

namespace {

std::vector<float> iota(std::size_t n, float first = 0.0f) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// A value of 10 floats 0..9 held as two buffers: [0,4) and [4,10).
float_parts two_buffers() {
  float_parts x;
  x.append(shared_floats{iota(4)});
  x.append(shared_floats{iota(6, 4.0f)});
  return x;
}

// A reply of 8 floats whose one piece lies outside its buffer of 2.
float_parts outside_its_buffer() {
  float_parts bad;
  bad.size = 8;
  bad.buffers.push_back(shared_floats{iota(2)});
  bad.pieces.push_back(float_piece{0, 0, 0, 8});
  return bad;
}

} // namespace

TEST_CASE("parts: parts_reader takes a whole buffer without copying",
          "[core]") {
  auto x = two_buffers();
  const float* second = x.buffers[1].data();
  parts_reader in{x};
  auto a = in.take(4);
  auto b = in.take(6);
  CHECK(a == iota(4));
  CHECK(b == iota(6, 4.0f));
  CHECK(b.data() == second);
}

TEST_CASE("parts: parts_reader copies slices that cross buffers", "[core]") {
  auto x = two_buffers();
  parts_reader in{x};
  auto a = in.take(3);
  auto b = in.take(5); // floats 3..7: the end of one buffer, part of the next
  std::vector<float> c;
  in.append(c, 2);
  CHECK(a == iota(3));
  CHECK(b == iota(5, 3.0f));
  CHECK(c == iota(2, 8.0f));
}

TEST_CASE("parts: parts_reader shares pieces instead of copying", "[core]") {
  auto x = two_buffers();
  const float* first = x.buffers[0].data();
  parts_reader in{x};
  float_parts out;
  in.share(out, 2);
  in.share(out, 5);
  REQUIRE(out.size == 7);
  CHECK(out.valid(true));
  CHECK(out.flatten() == iota(7));
  // The floats were shared in their buffer, not copied.
  CHECK(out.buffers[out.pieces[0].buffer].data() == first);
  // Consecutive reads of one buffer lengthen one piece.
  CHECK(out.pieces.size() == 2);
}

TEST_CASE("parts: parts_reader tells a whole view ahead from a buffer",
          "[core]") {
  // A buffer of 4, then a view of 6 (floats kept elsewhere), then a buffer.
  auto kept = std::make_shared<std::vector<float>>(iota(6, 4.0f));
  float_parts x;
  x.append(shared_floats{iota(4)});
  x.append(shared_floats{kept, kept->data(), kept->size()});
  x.append(shared_floats{iota(2, 10.0f)});
  parts_reader in{x};
  CHECK_FALSE(in.next_is_view(4)); // a buffer of its own
  auto a = in.take(4);
  CHECK_FALSE(in.next_is_view(5)); // not all of the view
  CHECK(in.next_is_view(6));
  float_parts out;
  in.share(out, 6);
  // Shared as it is: still the view, not a copy.
  REQUIRE(out.buffers.size() == 1);
  CHECK(out.buffers[0].is_view());
  CHECK(out.buffers[0].data() == kept->data());
  CHECK_FALSE(in.next_is_view(2));
  CHECK(in.take(2) == iota(2, 10.0f));
  CHECK_FALSE(in.next_is_view(1)); // past the end
  CHECK(a == iota(4));
}

TEST_CASE("parts: parts_cursor reads in place or gathers", "[core]") {
  auto x = two_buffers();
  parts_cursor cur{x};
  const float* p = cur.read(0, 3);
  CHECK(p == x.buffers[0].data());
  p = cur.read(3, 4); // crosses into the second buffer
  REQUIRE(p != nullptr);
  CHECK(std::vector<float>(p, p + 4) == iota(4, 3.0f));
  p = cur.read(7, 3);
  CHECK(p == x.buffers[1].data() + 3);
  CHECK(cur.read(10, 1) == nullptr);
}

TEST_CASE("parts: take_all moves a lone unshared buffer", "[core]") {
  float_parts x{iota(8)};
  const float* data = x.buffers[0].data();
  auto v = take_all(x);
  CHECK(v.data() == data);
  SECTION("a shared buffer is copied") {
    float_parts y{iota(8)};
    auto keep = y.buffers[0];
    auto w = take_all(y);
    CHECK(w == iota(8));
    CHECK(w.data() != keep.data());
  }
  SECTION("several pieces are flattened") {
    auto z = two_buffers();
    CHECK(take_all(z) == iota(10));
  }
}

TEST_CASE("parts: place puts a slice at its offset", "[core]") {
  float_parts out;
  out.size = 10;
  shared_floats hi{iota(6, 4.0f)};
  shared_floats lo{iota(4)};
  REQUIRE(place(out, 4, 6, hi).ok());
  REQUIRE(place(out, 0, 4, lo).ok());
  CHECK(out.valid(false));
  CHECK(out.flatten() == iota(10));
  SECTION("another size is a shape mismatch") {
    shared_floats wrong{iota(3)};
    auto st = place(out, 0, 4, wrong);
    CHECK(st.code == errc::shape_mismatch);
    CHECK(st.message.find("returned 3 floats where 4") != std::string::npos);
  }
}

TEST_CASE("parts: place cuts a batch reply where its slices meet", "[core]") {
  // Two slices of 3 and 5 floats that belong at offsets 10 and 0 of a value
  // of 15 floats; the reply holds them back to back, 0..7, in two buffers
  // whose boundary (after 2 floats) falls inside the first slice.
  float_parts reply;
  reply.append(shared_floats{iota(2)});
  reply.append(shared_floats{iota(6, 2.0f)});
  std::vector<piece> pieces{{10, 3}, {0, 5}};
  float_parts out;
  out.size = 15;
  REQUIRE(place(out, pieces, 8, reply).ok());
  REQUIRE(out.valid(false));
  std::vector<float> got(15, -1.0f);
  out.copy_to(got.data());
  std::vector<float> want(15, -1.0f);
  for (int i = 0; i < 3; ++i)
    want[10 + i] = static_cast<float>(i);
  for (int i = 0; i < 5; ++i)
    want[i] = static_cast<float>(3 + i);
  CHECK(got == want);
  SECTION("pieces outside their buffers are refused") {
    auto bad = outside_its_buffer();
    float_parts dst;
    dst.size = 15;
    CHECK(place(dst, pieces, 8, bad).code == errc::shape_mismatch);
  }
}

TEST_CASE("parts: place_flat copies each slice of a reply where it belongs",
          "[core]") {
  // As above: slices of 3 and 5 floats at 10 and 0 of 15 floats, the reply
  // 0..7 in two buffers cut inside the first slice; then a slice of 17
  // floats (copied by memcpy) and a reply whose pieces come out of order.
  std::vector<piece> pieces{{10, 3}, {0, 5}};
  std::vector<float> want(15, -1.0f);
  for (int i = 0; i < 3; ++i)
    want[10 + i] = static_cast<float>(i);
  for (int i = 0; i < 5; ++i)
    want[i] = static_cast<float>(3 + i);
  std::vector<float> out(15, -1.0f);
  SECTION("a reply in order") {
    float_parts reply;
    reply.append(shared_floats{iota(2)});
    reply.append(shared_floats{iota(6, 2.0f)});
    REQUIRE(place_flat(out.data(), out.size(), pieces, 8, reply).ok());
    CHECK(out == want);
  }
  SECTION("a reply whose pieces are listed backwards") {
    float_parts reply;
    reply.size = 8;
    reply.buffers.push_back(shared_floats{iota(8)});
    reply.pieces.push_back(float_piece{0, 5, 5, 3});
    reply.pieces.push_back(float_piece{0, 0, 0, 5});
    REQUIRE(place_flat(out.data(), out.size(), pieces, 8, reply).ok());
    CHECK(out == want);
  }
  SECTION("one long slice and a lone one") {
    std::vector<float> big(40, -1.0f);
    float_parts reply{iota(20)};
    REQUIRE(
      place_flat(big.data(), big.size(), {{21, 17}, {1, 3}}, 20, reply).ok());
    for (int i = 0; i < 17; ++i)
      CHECK(big[21 + i] == static_cast<float>(i));
    for (int i = 0; i < 3; ++i)
      CHECK(big[1 + i] == static_cast<float>(17 + i));
    CHECK(big[0] == -1.0f);
    CHECK(big[4] == -1.0f);
    CHECK(big[38] == -1.0f);
    shared_floats one{iota(2, 5.0f)};
    REQUIRE(place_flat(big.data(), big.size(), 38, 2, one).ok());
    CHECK(big[38] == 5.0f);
    CHECK(big[39] == 6.0f);
  }
  SECTION("errors: size, buffers, slices outside the output") {
    float_parts reply{iota(8)};
    CHECK(place_flat(out.data(), out.size(), pieces, 9, reply).code
          == errc::shape_mismatch);
    CHECK(place_flat(out.data(), out.size(), {{10, 3}, {0, 4}}, 8, reply).code
          == errc::shape_mismatch);
    CHECK(place_flat(out.data(), out.size(), {{13, 3}, {0, 5}}, 8, reply).code
          == errc::shape_mismatch);
    CHECK(
      place_flat(out.data(), out.size(), {{~uint64_t{0}, 3}, {0, 5}}, 8, reply)
        .code
      == errc::shape_mismatch);
    auto bad = outside_its_buffer();
    CHECK(place_flat(out.data(), out.size(), pieces, 8, bad).code
          == errc::shape_mismatch);
    shared_floats one{iota(3)};
    CHECK(place_flat(out.data(), out.size(), 13, 3, one).code
          == errc::shape_mismatch);
    CHECK(place_flat(out.data(), out.size(), 0, 2, one).code
          == errc::shape_mismatch);
    CHECK(out == std::vector<float>(15, -1.0f));
  }
}
