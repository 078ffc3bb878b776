// SPDX-License-Identifier: BSD-3-Clause
// A checkpoint read as the pieces of a load (core::load_pieces), and the
// newest checkpoint of a folder read by several restores at once
// (core::restore_reads).
#include "core/load_pieces.hpp"

#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/checkpoint.hpp"
#include "core/checkpoint_dir.hpp"
#include "tests/core/temp_dir.hpp"

using actorps::errc;
using actorps::optimizer_config;
using actorps::slice_record;
using actorps::state_snapshot;
using actorps::test::temp_dir;
namespace core = actorps::core;

namespace {

// A checkpoint of `keys` dense keys of `floats` floats, each float holding
// `value`.
state_snapshot model(int keys, size_t floats, float value) {
  state_snapshot snap;
  snap.optimizer.name = "accumulate";
  for (int k = 0; k < keys; ++k) {
    slice_record rec;
    rec.key = "k" + std::to_string(k);
    rec.value.data.assign(floats, value);
    snap.slices.push_back(std::move(rec));
  }
  return snap;
}

core::load_pieces::row_size_fn dense() {
  return [](const std::string&, uint64_t& dim) {
    dim = 0;
    return actorps::status{};
  };
}

} // namespace

TEST_CASE("load_pieces: records come in pieces of at most the budget, all of "
          "them once",
          "[checkpoint]") {
  temp_dir tmp;
  std::string path;
  REQUIRE(core::write_numbered_checkpoint(tmp.path(), 1, model(10, 100, 2.0f),
                                          2, path)
            .ok());
  core::load_pieces in;
  // About 3 records' bytes per piece.
  auto one = core::record_payload_size(model(1, 100, 2.0f).slices[0]);
  REQUIRE(in.open(path, 3 * one, 1000).ok());
  CHECK(in.optimizer().name == "accumulate");
  std::vector<std::string> keys;
  size_t pieces = 0;
  for (bool done = false; !done;) {
    std::vector<slice_record> out;
    REQUIRE(in.next(out, done, dense()).ok());
    CHECK(out.size() <= 3);
    for (auto& rec : out) {
      keys.push_back(rec.key);
      CHECK(rec.value.data == std::vector<float>(100, 2.0f));
    }
    pieces += out.empty() ? 0 : 1;
  }
  CHECK(keys.size() == 10);
  CHECK(pieces >= 4);
  // A record count bound cuts pieces too.
  REQUIRE(in.open(path, uint64_t{1} << 30, 4).ok());
  std::vector<slice_record> out;
  bool done = false;
  REQUIRE(in.next(out, done, dense()).ok());
  CHECK(out.size() == 4);
  CHECK_FALSE(done);
}

TEST_CASE("restore_reads: several restores read the newest whole checkpoint, "
          "each piece in turn",
          "[checkpoint]") {
  temp_dir tmp;
  std::string path;
  REQUIRE(
    core::write_numbered_checkpoint(tmp.path(), 1, model(4, 50, 1.0f), 5, path)
      .ok());
  REQUIRE(
    core::write_numbered_checkpoint(tmp.path(), 2, model(4, 50, 7.0f), 5, path)
      .ok());
  // A newer file cut short by a crash is skipped.
  {
    std::ofstream broken{tmp.path() + "/" + core::checkpoint_name(3),
                         std::ios::binary};
    broken << "ACTORPS";
  }
  auto one = core::record_payload_size(model(1, 50, 1.0f).slices[0]);
  core::restore_reads reads{tmp.path(), 2, 2 * one, 1000};
  // Two restores interleaved: each gets every record once, from the same
  // (newest whole) file.
  std::vector<size_t> got(2);
  std::vector<bool> finished(2);
  for (uint64_t index = 0; !(finished[0] && finished[1]); ++index)
    for (uint64_t id : {uint64_t{7}, uint64_t{8}}) {
      auto r = id - 7;
      if (finished[r])
        continue;
      optimizer_config opt;
      std::vector<slice_record> out;
      bool done = false;
      REQUIRE(reads.next(id, index, opt, out, done).ok());
      CHECK(opt.name == "accumulate");
      for (auto& rec : out)
        CHECK(rec.value.data == std::vector<float>(50, 7.0f));
      got[r] += out.size();
      finished[r] = done;
    }
  CHECK(got == std::vector<size_t>{4, 4});
  CHECK(reads.last_path() == tmp.path() + "/" + core::checkpoint_name(2));
  // A piece out of turn, or of a restore never opened, is refused.
  optimizer_config opt;
  std::vector<slice_record> out;
  bool done = false;
  REQUIRE(reads.next(9, 0, opt, out, done).ok());
  CHECK(reads.next(9, 2, opt, out, done).code == errc::checkpoint_io);
  CHECK(reads.next(10, 1, opt, out, done).code == errc::checkpoint_io);
  // A folder without checkpoints says so.
  temp_dir empty;
  core::restore_reads none{empty.path(), 1, one, 10};
  CHECK_FALSE(none.next(1, 0, opt, out, done).ok());
}
