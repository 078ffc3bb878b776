// SPDX-License-Identifier: BSD-3-Clause
#include "core/checkpoint.hpp"
#include "core/checkpoint_dir.hpp"
#include "core/restore.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/core/temp_dir.hpp"

using actorps::errc;
using actorps::optimizer_config;
using actorps::slice_record;
using actorps::state_snapshot;
namespace core = actorps::core;
namespace fs = std::filesystem;
using actorps::test::temp_dir;

namespace {

constexpr std::size_t magic_size = 8;
constexpr std::size_t header_size = 8;

float from_bits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

uint32_t to_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

std::vector<uint32_t> to_bits(const std::vector<float>& xs) {
  std::vector<uint32_t> result;
  for (auto x : xs)
    result.push_back(to_bits(x));
  return result;
}

void put_u32(std::vector<char>& buf, uint32_t x) {
  for (int i = 0; i < 4; ++i)
    buf.push_back(static_cast<char>((x >> (8 * i)) & 0xFF));
}

void put_u64(std::vector<char>& buf, uint64_t x) {
  for (int i = 0; i < 8; ++i)
    buf.push_back(static_cast<char>((x >> (8 * i)) & 0xFF));
}

uint32_t get_u32(const std::vector<char>& buf, std::size_t pos) {
  uint32_t x = 0;
  for (int i = 0; i < 4; ++i)
    x |= uint32_t{static_cast<unsigned char>(buf.at(pos + i))} << (8 * i);
  return x;
}

uint64_t get_u64(const std::vector<char>& buf, std::size_t pos) {
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i)
    x |= uint64_t{static_cast<unsigned char>(buf.at(pos + i))} << (8 * i);
  return x;
}

void set_u32(std::vector<char>& buf, std::size_t pos, uint32_t x) {
  for (int i = 0; i < 4; ++i)
    buf.at(pos + i) = static_cast<char>((x >> (8 * i)) & 0xFF);
}

// Appends a record with a correct length and CRC around `payload`.
void put_record(std::vector<char>& buf, const std::vector<char>& payload) {
  put_u32(buf, static_cast<uint32_t>(payload.size()));
  put_u32(buf, core::crc32(payload.data(), payload.size()));
  buf.insert(buf.end(), payload.begin(), payload.end());
}

std::vector<char> magic_bytes() {
  return {'A', 'C', 'T', 'O', 'R', 'P', 'S', '\x01'};
}

std::vector<char> end_payload(uint64_t count) {
  std::vector<char> payload = {'E', 'N', 'D'};
  put_u64(payload, count);
  return payload;
}

// A slice record payload as documented, built independently of the library.
std::vector<char> slice_payload(uint32_t key_id, const std::string& key,
                                uint64_t value_count,
                                const std::vector<float>& value) {
  std::vector<char> payload;
  put_u32(payload, key_id);
  put_u32(payload, static_cast<uint32_t>(key.size()));
  payload.insert(payload.end(), key.begin(), key.end());
  put_u32(payload, 0); // part
  put_u64(payload, 0); // offset
  put_u64(payload, 0); // step
  put_u64(payload, value_count);
  for (auto x : value)
    put_u32(payload, to_bits(x));
  put_u64(payload, 0); // state: no floats
  return payload;
}

struct record_span {
  std::size_t header;  // Offset of the length field.
  std::size_t payload; // Offset of the payload.
  uint32_t length;
};

// Walks the records of a well-formed checkpoint.
std::vector<record_span> records_of(const std::vector<char>& bytes) {
  std::vector<record_span> result;
  std::size_t pos = magic_size;
  while (pos < bytes.size()) {
    auto len = get_u32(bytes, pos);
    result.push_back({pos, pos + header_size, len});
    pos += header_size + len;
  }
  REQUIRE(pos == bytes.size());
  return result;
}

std::vector<char> payload_of(const std::vector<char>& bytes,
                             const record_span& r) {
  auto first = bytes.begin() + static_cast<std::ptrdiff_t>(r.payload);
  return std::vector<char>(first, first + r.length);
}

// The first `n` bytes of `bytes`.
std::vector<char> prefix(const std::vector<char>& bytes, std::size_t n) {
  return std::vector<char>(bytes.begin(),
                           bytes.begin() + static_cast<std::ptrdiff_t>(n));
}

optimizer_config sample_optimizer() {
  optimizer_config cfg;
  cfg.name = "adam";
  cfg.learning_rate = 0.001f;
  cfg.momentum = 0.5f;
  cfg.weight_decay = 1e-4f;
  cfg.rescale_grad = 0.125f;
  cfg.clip_gradient = 5.0f;
  cfg.beta1 = 0.85f;
  cfg.beta2 = 0.995f;
  cfg.epsilon = 1e-7f;
  // A quiet NaN with a payload: the optimizer fields must round-trip bit
  // for bit too.
  cfg.rho = from_bits(0x7fc0beefu);
  cfg.ascent = true;
  cfg.lr_schedule = "cosine";
  cfg.lr_updates = 0x0123456789abcdefull;
  cfg.lr_factor = 0.75f;
  cfg.lr_final = from_bits(0x00000001u); // the smallest denormal
  return cfg;
}

state_snapshot sample_snapshot() {
  state_snapshot snap;
  snap.optimizer = sample_optimizer();
  slice_record a;
  a.key_id = 7;
  a.key = "fc1.weight";
  a.part = 2;
  a.offset = 1u << 20;
  a.step = 123456789012345ull;
  a.value.data = {1.0f,
                  -0.0f,
                  0.0f,
                  from_bits(0x7fc12345u), // quiet NaN with payload
                  from_bits(0xffc00001u), // negative NaN
                  from_bits(0x7f800001u), // signaling NaN
                  std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::max(),
                  -3.5f};
  a.state.data = {0.25f, -0.0f, 1e-30f, 2.0f, 3.0f, 4.0f};
  a.row_steps = {0, 3, ~uint64_t{0}};
  snap.slices.push_back(a);
  slice_record b;
  b.key_id = 0xFFFFFFFFu;
  b.key = std::string("odd\0bytes\xff\x80\n\"'", 15);
  b.part = 0xFFFFFFFFu;
  b.offset = ~uint64_t{0};
  b.step = 0;
  b.value.data = {42.0f};
  // Empty state: an optimizer without state ("sgd" without momentum).
  snap.slices.push_back(b);
  slice_record c;
  // Empty key (shards fill in ids only), empty value and state.
  c.key_id = 1;
  snap.slices.push_back(c);
  return snap;
}

void check_same(const optimizer_config& x, const optimizer_config& y) {
  CHECK(x.name == y.name);
  CHECK(to_bits(x.learning_rate) == to_bits(y.learning_rate));
  CHECK(to_bits(x.momentum) == to_bits(y.momentum));
  CHECK(to_bits(x.weight_decay) == to_bits(y.weight_decay));
  CHECK(to_bits(x.rescale_grad) == to_bits(y.rescale_grad));
  CHECK(to_bits(x.clip_gradient) == to_bits(y.clip_gradient));
  CHECK(to_bits(x.beta1) == to_bits(y.beta1));
  CHECK(to_bits(x.beta2) == to_bits(y.beta2));
  CHECK(to_bits(x.epsilon) == to_bits(y.epsilon));
  CHECK(to_bits(x.rho) == to_bits(y.rho));
  CHECK(x.ascent == y.ascent);
  CHECK(x.lr_schedule == y.lr_schedule);
  CHECK(x.lr_updates == y.lr_updates);
  CHECK(to_bits(x.lr_factor) == to_bits(y.lr_factor));
  CHECK(to_bits(x.lr_final) == to_bits(y.lr_final));
}

void check_same(const state_snapshot& x, const state_snapshot& y) {
  check_same(x.optimizer, y.optimizer);
  REQUIRE(x.slices.size() == y.slices.size());
  for (std::size_t i = 0; i < x.slices.size(); ++i) {
    INFO("slice " << i);
    const auto& a = x.slices[i];
    const auto& b = y.slices[i];
    CHECK(a.key_id == b.key_id);
    CHECK(a.key == b.key);
    CHECK(a.part == b.part);
    CHECK(a.offset == b.offset);
    CHECK(a.step == b.step);
    CHECK(to_bits(a.value.data) == to_bits(b.value.data));
    CHECK(to_bits(a.state.data) == to_bits(b.state.data));
    CHECK(a.row_steps == b.row_steps);
  }
}

// Decodes `bytes`, which must be rejected as corrupt.
actorps::status decode_corrupt(const std::vector<char>& bytes) {
  state_snapshot out;
  auto st = core::decode_checkpoint(bytes, out);
  CHECK(st.code == errc::checkpoint_corrupt);
  CHECK_THAT(st.message, Catch::StartsWith("checkpoint: "));
  return st;
}

} // namespace

TEST_CASE("checkpoint: crc32 matches zlib", "[core]") {
  SECTION("the standard check value") {
    CHECK(core::crc32("123456789", 9) == 0xCBF43926u);
  }
  SECTION("other known values") {
    CHECK(core::crc32("", 0) == 0u);
    CHECK(core::crc32(nullptr, 0) == 0u);
    CHECK(core::crc32("a", 1) == 0xE8B7BE43u);
    const char* fox = "The quick brown fox jumps over the lazy dog";
    CHECK(core::crc32(fox, std::strlen(fox)) == 0x414FA339u);
  }
}

TEST_CASE("checkpoint: encode then decode round-trips exactly", "[core]") {
  SECTION("odd floats, odd strings, empty vectors") {
    auto snap = sample_snapshot();
    auto bytes = core::encode_checkpoint(snap);
    state_snapshot out;
    auto st = core::decode_checkpoint(bytes, out);
    REQUIRE(st.ok());
    check_same(out, snap);
  }
  SECTION("no slices") {
    state_snapshot snap;
    auto bytes = core::encode_checkpoint(snap);
    state_snapshot out;
    out.slices.resize(3);
    auto st = core::decode_checkpoint(bytes, out);
    REQUIRE(st.ok());
    check_same(out, snap);
  }
  SECTION("encoding is deterministic") {
    CHECK(core::encode_checkpoint(sample_snapshot())
          == core::encode_checkpoint(sample_snapshot()));
  }
}

TEST_CASE("checkpoint: a record's size is known before encoding, and one "
          "past 4 GiB is refused",
          "[core]") {
  auto snap = sample_snapshot();
  REQUIRE(core::check_encodable(snap).ok());
  auto bytes = core::encode_checkpoint(snap);
  auto records = records_of(bytes);
  REQUIRE(records.size() == snap.slices.size() + 2);
  for (size_t i = 0; i < snap.slices.size(); ++i) {
    const auto& s = snap.slices[i];
    CHECK(records[i + 1].length
          == core::record_payload_size(s.key.size(), s.value.data.size(),
                                       s.state.data.size(),
                                       s.row_steps.size()));
  }
  // A table part of 10M rows x 64 with Adam's two state blocks (7.7 GB)
  // does not fit a record; one of 10M x 16 (2 GB) does.
  const uint64_t rows = 10'000'000;
  CHECK(core::record_payload_size(1, rows * 64, 2 * rows * 64, rows)
        > std::numeric_limits<uint32_t>::max());
  CHECK(core::record_payload_size(1, rows * 16, 2 * rows * 16, rows)
        < std::numeric_limits<uint32_t>::max());
}

TEST_CASE("checkpoint: byte layout follows the documentation", "[core]") {
  auto snap = sample_snapshot();
  auto bytes = core::encode_checkpoint(snap);
  REQUIRE(bytes.size() > magic_size);
  CHECK(std::vector<char>(bytes.begin(), bytes.begin() + magic_size)
        == magic_bytes());
  auto records = records_of(bytes);
  REQUIRE(records.size() == snap.slices.size() + 2);
  for (const auto& r : records)
    CHECK(get_u32(bytes, r.header + 4)
          == core::crc32(bytes.data() + r.payload, r.length));
  SECTION("record 0 starts with the optimizer name") {
    CHECK(get_u32(bytes, records[0].payload) == snap.optimizer.name.size());
    CHECK(std::string(bytes.data() + records[0].payload + 4, 4) == "adam");
  }
  SECTION("slice records start with key id and key") {
    const auto& r = records[1];
    CHECK(get_u32(bytes, r.payload) == 7u);
    CHECK(get_u32(bytes, r.payload + 4) == 10u);
    CHECK(std::string(bytes.data() + r.payload + 8, 10) == "fc1.weight");
  }
  SECTION("the last record is END and the slice count") {
    const auto& r = records.back();
    REQUIRE(r.length == 11);
    CHECK(std::string(bytes.data() + r.payload, 3) == "END");
    CHECK(get_u64(bytes, r.payload + 3) == snap.slices.size());
  }
  SECTION("the schedule follows ascent; records without it read as "
          "constant") {
    auto payload = payload_of(bytes, records[0]);
    // name (4 + 4) + 9 floats + ascent, then the schedule's 4 + 6 + 8 + 4 + 4.
    const size_t old_size = 8 + 9 * 4 + 1;
    // The dump_optimizer flag is written only as 1 (not here), so that
    // older readers read the file.
    REQUIRE(payload.size() == old_size + 4 + 6 + 8 + 4 + 4);
    CHECK(get_u32(payload, old_size) == 6u);
    CHECK(std::string(payload.data() + old_size + 4, 6) == "cosine");
    CHECK(get_u64(payload, old_size + 10) == snap.optimizer.lr_updates);
    std::vector<char> built = magic_bytes();
    put_record(built,
               std::vector<char>(payload.begin(), payload.begin() + old_size));
    put_record(built, end_payload(0));
    state_snapshot out;
    REQUIRE(core::decode_checkpoint(built, out).ok());
    CHECK(out.optimizer.name == "adam");
    CHECK(out.optimizer.ascent);
    CHECK(out.optimizer.lr_schedule == "constant");
    CHECK(out.optimizer.lr_updates == 0u);
    CHECK(out.optimizer.lr_factor == 1.0f);
    // The optimizer record with a dump_optimizer flag byte after it.
    auto decode_flagged = [&](char flag) {
      auto flagged = payload;
      flagged.push_back(flag);
      built = magic_bytes();
      put_record(built, flagged);
      put_record(built, end_payload(0));
      return core::decode_checkpoint(built, out);
    };
    SECTION("a dump_optimizer flag of 1 reads") {
      REQUIRE(decode_flagged(1).ok());
      CHECK(out.optimizer.lr_schedule == "cosine");
    }
    SECTION("a dump_optimizer flag other than 0 or 1 is corrupt") {
      auto st = decode_flagged(2);
      CHECK(st.code == errc::checkpoint_corrupt);
      CHECK_THAT(st.message, Catch::Contains("dump_optimizer"));
    }
    SECTION("a schedule cut short is corrupt") {
      built = magic_bytes();
      put_record(built, std::vector<char>(payload.begin(),
                                          payload.begin() + old_size + 7));
      put_record(built, end_payload(0));
      auto st = core::decode_checkpoint(built, out);
      CHECK(st.code == errc::checkpoint_corrupt);
      CHECK_THAT(st.message, Catch::Contains("record 0"));
    }
  }
  SECTION("a hand-built checkpoint decodes") {
    std::vector<char> built = magic_bytes();
    put_record(built, payload_of(bytes, records[0]));
    put_record(built, slice_payload(3, "k", 2, {1.5f, -2.0f}));
    put_record(built, end_payload(1));
    state_snapshot out;
    auto st = core::decode_checkpoint(built, out);
    REQUIRE(st.ok());
    REQUIRE(out.slices.size() == 1);
    CHECK(out.slices[0].key_id == 3);
    CHECK(out.slices[0].key == "k");
    CHECK(out.slices[0].value.data == std::vector<float>{1.5f, -2.0f});
    CHECK(out.slices[0].state.data.empty());
    // Written before row tables: no row steps.
    CHECK(out.slices[0].row_steps.empty());
  }
}

TEST_CASE("checkpoint: corruption is detected", "[core]") {
  const auto bytes = core::encode_checkpoint(sample_snapshot());
  const auto records = records_of(bytes);
  SECTION("a flipped byte in a payload is a CRC mismatch") {
    auto bad = bytes;
    bad.at(records[1].payload + 20) ^= 0x01;
    auto st = decode_corrupt(bad);
    CHECK_THAT(st.message,
               Catch::Contains("record 1") && Catch::Contains("CRC mismatch"));
  }
  SECTION("any flipped byte is detected") {
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      INFO("byte " << i);
      auto bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ 0xFF);
      decode_corrupt(bad);
    }
  }
  SECTION("every truncation is detected") {
    for (std::size_t len = 0; len < bytes.size(); ++len) {
      INFO("truncated to " << len << " of " << bytes.size() << " bytes");
      decode_corrupt(prefix(bytes, len));
    }
  }
  SECTION("bad magic") {
    auto bad = bytes;
    bad[0] = 'X';
    CHECK_THAT(decode_corrupt(bad).message, Catch::Contains("magic"));
    bad = bytes;
    bad[7] = '\x02'; // A future format version.
    CHECK_THAT(decode_corrupt(bad).message, Catch::Contains("magic"));
  }
  SECTION("missing end record") {
    auto bad = prefix(bytes, records.back().header);
    CHECK_THAT(decode_corrupt(bad).message, Catch::Contains("end record"));
  }
  SECTION("huge record length") {
    auto bad = bytes;
    set_u32(bad, records[1].header, 0xFFFFFFFFu);
    CHECK_THAT(decode_corrupt(bad).message,
               Catch::Contains("record 1") && Catch::Contains("length"));
  }
  SECTION("huge float count behind a valid CRC") {
    // Must fail before allocating 2^62 floats.
    auto bad = magic_bytes();
    put_record(bad, payload_of(bytes, records[0]));
    for (uint64_t count : {uint64_t{1} << 62, ~uint64_t{0}, uint64_t{5}}) {
      auto with_slice = bad;
      put_record(with_slice, slice_payload(1, "k", count, {1.0f, 2.0f}));
      put_record(with_slice, end_payload(1));
      CHECK_THAT(decode_corrupt(with_slice).message,
                 Catch::Contains("float count"));
    }
  }
  SECTION("huge string length behind a valid CRC") {
    auto bad = magic_bytes();
    std::vector<char> opt;
    put_u32(opt, 0xFFFFFFF0u);
    opt.push_back('x');
    put_record(bad, opt);
    put_record(bad, end_payload(0));
    CHECK_THAT(decode_corrupt(bad).message,
               Catch::Contains("record 0") && Catch::Contains("string"));
  }
  SECTION("end record with the wrong count") {
    auto bad = prefix(bytes, records.back().header);
    put_record(bad, end_payload(2));
    CHECK_THAT(decode_corrupt(bad).message, Catch::Contains("end"));
  }
  SECTION("bytes after the end record") {
    auto bad = bytes;
    bad.push_back('\0');
    CHECK_THAT(decode_corrupt(bad).message, Catch::Contains("trailing"));
  }
  SECTION("extra bytes inside a slice payload") {
    auto bad = prefix(bytes, records[1].header);
    auto payload = slice_payload(1, "k", 1, {1.0f});
    payload.push_back('\0');
    put_record(bad, payload);
    put_record(bad, end_payload(1));
    CHECK_THAT(decode_corrupt(bad).message, Catch::Contains("record 1"));
  }
  SECTION("an ascent flag other than 0 or 1") {
    auto bad = magic_bytes();
    auto opt = payload_of(bytes, records[0]);
    // The flag follows the name (u32 length + bytes) and nine floats.
    const size_t flag = 4 + sample_optimizer().name.size() + 9 * 4;
    REQUIRE(opt.size() > flag);
    REQUIRE(opt.at(flag) == 1);
    opt.at(flag) = 2;
    put_record(bad, opt);
    put_record(bad, end_payload(0));
    CHECK_THAT(decode_corrupt(bad).message, Catch::Contains("ascent"));
  }
  SECTION("a failed decode leaves the output untouched") {
    state_snapshot out;
    out.optimizer.name = "sgd";
    out.slices.resize(2);
    auto bad = bytes;
    bad.pop_back();
    CHECK(core::decode_checkpoint(bad, out).code == errc::checkpoint_corrupt);
    CHECK(out.optimizer.name == "sgd");
    CHECK(out.slices.size() == 2);
  }
}

TEST_CASE("checkpoint: decode survives mutated payloads", "[core]") {
  // Mutates payload bytes and then repairs the CRC, so that the payload
  // parser itself sees hostile lengths. Fixed seed: failures reproduce.
  const auto bytes = core::encode_checkpoint(sample_snapshot());
  const auto records = records_of(bytes);
  std::mt19937 rng{20240601u};
  int accepted = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    auto bad = bytes;
    const auto& r = records[rng() % records.size()];
    if (r.length == 0)
      continue;
    auto flips = 1 + rng() % 4;
    for (unsigned k = 0; k < flips; ++k)
      bad[r.payload + rng() % r.length] = static_cast<char>(rng() & 0xFF);
    set_u32(bad, r.header + 4, core::crc32(bad.data() + r.payload, r.length));
    state_snapshot out;
    auto st = core::decode_checkpoint(bad, out);
    if (st.ok())
      ++accepted; // E.g. a changed float or step: still well-formed.
    else
      CHECK(st.code == errc::checkpoint_corrupt);
  }
  CHECK(accepted > 0);
}

TEST_CASE("checkpoint: files", "[core]") {
  temp_dir dir;
  REQUIRE_FALSE(dir.path().empty());
  const auto bytes = core::encode_checkpoint(sample_snapshot());
  SECTION("write_file_atomic then read_file round-trips") {
    auto path = dir.path() + "/shard-0.ckpt";
    auto st = core::write_file_atomic(path, bytes);
    REQUIRE(st.ok());
    CHECK_FALSE(fs::exists(path + ".tmp"));
    std::vector<char> read_back;
    REQUIRE(core::read_file(path, read_back).ok());
    CHECK(read_back == bytes);
    state_snapshot out;
    REQUIRE(core::decode_checkpoint(read_back, out).ok());
    check_same(out, sample_snapshot());
  }
  SECTION("writing replaces an existing file") {
    auto path = dir.path() + "/ckpt";
    REQUIRE(core::write_file_atomic(path, std::vector<char>(100000, 'x')).ok());
    REQUIRE(core::write_file_atomic(path, bytes).ok());
    std::vector<char> read_back;
    REQUIRE(core::read_file(path, read_back).ok());
    CHECK(read_back == bytes);
  }
  SECTION("empty files") {
    auto path = dir.path() + "/empty";
    REQUIRE(core::write_file_atomic(path, {}).ok());
    std::vector<char> read_back = {'x'};
    REQUIRE(core::read_file(path, read_back).ok());
    CHECK(read_back.empty());
  }
  SECTION("a file larger than the first read") {
    auto path = dir.path() + "/big";
    std::vector<char> big(3 * 65536 + 17);
    for (std::size_t i = 0; i < big.size(); ++i)
      big[i] = static_cast<char>(i * 31);
    REQUIRE(core::write_file_atomic(path, big).ok());
    std::vector<char> read_back;
    REQUIRE(core::read_file(path, read_back).ok());
    CHECK(read_back == big);
  }
  SECTION("writing into a missing directory fails cleanly") {
    auto path = dir.path() + "/missing/ckpt";
    auto st = core::write_file_atomic(path, bytes);
    CHECK(st.code == errc::checkpoint_io);
    CHECK_THAT(st.message, Catch::Contains(path)
                             && Catch::Contains("No such file or directory"));
    CHECK_FALSE(fs::exists(path + ".tmp"));
    CHECK_FALSE(fs::exists(path));
  }
  SECTION("a failed rename removes the temporary file") {
    // A non-empty directory cannot be replaced by a file.
    auto path = dir.path() + "/occupied";
    fs::create_directory(path);
    std::ofstream{path + "/child"} << "x";
    auto st = core::write_file_atomic(path, bytes);
    CHECK(st.code == errc::checkpoint_io);
    CHECK_THAT(st.message, Catch::Contains(path));
    CHECK_FALSE(fs::exists(path + ".tmp"));
    CHECK(fs::is_directory(path));
  }
  SECTION("reading a missing file names the path") {
    auto path = dir.path() + "/nope.ckpt";
    std::vector<char> out = {'x'};
    auto st = core::read_file(path, out);
    CHECK(st.code == errc::checkpoint_io);
    CHECK_THAT(st.message, Catch::Contains(path)
                             && Catch::Contains("No such file or directory"));
    CHECK(out == std::vector<char>{'x'});
  }
  SECTION("reading a directory fails") {
    std::vector<char> out;
    auto st = core::read_file(dir.path(), out);
    CHECK(st.code == errc::checkpoint_io);
    CHECK_THAT(st.message, Catch::Contains(dir.path()));
  }
}

namespace {

// A saved slice of key "k" (id 3): floats [offset, offset + value.size()),
// state blocks as given.
slice_record saved(uint32_t part, uint64_t offset, std::vector<float> value,
                   std::vector<float> state, uint64_t step = 5) {
  slice_record r;
  r.key_id = 3;
  r.key = "k";
  r.part = part;
  r.offset = offset;
  r.step = step;
  r.value.data = std::move(value);
  r.state.data = std::move(state);
  return r;
}

} // namespace

TEST_CASE("checkpoint: reslice cuts saved slices to another slicing",
          "[core]") {
  // 5 floats saved as [0, 3) and [3, 5) with two state blocks (adam: m, v),
  // loaded into slices [0, 2) on shard 1 and [2, 5) on shard 0.
  auto a = saved(0, 0, {0, 1, 2}, {10, 11, 12, 20, 21, 22});
  auto b = saved(1, 3, {3, 4}, {13, 14, 23, 24});
  std::vector<actorps::slice_range> target{{0, 1, 0, 2}, {1, 0, 2, 3}};
  std::vector<slice_record> out;
  // Saved order does not matter.
  auto st = core::reslice({&b, &a}, 5, target, 2, out);
  INFO(st.message);
  REQUIRE(st.ok());
  REQUIRE(out.size() == 2);
  CHECK(out[0].part == 0);
  CHECK(out[0].offset == 0);
  CHECK(out[0].value.data == std::vector<float>{0, 1});
  CHECK(out[0].state.data == std::vector<float>{10, 11, 20, 21});
  CHECK(out[1].part == 1);
  CHECK(out[1].offset == 2);
  CHECK(out[1].value.data == std::vector<float>{2, 3, 4});
  CHECK(out[1].state.data == std::vector<float>{12, 13, 14, 22, 23, 24});
  CHECK(out[1].step == 5);
  CHECK(out[1].key == "k");
  SECTION("no state") {
    auto c = saved(0, 0, {0, 1, 2}, {});
    auto d = saved(1, 3, {3, 4}, {});
    REQUIRE(core::reslice({&c, &d}, 5, {{0, 0, 0, 5}}, 0, out).ok());
    CHECK(out.size() == 1);
    CHECK(out[0].value.data == std::vector<float>{0, 1, 2, 3, 4});
  }
  SECTION("what cannot be cut is refused, out left alone") {
    auto before = out;
    auto refused = [&](std::vector<const slice_record*> in, uint64_t size,
                       const std::string& why) {
      auto r = core::reslice(in, size, target, 2, out);
      INFO(r.message);
      CHECK(r.code == errc::checkpoint_mismatch);
      CHECK(r.message.find(why) != std::string::npos);
      CHECK(out.size() == before.size());
    };
    auto gap = saved(1, 4, {4}, {14, 24});
    refused({&a, &gap}, 5, "gap");
    auto overlap = saved(1, 2, {2, 3, 4}, {12, 13, 14, 22, 23, 24});
    refused({&a, &overlap}, 5, "overlap");
    refused({&a, &b}, 6, "holds 5 floats");
    auto later = saved(1, 3, {3, 4}, {13, 14, 23, 24}, 6);
    refused({&a, &later}, 5, "different numbers of updates");
    auto short_state = saved(1, 3, {3, 4}, {13, 14});
    refused({&a, &short_state}, 5, "state floats");
  }
  SECTION("slices cut from one saved slice keep its step") {
    // Async training: slices saw different numbers of updates. Cut as
    // saved, each keeps its own.
    auto later = saved(1, 3, {3, 4}, {13, 14, 23, 24}, 6);
    std::vector<actorps::slice_range> as_saved{{0, 0, 0, 3}, {1, 1, 3, 2}};
    REQUIRE(core::reslice({&later, &a}, 5, as_saved, 2, out).ok());
    REQUIRE(out.size() == 2);
    CHECK(out[0].step == 5);
    CHECK(out[0].value.data == a.value.data);
    CHECK(out[0].state.data == a.state.data);
    CHECK(out[1].step == 6);
    CHECK(out[1].value.data == later.value.data);
    CHECK(out[1].state.data == later.state.data);
  }
}

TEST_CASE("checkpoint folder: numbered files, the newest kept, the newest "
          "whole one resumed",
          "[core]") {
  temp_dir tmp;
  auto dir = tmp.path() + "/ckpt";
  auto snap_of = [](float x) {
    state_snapshot snap;
    snap.optimizer.name = "accumulate";
    slice_record rec;
    rec.key = "w";
    rec.value.data = {x, x + 1};
    snap.slices.push_back(rec);
    return snap;
  };
  std::string path;
  for (uint64_t n : {3, 7, 12}) {
    REQUIRE(
      core::write_numbered_checkpoint(dir, n, snap_of(float(n)), 2, path).ok());
    CHECK(path == dir + "/" + core::checkpoint_name(n));
  }
  CHECK(core::checkpoint_name(7) == "checkpoint-000007.actorps");
  // The two newest stay; other files in the folder are left alone.
  std::ofstream{dir + "/notes.txt"} << "x";
  CHECK_FALSE(fs::exists(dir + "/" + core::checkpoint_name(3)));
  CHECK(fs::exists(dir + "/" + core::checkpoint_name(7)));
  std::string latest;
  REQUIRE(core::latest_checkpoint(dir, latest).ok());
  CHECK(latest == dir + "/" + core::checkpoint_name(12));
  // A newest file cut short by a crash is skipped for the one before.
  fs::resize_file(latest, fs::file_size(latest) / 2);
  REQUIRE(core::latest_checkpoint(dir, latest).ok());
  CHECK(latest == dir + "/" + core::checkpoint_name(7));
  std::vector<char> bytes;
  REQUIRE(core::read_file(latest, bytes).ok());
  state_snapshot back;
  REQUIRE(core::decode_checkpoint(bytes, back).ok());
  CHECK(back.slices.at(0).value.data == std::vector<float>{7, 8});
  // A file names itself; nothing usable is a clear error.
  REQUIRE(core::latest_checkpoint(latest, path).ok());
  CHECK(path == latest);
  fs::resize_file(latest, 3);
  auto st = core::latest_checkpoint(dir, path);
  CHECK(st.code == errc::checkpoint_corrupt);
  CHECK_THAT(st.message, Catch::Contains("reads back whole"));
  fs::create_directories(tmp.path() + "/empty");
  CHECK(core::latest_checkpoint(tmp.path() + "/empty", path).code
        == errc::checkpoint_io);
  CHECK(core::latest_checkpoint(tmp.path() + "/nothing", path).code
        == errc::checkpoint_io);
}
