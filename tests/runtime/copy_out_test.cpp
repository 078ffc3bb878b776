// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/payload.hpp"

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

using actorps::float_parts;
using actorps::float_piece;
using actorps::shared_floats;
using namespace actorps::payload;

namespace {

// Outputs of `sizes` floats back to back, each in a vector of its own.
struct outputs {
  std::vector<std::vector<float>> data;
  target_list list;

  explicit outputs(const std::vector<uint64_t>& sizes) {
    data.reserve(sizes.size());
    uint64_t at = 0;
    for (auto n : sizes) {
      data.emplace_back(n, -1.0f);
      list.push_back(target{at, n, data.back().data()});
      at += n;
    }
  }
};

// A value of `total` floats (float i holds i) in one buffer, cut into
// pieces at `cuts` and listed in `order`.
float_parts cut(uint64_t total, std::vector<uint64_t> cuts,
                const std::vector<size_t>& order) {
  std::vector<float> all(total);
  std::iota(all.begin(), all.end(), 0.0f);
  float_parts x;
  x.size = total;
  x.buffers.push_back(shared_floats{std::move(all)});
  cuts.insert(cuts.begin(), 0);
  cuts.push_back(total);
  std::vector<float_piece> pieces;
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    pieces.push_back(float_piece{0, cuts[i], cuts[i], cuts[i + 1] - cuts[i]});
  for (auto i : order)
    x.pieces.push_back(pieces[i]);
  return x;
}

} // namespace

TEST_CASE("copy_out: pieces in any order reach the outputs that hold them",
          "[payload]") {
  // 40 one-float keys, then two keys of 10 floats each cut into pieces.
  std::vector<uint64_t> sizes(40, 1);
  sizes.push_back(10);
  sizes.push_back(10);
  std::vector<uint64_t> cuts;
  for (uint64_t i = 1; i <= 40; ++i)
    cuts.push_back(i);
  for (uint64_t c : {43, 47, 50, 55})
    cuts.push_back(c);
  std::vector<size_t> order(cuts.size() + 1);
  std::iota(order.begin(), order.end(), size_t{0});
  SECTION("in order") {
  }
  SECTION("backwards") {
    std::reverse(order.begin(), order.end());
  }
  SECTION("two shards' replies, each in order") {
    std::stable_partition(order.begin(), order.end(),
                          [](size_t i) { return i % 2 == 0; });
  }
  SECTION("shuffled") {
    std::mt19937 gen{7};
    std::shuffle(order.begin(), order.end(), gen);
  }
  outputs out{sizes};
  copy_out(cut(60, cuts, order), out.list);
  float want = 0.0f;
  for (auto& v : out.data)
    for (auto f : v)
      CHECK(f == want++);
}

TEST_CASE("copy_out: a key pulled into two outputs fills both", "[payload]") {
  // Outputs: key a (2 floats) twice, then key b (3 floats).
  std::vector<float> a1(2, -1.0f), a2(2, -1.0f), b(3, -1.0f);
  target_list list{target{0, 2, a1.data()}, target{0, 2, a2.data()},
                   target{2, 3, b.data()}};
  copy_out(cut(5, {2}, {1, 0}), list);
  CHECK(a1 == std::vector<float>{0, 1});
  CHECK(a2 == std::vector<float>{0, 1});
  CHECK(b == std::vector<float>{2, 3, 4});
}

TEST_CASE("pack: slices of their own go to lent room where it is lent, the "
          "rest to buffers",
          "[payload]") {
  using actorps::key_info;
  using actorps::slice_range;
  // Two keys: one of three slices of its own over two shards, one small.
  actorps::core::batching batching{};
  auto big = batching.batch_floats + 1;
  key_info a;
  a.size = 3 * big;
  a.slices = {slice_range{0, 0, 0, big}, slice_range{1, 1, big, big},
              slice_range{2, 0, 2 * big, big}};
  key_info b;
  b.size = 3;
  b.slices = {slice_range{0, 1, 0, 3}};
  std::vector<float> va(a.size);
  std::iota(va.begin(), va.end(), 0.0f);
  std::vector<float> vb{-1.0f, -2.0f, -3.0f};
  std::vector<Eigen::Ref<const Eigen::VectorXf>> values{
    Eigen::Map<const Eigen::VectorXf>(va.data(),
                                      static_cast<Eigen::Index>(va.size())),
    Eigen::Map<const Eigen::VectorXf>(vb.data(), 3)};
  // Room on shard 0 only: its two slices are written there.
  std::vector<std::shared_ptr<std::vector<float>>> rooms;
  std::vector<uint32_t> asked;
  lender lend = [&](uint32_t shard, uint64_t n) {
    asked.push_back(shard);
    if (shard != 0)
      return lent{};
    rooms.push_back(std::make_shared<std::vector<float>>(n, -7.0f));
    return lent{rooms.back()->data(), rooms.back()};
  };
  auto x = pack({resolve(a, batching), resolve(b, batching)}, batching, values,
                lend);
  CHECK(asked == std::vector<uint32_t>{0, 1, 0});
  REQUIRE(rooms.size() == 2);
  REQUIRE(x.size == a.size + b.size);
  CHECK(x.valid(true));
  auto all = va;
  all.insert(all.end(), vb.begin(), vb.end());
  CHECK(x.flatten() == all);
  // The lent slices lie in their rooms, as views of them.
  int views = 0;
  for (auto& p : x.pieces) {
    auto& buf = x.buffers[p.buffer];
    if (!buf.is_view())
      continue;
    ++views;
    auto j = p.at == 0 ? 0 : 1;
    CHECK(p.at == (j == 0 ? 0 : 2 * big));
    CHECK(buf.data() == rooms[static_cast<size_t>(j)]->data());
    CHECK(std::equal(buf.data(), buf.data() + big, va.data() + p.at));
  }
  CHECK(views == 2);
  // Without a lender, no views.
  auto y = pack({resolve(a, batching), resolve(b, batching)}, batching, values);
  CHECK(y.flatten() == all);
  for (auto& buf : y.buffers)
    CHECK_FALSE(buf.is_view());
}

TEST_CASE("pack: keys of one small slice each go into one buffer, in order",
          "[payload]") {
  using actorps::key_info;
  using actorps::slice_range;
  actorps::core::batching batching{};
  // Keys of 1 to 5 floats, each one slice on shard 0 or 1.
  std::vector<key_info> infos(40);
  std::vector<std::vector<float>> vs(infos.size());
  std::vector<Eigen::Ref<const Eigen::VectorXf>> values;
  std::vector<float> all;
  for (std::size_t k = 0; k < infos.size(); ++k) {
    auto n = 1 + k % 5;
    infos[k].size = n;
    infos[k].slices = {slice_range{0, static_cast<uint32_t>(k % 2), 0, n}};
    for (std::size_t j = 0; j < n; ++j)
      vs[k].push_back(static_cast<float>(100 * k + j));
    values.emplace_back(Eigen::Map<const Eigen::VectorXf>(
      vs[k].data(), static_cast<Eigen::Index>(n)));
    all.insert(all.end(), vs[k].begin(), vs[k].end());
  }
  resolved_keys keys;
  for (auto& info : infos) {
    keys.push_back(resolve(info, batching));
    CHECK(keys.back().one_small_slice);
    CHECK(keys.back().size == info.size);
  }
  auto x = pack(keys, batching, values);
  REQUIRE(x.buffers.size() == 1);
  CHECK(x.valid(true));
  CHECK(x.flatten() == all);
  // One key of several slices among them: laid out slice by slice, the
  // same floats.
  key_info big;
  auto n = batching.batch_floats + 1;
  big.size = 2 * n;
  big.slices = {slice_range{0, 0, 0, n}, slice_range{1, 1, n, n}};
  std::vector<float> vbig(big.size, 0.5f);
  auto mixed = keys;
  mixed.insert(mixed.begin() + 7, resolve(big, batching));
  CHECK_FALSE(mixed[7].one_small_slice);
  // (Refs cannot be assigned: the list is built anew.)
  std::vector<Eigen::Ref<const Eigen::VectorXf>> mixed_values;
  for (std::size_t k = 0; k < values.size(); ++k) {
    if (k == 7)
      mixed_values.emplace_back(Eigen::Map<const Eigen::VectorXf>(
        vbig.data(), static_cast<Eigen::Index>(vbig.size())));
    mixed_values.emplace_back(values[k]);
  }
  auto expect = all;
  std::size_t before = 0;
  for (std::size_t k = 0; k < 7; ++k)
    before += infos[k].size;
  expect.insert(expect.begin() + static_cast<std::ptrdiff_t>(before),
                vbig.begin(), vbig.end());
  auto y = pack(mixed, batching, mixed_values);
  CHECK(y.valid(true));
  CHECK(y.buffers.size() > 1);
  CHECK(y.flatten() == expect);
}

TEST_CASE("copy_out: a piece over several outputs fills each with its part",
          "[payload]") {
  // Keys of 1 to 7 floats, the first one pulled into two outputs; the value
  // in pieces cut anywhere (inside keys and across them), as one piece
  // (a worker's gather of many short keys), and large enough for two
  // threads.
  auto check = [](uint64_t keys, const std::vector<uint64_t>& cuts) {
    std::vector<uint64_t> sizes;
    uint64_t total = 0;
    for (uint64_t k = 0; k < keys; ++k) {
      sizes.push_back(1 + k % 7);
      total += sizes.back();
    }
    outputs out{sizes};
    std::vector<float> twin(sizes[0], -1.0f);
    auto list = out.list;
    list.insert(list.begin() + 1, target{0, sizes[0], twin.data()});
    std::vector<size_t> order(cuts.size() + 1);
    std::iota(order.begin(), order.end(), size_t{0});
    std::mt19937 gen{11};
    std::shuffle(order.begin(), order.end(), gen);
    copy_out(cut(total, cuts, order), list);
    float want = 0.0f;
    uint64_t wrong = 0;
    for (auto& v : out.data)
      for (auto f : v)
        wrong += f == want++ ? 0 : 1;
    CHECK(wrong == 0);
    for (std::size_t j = 0; j < twin.size(); ++j)
      CHECK(twin[j] == static_cast<float>(j));
  };
  SECTION("one piece") {
    check(40, {});
    check(600000, {});
  }
  SECTION("cut inside and across keys") {
    check(40, {3, 4, 17, 41, 100, 150});
    check(600000, {1, 5, 99999, 300001, 2000001});
  }
}
