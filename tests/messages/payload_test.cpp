// SPDX-License-Identifier: BSD-3-Clause
// Payload types: shared_floats (copy on write) and float_parts (pieces of
// shared buffers), in memory and through CAF's binary serialization.
#include <catch2/catch.hpp>

#include <vector>

#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"

#include "messages/types.hpp"

using namespace actorps;

namespace {

// Serializes through the base classes, as CAF does (the concrete inspector
// types would pick the generic, printing overload).
template <class T>
std::vector<char> save(T& x) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  REQUIRE(!inspect(static_cast<caf::serializer&>(sink), x));
  return buf;
}

template <class T>
T round_trip(T x) {
  auto buf = save(x);
  T out;
  caf::binary_deserializer source{nullptr, buf};
  REQUIRE(!inspect(static_cast<caf::deserializer&>(source), out));
  return out;
}

} // namespace

TEST_CASE("shared_floats: copies share, writes copy first", "[payload]") {
  shared_floats a{std::vector<float>{1, 2, 3}};
  auto* first = a.data();
  CHECK(a.unique());
  shared_floats b = a;
  CHECK(b.data() == first);
  CHECK(!a.unique());
  SECTION("mutate on a shared buffer leaves the other holder alone") {
    a.mutate()[0] = 9;
    CHECK(a.vec() == std::vector<float>{9, 2, 3});
    CHECK(b.vec() == std::vector<float>{1, 2, 3});
    CHECK(a.data() != first);
    // Now each holds its own buffer: writing does not copy again.
    auto* own = a.data();
    a.mutate()[1] = 8;
    CHECK(a.data() == own);
  }
  SECTION("take copies a shared buffer and moves a sole one") {
    auto copied = a.take();
    CHECK(copied == std::vector<float>{1, 2, 3});
    CHECK(copied.data() != first);
    CHECK(a.empty());
    CHECK(b.unique());
    auto moved = b.take();
    CHECK(moved.data() == first);
    CHECK(b.empty());
  }
}

TEST_CASE("shared_floats: a view reads memory where it lies, and lets go of "
          "it once copied or dropped",
          "[payload]") {
  // The viewed memory and how many hold it (its `keep`).
  auto memory
    = std::make_shared<std::vector<float>>(std::vector<float>{4, 5, 6, 7});
  auto keep = std::shared_ptr<const void>(memory, memory->data());
  auto holders = [&] { return memory.use_count() - 1; };
  shared_floats v{keep, memory->data() + 1, 3};
  keep.reset();
  CHECK(v.is_view());
  CHECK(v.data() == memory->data() + 1);
  CHECK(v.size() == 3);
  CHECK_FALSE(v.unique());
  CHECK(holders() == 1);
  // Copies share the view; a pull's pieces copy out of it.
  shared_floats w = v;
  CHECK(w.data() == v.data());
  CHECK(holders() == 2);
  float_parts parts;
  parts.append(w);
  std::vector<float> out(3);
  parts.copy_to(out.data());
  CHECK(out == std::vector<float>{5, 6, 7});
  parts = float_parts{};
  SECTION("mutate copies first, the viewed memory is never written") {
    v.mutate()[0] = 9;
    CHECK_FALSE(v.is_view());
    CHECK(v.vec() == std::vector<float>{9, 6, 7});
    CHECK(*memory == std::vector<float>{4, 5, 6, 7});
    CHECK(holders() == 1);
  }
  SECTION("take copies and lets go") {
    CHECK(v.take() == std::vector<float>{5, 6, 7});
    CHECK(v.empty());
    CHECK(holders() == 1);
  }
  SECTION("vec copies once, then reads its own copy") {
    const auto& x = v.vec();
    CHECK(x == std::vector<float>{5, 6, 7});
    CHECK(&v.vec() == &x);
    CHECK(v.data() != memory->data() + 1);
    CHECK(holders() == 1);
  }
  SECTION("serialized as the floats it views") {
    CHECK(round_trip(v).vec() == std::vector<float>{5, 6, 7});
  }
  SECTION("dropped, it lets go") {
    v = shared_floats{};
    w = shared_floats{};
    CHECK(holders() == 0);
  }
  SECTION("moved from, it is empty, pointing nowhere") {
    shared_floats moved = std::move(v);
    CHECK(moved.data() == memory->data() + 1);
    CHECK(v.empty());
    CHECK(v.data() == nullptr);
    CHECK_FALSE(v.is_view());
    w = std::move(moved);
    CHECK(moved.empty());
    CHECK(moved.data() == nullptr);
    CHECK(holders() == 1);
  }
  // A view of nothing is empty.
  CHECK(shared_floats{nullptr, nullptr, 0}.empty());
}

TEST_CASE("shared_floats: serialized as the raw floats", "[payload]") {
  shared_floats a{std::vector<float>{1.5f, -2, 3e7f}};
  CHECK(round_trip(a).vec() == a.vec());
  CHECK(round_trip(shared_floats{}).empty());
  // The same bytes as uncompressed floats after their codec tag.
  floats f{a.vec()};
  auto plain = save(f);
  REQUIRE(plain.size() == save(a).size() + 1);
  CHECK(plain[0] == 0);
  CHECK(std::vector<char>(plain.begin() + 1, plain.end()) == save(a));
  CHECK(save(a).size() > 3 * sizeof(float));
}

TEST_CASE("floats: compressed payloads cross packed and read back exactly",
          "[payload][compression]") {
  // Longer than the codec's 4096-float chunks and not a multiple of 16.
  const size_t n = 4096 + 4096 + 37;
  std::vector<float> xs(n);
  for (size_t i = 0; i < n; ++i)
    xs[i] = static_cast<float>(i % 101) * 0.37f - 17.0f;
  floats plain{xs};
  auto plain_size = save(plain).size();
  SECTION("fp16: 2 bytes a value") {
    compression c{codec::fp16, 0.5f};
    auto q = xs;
    quantize(c, q.data(), nullptr, n);
    floats in{q, c};
    auto bytes = save(in);
    CHECK(bytes.size() == plain_size - 2 * n);
    auto out = round_trip(in);
    CHECK(out.data == q);
    CHECK(out.encoding == c);
  }
  SECTION("2-bit: 4 bytes per 16 values, plus the threshold") {
    compression c{codec::two_bit, 0.75f};
    auto q = xs;
    std::vector<float> residual(n, 0.0f);
    quantize(c, q.data(), residual.data(), n);
    floats in{q, c};
    auto bytes = save(in);
    CHECK(bytes.size()
          == plain_size - 4 * n + sizeof(float) + 4 * ((n + 15) / 16));
    auto out = round_trip(in);
    CHECK(out.data == q);
    CHECK(out.encoding == c);
  }
  SECTION("an unknown codec or a bad threshold is an error") {
    floats in{std::vector<float>{0.5f}, compression{codec::two_bit, 0.5f}};
    auto bytes = save(in);
    auto bad_codec = bytes;
    bad_codec[0] = 7;
    floats out;
    caf::binary_deserializer s1{nullptr, bad_codec};
    CHECK(inspect(static_cast<caf::deserializer&>(s1), out));
    // The sender does not check; the receiver must.
    floats bad{std::vector<float>{0.0f}, compression{codec::two_bit, -1.0f}};
    auto bad_threshold = save(bad);
    caf::binary_deserializer s2{nullptr, bad_threshold};
    CHECK(inspect(static_cast<caf::deserializer&>(s2), out));
  }
}

TEST_CASE("floats: read back exactly at every alignment", "[payload]") {
  // Longer than the reader's 1024-float chunks, and not a multiple of them.
  std::vector<float> xs(3001);
  for (size_t i = 0; i < xs.size(); ++i)
    xs[i] = static_cast<float>(i) * 0.5f - 7.0f;
  floats in{xs};
  auto bytes = save(in);
  // k junk bytes in front move the floats to every offset modulo 4.
  for (size_t k = 0; k < 4; ++k) {
    std::vector<char> buf(k, 'x');
    buf.insert(buf.end(), bytes.begin(), bytes.end());
    caf::binary_deserializer source{nullptr, buf};
    source.skip(k);
    floats out;
    out.data.assign(5, 1.0f);
    REQUIRE(!inspect(static_cast<caf::deserializer&>(source), out));
    CHECK(out.data == xs);
    CHECK(source.remaining() == 0);
  }
  SECTION("a length beyond the bytes that follow is an error") {
    auto cut = bytes;
    cut.resize(cut.size() - 1);
    caf::binary_deserializer source{nullptr, cut};
    floats out;
    CHECK(inspect(static_cast<caf::deserializer&>(source), out));
  }
  SECTION("a declared length sizes no allocation beyond the message (found "
          "by fuzzing)") {
    // 2^28 floats (1 GB) declared, plain and fp16, 8 bytes present.
    for (uint8_t kind : {uint8_t{0}, uint8_t{1}}) {
      std::vector<char> buf;
      caf::binary_serializer sink{nullptr, buf};
      REQUIRE_FALSE(sink(kind));
      size_t declared = size_t{1} << 28;
      REQUIRE_FALSE(sink.begin_sequence(declared));
      REQUIRE_FALSE(sink(uint64_t{0}));
      caf::binary_deserializer source{nullptr, buf};
      floats out;
      auto err = inspect(static_cast<caf::deserializer&>(source), out);
      REQUIRE(err);
      CHECK(out.data.capacity() < 1024);
    }
  }
}

TEST_CASE("float_parts: pieces, checks and flattening", "[payload]") {
  float_parts p;
  p.append(shared_floats{std::vector<float>{1, 2}});
  p.append(shared_floats{});
  p.append(shared_floats{std::vector<float>{3, 4, 5}});
  CHECK(p.size == 5);
  CHECK(p.pieces.size() == 2);
  CHECK(p.valid(true));
  CHECK(p.flatten() == std::vector<float>{1, 2, 3, 4, 5});
  SECTION("a scattered value: pieces in any order, from inside buffers") {
    float_parts s;
    s.size = 4;
    s.buffers.emplace_back(std::vector<float>{0, 10, 20, 30});
    s.pieces.push_back(float_piece{0, 0, 2, 2});
    s.pieces.push_back(float_piece{0, 2, 0, 2});
    CHECK(s.valid(false));
    // Not in order of their place in the value: no good as a push.
    CHECK(!s.valid(true));
    CHECK(s.flatten() == std::vector<float>{20, 30, 0, 10});
    CHECK(round_trip(s).flatten() == s.flatten());
    // Written piece by piece, in the value's order: the same bytes as the
    // flattened value.
    s.buffers.emplace_back(std::vector<float>{7, 8, 9});
    s.size = 6;
    s.pieces.push_back(float_piece{1, 1, 4, 2});
    float_parts flat{std::vector<float>{20, 30, 0, 10, 8, 9}};
    CHECK(save(s) == save(flat));
    // Pieces that leave a gap: the gap crosses as zeros.
    s.size = 7;
    CHECK(round_trip(s).flatten()
          == std::vector<float>{20, 30, 0, 10, 8, 9, 0});
    // Overlapping pieces that reach the end: the value as the pieces make
    // it, not both pieces' bytes.
    float_parts overlap;
    overlap.size = 4;
    overlap.buffers.emplace_back(std::vector<float>{1, 2, 3, 4});
    overlap.pieces.push_back(float_piece{0, 0, 0, 4});
    overlap.pieces.push_back(float_piece{0, 0, 2, 2});
    CHECK(round_trip(overlap).flatten() == std::vector<float>{1, 2, 1, 2});
    // A piece outside its buffer is refused, not read.
    s.pieces.back().length = 3;
    std::vector<char> buf;
    caf::binary_serializer sink{nullptr, buf};
    CHECK(inspect(static_cast<caf::serializer&>(sink), s));
  }
  SECTION("pieces outside their buffer or the value are refused") {
    auto bad = p;
    bad.pieces[1].length = 4;
    CHECK(!bad.valid(false));
    bad = p;
    bad.pieces[1].at = 3;
    CHECK(!bad.valid(false));
    bad = p;
    bad.pieces[0].buffer = 7;
    CHECK(!bad.valid(false));
    bad = p;
    bad.size = 6;
    CHECK(!bad.valid(true));
  }
  SECTION("serialized flat") {
    auto back = round_trip(p);
    CHECK(back.size == 5);
    CHECK(back.pieces.size() == 1);
    CHECK(back.flatten() == p.flatten());
  }
}

TEST_CASE("optimizer_config: an infinite parameter is refused when decoded "
          "(found by fuzzing)",
          "[payload]") {
  // The wire image of an optimizer_config whose learning rate has the bits
  // `lr_bits`: CAF 0.17 writes a float as its IEEE 754 bits.
  auto image = [](uint32_t lr_bits) {
    std::vector<char> buf;
    caf::binary_serializer sink{nullptr, buf};
    std::string name = "accumulate";
    std::string schedule = "constant";
    REQUIRE_FALSE(sink(name, lr_bits));
    for (int i = 0; i < 8; ++i) // momentum .. rho
      REQUIRE_FALSE(sink(uint32_t{0}));
    REQUIRE_FALSE(
      sink(false, schedule, uint64_t{0}, uint32_t{0x3f800000}, uint32_t{0}));
    return buf;
  };
  for (uint32_t bits : {uint32_t{0x3f800000}, uint32_t{0x7f800000}}) {
    auto buf = image(bits);
    caf::binary_deserializer source{nullptr, buf};
    optimizer_config out;
    auto err = source(out);
    INFO(bits);
    if (bits == 0x3f800000) {
      CHECK_FALSE(err);
      CHECK(out.learning_rate == 1.0f);
    } else {
      CHECK(err);
    }
  }
}

TEST_CASE("op_stats: a latency sum that is no finite number >= 0 is refused "
          "when decoded (found by fuzzing)",
          "[payload]") {
  // The wire image of an op_stats whose latency sum has the bits `sum_bits`
  // (CAF 0.17 writes a double as its IEEE 754 bits).
  auto image = [](uint64_t sum_bits) {
    std::vector<char> buf;
    caf::binary_serializer sink{nullptr, buf};
    std::vector<uint64_t> buckets{1, 2};
    REQUIRE_FALSE(sink(uint64_t{3}, uint64_t{0}, uint64_t{4}, uint64_t{5},
                       buckets, sum_bits));
    return buf;
  };
  // 1.5, +infinity, NaN, -1.0
  for (uint64_t bits :
       {uint64_t{0x3ff8000000000000}, uint64_t{0x7ff0000000000000},
        uint64_t{0x7ff8000000000000}, uint64_t{0xbff0000000000000}}) {
    auto buf = image(bits);
    caf::binary_deserializer source{nullptr, buf};
    op_stats out;
    auto err = source(out);
    INFO(bits);
    if (bits == 0x3ff8000000000000) {
      CHECK_FALSE(err);
      CHECK(out.latency_sum_s == 1.5);
      CHECK(out.buckets == std::vector<uint64_t>{1, 2});
    } else {
      CHECK(err);
    }
  }
}
