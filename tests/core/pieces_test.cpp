// SPDX-License-Identifier: BSD-3-Clause
// Checkpoints in pieces: the streaming writer and reader, and slices cut
// into pieces, moved to another layout and assembled again.
#include "core/checkpoint_stream.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "core/checkpoint.hpp"
#include "core/layout.hpp"
#include "core/restore.hpp"
#include "core/rows.hpp"
#include "tests/core/temp_dir.hpp"

using actorps::errc;
using actorps::key_info;
using actorps::slice_range;
using actorps::slice_record;
using actorps::state_snapshot;
using actorps::test::temp_dir;
namespace core = actorps::core;

namespace {

void check_same(const slice_record& a, const slice_record& b) {
  CHECK(a.key_id == b.key_id);
  CHECK(a.key == b.key);
  CHECK(a.part == b.part);
  CHECK(a.offset == b.offset);
  CHECK(a.step == b.step);
  CHECK(a.value.data == b.value.data);
  CHECK(a.state.data == b.state.data);
  CHECK(a.row_steps == b.row_steps);
  CHECK(a.first == b.first);
  CHECK(a.total == b.total);
  CHECK(a.parts == b.parts);
}

std::vector<float> ramp(std::size_t n, float from) {
  std::vector<float> xs(n);
  for (std::size_t i = 0; i < n; ++i)
    xs[i] = from + static_cast<float>(i);
  return xs;
}

// A row table's key as a store of `shards` shards keeps it.
key_info table_key(const std::string& name, uint64_t rows, uint64_t dim,
                   uint32_t shards) {
  key_info info;
  info.id = 3;
  info.name = name;
  info.shape = {rows, dim};
  info.size = rows * dim;
  info.dim = dim;
  core::row_layout layout{rows, dim, shards};
  uint64_t offset = 0;
  for (uint32_t s = 0; s < shards && layout.rows_on(s) > 0; ++s) {
    info.slices.push_back(slice_range{s, s, offset, layout.rows_on(s) * dim});
    offset += layout.rows_on(s) * dim;
  }
  return info;
}

// The parts of a table saved over `shards` shards: row r holds r * 10 +
// j, state (per row `per_row` floats) -r - j, step r.
std::vector<slice_record> saved_table(const key_info& info, uint64_t per_row) {
  std::vector<slice_record> parts;
  auto shards = static_cast<uint32_t>(info.slices.size());
  core::row_layout layout{info.shape[0], info.dim, shards};
  for (uint32_t p = 0; p < shards; ++p) {
    slice_record rec;
    rec.key = info.name;
    rec.part = p;
    rec.offset = info.slices[p].offset;
    rec.parts = shards;
    for (uint64_t i = 0; i < layout.rows_on(p); ++i) {
      auto r = i * shards + p;
      for (uint64_t j = 0; j < info.dim; ++j)
        rec.value.data.push_back(static_cast<float>(r * 10 + j));
      for (uint64_t j = 0; j < per_row; ++j)
        rec.state.data.push_back(-static_cast<float>(r + j));
      rec.row_steps.push_back(r);
    }
    parts.push_back(std::move(rec));
  }
  return parts;
}

// Every piece of `whole` of at most `budget` bytes.
std::vector<slice_record> pieces_of(const slice_record& whole, uint64_t budget,
                                    uint64_t dim) {
  std::vector<slice_record> out;
  for (uint64_t from = 0; from < whole.value.data.size();) {
    slice_record piece;
    from = core::take_piece(whole, from, budget, dim, piece);
    out.push_back(std::move(piece));
  }
  return out;
}

// Cuts every saved piece to the layout of `info` over `shards` shards and
// assembles each target slice; `state_per` as slice_assembly takes it.
std::map<uint32_t, core::slice_assembly>
move_pieces(const std::vector<slice_record>& saved, const key_info& info,
            uint32_t shards, std::size_t per_float, std::size_t state_per) {
  std::map<uint32_t, core::slice_assembly> by_part;
  for (auto& rec : saved) {
    std::vector<std::pair<uint32_t, slice_record>> cut;
    REQUIRE(core::cut_piece(rec, info, shards, per_float, cut).ok());
    for (auto& [shard, piece] : cut) {
      CHECK(shard == info.slices[piece.part].shard);
      auto i = by_part.find(piece.part);
      if (i == by_part.end()) {
        i = by_part.emplace(piece.part, core::slice_assembly{}).first;
        i->second.reset(info.slices[piece.part].length, info.dim, state_per);
      }
      REQUIRE(i->second.add(piece, "test").ok());
    }
  }
  return by_part;
}

} // namespace

TEST_CASE("checkpoint stream: records written one by one read back exactly",
          "[core][checkpoint]") {
  temp_dir dir;
  auto path = dir.path() + "/x.actorps";
  actorps::optimizer_config opt;
  opt.name = "adam";
  std::vector<slice_record> recs(3);
  recs[0].key = "w";
  recs[0].key_id = 1;
  recs[0].step = 4;
  recs[0].value.data = ramp(10, 1);
  recs[0].state.data = ramp(20, -5);
  recs[0].parts = 1;
  recs[1].key = "emb";
  recs[1].part = 2;
  recs[1].offset = 40;
  recs[1].value.data = ramp(6, 7);
  recs[1].row_steps = {3, 9};
  recs[1].first = 12;
  recs[1].total = 30;
  recs[1].parts = 3;
  recs[2].key = "b";
  {
    core::checkpoint_writer out;
    REQUIRE(out.open(path, opt).ok());
    for (auto& rec : recs)
      REQUIRE(out.add(rec).ok());
    // Nothing at the path before the end.
    CHECK_FALSE(std::filesystem::exists(path));
    REQUIRE(out.finish().ok());
  }
  core::checkpoint_reader in;
  REQUIRE(in.open(path).ok());
  CHECK(in.optimizer().name == "adam");
  CHECK_FALSE(in.optimizer_dumped());
  for (auto& want : recs) {
    slice_record got;
    bool done = true;
    REQUIRE(in.next(got, done).ok());
    REQUIRE_FALSE(done);
    check_same(got, want);
  }
  slice_record last;
  bool done = false;
  REQUIRE(in.next(last, done).ok());
  CHECK(done);
  CHECK(core::verify_checkpoint(path).ok());
  {
    // Saved with dump_optimizer: the reader says so.
    auto dumped = path + ".dumped";
    core::checkpoint_writer out;
    REQUIRE(out.open(dumped, opt, core::posix_file_system(), true).ok());
    REQUIRE(out.finish().ok());
    core::checkpoint_reader back;
    REQUIRE(back.open(dumped).ok());
    CHECK(back.optimizer_dumped());
    CHECK(back.optimizer().name == "adam");
    std::filesystem::remove(dumped);
  }
  // The whole-file decoder reads the same file.
  std::vector<char> bytes;
  REQUIRE(core::read_file(path, bytes).ok());
  state_snapshot snap;
  REQUIRE(core::decode_checkpoint(bytes, snap).ok());
  REQUIRE(snap.slices.size() == recs.size());
  for (size_t i = 0; i < recs.size(); ++i)
    check_same(snap.slices[i], recs[i]);
  std::map<std::string, uint32_t> parts;
  REQUIRE(core::count_saved_parts(path, parts).ok());
  CHECK(parts
        == std::map<std::string, uint32_t>{{"b", 1}, {"emb", 1}, {"w", 1}});
  SECTION("a writer dropped before the end leaves nothing behind") {
    auto other = dir.path() + "/y.actorps";
    {
      core::checkpoint_writer out;
      REQUIRE(out.open(other, opt).ok());
      REQUIRE(out.add(recs[0]).ok());
    }
    CHECK_FALSE(std::filesystem::exists(other));
    CHECK_FALSE(std::filesystem::exists(other + ".tmp"));
  }
}

TEST_CASE("checkpoint stream: a length past the file's end is corruption, "
          "never an allocation",
          "[core][checkpoint]") {
  temp_dir dir;
  auto path = dir.path() + "/x.actorps";
  actorps::optimizer_config opt;
  opt.name = "sgd";
  slice_record rec;
  rec.key = "w";
  rec.value.data = ramp(1000, 0);
  {
    core::checkpoint_writer out;
    REQUIRE(out.open(path, opt).ok());
    REQUIRE(out.add(rec).ok());
    REQUIRE(out.finish().ok());
  }
  std::vector<char> bytes;
  REQUIRE(core::read_file(path, bytes).ok());
  auto rewrite = [&](const std::vector<char>& b) {
    std::ofstream f{path, std::ios::binary | std::ios::trunc};
    f.write(b.data(), static_cast<std::streamsize>(b.size()));
  };
  auto read_all = [&] {
    core::checkpoint_reader in;
    auto st = in.open(path);
    slice_record got;
    for (bool done = false; st.ok() && !done;)
      st = in.next(got, done);
    return st;
  };
  // The slice record's header follows the magic and the optimizer record.
  auto opt_len = static_cast<unsigned char>(bytes[8])
                 | static_cast<unsigned char>(bytes[9]) << 8;
  auto at = 8 + 8 + static_cast<size_t>(opt_len);
  SECTION("a huge declared length") {
    auto b = bytes;
    b[at] = b[at + 1] = b[at + 2] = '\xff';
    b[at + 3] = '\x7f';
    rewrite(b);
    auto st = read_all();
    CHECK(st.code == errc::checkpoint_corrupt);
    CHECK(st.message.find("exceeds") != std::string::npos);
    CHECK(st.message.find(path) != std::string::npos);
  }
  SECTION("cut short inside a record") {
    rewrite(std::vector<char>(bytes.begin(), bytes.begin() + at + 100));
    CHECK(read_all().code == errc::checkpoint_corrupt);
  }
  SECTION("no end record") {
    auto end = bytes.size() - (8 + 3 + 8);
    rewrite(std::vector<char>(bytes.begin(), bytes.begin() + end));
    auto st = read_all();
    CHECK(st.code == errc::checkpoint_corrupt);
    CHECK(st.message.find("missing end record") != std::string::npos);
  }
  SECTION("a flipped bit") {
    auto b = bytes;
    b[at + 200] ^= 0x10;
    rewrite(b);
    CHECK(read_all().message.find("CRC") != std::string::npos);
  }
  SECTION("not a regular file") {
    core::checkpoint_reader in;
    CHECK(in.open("/dev/zero").code == errc::checkpoint_io);
  }
}

TEST_CASE("pieces: a slice taken in pieces and assembled again is the slice",
          "[core][checkpoint]") {
  SECTION("dense, with two state blocks") {
    slice_record whole;
    whole.key = "w";
    whole.step = 11;
    whole.value.data = ramp(1000, 0);
    whole.state.data = ramp(2000, 5000);
    const uint64_t budget = 12 * 100; // 100 floats with their state
    auto pieces = pieces_of(whole, budget, 0);
    CHECK(pieces.size() == 10);
    core::slice_assembly a;
    a.reset(1000, 0, 2);
    for (auto& p : pieces) {
      CHECK(p.total == 1000);
      CHECK(4 * (p.value.data.size() + p.state.data.size()) <= budget);
      REQUIRE(a.add(p, "w").ok());
    }
    REQUIRE(a.complete());
    CHECK(a.value == whole.value.data);
    CHECK(a.state == whole.state.data);
    CHECK(a.step == 11);
    // A budget that holds everything gives the whole slice back as it is.
    auto one = pieces_of(whole, 1 << 20, 0);
    REQUIRE(one.size() == 1);
    CHECK(one[0].first == 0);
    CHECK(one[0].total == 0);
    CHECK(one[0].value.data == whole.value.data);
  }
  SECTION("a table, whole rows with their state and steps") {
    auto info = table_key("emb", 50, 3, 1);
    auto whole = saved_table(info, 6).front();
    auto pieces = pieces_of(whole, 7 * (4 * 3 + 4 * 6 + 8), 3);
    CHECK(pieces.size() == 8); // 7 rows each, the last 1
    core::slice_assembly a;
    a.reset(150, 3, 6);
    for (auto& p : pieces) {
      CHECK(p.first % 3 == 0);
      REQUIRE(a.add(p, "emb").ok());
    }
    REQUIRE(a.complete());
    CHECK(a.value == whole.value.data);
    CHECK(a.state == whole.state.data);
    CHECK(a.row_steps == whole.row_steps);
  }
}

TEST_CASE("pieces: saved pieces move to another layout as the whole "
          "reslicing does",
          "[core][checkpoint]") {
  SECTION("a dense key saved over 3 shards in small slices, loaded over 2") {
    const uint64_t size = 1000;
    key_info saved_info;
    saved_info.name = "w";
    saved_info.size = size;
    saved_info.slices = core::make_layout("w", size, 3, 1, 70);
    std::vector<slice_record> saved;
    for (auto& s : saved_info.slices) {
      slice_record rec;
      rec.key = "w";
      rec.part = s.part;
      rec.offset = s.offset;
      rec.step = 5;
      rec.value.data = ramp(s.length, static_cast<float>(s.offset));
      // One state block: the weight's index, negated.
      for (auto& v : rec.value.data)
        rec.state.data.push_back(-v);
      for (auto& p : pieces_of(rec, 8 * 16, 0))
        saved.push_back(std::move(p));
    }
    key_info here;
    here.id = 9;
    here.name = "w";
    here.size = size;
    here.slices = core::make_layout("w", size, 2, 1, 300);
    auto parts = move_pieces(saved, here, 2, 1, 1);
    REQUIRE(parts.size() == here.slices.size());
    for (auto& s : here.slices) {
      auto& a = parts.at(s.part);
      REQUIRE(a.complete());
      CHECK(a.value == ramp(s.length, static_cast<float>(s.offset)));
      CHECK(a.state.front() == -static_cast<float>(s.offset));
      CHECK(a.step == 5);
    }
  }
  SECTION("a table saved over 3 shards, loaded over 1, 2, 3 and 5") {
    const uint64_t rows = 101;
    const uint64_t dim = 3;
    auto saved_info = table_key("emb", rows, dim, 3);
    auto whole = saved_table(saved_info, 2 * dim);
    std::vector<slice_record> saved;
    for (auto& part : whole)
      for (auto& p : pieces_of(part, 5 * (4 * dim + 8 * dim + 8), dim))
        saved.push_back(std::move(p));
    for (uint32_t shards : {1u, 2u, 3u, 5u}) {
      INFO(shards << " shards");
      auto here = table_key("emb", rows, dim, shards);
      auto parts = move_pieces(saved, here, shards, 2, 2 * dim);
      // The whole reslicing of the whole parts: the reference.
      std::vector<const slice_record*> refs;
      for (auto& part : whole)
        refs.push_back(&part);
      std::vector<slice_record> want;
      REQUIRE(
        core::reslice_rows(refs, {rows, dim, shards}, 2 * dim, want).ok());
      REQUIRE(parts.size() == want.size());
      for (auto& w : want) {
        auto& a = parts.at(w.part);
        REQUIRE(a.complete());
        CHECK(a.value == w.value.data);
        CHECK(a.state == w.state.data);
        CHECK(a.row_steps == w.row_steps);
      }
    }
  }
}

TEST_CASE("pieces: an assembly refuses overlaps, gaps, other sizes and "
          "mixed steps",
          "[core][checkpoint]") {
  slice_record whole;
  whole.key = "w";
  whole.step = 2;
  whole.value.data = ramp(100, 0);
  auto pieces = pieces_of(whole, 4 * 30, 0);
  REQUIRE(pieces.size() == 4);
  core::slice_assembly a;
  a.reset(100, 0, 0);
  REQUIRE(a.add(pieces[0], "w").ok());
  SECTION("overlap") {
    auto again = pieces[0];
    CHECK(a.add(again, "w").code == errc::checkpoint_mismatch);
    // The refused piece left nothing: the others still complete it.
    for (size_t i = 1; i < pieces.size(); ++i)
      REQUIRE(a.add(pieces[i], "w").ok());
    CHECK(a.complete());
  }
  SECTION("gap") {
    REQUIRE(a.add(pieces[1], "w").ok());
    REQUIRE(a.add(pieces[3], "w").ok());
    CHECK_FALSE(a.complete());
    CHECK(a.missing() == 30);
  }
  SECTION("a piece of a slice of another size") {
    pieces[1].total = 101;
    CHECK(a.add(pieces[1], "w").code == errc::checkpoint_mismatch);
  }
  SECTION("a piece outside the slice") {
    pieces[3].first = 95;
    CHECK(a.add(pieces[3], "w").code == errc::checkpoint_mismatch);
    // Also when it names rows (a dense slice has none) or starts far out.
    pieces[3].rows.assign(pieces[3].value.data.size(), 0);
    CHECK(a.add(pieces[3], "w").code == errc::checkpoint_mismatch);
    pieces[3].rows.clear();
    pieces[3].first = uint64_t{1} << 40;
    CHECK(a.add(pieces[3], "w").code == errc::checkpoint_mismatch);
  }
  SECTION("state of the wrong size") {
    pieces[1].state.data.assign(3, 0.0f);
    CHECK(a.add(pieces[1], "w").code == errc::checkpoint_mismatch);
  }
  SECTION("pieces that saw different numbers of updates") {
    pieces[1].step = 3;
    auto st = a.add(pieces[1], "w");
    CHECK(st.code == errc::checkpoint_mismatch);
    CHECK(st.message.find("different numbers of updates") != std::string::npos);
  }
  SECTION("a table piece that names rows out of range") {
    auto info = table_key("emb", 10, 2, 1);
    auto part = saved_table(info, 0).front();
    core::slice_assembly t;
    t.reset(20, 2, 0);
    auto piece = part;
    piece.rows.assign(10, 0);
    piece.rows.back() = 10;
    CHECK(t.add(piece, "emb").code == errc::checkpoint_mismatch);
    // Nothing stuck from the refused piece.
    REQUIRE(t.add(part, "emb").ok());
    CHECK(t.complete());
  }
  SECTION("shape_fits: records whose arrays do not fit their rows") {
    auto info = table_key("emb", 10, 2, 1);
    auto part = saved_table(info, 2).front();
    CHECK(core::shape_fits(part, 2));
    auto odd = part;
    odd.value.data.pop_back();
    CHECK_FALSE(core::shape_fits(odd, 2));
    auto steps = part;
    steps.row_steps.pop_back();
    CHECK_FALSE(core::shape_fits(steps, 2));
    auto state = part;
    state.state.data.pop_back();
    CHECK_FALSE(core::shape_fits(state, 2));
    CHECK(core::shape_fits(whole, 0));
    CHECK_FALSE(core::shape_fits(part, 0)); // dense with row steps
  }
  SECTION("cut_piece: a table record of unknown parts or wrong size") {
    auto info = table_key("emb", 10, 2, 2);
    auto parts = saved_table(info, 0);
    std::vector<std::pair<uint32_t, slice_record>> out;
    auto unknown = parts[0];
    unknown.parts = 0;
    CHECK(core::cut_piece(unknown, info, 2, 0, out).code
          == errc::checkpoint_mismatch);
    auto other = parts[0];
    other.parts = 3;
    CHECK(core::cut_piece(other, info, 2, 0, out).code
          == errc::checkpoint_mismatch);
    auto outside = whole;
    outside.offset = 50;
    key_info dense;
    dense.name = "w";
    dense.size = 100;
    dense.slices = {slice_range{0, 0, 0, 100}};
    CHECK(core::cut_piece(outside, dense, 1, 0, out).code
          == errc::checkpoint_mismatch);
    CHECK(out.empty());
  }
}
