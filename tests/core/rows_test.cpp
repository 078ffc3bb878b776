// SPDX-License-Identifier: BSD-3-Clause
#include "core/rows.hpp"

#include <algorithm>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "core/optimizer.hpp"

using actorps::errc;
using actorps::optimizer_config;
namespace core = actorps::core;

TEST_CASE("rows: random and consecutive ids spread evenly over the shards",
          "[core]") {
  core::row_layout layout{10'000'000, 16, 4};
  uint64_t total = 0;
  for (uint32_t s = 0; s < 4; ++s)
    total += layout.rows_on(s);
  CHECK(total == layout.rows);
  CHECK(core::row_layout{10, 1, 4}.rows_on(1) == 3);
  CHECK(core::row_layout{10, 1, 4}.rows_on(3) == 2);
  std::mt19937_64 rng{7};
  std::vector<uint64_t> ids(4000);
  for (auto& id : ids)
    id = rng() % layout.rows;
  std::vector<core::shard_rows> split;
  REQUIRE(core::split_rows(layout, ids, split).ok());
  REQUIRE(split.size() == 4);
  for (auto& s : split) {
    // 1000 expected per shard; a shard far off would mean a skewed spread.
    CHECK(s.local.size() > 850);
    CHECK(s.local.size() < 1150);
  }
  std::vector<uint64_t> run(100);
  for (uint64_t i = 0; i < run.size(); ++i)
    run[i] = 5000 + i;
  REQUIRE(core::split_rows(layout, run, split).ok());
  for (auto& s : split)
    CHECK(s.local.size() == 25);
}

TEST_CASE("rows: a request splits as it is, repeats and all; the shard sums "
          "a push's repeats",
          "[core]") {
  core::row_layout layout{8, 2, 2};
  std::vector<uint64_t> ids{3, 5, 3, 0};
  std::vector<core::shard_rows> split;
  REQUIRE(core::split_rows(layout, ids, split).ok());
  // Shard 1 holds rows 3 and 5 (local 1 and 2), shard 0 row 0.
  CHECK(split[1].local == std::vector<uint64_t>{1, 2, 1});
  CHECK(split[1].positions == std::vector<uint64_t>{0, 1, 2});
  CHECK_FALSE(split[1].in_order);
  CHECK(split[0].local == std::vector<uint64_t>{0});
  CHECK(split[0].positions == std::vector<uint64_t>{3});
  std::vector<float> values{1, 2, 10, 20, 100, 200, 7, 8};
  auto to_1 = core::shard_values(split[1], values.data(), 2);
  CHECK(to_1 == std::vector<float>{1, 2, 10, 20, 100, 200});
  CHECK(core::shard_values(split[0], values.data(), 2)
        == std::vector<float>{7, 8});
  // The shard adds up the rows of local row 1.
  auto rows = split[1].local;
  std::vector<float> summed;
  REQUIRE(core::sum_repeats(rows, to_1.data(), 2, summed));
  CHECK(rows == std::vector<uint64_t>{1, 2});
  CHECK(summed == std::vector<float>{101, 202, 10, 20});
  auto distinct = split[0].local;
  CHECK_FALSE(core::sum_repeats(distinct, values.data(), 2, summed));
  // A pull's answer has a row per entry: every position gets its row.
  std::vector<float> pulled1{0.5f, 0.25f, 9, 9, 0.5f, 0.25f};
  std::vector<float> pulled0{4, 4};
  std::vector<float> out(ids.size() * 2, -1);
  core::scatter_rows(split[1], pulled1.data(), 2, out.data());
  core::scatter_rows(split[0], pulled0.data(), 2, out.data());
  CHECK(out == std::vector<float>{0.5f, 0.25f, 9, 9, 0.5f, 0.25f, 4, 4});
  auto st = core::split_rows(layout, {1, 8}, split);
  CHECK(st.code == errc::unknown_key);
  CHECK_THAT(st.message, Catch::Contains("row 8 out of range"));
  CHECK(core::split_rows(core::row_layout{8, 0, 2}, {1}, split).code
        == errc::bad_config);
}

TEST_CASE("rows: a request whose rows all lie on one shard goes as it is",
          "[core]") {
  std::vector<core::shard_rows> split;
  REQUIRE(core::split_rows(core::row_layout{100, 2, 1}, {5, 3, 5}, split).ok());
  REQUIRE(split.size() == 1);
  CHECK(split[0].in_order);
  CHECK(split[0].local == std::vector<uint64_t>{5, 3, 5});
  CHECK(split[0].positions.empty());
  std::vector<float> values{1, 2, 3, 4, 5, 6};
  CHECK(core::shard_values(split[0], values.data(), 2) == values);
  std::vector<float> out(6, -1);
  core::scatter_rows(split[0], values.data(), 2, out.data());
  CHECK(out == values);
  // Two shards, every id on shard 1: local indices, in order.
  REQUIRE(core::split_rows(core::row_layout{100, 2, 2}, {5, 3, 9}, split).ok());
  REQUIRE(split.size() == 2);
  CHECK(split[0].local.empty());
  CHECK(split[1].in_order);
  CHECK(split[1].local == std::vector<uint64_t>{2, 1, 4});
  auto st = core::split_rows(core::row_layout{100, 2, 1}, {5, 100}, split);
  CHECK(st.code == errc::unknown_key);
  CHECK_THAT(st.message, Catch::Contains("row 100 out of range"));
}

TEST_CASE("rows: each id goes to shard id mod S at local index id div S",
          "[core]") {
  std::mt19937_64 rng{5};
  for (uint32_t shards : {2u, 3u, 5u, 7u, 64u, 1000u, 65537u}) {
    // Tables up to 2^32 rows (a table holds at most 2^32 floats), and one
    // beyond that bound (divided plainly).
    for (uint64_t rows : {uint64_t{1} << 32, (uint64_t{1} << 32) - 1,
                          uint64_t{1000003}, uint64_t{1} << 40}) {
      std::vector<uint64_t> ids(2000);
      for (auto& id : ids)
        id = rng() % rows;
      ids[0] = rows - 1;
      ids[1] = 0;
      std::vector<core::shard_rows> split;
      REQUIRE(
        core::split_rows(core::row_layout{rows, 1, shards}, ids, split).ok());
      uint64_t seen = 0;
      for (uint32_t s = 0; s < shards; ++s) {
        auto& r = split[s];
        REQUIRE(r.local.size() == r.positions.size());
        for (size_t i = 0; i < r.local.size(); ++i) {
          auto id = ids[r.positions[i]];
          CHECK(id % shards == s);
          CHECK(id / shards == r.local[i]);
        }
        seen += r.local.size();
      }
      CHECK(seen == ids.size());
    }
  }
}

TEST_CASE("rows: repeats are summed call after call, small and large",
          "[core]") {
  // The index behind sum_repeats is kept from call to call on each thread:
  // a row of an earlier call must not count as a repeat, and requests of
  // every size (over 2^15 rows too) must find theirs.
  std::mt19937_64 rng{11};
  for (int call = 0; call < 200; ++call) {
    uint64_t n = call % 50 == 49 ? 40000 : 1 + rng() % 3000;
    std::vector<uint64_t> rows(n);
    for (uint64_t i = 0; i < n; ++i)
      rows[i] = i * 7 + static_cast<uint64_t>(call);
    std::shuffle(rows.begin(), rows.end(), rng);
    auto twice = call % 3 == 0 && n > 1;
    uint64_t at = twice ? 1 + rng() % (n - 1) : 0;
    if (twice)
      rows[at] = rows[0];
    std::vector<float> values(n);
    for (uint64_t i = 0; i < n; ++i)
      values[i] = static_cast<float>(i);
    auto before = rows;
    std::vector<float> summed;
    REQUIRE(core::sum_repeats(rows, values.data(), 1, summed) == twice);
    if (!twice) {
      CHECK(rows == before);
      continue;
    }
    // Row rows[0] holds its two values; every other row is as it was, in
    // first-seen order.
    REQUIRE(rows.size() == n - 1);
    CHECK(summed[0] == static_cast<float>(at));
    std::vector<uint64_t> expected = before;
    expected.erase(expected.begin() + static_cast<std::ptrdiff_t>(at));
    CHECK(rows == expected);
    CHECK(summed.size() == n - 1);
    if (n > 2)
      CHECK(summed.back() == static_cast<float>(at + 1 < n ? n - 1 : n - 2));
  }
}

TEST_CASE("rows: the lazy update touches only the rows pushed, each with its "
          "own state and step",
          "[core]") {
  optimizer_config adam;
  adam.name = "adam";
  adam.learning_rate = 0.1f;
  const uint64_t dim = 3;
  const uint64_t rows = 4;
  auto per_row = core::state_size(adam, dim);
  std::vector<float> table(rows * dim, 1.0f);
  std::vector<float> state(rows * per_row, 0.0f);
  std::vector<uint64_t> steps(rows, 0);
  std::vector<float> g{0.5f, -1.0f, 2.0f, 3.0f, 3.0f, 3.0f};
  // Row 2 twice, row 0 once; rows 1 and 3 never.
  core::apply_rows(adam, table.data(), state.data(), steps.data(), dim, {2, 0},
                   g.data());
  core::apply_rows(adam, table.data(), state.data(), steps.data(), dim, {2},
                   g.data());
  CHECK(steps == std::vector<uint64_t>{1, 0, 2, 0});
  // Each row as a dense slice of its own, updated the same times.
  auto dense = [&](const std::vector<std::vector<float>>& grads) {
    std::vector<float> w(dim, 1.0f);
    std::vector<float> s(per_row, 0.0f);
    uint64_t t = 0;
    for (auto& x : grads)
      core::apply_update(adam, w.data(), x.data(), s.data(), dim, t++);
    return w;
  };
  std::vector<float> g0(g.begin(), g.begin() + 3);
  std::vector<float> g1(g.begin() + 3, g.end());
  auto row = [&](uint64_t r) {
    return std::vector<float>(table.begin() + r * dim,
                              table.begin() + (r + 1) * dim);
  };
  CHECK(row(2) == dense({g0, g0}));
  CHECK(row(0) == dense({g1}));
  CHECK(row(1) == std::vector<float>(dim, 1.0f));
  CHECK(row(3) == std::vector<float>(dim, 1.0f));
  for (uint64_t r : {1, 3})
    for (uint64_t j = 0; j < per_row; ++j)
      CHECK(state[r * per_row + j] == 0.0f);
}

TEST_CASE("rows: assign and accumulate update rows as a dense update of each "
          "row does",
          "[core]") {
  for (auto name : {"assign", "accumulate"})
    for (float rescale : {1.0f, 0.5f})
      for (float clip : {0.0f, 0.25f}) {
        INFO(name << ", rescale " << rescale << ", clip " << clip);
        optimizer_config cfg;
        cfg.name = name;
        cfg.rescale_grad = rescale;
        cfg.clip_gradient = clip;
        const uint64_t dim = 5;
        std::vector<float> table(4 * dim);
        for (std::size_t i = 0; i < table.size(); ++i)
          table[i] = 0.1f * static_cast<float>(i) - 0.7f;
        auto dense = table;
        std::vector<uint64_t> steps(4, 0);
        std::vector<float> g(3 * dim);
        for (std::size_t i = 0; i < g.size(); ++i)
          g[i] = 0.3f * static_cast<float>(i % 7) - 0.8f;
        // Row 2 twice (as two calls would), row 0 once.
        core::apply_rows(cfg, table.data(), nullptr, steps.data(), dim,
                         {2, 0, 2}, g.data());
        for (uint64_t i = 0; i < 3; ++i) {
          auto r = i == 1 ? 0 : 2;
          core::apply_update(cfg, dense.data() + r * dim, g.data() + i * dim,
                             nullptr, dim, 0);
        }
        CHECK(table == dense);
        CHECK(steps == std::vector<uint64_t>{1, 0, 2, 0});
      }
}

TEST_CASE("rows: rows of one update with different step counts each get "
          "their own step size",
          "[core]") {
  // Adam's bias correction and a factor schedule both depend on the step:
  // counts 64 apart (and repeated ones) in one call must not share a step
  // size computed for another count.
  for (auto name : {"adam", "sgd"}) {
    INFO(name);
    optimizer_config cfg;
    cfg.name = name;
    cfg.learning_rate = 0.1f;
    cfg.lr_schedule = "factor";
    cfg.lr_updates = 3;
    cfg.lr_factor = 0.5f;
    const uint64_t dim = 2;
    std::vector<uint64_t> counts{0, 64, 128, 1, 65, 0, 7, 200, 64};
    const auto rows = counts.size();
    auto per_row = core::state_size(cfg, dim);
    std::vector<float> table(rows * dim);
    for (std::size_t i = 0; i < table.size(); ++i)
      table[i] = 0.01f * static_cast<float>(i) - 0.05f;
    std::vector<float> state(rows * per_row, 0.25f);
    auto expected = table;
    auto expected_state = state;
    std::vector<float> g(rows * dim);
    for (std::size_t i = 0; i < g.size(); ++i)
      g[i] = 0.3f - 0.02f * static_cast<float>(i);
    // Pushed in reverse order, each row once.
    std::vector<uint64_t> ids;
    std::vector<float> grads;
    for (auto r = rows; r-- > 0;) {
      ids.push_back(r);
      grads.insert(grads.end(), g.begin() + r * dim, g.begin() + (r + 1) * dim);
    }
    auto steps = counts;
    core::apply_rows(cfg, table.data(), state.data(), steps.data(), dim, ids,
                     grads.data());
    for (uint64_t r = 0; r < rows; ++r) {
      INFO("row " << r << ", step " << counts[r]);
      core::apply_update(cfg, expected.data() + r * dim, g.data() + r * dim,
                         expected_state.data() + r * per_row, dim, counts[r]);
      CHECK(steps[r] == counts[r] + 1);
      for (uint64_t j = 0; j < dim; ++j)
        CHECK(table[r * dim + j] == expected[r * dim + j]);
    }
    CHECK(state == expected_state);
  }
}

TEST_CASE("rows: a saved table is cut anew for another number of shards, "
          "each row keeping its values, state and step",
          "[core]") {
  // 7 rows of 2 floats with one state float per value, saved over 2
  // shards: row r holds (r, -r), state (10 r, -10 r), step r.
  const uint64_t rows = 7;
  const uint64_t dim = 2;
  auto saved_parts = [&](uint32_t shards) {
    core::row_layout old{rows, dim, shards};
    std::vector<actorps::slice_record> parts(shards);
    for (uint32_t p = 0; p < shards; ++p) {
      parts[p].key = "emb";
      parts[p].part = p;
      for (uint64_t i = 0; i < old.rows_on(p); ++i) {
        auto r = static_cast<float>(i * shards + p);
        parts[p].value.data.insert(parts[p].value.data.end(), {r, -r});
        parts[p].state.data.insert(parts[p].state.data.end(),
                                   {10 * r, -10 * r});
        parts[p].row_steps.push_back(i * shards + p);
      }
    }
    return parts;
  };
  auto parts = saved_parts(2);
  std::vector<const actorps::slice_record*> saved{&parts[1], &parts[0]};
  for (uint32_t shards : {1u, 2u, 3u, 7u, 9u}) {
    INFO(shards << " shards");
    core::row_layout now{rows, dim, shards};
    std::vector<actorps::slice_record> out;
    REQUIRE(core::reslice_rows(saved, now, dim, out).ok());
    REQUIRE(out.size() == std::min<uint64_t>(shards, rows));
    uint64_t offset = 0;
    for (uint32_t s = 0; s < out.size(); ++s) {
      CHECK(out[s].part == s);
      CHECK(out[s].offset == offset);
      offset += out[s].value.data.size();
      REQUIRE(out[s].value.data.size() == now.rows_on(s) * dim);
      for (uint64_t i = 0; i < now.rows_on(s); ++i) {
        auto r = i * shards + s;
        CHECK(out[s].value.data[i * dim] == static_cast<float>(r));
        CHECK(out[s].value.data[i * dim + 1] == -static_cast<float>(r));
        CHECK(out[s].state.data[i * dim] == 10.0f * static_cast<float>(r));
        CHECK(out[s].row_steps[i] == r);
      }
    }
    CHECK(offset == rows * dim);
  }
  // Parts missing, repeated or of the wrong size are refused.
  std::vector<actorps::slice_record> out;
  auto three = saved_parts(3);
  CHECK(
    core::reslice_rows({&three[0], &three[2]}, {rows, dim, 2}, dim, out).code
    == errc::checkpoint_mismatch);
  CHECK(
    core::reslice_rows({&parts[0], &parts[0]}, {rows, dim, 2}, dim, out).code
    == errc::checkpoint_mismatch);
  CHECK(core::reslice_rows(saved, {rows + 1, dim, 2}, dim, out).code
        == errc::checkpoint_mismatch);
  auto short_steps = parts;
  short_steps[0].row_steps.pop_back();
  CHECK(core::reslice_rows({&short_steps[0], &short_steps[1]}, {rows, dim, 2},
                           dim, out)
          .code
        == errc::checkpoint_mismatch);
  CHECK(out.empty());
}

TEST_CASE("rows: a gather returns each named row in order, repeats included",
          "[core]") {
  // Rows of 5 floats (not a multiple of a cache line) in a table whose rows
  // each hold their index and place; more rows named than fetched ahead.
  const uint64_t dim = 5;
  const uint64_t rows = 300;
  std::vector<float> table(rows * dim);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t j = 0; j < dim; ++j)
      table[r * dim + j] = static_cast<float>(r * 10 + j);
  std::vector<uint64_t> ids{299, 0, 17, 17, 150, 3, 299, 1, 2, 9, 8, 7, 6};
  auto out = core::gather_rows(table.data(), dim, ids);
  REQUIRE(out.size() == ids.size() * dim);
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (uint64_t j = 0; j < dim; ++j)
      CHECK(out[i * dim + j] == static_cast<float>(ids[i] * 10 + j));
  CHECK(core::gather_rows(table.data(), dim, {}).empty());
}
