// SPDX-License-Identifier: BSD-3-Clause
// Row-sparse tables in a shard: made in place, pushed and pulled by row,
// updated lazily (table_init, rows_push, rows_pull).
#include "actors/shard/shard.hpp"

#include <algorithm>
#include <cmath>

#include "core/restore.hpp"
#include "tests/actors/fixture.hpp"

using namespace actorps;
using actorps::test::require_error;

namespace {

constexpr slice_id table = make_slice_id(9, 0);
constexpr slice_id dense = make_slice_id(10, 0);

struct table_fixture : test::deterministic_fixture {
  shard_actor shard;

  explicit table_fixture(shard_config cfg = test::shard_cfg(0, 2, false)) {
    shard = guard(spawn_shard(sys, cfg));
  }

  caf::expected<caf::ok_atom> make(table_init x) {
    self->send(shard, init_atom::value, x);
    run();
    return reply<caf::ok_atom>();
  }

  // A table of `rows` rows of `dim` floats, all `value`.
  caf::expected<caf::ok_atom> make(uint64_t rows, uint64_t dim, float value,
                                   slice_id id = table) {
    table_init x;
    x.slice = id;
    x.rows = rows;
    x.dim = dim;
    x.low = value;
    return make(x);
  }

  void send_push(uint32_t worker, uint64_t seq, std::vector<uint64_t> rows,
                 std::vector<float> values, slice_id id = table) {
    self->send(shard, push_atom::value,
               rows_push{id, worker, seq, std::move(rows),
                         floats{std::move(values)}});
  }

  caf::expected<caf::ok_atom>
  push(uint32_t worker, uint64_t seq, std::vector<uint64_t> rows,
       std::vector<float> values, slice_id id = table) {
    send_push(worker, seq, std::move(rows), std::move(values), id);
    run();
    return reply<caf::ok_atom>();
  }

  caf::expected<std::vector<float>> pull(uint32_t worker, uint64_t seq,
                                         std::vector<uint64_t> rows,
                                         slice_id id = table) {
    self->send(shard, pull_atom::value,
               rows_pull{id, worker, seq, std::move(rows)});
    run();
    auto r = reply<shared_floats>();
    if (!r)
      return r.error();
    return r->vec();
  }

  caf::expected<caf::ok_atom> set_optimizer(const optimizer_config& opt) {
    self->send(shard, set_opt_atom::value, opt);
    run();
    return reply<caf::ok_atom>();
  }
};

} // namespace

TEST_CASE_METHOD(table_fixture,
                 "table: rows are pulled in the order asked, pushes update "
                 "only their rows",
                 "[table]") {
  REQUIRE(make(5, 2, 1.0f));
  CHECK(pull(0, 0, {4, 0}) == std::vector<float>{1, 1, 1, 1});
  optimizer_config sgd;
  sgd.name = "sgd";
  sgd.learning_rate = 0.5f;
  REQUIRE(set_optimizer(sgd));
  // w - 0.5 g on rows 3 and 1; rows 0, 2 and 4 keep their values.
  REQUIRE(push(0, 1, {3, 1}, {2, 4, 6, 8}));
  CHECK(pull(0, 2, {0, 1, 2, 3, 4})
        == std::vector<float>{1, 1, -2, -3, 1, 1, 0, -1, 1, 1});
  // Another worker's pull sees the same table.
  CHECK(pull(1, 0, {3}) == std::vector<float>{0, -1});
}

TEST_CASE_METHOD(table_fixture,
                 "table: the optimizer's state and step are kept per row "
                 "(lazy update)",
                 "[table]") {
  optimizer_config adam;
  adam.name = "adam";
  adam.learning_rate = 0.1f;
  REQUIRE(set_optimizer(adam));
  REQUIRE(make(4, 3, 0.5f));
  // The reference: a dense slice of one row, updated as a row would be.
  self->send(shard, init_atom::value,
             slice_init{dense, floats{{0.5f, 0.5f, 0.5f}}});
  run();
  REQUIRE(reply<caf::ok_atom>());
  std::vector<float> g1{1, -2, 3};
  std::vector<float> g2{0.5f, 0.5f, -1};
  // Row 2 is pushed twice, row 0 once, in between: with one step counter
  // for the table, row 0's update would use step 1, not 0.
  REQUIRE(push(0, 0, {2}, g1));
  REQUIRE(push(0, 1, {0}, g2));
  REQUIRE(push(0, 2, {2}, g2));
  auto ref = [&](uint64_t seq, const std::vector<float>& g) {
    self->send(shard, push_atom::value, slice_push{dense, 1, seq, floats{g}});
    run();
    REQUIRE(reply<caf::ok_atom>());
    self->send(shard, pull_atom::value, slice_pull{dense, 1, seq + 1});
    run();
    auto v = reply<shared_floats>();
    REQUIRE(v);
    return v->vec();
  };
  auto once = ref(0, g2);
  auto rows = pull(0, 3, {0, 1, 2});
  REQUIRE(rows);
  CHECK(std::vector<float>(rows->begin(), rows->begin() + 3) == once);
  // Row 1 was never pushed.
  CHECK(std::vector<float>(rows->begin() + 3, rows->begin() + 6)
        == std::vector<float>{0.5f, 0.5f, 0.5f});
  // Row 2: g1 then g2, as the dense slice after the same two pushes (it
  // got g2 already: start it afresh with g1, g2).
  self->send(shard, init_atom::value,
             slice_init{make_slice_id(11, 0), floats{{0.5f, 0.5f, 0.5f}}});
  run();
  REQUIRE(reply<caf::ok_atom>());
  for (uint64_t seq = 0; seq < 2; ++seq) {
    self->send(shard, push_atom::value,
               slice_push{make_slice_id(11, 0), 1, seq,
                          floats{seq == 0 ? g1 : g2}});
    run();
    REQUIRE(reply<caf::ok_atom>());
  }
  self->send(shard, pull_atom::value, slice_pull{make_slice_id(11, 0), 1, 2});
  run();
  auto twice = reply<shared_floats>();
  REQUIRE(twice);
  CHECK(std::vector<float>(rows->begin() + 6, rows->end()) == twice->vec());
}

TEST_CASE_METHOD(table_fixture,
                 "table: a uniform table is the same whatever the number of "
                 "shards",
                 "[table]") {
  // One shard holding all 6 rows, and the two halves of the same table
  // over 2 shards (rows 0, 2, 4 and 1, 3, 5).
  auto uniform = [](slice_id id, uint64_t rows, uint64_t first,
                    uint64_t stride) {
    table_init x;
    x.slice = id;
    x.rows = rows;
    x.dim = 4;
    x.first = first;
    x.stride = stride;
    x.rule = table_init::uniform;
    x.low = -0.5f;
    x.high = 0.5f;
    x.seed = 42;
    return x;
  };
  REQUIRE(make(uniform(make_slice_id(1, 0), 6, 0, 1)));
  REQUIRE(make(uniform(make_slice_id(2, 0), 3, 0, 2)));
  REQUIRE(make(uniform(make_slice_id(2, 1), 3, 1, 2)));
  auto whole = pull(0, 0, {0, 1, 2, 3, 4, 5}, make_slice_id(1, 0));
  auto even = pull(0, 0, {0, 1, 2}, make_slice_id(2, 0));
  auto odd = pull(0, 0, {0, 1, 2}, make_slice_id(2, 1));
  REQUIRE(whole);
  REQUIRE(even);
  REQUIRE(odd);
  for (size_t r = 0; r < 6; ++r) {
    auto& half = r % 2 == 0 ? *even : *odd;
    for (size_t j = 0; j < 4; ++j) {
      INFO(r << " " << j);
      CHECK((*whole)[r * 4 + j] == half[(r / 2) * 4 + j]);
    }
  }
  // Within the bounds, and not all alike.
  CHECK(std::all_of(whole->begin(), whole->end(),
                    [](float v) { return v >= -0.5f && v < 0.5f; }));
  CHECK(std::adjacent_find(whole->begin(), whole->end()) == whole->end());
  // Another seed, another table.
  auto other = uniform(make_slice_id(3, 0), 6, 0, 1);
  other.seed = 43;
  REQUIRE(make(other));
  CHECK(pull(0, 0, {0, 1, 2, 3, 4, 5}, make_slice_id(3, 0)) != *whole);
}

TEST_CASE_METHOD(table_fixture,
                 "table: bad rows, shapes and tables are refused", "[table]") {
  REQUIRE(make(3, 2, 0.0f));
  require_error(make(3, 2, 0.0f), errc::already_initialized);
  require_error(make(0, 2, 0.0f, make_slice_id(9, 1)), errc::shape_mismatch);
  require_error(make(uint64_t{1} << 40, uint64_t{1} << 20, 0.0f,
                     make_slice_id(9, 2)),
                errc::shape_mismatch);
  table_init bad;
  bad.slice = make_slice_id(9, 3);
  bad.rows = 1;
  bad.dim = 1;
  bad.rule = 7;
  require_error(make(bad), errc::bad_config);
  bad.rule = table_init::uniform;
  bad.low = 1.0f;
  bad.high = 0.0f;
  require_error(make(bad), errc::bad_config);
  // Each refused operation still uses its sequence number.
  require_error(push(0, 0, {3}, {1, 1}), errc::unknown_key);
  // A row named twice in one push gets the sum of its rows (under
  // "assign", the sum itself).
  REQUIRE(push(0, 1, {1, 1}, {1, 1, 2, 2}));
  require_error(push(0, 2, {0, 1}, {1, 1, 1}), errc::shape_mismatch);
  require_error(pull(0, 3, {2, 5}), errc::unknown_key);
  // A dense slice is no table, and a table no dense slice.
  self->send(shard, init_atom::value, slice_init{dense, floats{{1, 2}}});
  run();
  REQUIRE(reply<caf::ok_atom>());
  require_error(pull(0, 0, {0}, dense), errc::shape_mismatch);
  require_error(pull(0, 4, {0}, make_slice_id(99, 0)), errc::not_initialized);
  // Nor does a push or pull of a whole value reach a table.
  self->send(shard, push_atom::value,
             slice_push{table, 0, 4, floats{std::vector<float>(6, 9.0f)}});
  run();
  require_error(reply<caf::ok_atom>(), errc::shape_mismatch);
  self->send(shard, pull_atom::value, slice_pull{table, 0, 5});
  run();
  require_error(reply<shared_floats>(), errc::shape_mismatch);
  // What failed changed nothing (row 1 holds the sum pushed above).
  CHECK(pull(0, 6, {0, 1, 2}) == std::vector<float>{0, 0, 3, 3, 0, 0});
}

TEST_CASE_METHOD(table_fixture,
                 "table: a batch naming a table is refused before anything "
                 "runs",
                 "[table]") {
  REQUIRE(make(3, 2, 0.0f));
  self->send(shard, init_atom::value, slice_init{dense, floats{{1, 2}}});
  run();
  REQUIRE(reply<caf::ok_atom>());
  // The dense slice first: it would run before the table's turn came.
  self->send(shard, batch_atom::value,
             slice_batch{0,
                         static_cast<uint8_t>(op_kind::push),
                         {dense, table},
                         {0, 0},
                         floats{std::vector<float>(8, 5.0f)},
                         {}});
  run();
  require_error(reply<float_parts>(), errc::shape_mismatch);
  self->send(shard, batch_atom::value,
             slice_batch{0,
                         static_cast<uint8_t>(op_kind::pull),
                         {dense, table},
                         {0, 0},
                         floats{},
                         {}});
  run();
  require_error(reply<float_parts>(), errc::shape_mismatch);
  // Neither used the dense slice's sequence number nor changed it.
  self->send(shard, pull_atom::value, slice_pull{dense, 0, 0});
  run();
  auto value = reply<shared_floats>();
  REQUIRE(value);
  CHECK(value->vec() == std::vector<float>{1, 2});
}

TEST_CASE("table: a pull whose answer would not fit one message of the job "
          "is refused",
          "[table]") {
  auto cfg = test::shard_cfg(0, 1, false);
  // 2 MiB: 1 MiB of it for values (the rest is the headers' share).
  cfg.message_cap = uint64_t{2} << 20;
  table_fixture f{cfg};
  constexpr uint64_t fit = (uint64_t{1} << 20) / sizeof(float);
  SECTION("the rows of a table pull") {
    REQUIRE(f.make(8, fit / 4, 1.0f));
    // 4 rows fill the bound, 5 (a row named twice counts twice) exceed it.
    auto ok = f.pull(0, 0, {0, 1, 2, 3});
    REQUIRE(ok);
    CHECK(ok->size() == fit);
    require_error(f.pull(0, 1, {0, 1, 2, 3, 3}), errc::bad_config);
  }
  SECTION("the slices of a batch pull") {
    std::vector<slice_id> ids;
    for (uint32_t k = 0; k < 5; ++k) {
      ids.push_back(make_slice_id(20 + k, 0));
      f.self->send(f.shard, init_atom::value,
                   slice_init{ids.back(), floats{std::vector<float>(fit / 4)}});
      f.run();
      REQUIRE(f.reply<caf::ok_atom>());
    }
    auto batch_pull = [&](std::vector<slice_id> which) {
      std::vector<uint64_t> seqs(which.size(), 0);
      f.self->send(f.shard, batch_atom::value,
                   slice_batch{0,
                               static_cast<uint8_t>(op_kind::pull),
                               std::move(which),
                               std::move(seqs),
                               floats{},
                               {}});
      f.run();
      return f.reply<float_parts>();
    };
    require_error(batch_pull(ids), errc::bad_config);
    ids.pop_back();
    auto ok = batch_pull(ids);
    REQUIRE(ok);
    CHECK(ok->size == fit);
  }
}

TEST_CASE_METHOD(table_fixture,
                 "table: a worker's row operations keep their order",
                 "[table]") {
  REQUIRE(make(2, 1, 0.0f));
  // Under "assign" the last push wins: seq 1 arrives first and waits.
  send_push(0, 1, {0}, {2});
  run();
  CHECK(no_reply());
  REQUIRE(push(0, 0, {0, 1}, {1, 1}));
  REQUIRE(reply<caf::ok_atom>());
  CHECK(pull(0, 2, {0, 1}) == std::vector<float>{2, 1});
}

TEST_CASE("table: with bounded staleness a row pull waits for the slowest "
          "worker",
          "[table]") {
  auto ssp = test::shard_cfg(0, 2, false);
  ssp.staleness = 0;
  table_fixture f{ssp};
  REQUIRE(f.make(2, 1, 0.0f));
  optimizer_config acc;
  acc.name = "accumulate";
  REQUIRE(f.set_optimizer(acc));
  REQUIRE(f.push(0, 0, {0}, {1}));
  // Worker 0 is one push ahead of worker 1: with s = 0 its pull waits.
  f.self->send(f.shard, pull_atom::value, rows_pull{table, 0, 1, {0}});
  f.run();
  CHECK(f.no_reply());
  REQUIRE(f.push(1, 0, {0}, {10}));
  auto v = f.reply<shared_floats>();
  REQUIRE(v);
  CHECK(v->vec() == std::vector<float>{11});
}

TEST_CASE("table: a sync round sums each row over the workers and updates "
          "it once, when every live worker pushed",
          "[table]") {
  table_fixture f{test::shard_cfg(0, 2, true)};
  optimizer_config adam;
  adam.name = "adam";
  adam.learning_rate = 0.1f;
  REQUIRE(f.set_optimizer(adam));
  REQUIRE(f.make(3, 1, 0.0f));
  // Round 0: worker 0 pushes rows 0 and 1, worker 1 row 1. Worker 0's
  // pull waits for the round.
  REQUIRE(f.push(0, 0, {0, 1}, {1, 2}));
  f.self->send(f.shard, pull_atom::value, rows_pull{table, 0, 1, {0, 1, 2}});
  f.run();
  CHECK(f.no_reply());
  REQUIRE(f.push(1, 0, {1}, {4}));
  auto v = f.reply<shared_floats>();
  REQUIRE(v);
  // Adam's first step moves a weight by lr in the gradient's direction:
  // row 1 once with the sum 6 (-0.1), not twice with 2 and 4 (-0.2); row
  // 2, pushed by nobody, keeps its value.
  REQUIRE(v->size() == 3);
  CHECK(std::abs(v->data()[0] + 0.1f) < 1e-5f);
  CHECK(std::abs(v->data()[1] + 0.1f) < 1e-5f);
  CHECK(v->data()[2] == 0.0f);
  // Round 1: worker 0 pushes no rows, but its push counts: the round
  // waits for it.
  REQUIRE(f.push(1, 1, {0}, {-3}));
  f.self->send(f.shard, pull_atom::value, rows_pull{table, 1, 2, {0}});
  f.run();
  CHECK(f.no_reply());
  REQUIRE(f.push(0, 2, {}, {}));
  v = f.reply<shared_floats>();
  REQUIRE(v);
  REQUIRE(v->size() == 1);
  CHECK(v->data()[0] > -0.1f);
  // Each row's step counts the rounds that changed it.
  f.self->send(f.shard, save_atom::value);
  f.run();
  auto snap = f.reply<state_snapshot>();
  REQUIRE(snap);
  REQUIRE(snap->slices.size() == 1);
  CHECK(snap->slices[0].row_steps == std::vector<uint64_t>{2, 1, 0});
}

TEST_CASE("table: row steps are saved and loaded with the table", "[table]") {
  table_fixture f;
  optimizer_config adam;
  adam.name = "adam";
  REQUIRE(f.set_optimizer(adam));
  REQUIRE(f.make(3, 2, 0.5f));
  REQUIRE(f.push(0, 0, {2}, {1, 1}));
  REQUIRE(f.push(0, 1, {2, 0}, {1, 1, 1, 1}));
  f.self->send(f.shard, save_atom::value);
  f.run();
  auto snap = f.reply<state_snapshot>();
  REQUIRE(snap);
  REQUIRE(snap->slices.size() == 1);
  CHECK(snap->slices[0].row_steps == std::vector<uint64_t>{1, 0, 2});
  // Into a fresh shard holding the same table: the same steps come back.
  table_fixture g;
  REQUIRE(g.make(3, 2, 0.0f));
  g.self->send(g.shard, load_atom::value, *snap);
  g.run();
  REQUIRE(g.reply<caf::ok_atom>());
  g.self->send(g.shard, save_atom::value);
  g.run();
  auto back = g.reply<state_snapshot>();
  REQUIRE(back);
  REQUIRE(back->slices.size() == 1);
  CHECK(back->slices[0].row_steps == snap->slices[0].row_steps);
  CHECK(back->slices[0].value.data == snap->slices[0].value.data);
  // Steps for another number of rows are refused, and change nothing.
  auto bad = *snap;
  bad.slices[0].row_steps.push_back(0);
  g.self->send(g.shard, load_atom::value, bad);
  g.run();
  require_error(g.reply<caf::ok_atom>(), errc::checkpoint_mismatch);
}

TEST_CASE("table: a save in pieces is the state when it began, piece by "
          "piece within the bound; a load in pieces counts at the commit only",
          "[table]") {
  table_fixture f;
  optimizer_config adam;
  adam.name = "adam";
  REQUIRE(f.set_optimizer(adam));
  // 200000 rows of 16 with Adam's two state blocks: about 40 MB, so the
  // save takes several pieces of at most save_piece_bytes.
  table_init init;
  init.slice = table;
  init.rows = 200000;
  init.dim = 16;
  init.rule = table_init::uniform;
  init.low = -1.0f;
  init.high = 1.0f;
  init.seed = 7;
  REQUIRE(f.make(init));
  REQUIRE(f.push(0, 0, {3, 199999}, std::vector<float>(32, 0.5f)));
  f.self->send(f.shard, save_atom::value);
  f.run();
  auto whole = f.reply<state_snapshot>();
  REQUIRE(whole);
  REQUIRE(whole->slices.size() == 1);
  auto& want = whole->slices[0];
  f.self->send(f.shard, save_atom::value, uint64_t{1});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  // A push after the save began is not in it.
  REQUIRE(f.push(0, 1, {3}, std::vector<float>(16, 1.0f)));
  std::vector<slice_record> pieces;
  save_cursor at{1, 0, 0};
  for (bool done = false; !done;) {
    f.self->send(f.shard, save_atom::value, at);
    f.run();
    auto piece = f.reply<save_piece>();
    REQUIRE(piece);
    uint64_t bytes = 0;
    for (auto& rec : piece->records)
      bytes += 4 * (rec.value.data.size() + rec.state.data.size())
               + 8 * rec.row_steps.size();
    CHECK(bytes <= save_piece_bytes);
    for (auto& rec : piece->records)
      pieces.push_back(std::move(rec));
    done = piece->done;
    at = piece->next;
    REQUIRE(pieces.size() < 100);
  }
  CHECK(pieces.size() >= 3);
  // A save given up is gone at once.
  f.self->send(f.shard, save_atom::value, uint64_t{2});
  f.run();
  REQUIRE(f.reply<caf::ok_atom>());
  f.self->send(f.shard, save_atom::value,
               save_cursor{2, 0, save_cursor::give_up});
  f.run();
  auto given_up = f.reply<save_piece>();
  REQUIRE(given_up);
  CHECK(given_up->done);
  f.self->send(f.shard, save_atom::value, save_cursor{2, 0, 0});
  f.run();
  require_error(f.reply<save_piece>(), errc::checkpoint_io);
  // The session is gone once the last piece was taken.
  f.self->send(f.shard, save_atom::value, at);
  f.run();
  require_error(f.reply<save_piece>(), errc::checkpoint_io);
  core::slice_assembly a;
  a.reset(want.value.data.size(), 16, 2 * 16);
  for (auto p : pieces)
    REQUIRE(a.add(p, "table").ok());
  REQUIRE(a.complete());
  CHECK(a.value == want.value.data);
  CHECK(a.state == want.state.data);
  CHECK(a.row_steps == want.row_steps);
  // Into a fresh shard holding the same table, piece by piece.
  table_fixture g;
  init.low = init.high = 0.0f;
  init.rule = table_init::constant;
  REQUIRE(g.make(init));
  auto load = [&](auto... xs) {
    g.self->send(g.shard, load_atom::value, xs...);
    g.run();
    return g.reply<caf::ok_atom>();
  };
  REQUIRE(load(uint64_t{5}, adam, true));
  for (size_t i = 0; i + 1 < pieces.size(); ++i)
    REQUIRE(load(uint64_t{5}, std::vector<slice_record>{pieces[i]}));
  SECTION("nothing counts before the commit, all of it after") {
    auto before = g.pull(0, 0, {3});
    REQUIRE(before);
    CHECK(*before == std::vector<float>(16, 0.0f));
    REQUIRE(load(uint64_t{5}, std::vector<slice_record>{pieces.back()}));
    REQUIRE(load(uint64_t{5}, true));
    g.self->send(g.shard, save_atom::value);
    g.run();
    auto back = g.reply<state_snapshot>();
    REQUIRE(back);
    CHECK(back->slices[0].value.data == want.value.data);
    CHECK(back->slices[0].state.data == want.state.data);
    CHECK(back->slices[0].row_steps == want.row_steps);
  }
  SECTION("a commit with a piece missing is refused and changes nothing") {
    require_error(load(uint64_t{5}, true), errc::checkpoint_mismatch);
    auto after = g.pull(0, 0, {3});
    REQUIRE(after);
    CHECK(*after == std::vector<float>(16, 0.0f));
    // The session is gone.
    require_error(load(uint64_t{5}, std::vector<slice_record>{pieces.back()}),
                  errc::checkpoint_io);
  }
  SECTION("a load of the states alone keeps the rows (MXNet's "
          "load_optimizer_states)") {
    REQUIRE(load(uint64_t{6}, adam, false));
    for (auto& piece : pieces)
      REQUIRE(load(uint64_t{6}, std::vector<slice_record>{piece}));
    REQUIRE(load(uint64_t{6}, true));
    g.self->send(g.shard, save_atom::value);
    g.run();
    auto back = g.reply<state_snapshot>();
    REQUIRE(back);
    CHECK(back->slices[0].value.data
          == std::vector<float>(want.value.data.size(), 0.0f));
    CHECK(back->slices[0].state.data == want.state.data);
    CHECK(back->slices[0].row_steps == want.row_steps);
  }
  SECTION("a piece sent twice is refused") {
    require_error(load(uint64_t{5}, std::vector<slice_record>{pieces[0]}),
                  errc::checkpoint_mismatch);
  }
}
