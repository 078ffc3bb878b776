// SPDX-License-Identifier: BSD-3-Clause
#include "core/checkpoint.hpp"

#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <sys/stat.h>

#include "tests/core/faulty_file_system.hpp"
#include "tests/core/temp_dir.hpp"

using actorps::errc;
using actorps::slice_record;
using actorps::state_snapshot;
using actorps::test::faulty_file_system;
using actorps::test::temp_dir;
namespace core = actorps::core;
namespace fs = std::filesystem;

namespace {

// A snapshot of one slice whose floats all equal `x`.
state_snapshot snapshot_of(float x, std::size_t n = 4096) {
  state_snapshot snap;
  snap.optimizer.name = "sgd";
  slice_record rec;
  rec.key_id = 1;
  rec.key = "w";
  rec.value.data.assign(n, x);
  rec.step = 7;
  snap.slices.push_back(rec);
  return snap;
}

// Reads `path` with the real file system and decodes it.
state_snapshot load(const std::string& path) {
  std::vector<char> bytes;
  auto st = core::read_file(path, bytes);
  INFO(st.message);
  REQUIRE(st.ok());
  state_snapshot snap;
  st = core::decode_checkpoint(bytes, snap);
  INFO(st.message);
  REQUIRE(st.ok());
  return snap;
}

} // namespace

TEST_CASE("checkpoint: a failed save leaves the previous checkpoint intact",
          "[core]") {
  temp_dir dir;
  REQUIRE_FALSE(dir.path().empty());
  auto path = dir.path() + "/model.ckpt";
  auto old_bytes = core::encode_checkpoint(snapshot_of(1.0f));
  REQUIRE(core::write_file_atomic(path, old_bytes).ok());
  auto new_bytes = core::encode_checkpoint(snapshot_of(2.0f));
  faulty_file_system faulty;
  std::string op;
  SECTION("a write that fails halfway (disk full)") {
    faulty.fail_write_after = new_bytes.size() / 2;
    op = "cannot write";
  }
  SECTION("a write that fails at once") {
    faulty.fail_write_after = 0;
    op = "cannot write";
  }
  SECTION("a sync that fails") {
    faulty.fail_sync = true;
    op = "cannot fsync";
  }
  SECTION("a close that reports a delayed write error") {
    faulty.fail_close = true;
    op = "cannot close";
  }
  SECTION("a rename that fails") {
    faulty.fail_rename = true;
    op = "cannot rename";
  }
  auto st = core::write_file_atomic(path, new_bytes, faulty);
  INFO(st.message);
  CHECK(st.code == errc::checkpoint_io);
  CHECK_THAT(st.message, Catch::Contains(op) && Catch::Contains(path));
  // The temporary file is gone; the old checkpoint is there, byte for byte.
  CHECK(faulty.removes == 1);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  std::vector<char> now;
  REQUIRE(core::read_file(path, now).ok());
  CHECK(now == old_bytes);
  auto snap = load(path);
  REQUIRE(snap.slices.size() == 1);
  CHECK(snap.slices[0].value.data == std::vector<float>(4096, 1.0f));
  CHECK(snap.slices[0].step == 7);
}

TEST_CASE("checkpoint: the same save without faults replaces the file",
          "[core]") {
  temp_dir dir;
  auto path = dir.path() + "/model.ckpt";
  REQUIRE(
    core::write_file_atomic(path, core::encode_checkpoint(snapshot_of(1.0f)))
      .ok());
  faulty_file_system healthy;
  auto st = core::write_file_atomic(
    path, core::encode_checkpoint(snapshot_of(2.0f)), healthy);
  REQUIRE(st.ok());
  CHECK(healthy.removes == 0);
  CHECK(load(path).slices[0].value.data == std::vector<float>(4096, 2.0f));
}

TEST_CASE("checkpoint: a short read is corruption, never a crash", "[core]") {
  temp_dir dir;
  auto path = dir.path() + "/model.ckpt";
  auto bytes = core::encode_checkpoint(snapshot_of(3.0f));
  REQUIRE(core::write_file_atomic(path, bytes).ok());
  // Cut inside the magic, inside a record header, inside a payload, and
  // just before the end record.
  auto cut = GENERATE_COPY(std::size_t{3}, std::size_t{10}, bytes.size() / 2,
                           bytes.size() - 5);
  INFO("the file seems to end after " << cut << " of " << bytes.size()
                                      << " bytes");
  faulty_file_system faulty;
  faulty.end_reads_at = cut;
  std::vector<char> got;
  REQUIRE(core::read_file(path, got, faulty).ok());
  REQUIRE(got.size() == cut);
  auto before = snapshot_of(9.0f, 2);
  auto out = before;
  auto st = core::decode_checkpoint(got, out);
  CHECK(st.code == errc::checkpoint_corrupt);
  // A failed decode leaves its output alone.
  CHECK(out.slices[0].value.data == before.slices[0].value.data);
  // The file itself is untouched.
  CHECK(load(path).slices[0].value.data == std::vector<float>(4096, 3.0f));
}

TEST_CASE("checkpoint: only regular files are read", "[core]") {
  std::vector<char> out{'x'};
  SECTION("a device that never ends") {
    auto st = core::read_file("/dev/zero", out);
    CHECK(st.code == errc::checkpoint_io);
    CHECK_THAT(st.message, Catch::Contains("/dev/zero")
                             && Catch::Contains("not a regular file"));
  }
  SECTION("a FIFO without a writer") {
    temp_dir dir;
    auto path = dir.path() + "/fifo";
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    auto st = core::read_file(path, out);
    CHECK(st.code == errc::checkpoint_io);
    CHECK_THAT(st.message, Catch::Contains("not a regular file"));
  }
  CHECK(out == std::vector<char>{'x'});
}
