// SPDX-License-Identifier: BSD-3-Clause
#include "actors/shard/shard.hpp"
#include "actors/shard/state.hpp"

#include <cmath>
#include <map>

#include "caf/message_priority.hpp"

#include "core/batching.hpp"

#include "tests/actors/fixture.hpp"

using namespace actorps;
using actorps::test::require_error;

namespace {

constexpr slice_id slice_a = make_slice_id(7, 0);
constexpr slice_id slice_b = make_slice_id(7, 1);

struct shard_fixture : test::deterministic_fixture {
  shard_actor shard;

  explicit shard_fixture(shard_config cfg = test::shard_cfg(0, 2, false)) {
    shard = guard(spawn_shard(sys, cfg));
  }

  caf::expected<caf::ok_atom> init(slice_id id, std::vector<float> value) {
    self->send(shard, init_atom::value,
               slice_init{id, floats{std::move(value)}});
    run();
    return reply<caf::ok_atom>();
  }

  void send_push(slice_id id, uint32_t worker, uint64_t seq,
                 std::vector<float> grad) {
    self->send(shard, push_atom::value,
               slice_push{id, worker, seq, floats{std::move(grad)}});
  }

  caf::expected<caf::ok_atom> push(slice_id id, uint32_t worker, uint64_t seq,
                                   std::vector<float> grad) {
    send_push(id, worker, seq, std::move(grad));
    run();
    return reply<caf::ok_atom>();
  }

  caf::expected<std::vector<float>> pull(slice_id id, uint32_t worker,
                                         uint64_t seq) {
    self->send(shard, pull_atom::value, slice_pull{id, worker, seq});
    run();
    auto r = reply<shared_floats>();
    if (!r)
      return r.error();
    return r->take();
  }

  void send_batch(op_kind kind, uint32_t worker, std::vector<slice_id> ids,
                  std::vector<uint64_t> seqs, std::vector<float> data = {}) {
    self->send(shard, batch_atom::value,
               slice_batch{worker,
                           static_cast<uint8_t>(kind),
                           std::move(ids),
                           std::move(seqs),
                           floats{std::move(data)},
                           {}});
  }

  // A batch whose pushed values are held in `parts`.
  caf::expected<std::vector<float>>
  batch_of_parts(op_kind kind, std::vector<slice_id> ids,
                 std::vector<uint64_t> seqs, float_parts parts) {
    self->send(shard, batch_atom::value,
               slice_batch{0, static_cast<uint8_t>(kind), std::move(ids),
                           std::move(seqs), floats{}, std::move(parts)});
    run();
    auto r = reply<float_parts>();
    if (!r)
      return r.error();
    return r->flatten();
  }

  caf::expected<std::vector<float>>
  batch(op_kind kind, uint32_t worker, std::vector<slice_id> ids,
        std::vector<uint64_t> seqs, std::vector<float> data = {}) {
    send_batch(kind, worker, std::move(ids), std::move(seqs), std::move(data));
    run();
    auto r = reply<float_parts>();
    if (!r)
      return r.error();
    return r->flatten();
  }

  caf::expected<caf::ok_atom> set_optimizer(const optimizer_config& opt) {
    self->send(shard, set_opt_atom::value, opt);
    run();
    return reply<caf::ok_atom>();
  }

  caf::expected<shard_stats> stats() {
    self->send(shard, stats_atom::value);
    run();
    return reply<shard_stats>();
  }
};

struct sync_fixture : shard_fixture {
  sync_fixture() : shard_fixture(test::shard_cfg(0, 2, true)) {
  }
};

// Bounded staleness with bound `s`, 3 workers, "accumulate" updates.
struct ssp_fixture : shard_fixture {
  explicit ssp_fixture(int32_t s = 1) : shard_fixture(ssp_cfg(s)) {
    optimizer_config acc;
    acc.name = "accumulate";
    REQUIRE(set_optimizer(acc));
    REQUIRE(init(slice_a, {0}));
  }

  static shard_config ssp_cfg(int32_t s) {
    auto cfg = test::shard_cfg(0, 3, false);
    cfg.staleness = s;
    return cfg;
  }

  // Worker `w`'s next sequence number on slice_a.
  uint64_t next(uint32_t w) {
    return seq[w]++;
  }

  std::vector<uint64_t> seq = std::vector<uint64_t>(3, 0);
};

} // namespace

TEST_CASE_METHOD(shard_fixture, "shard: init stores a slice once", "[shard]") {
  REQUIRE(init(slice_a, {1, 2, 3}));
  CHECK(pull(slice_a, 0, 0) == std::vector<float>{1, 2, 3});
  SECTION("a second init of the same slice is refused") {
    auto msg = require_error(init(slice_a, {4, 5, 6}),
                             errc::already_initialized);
    CHECK(msg.find("init") != std::string::npos);
    CHECK(pull(slice_a, 0, 1) == std::vector<float>{1, 2, 3});
  }
  SECTION("an empty value is refused") {
    require_error(init(slice_b, {}), errc::shape_mismatch);
  }
}

TEST_CASE_METHOD(shard_fixture, "shard: push and pull errors", "[shard]") {
  SECTION("push before init") {
    auto msg = require_error(push(slice_a, 0, 0, {1}), errc::not_initialized);
    CHECK(msg.find("push") != std::string::npos);
  }
  SECTION("pull before init") {
    require_error(pull(slice_a, 0, 0), errc::not_initialized);
  }
  SECTION("push of the wrong length keeps the value") {
    REQUIRE(init(slice_a, {1, 2}));
    auto msg = require_error(push(slice_a, 0, 0, {1, 2, 3}),
                             errc::shape_mismatch);
    CHECK(msg.find("2 floats") != std::string::npos);
    CHECK(msg.find("the push has 3") != std::string::npos);
    // The failed push still used its sequence number: the next op runs.
    CHECK(pull(slice_a, 0, 1) == std::vector<float>{1, 2});
  }
  SECTION("worker out of range") {
    REQUIRE(init(slice_a, {1}));
    require_error(push(slice_a, 5, 0, {1}), errc::bad_config);
    require_error(pull(slice_a, 2, 0), errc::bad_config);
  }
  SECTION("a sequence number far ahead or twice in the stash is refused") {
    REQUIRE(init(slice_a, {1}));
    require_error(push(slice_a, 0, 1 << 20, {2}), errc::bad_config);
    send_push(slice_a, 0, 3, {2});
    run();
    CHECK(no_reply());
    require_error(push(slice_a, 0, 3, {2}), errc::bad_config);
  }
  SECTION("a worker's early operations are held up to a bound in bytes") {
    // A shard that holds at most 16 bytes of a worker's early operations.
    auto cfg = test::shard_cfg(1, 2, false);
    cfg.max_stash_bytes = 16;
    auto small = guard(spawn_shard(sys, cfg));
    auto push_to = [&](uint64_t seq, std::vector<float> grad) {
      self->send(small, push_atom::value,
                 slice_push{slice_a, 0, seq, floats{std::move(grad)}});
      run();
    };
    self->send(small, init_atom::value, slice_init{slice_a, floats{{0, 0}}});
    run();
    REQUIRE(reply<caf::ok_atom>());
    // Two pushes of 8 bytes ahead of push 0 wait; a third would hold 24.
    push_to(1, {1, 1});
    push_to(2, {2, 2});
    CHECK(no_reply());
    push_to(3, {3, 3});
    auto msg = require_error(reply<caf::ok_atom>(), errc::bad_config);
    CHECK(msg.find("over the bound of 0 MiB") != std::string::npos);
    CHECK(msg.find("sequence number 3 of worker 0") != std::string::npos);
    // Worker 1's operations count apart.
    self->send(small, push_atom::value,
               slice_push{slice_a, 1, 1, floats{{5, 5}}});
    run();
    CHECK(no_reply());
    // Push 0 runs the two waiting ones after it; their bytes are free again,
    // so two more may wait (3 was refused: it is still the next one).
    push_to(0, {0, 0});
    for (int i = 0; i < 3; ++i)
      REQUIRE(reply<caf::ok_atom>());
    CHECK(no_reply());
    push_to(4, {4, 4});
    push_to(5, {5, 5});
    CHECK(no_reply());
    push_to(3, {3, 3});
    for (int i = 0; i < 3; ++i)
      REQUIRE(reply<caf::ok_atom>());
    self->send(small, pull_atom::value, slice_pull{slice_a, 0, 6});
    run();
    auto value = reply<shared_floats>();
    REQUIRE(value);
    CHECK(value->take() == std::vector<float>{5, 5});
  }
  SECTION("a reused sequence number is refused") {
    REQUIRE(init(slice_a, {1}));
    REQUIRE(push(slice_a, 0, 0, {2}));
    require_error(push(slice_a, 0, 0, {3}), errc::bad_config);
    CHECK(pull(slice_a, 0, 1) == std::vector<float>{2});
  }
}

TEST_CASE_METHOD(shard_fixture,
                 "shard: without optimizer the value becomes the push",
                 "[shard]") {
  REQUIRE(init(slice_a, {1, 1}));
  REQUIRE(push(slice_a, 0, 0, {5, 6}));
  CHECK(pull(slice_a, 0, 1) == std::vector<float>{5, 6});
  REQUIRE(push(slice_a, 1, 0, {7, 8}));
  CHECK(pull(slice_a, 1, 1) == std::vector<float>{7, 8});
}

namespace {

// What a data plane's sink was told, by request.
struct plane_answers : reply_sink {
  std::map<uint64_t, std::vector<float>> values;
  std::map<uint64_t, int> oks;

  void ok(uint64_t, uint64_t request) override {
    ++oks[request];
  }

  void value(uint64_t, uint64_t request, const shared_floats& x) override {
    values[request].assign(x.data(), x.data() + x.size());
  }

  void parts(uint64_t, uint64_t, float_parts&&) override {
  }

  void fail(uint64_t, uint64_t request, const caf::error&) override {
    values.erase(request);
  }
};

} // namespace

TEST_CASE_METHOD(shard_fixture,
                 "shard: a data plane's push is read where its values lie, "
                 "never kept there, and let go of once handled",
                 "[shard]") {
  REQUIRE(init(slice_a, {1, 1}));
  auto sink = std::make_shared<plane_answers>();
  // Memory of someone else's (a worker's segment) holding pushes.
  auto memory = std::make_shared<std::vector<float>>(
    std::vector<float>{5, 6, 7, 8, 9, 10});
  auto viewers = [&] { return memory.use_count() - 1; };
  auto from_plane = [&](auto atom, uint32_t worker, uint64_t seq,
                        std::size_t at, uint64_t request) {
    auto keep = std::shared_ptr<const void>(memory, memory->data());
    caf::anon_send(shard, atom, slice_push{slice_a, worker, seq, floats{}},
                   plane_reply{sink, 1, request, nullptr,
                               shared_floats{keep, memory->data() + at, 2}});
    run();
  };
  // The value becomes the push (no optimizer): a copy of it.
  from_plane(push_pull_atom::value, 0, 0, 0, 1);
  CHECK(viewers() == 0);
  CHECK(sink->values[1] == std::vector<float>{5, 6});
  (*memory)[0] = -1;
  CHECK(pull(slice_a, 0, 1) == std::vector<float>{5, 6});
  // Out of order: seq 3 waits for seq 2 (copied, the view let go of at
  // once), then both apply in order.
  from_plane(push_atom::value, 0, 3, 4, 3);
  CHECK(viewers() == 0);
  CHECK(sink->oks.count(3) == 0);
  (*memory)[4] = 100;
  from_plane(push_atom::value, 0, 2, 2, 2);
  CHECK(viewers() == 0);
  CHECK(sink->oks[2] == 1);
  CHECK(sink->oks[3] == 1);
  CHECK(pull(slice_a, 0, 4) == std::vector<float>{9, 10});
}

TEST_CASE_METHOD(shard_fixture,
                 "shard: operations of one worker apply in sequence order",
                 "[shard]") {
  REQUIRE(init(slice_a, {0}));
  // Deliver seq 2 (pull), then 1 (push 20), then 0 (push 10): the shard must
  // apply push 10, push 20, then answer the pull with 20.
  self->send(shard, pull_atom::value, slice_pull{slice_a, 0, 2});
  send_push(slice_a, 0, 1, {20});
  run();
  CHECK(no_reply());
  send_push(slice_a, 0, 0, {10});
  run();
  auto first = reply<caf::ok_atom>();
  auto second = reply<caf::ok_atom>();
  auto value = reply<shared_floats>();
  REQUIRE(first);
  REQUIRE(second);
  REQUIRE(value);
  CHECK(value->vec() == std::vector<float>{20});
  auto st = stats();
  REQUIRE(st);
  CHECK(st->reordered == 2);
}

TEST_CASE_METHOD(shard_fixture,
                 "shard: a high-priority pull overtakes a normal backlog",
                 "[shard]") {
  optimizer_config acc;
  acc.name = "accumulate";
  REQUIRE(set_optimizer(acc));
  REQUIRE(init(slice_a, {0}));
  // Worker 0 queues 20 pushes of 1; worker 1 then pulls. The shard has not
  // run yet, so all 21 messages wait in its mailbox.
  for (uint64_t i = 0; i < 20; ++i)
    send_push(slice_a, 0, i, {1});
  // Collects the 20 acks and the pulled value, whatever their order.
  auto pulled_value = [this] {
    float seen = -1;
    int acks = 0;
    for (int i = 0; i < 21; ++i)
      self->receive([&](caf::ok_atom) { ++acks; },
                    [&](shared_floats& x) { seen = x.vec().at(0); },
                    caf::after(std::chrono::seconds(0)) >> [] {});
    CHECK(acks == 20);
    return seen;
  };
  SECTION("with high priority, the pull is answered before the backlog") {
    self->send<caf::message_priority::high>(shard, pull_atom::value,
                                            slice_pull{slice_a, 1, 0});
    run();
    CHECK(pulled_value() == 0.0f);
  }
  SECTION("with normal priority, the pull waits behind the backlog") {
    self->send(shard, pull_atom::value, slice_pull{slice_a, 1, 0});
    run();
    CHECK(pulled_value() == 20.0f);
  }
}

namespace {

// Values longer than a short value, which is always overwritten in place.
std::vector<float> long_value(float x) {
  return std::vector<float>(2 * core::min_shared_floats, x);
}

} // namespace

TEST_CASE_METHOD(sync_fixture,
                 "shard: a sync round's last push writes an assigned value "
                 "where it lies, unless a reader holds it",
                 "[shard]") {
  REQUIRE(init(slice_a, long_value(0)));
  auto pull_shared = [this](uint32_t worker, uint64_t seq) {
    self->send(shard, pull_atom::value, slice_pull{slice_a, worker, seq});
    run();
    auto r = reply<shared_floats>();
    REQUIRE(r);
    return *r;
  };
  // A push whose values are not a buffer of its own (a batch's payload).
  auto push_part = [this](uint32_t worker, uint64_t seq, float x) {
    send_batch(op_kind::push, worker, {slice_a}, {seq}, long_value(x));
    run();
    REQUIRE(reply<float_parts>());
  };
  REQUIRE(push(slice_a, 0, 0, long_value(1)));
  REQUIRE(push(slice_a, 1, 0, long_value(10)));
  const float* where = nullptr;
  {
    auto now = pull_shared(0, 1);
    CHECK(now.vec() == long_value(11));
    where = now.data();
  }
  // Nobody holds the value: the next round lands in its buffer.
  push_part(0, 2, 1);
  push_part(1, 1, 2);
  {
    auto now = pull_shared(1, 2);
    CHECK(now.vec() == long_value(3));
    CHECK(now.data() == where);
  }
  // A reader holds it: the round makes a new value and the held one stays.
  auto held = pull_shared(0, 3);
  REQUIRE(push(slice_a, 0, 4, long_value(5)));
  push_part(1, 3, 6);
  CHECK(held.vec() == long_value(3));
  auto now = pull_shared(0, 5);
  CHECK(now.vec() == long_value(11));
  CHECK(now.data() != held.data());
}

TEST_CASE("shard: a sync round of one worker applies its push at once",
          "[shard]") {
  shard_fixture f{test::shard_cfg(0, 1, true)};
  REQUIRE(f.init(slice_a, long_value(1)));
  auto pull_shared = [&f](uint64_t seq) {
    f.self->send(f.shard, pull_atom::value, slice_pull{slice_a, 0, seq});
    f.run();
    auto r = f.reply<shared_floats>();
    REQUIRE(r);
    return *r;
  };
  auto push_part = [&f](uint64_t seq, float x) {
    f.send_batch(op_kind::push, 0, {slice_a}, {seq}, long_value(x));
    f.run();
    REQUIRE(f.reply<float_parts>());
  };
  SECTION("assign: the value takes the push; a held value stays") {
    auto held = pull_shared(0);
    push_part(1, 5);
    CHECK(held.vec() == long_value(1));
    const float* where = nullptr;
    {
      auto now = pull_shared(2);
      CHECK(now.vec() == long_value(5));
      where = now.data();
    }
    push_part(3, 7);
    auto now = pull_shared(4);
    CHECK(now.vec() == long_value(7));
    CHECK(now.data() == where);
  }
  SECTION("an optimizer reads the push once, and counts one step a round") {
    optimizer_config sgd;
    sgd.name = "sgd";
    sgd.learning_rate = 0.5f;
    REQUIRE(f.set_optimizer(sgd));
    push_part(0, 2);
    REQUIRE(f.push(slice_a, 0, 1, long_value(4)));
    CHECK(pull_shared(2).vec() == long_value(-2));
    auto st = f.stats();
    REQUIRE(st);
    CHECK(st->updates == 2);
  }
}

TEST_CASE_METHOD(shard_fixture,
                 "shard: a pulled value is shared, and later updates leave it "
                 "alone",
                 "[shard]") {
  REQUIRE(init(slice_a, {1, 2}));
  auto pull_shared = [this](uint64_t seq) {
    self->send(shard, pull_atom::value, slice_pull{slice_a, 0, seq});
    run();
    auto r = reply<shared_floats>();
    REQUIRE(r);
    return *r;
  };
  SECTION("an update in place copies a value a reader still holds") {
    optimizer_config acc;
    acc.name = "accumulate";
    REQUIRE(set_optimizer(acc));
    auto held = pull_shared(0);
    auto* where = held.data();
    // Two pulls in a row share one buffer: nothing was copied.
    CHECK(pull_shared(1).data() == where);
    REQUIRE(push(slice_a, 0, 2, {10, 10}));
    CHECK(held.vec() == std::vector<float>{1, 2});
    CHECK(pull(slice_a, 0, 3) == std::vector<float>{11, 12});
  }
  SECTION("assign takes the pushed buffer as the new value") {
    auto held = pull_shared(0);
    REQUIRE(push(slice_a, 0, 1, {5, 6}));
    CHECK(held.vec() == std::vector<float>{1, 2});
    auto now = pull_shared(2);
    CHECK(now.vec() == std::vector<float>{5, 6});
    CHECK(now.data() != held.data());
  }
}

TEST_CASE_METHOD(shard_fixture, "shard: set_optimizer validates and applies",
                 "[shard]") {
  REQUIRE(init(slice_a, {1.0f, -2.0f}));
  SECTION("bad parameters are refused and nothing changes") {
    optimizer_config bad;
    bad.name = "sgd";
    bad.learning_rate = -1;
    auto msg = require_error(set_optimizer(bad), errc::bad_optimizer);
    CHECK(msg.find("learning_rate") != std::string::npos);
    optimizer_config unknown;
    unknown.name = "lbfgs";
    require_error(set_optimizer(unknown), errc::bad_optimizer);
    REQUIRE(push(slice_a, 0, 0, {3, 4}));
    CHECK(pull(slice_a, 0, 1) == std::vector<float>{3, 4});
  }
  SECTION("sgd descends, ascent climbs") {
    optimizer_config sgd;
    sgd.name = "sgd";
    sgd.learning_rate = 0.5f;
    REQUIRE(set_optimizer(sgd));
    REQUIRE(push(slice_a, 0, 0, {2, 2}));
    CHECK(pull(slice_a, 0, 1) == std::vector<float>{0.0f, -3.0f});
    sgd.ascent = true;
    REQUIRE(set_optimizer(sgd));
    REQUIRE(push(slice_a, 0, 2, {2, 2}));
    CHECK(pull(slice_a, 0, 3) == std::vector<float>{1.0f, -2.0f});
  }
}

TEST_CASE_METHOD(sync_fixture,
                 "shard: a sync round sums every worker's push once",
                 "[shard]") {
  REQUIRE(init(slice_a, {0, 0}));
  REQUIRE(push(slice_a, 0, 0, {1, 2}));
  // Worker 0's pull depends on round 0, which still lacks worker 1.
  self->send(shard, pull_atom::value, slice_pull{slice_a, 0, 1});
  run();
  CHECK(no_reply());
  auto st = stats();
  REQUIRE(st);
  CHECK(st->waiting_pulls == 1);
  SECTION("the round completes when the last worker pushes") {
    REQUIRE(push(slice_a, 1, 0, {10, 20}));
    auto value = reply<shared_floats>();
    REQUIRE(value);
    CHECK(value->vec() == std::vector<float>{11, 22});
    // A pull of worker 1 after its push sees the same round.
    CHECK(pull(slice_a, 1, 1) == std::vector<float>{11, 22});
  }
  SECTION("a worker ahead of the others goes into the next round") {
    REQUIRE(push(slice_a, 0, 2, {100, 100}));
    REQUIRE(push(slice_a, 1, 0, {10, 20}));
    auto value = reply<shared_floats>();
    REQUIRE(value);
    CHECK(value->vec() == std::vector<float>{11, 22});
    REQUIRE(push(slice_a, 1, 1, {1, 1}));
    CHECK(pull(slice_a, 1, 2) == std::vector<float>{101, 101});
  }
  SECTION("a dead worker's later pushes are refused") {
    self->send(shard, workers_atom::value, std::vector<uint32_t>{0});
    run();
    REQUIRE(reply<caf::ok_atom>());
    REQUIRE(reply<shared_floats>());
    require_error(push(slice_a, 1, 0, {1, 1}), errc::dead_node);
    SECTION("and when it comes back it joins the current round") {
      // A new process in rank 1 (a replacement) numbers from 0 again.
      self->send(shard, workers_atom::value, std::vector<uint32_t>{0, 1});
      run();
      REQUIRE(reply<caf::ok_atom>());
      REQUIRE(push(slice_a, 0, 2, {1, 1}));
      REQUIRE(push(slice_a, 1, 0, {2, 2}));
      CHECK(pull(slice_a, 1, 1) == std::vector<float>{3, 3});
    }
  }
  SECTION("a dead worker is dropped from the round") {
    self->send(shard, workers_atom::value, std::vector<uint32_t>{0});
    run();
    auto ok = reply<caf::ok_atom>();
    auto value = reply<shared_floats>();
    REQUIRE(ok);
    REQUIRE(value);
    CHECK(value->vec() == std::vector<float>{1, 2});
    self->send(shard, workers_atom::value, std::vector<uint32_t>{0, 9});
    run();
    require_error(reply<caf::ok_atom>(), errc::bad_config);
  }
}

TEST_CASE_METHOD(shard_fixture,
                 "shard: a batch pushes, pulls and push-pulls several slices",
                 "[shard][batch]") {
  REQUIRE(init(slice_a, {0, 0}));
  REQUIRE(init(slice_b, {0, 0, 0}));
  // Pushes of both slices back to back; the reply carries no floats.
  auto pushed = batch(op_kind::push, 0, {slice_a, slice_b}, {0, 0},
                      {1, 2, 3, 4, 5});
  REQUIRE(pushed);
  CHECK(pushed->empty());
  // Pulls come back in the batch's slice order, not the shard's.
  CHECK(batch(op_kind::pull, 0, {slice_b, slice_a}, {1, 1})
        == std::vector<float>{3, 4, 5, 1, 2});
  // A push-pull answers with the values its pushes produced.
  CHECK(
    batch(op_kind::push_pull, 1, {slice_a, slice_b}, {0, 0}, {9, 8, 7, 6, 5})
    == std::vector<float>{9, 8, 7, 6, 5});
  // The same slice twice in one batch: applied in sequence order.
  CHECK(batch(op_kind::push_pull, 1, {slice_a, slice_a}, {1, 2}, {1, 1, 2, 2})
        == std::vector<float>{1, 1, 2, 2});
  auto st = stats();
  REQUIRE(st);
  CHECK(st->pushes == 6);
  CHECK(st->pulls == 6);
}

TEST_CASE_METHOD(shard_fixture,
                 "shard: batch operations are ordered with single ones",
                 "[shard][batch]") {
  REQUIRE(init(slice_a, {0}));
  REQUIRE(init(slice_b, {0}));
  // The batch carries seq 1 on both slices; the pushes of seq 0 come later.
  send_batch(op_kind::pull, 0, {slice_a, slice_b}, {1, 1});
  run();
  CHECK(no_reply());
  REQUIRE(push(slice_a, 0, 0, {5}));
  CHECK(no_reply());
  REQUIRE(push(slice_b, 0, 0, {6}));
  auto value = reply<float_parts>();
  REQUIRE(value);
  CHECK(value->flatten() == std::vector<float>{5, 6});
  // A single pull after the batch sees the batch's push-pull.
  send_batch(op_kind::push_pull, 0, {slice_a}, {2}, {7});
  self->send(shard, pull_atom::value, slice_pull{slice_a, 0, 3});
  run();
  auto from_batch = reply<float_parts>();
  auto single = reply<shared_floats>();
  REQUIRE(from_batch);
  REQUIRE(single);
  CHECK(from_batch->flatten() == std::vector<float>{7});
  CHECK(single->vec() == std::vector<float>{7});
  // Short slices are copied into one buffer.
  REQUIRE(from_batch->buffers.size() == 1);
  CHECK(from_batch->buffers[0].data() != single->data());
  // Slices of 1024 floats and more: the batch's reply shares each slice's
  // buffer, as a single pull does; a later push leaves both as they were
  // (copy on write).
  auto big = make_slice_id(8, 0);
  std::vector<float> ones(1024, 1.0f);
  REQUIRE(init(big, std::vector<float>(1024, 0.0f)));
  send_batch(op_kind::push_pull, 0, {big}, {0}, ones);
  self->send(shard, pull_atom::value, slice_pull{big, 0, 1});
  run();
  auto shared_batch = reply<float_parts>();
  auto shared_single = reply<shared_floats>();
  REQUIRE(shared_batch);
  REQUIRE(shared_single);
  REQUIRE(shared_batch->buffers.size() == 1);
  CHECK(shared_batch->buffers[0].data() == shared_single->data());
  CHECK(shared_batch->flatten() == ones);
  REQUIRE(push(big, 0, 2, std::vector<float>(1024, 9.0f)));
  CHECK(pull(big, 0, 3) == std::vector<float>(1024, 9.0f));
  CHECK(shared_batch->flatten() == ones);
  CHECK(shared_single->vec() == ones);
}

TEST_CASE_METHOD(shard_fixture,
                 "shard: a batch's values may come in pieces of shared "
                 "buffers",
                 "[shard][batch]") {
  auto c = make_slice_id(9, 0);
  REQUIRE(init(slice_a, {0, 0}));
  REQUIRE(init(slice_b, {0, 0, 0}));
  REQUIRE(init(c, {0}));
  // Slice b starts in the first buffer and ends in the second, which holds
  // its floats after others the batch does not use.
  shared_floats first{{1, 2, 3}};
  shared_floats second{{-1, -1, 4, 5, 6}};
  float_parts parts;
  parts.size = 6;
  parts.buffers = {first, second};
  parts.pieces.push_back(float_piece{0, 0, 0, 3});
  parts.pieces.push_back(float_piece{1, 2, 3, 3});
  REQUIRE(
    batch_of_parts(op_kind::push, {slice_a, slice_b, c}, {0, 0, 0}, parts));
  CHECK(pull(slice_a, 0, 1) == std::vector<float>{1, 2});
  CHECK(pull(slice_b, 0, 1) == std::vector<float>{3, 4, 5});
  CHECK(pull(c, 0, 1) == std::vector<float>{6});
  // The sender's buffers are read, never written.
  CHECK(first.vec() == std::vector<float>{1, 2, 3});
  CHECK(second.vec() == std::vector<float>{-1, -1, 4, 5, 6});
  // A push-pull answers with the values it produced.
  CHECK(
    batch_of_parts(op_kind::push_pull, {slice_b}, {2}, float_parts{{7, 8, 9}})
    == std::vector<float>{7, 8, 9});
}

TEST_CASE_METHOD(shard_fixture,
                 "shard: slices are found whatever their keys' numbers",
                 "[shard][batch]") {
  // Keys numbered in order, one far out (past what the shard indexes by
  // number), and later parts of a key whose part 0 lives elsewhere.
  auto near = make_slice_id(5, 0);
  auto far = make_slice_id(uint32_t{1} << 31, 0);
  auto later = make_slice_id(2, 3);
  REQUIRE(init(slice_a, {1}));
  REQUIRE(init(near, {2}));
  REQUIRE(init(far, {3}));
  REQUIRE(init(later, {4}));
  CHECK(batch(op_kind::push_pull, 0, {far, slice_a, later, near}, {0, 0, 0, 0},
              {30, 10, 40, 20})
        == std::vector<float>{30, 10, 40, 20});
  CHECK(pull(far, 0, 1) == std::vector<float>{30});
  CHECK(pull(near, 0, 1) == std::vector<float>{20});
  // Neighbours of the slices held are not there.
  for (auto id : {make_slice_id(2, 0), make_slice_id(4, 0), make_slice_id(5, 1),
                  make_slice_id((uint32_t{1} << 31) - 1, 0)}) {
    INFO(id);
    require_error(batch(op_kind::pull, 0, {slice_a, id}, {1, 0}),
                  errc::not_initialized);
    require_error(init(id, {}), errc::shape_mismatch);
  }
  // A slice of a key numbered far out is refused once, as any other.
  require_error(init(far, {5}), errc::already_initialized);
  CHECK(pull(far, 0, 2) == std::vector<float>{30});
}

TEST_CASE_METHOD(shard_fixture, "shard: bad batches are refused whole",
                 "[shard][batch]") {
  REQUIRE(init(slice_a, {0, 0}));
  SECTION("an unknown slice") {
    auto msg = require_error(batch(op_kind::push, 0, {slice_a, slice_b}, {0, 0},
                                   {1, 1, 1}),
                             errc::not_initialized);
    CHECK(msg.find("slice 7/1") != std::string::npos);
  }
  SECTION("a payload of the wrong size") {
    auto msg = require_error(batch(op_kind::push, 0, {slice_a}, {0}, {1}),
                             errc::shape_mismatch);
    CHECK(msg.find("2 floats") != std::string::npos);
  }
  SECTION("mismatched lists, an unknown kind, a bad worker") {
    require_error(batch(op_kind::pull, 0, {slice_a}, {0, 1}), errc::bad_config);
    require_error(batch(op_kind::pull, 0, {}, {}), errc::bad_config);
    self->send(shard, batch_atom::value,
               slice_batch{0, 7, {slice_a}, {0}, floats{}, {}});
    run();
    require_error(reply<float_parts>(), errc::bad_config);
    require_error(batch(op_kind::pull, 5, {slice_a}, {0}), errc::bad_config);
  }
  SECTION("values in pieces that do not fit, leave a gap, or come twice") {
    auto msg = require_error(batch_of_parts(op_kind::push, {slice_a}, {0},
                                            float_parts{{1, 2, 3}}),
                             errc::shape_mismatch);
    CHECK(msg.find("carries 3") != std::string::npos);
    float_parts gap;
    gap.size = 2;
    gap.buffers.push_back(shared_floats{{1, 2}});
    gap.pieces.push_back(float_piece{0, 0, 1, 1});
    require_error(batch_of_parts(op_kind::push, {slice_a}, {0}, gap),
                  errc::shape_mismatch);
    self->send(shard, batch_atom::value,
               slice_batch{0,
                           static_cast<uint8_t>(op_kind::push),
                           {slice_a},
                           {0},
                           floats{{1, 2}},
                           float_parts{{1, 2}}});
    run();
    require_error(reply<float_parts>(), errc::bad_config);
  }
  // Nothing of the refused batches ran: sequence 0 is still free.
  CHECK(push(slice_a, 0, 0, {3, 4}));
  CHECK(pull(slice_a, 0, 1) == std::vector<float>{3, 4});
}

TEST_CASE_METHOD(sync_fixture,
                 "shard: a sync push-pull answers once its round completes",
                 "[shard][batch]") {
  REQUIRE(init(slice_a, {0}));
  REQUIRE(init(slice_b, {0}));
  send_batch(op_kind::push_pull, 0, {slice_a, slice_b}, {0, 0}, {1, 2});
  run();
  CHECK(no_reply());
  // Worker 1 completes the round of slice_a only: still no reply.
  REQUIRE(push(slice_a, 1, 0, {10}));
  CHECK(no_reply());
  // Worker 1's push-pull on slice_b completes the other round: worker 0's
  // batch is answered first, then worker 1's.
  send_batch(op_kind::push_pull, 1, {slice_b}, {0}, {20});
  run();
  auto first = reply<float_parts>();
  auto second = reply<float_parts>();
  REQUIRE(first);
  REQUIRE(second);
  CHECK(first->flatten() == std::vector<float>{11, 22});
  CHECK(second->flatten() == std::vector<float>{22});
}

TEST_CASE_METHOD(sync_fixture,
                 "shard: a batch whose slices run now, wait for their turn "
                 "and wait for their round answers each in its place",
                 "[shard][batch]") {
  auto c = make_slice_id(9, 0);
  REQUIRE(init(slice_a, {0}));
  REQUIRE(init(slice_b, {0}));
  REQUIRE(init(c, {0}));
  // Round 0 of slice_a completes: 1 + 10.
  REQUIRE(push(slice_a, 0, 0, {1}));
  REQUIRE(push(slice_a, 1, 0, {10}));
  // slice_a's pull runs now, slice_b's waits for worker 0's push of
  // sequence 0, slice_c's runs now (round 0 of it needs no push).
  send_batch(op_kind::pull, 0, {slice_a, slice_b, c}, {1, 1, 0});
  run();
  CHECK(no_reply());
  // The push runs, then the pull behind it, which waits for the round.
  REQUIRE(push(slice_b, 0, 0, {2}));
  CHECK(no_reply());
  REQUIRE(push(slice_b, 1, 0, {20}));
  auto value = reply<float_parts>();
  REQUIRE(value);
  CHECK(value->flatten() == std::vector<float>{11, 22, 0});
  // A batch of pushes where the middle one comes before its turn: each
  // lands on its own slice once its turn came.
  send_batch(op_kind::push, 1, {slice_a, slice_b, c}, {1, 2, 0}, {3, 4, 5});
  run();
  CHECK(no_reply());
  REQUIRE(push(slice_b, 1, 1, {6}));
  REQUIRE(reply<float_parts>());
  REQUIRE(push(slice_a, 0, 2, {30}));
  REQUIRE(push(slice_b, 0, 2, {40}));
  REQUIRE(push(slice_b, 0, 3, {60}));
  REQUIRE(push(c, 0, 1, {50}));
  CHECK(pull(slice_a, 0, 3) == std::vector<float>{33});
  CHECK(pull(slice_b, 0, 4) == std::vector<float>{64});
  CHECK(pull(c, 0, 2) == std::vector<float>{55});
}

TEST_CASE("shard: a sync round of 70 workers waits for the ranks past 64 too",
          "[shard]") {
  // Ranks below 64 and beyond are recorded differently (round_sum).
  shard_fixture f{test::shard_cfg(0, 70, true)};
  REQUIRE(f.init(slice_a, {0}));
  for (uint32_t w = 0; w < 70; ++w) {
    if (w == 65)
      continue;
    REQUIRE(f.push(slice_a, w, 0, {1}));
  }
  // Every rank but 65 pushed: the round is still open.
  f.self->send(f.shard, pull_atom::value, slice_pull{slice_a, 0, 1});
  f.run();
  CHECK(f.no_reply());
  REQUIRE(f.push(slice_a, 65, 0, {1}));
  auto value = f.reply<shared_floats>();
  REQUIRE(value);
  CHECK(value->vec() == std::vector<float>{70});
  // A second push of rank 65 goes to the next round, not this one.
  REQUIRE(f.push(slice_a, 65, 1, {5}));
  CHECK(f.pull(slice_a, 69, 1) == std::vector<float>{70});
}

TEST_CASE_METHOD(shard_fixture, "shard: save and load state", "[shard]") {
  optimizer_config mom;
  mom.name = "sgd";
  mom.momentum = 0.9f;
  mom.learning_rate = 0.1f;
  REQUIRE(set_optimizer(mom));
  REQUIRE(init(slice_a, {1, 2, 3}));
  REQUIRE(init(slice_b, {4}));
  REQUIRE(push(slice_a, 0, 0, {1, 1, 1}));
  self->send(shard, save_atom::value);
  run();
  auto snap = reply<state_snapshot>();
  REQUIRE(snap);
  REQUIRE(snap->slices.size() == 2);
  CHECK(snap->optimizer.name == "sgd");
  CHECK(snap->slices[0].part == 0);
  CHECK(snap->slices[0].step == 1);
  CHECK(snap->slices[0].state.data.size() == 3);
  auto saved_value = snap->slices[0].value.data;
  // Diverge, then load: the value, state and step come back.
  REQUIRE(push(slice_a, 0, 1, {5, 5, 5}));
  SECTION("a valid snapshot restores everything") {
    self->send(shard, load_atom::value, *snap);
    run();
    REQUIRE(reply<caf::ok_atom>());
    CHECK(pull(slice_a, 0, 2) == saved_value);
  }
  SECTION("a mismatched length is refused and nothing changes") {
    auto bad = *snap;
    bad.slices[0].value.data.push_back(0);
    self->send(shard, load_atom::value, bad);
    run();
    require_error(reply<caf::ok_atom>(), errc::checkpoint_mismatch);
    CHECK(pull(slice_a, 0, 2) != saved_value);
  }
  SECTION("a wrong state size is refused") {
    auto bad = *snap;
    bad.slices[1].state.data.clear();
    self->send(shard, load_atom::value, bad);
    run();
    require_error(reply<caf::ok_atom>(), errc::checkpoint_mismatch);
  }
  SECTION("an unknown slice is refused") {
    auto bad = *snap;
    bad.slices[0].key_id = 99;
    self->send(shard, load_atom::value, bad);
    run();
    require_error(reply<caf::ok_atom>(), errc::unknown_key);
  }
  SECTION("a bad optimizer is refused") {
    auto bad = *snap;
    bad.optimizer.momentum = 2;
    self->send(shard, load_atom::value, bad);
    run();
    require_error(reply<caf::ok_atom>(), errc::bad_optimizer);
  }
}

TEST_CASE_METHOD(shard_fixture, "shard: stats count what happened", "[shard]") {
  REQUIRE(init(slice_a, {1, 2}));
  REQUIRE(init(slice_b, {3}));
  REQUIRE(push(slice_a, 0, 0, {1, 1}));
  REQUIRE(pull(slice_a, 0, 1));
  auto st = stats();
  REQUIRE(st);
  CHECK(st->slices == 2);
  CHECK(st->floats_stored == 3);
  CHECK(st->pushes == 1);
  CHECK(st->pulls == 1);
  CHECK(st->updates == 1);
}

TEST_CASE_METHOD(ssp_fixture,
                 "shard: bounded staleness holds a fast worker exactly s "
                 "pushes ahead of the slowest",
                 "[shard]") {
  // s = 1. Workers 1 and 2 push once; worker 0 runs ahead.
  REQUIRE(push(slice_a, 1, next(1), {10}));
  REQUIRE(push(slice_a, 2, next(2), {100}));
  // Each push is applied on arrival: worker 0 at clock 1 and 2 may pull
  // (the slowest clock, 1, is at least 1 - 1 and 2 - 1).
  REQUIRE(push(slice_a, 0, next(0), {1}));
  CHECK(pull(slice_a, 0, next(0)) == std::vector<float>{111});
  REQUIRE(push(slice_a, 0, next(0), {1}));
  CHECK(pull(slice_a, 0, next(0)) == std::vector<float>{112});
  // At clock 3 it needs every live worker at 2: it waits.
  REQUIRE(push(slice_a, 0, next(0), {1}));
  self->send(shard, pull_atom::value, slice_pull{slice_a, 0, next(0)});
  run();
  CHECK(no_reply());
  auto st = stats();
  REQUIRE(st);
  CHECK(st->waiting_pulls == 1);
  // Its own later pushes are not held up by its waiting pull.
  SECTION("it goes on once the slowest workers catch up") {
    REQUIRE(push(slice_a, 1, next(1), {10}));
    run();
    CHECK(no_reply()); // worker 2 is still at clock 1
    REQUIRE(push(slice_a, 2, next(2), {100}));
    auto value = reply<shared_floats>();
    REQUIRE(value);
    CHECK(value->vec() == std::vector<float>{223});
  }
  SECTION("a worker that leaves stops counting") {
    REQUIRE(push(slice_a, 1, next(1), {10}));
    self->send(shard, workers_atom::value, std::vector<uint32_t>{0, 1});
    run();
    REQUIRE(reply<caf::ok_atom>());
    auto value = reply<shared_floats>();
    REQUIRE(value);
    CHECK(value->vec() == std::vector<float>{123});
    SECTION("and when it comes back it starts at the slowest clock") {
      self->send(shard, workers_atom::value, std::vector<uint32_t>{0, 1, 2});
      run();
      REQUIRE(reply<caf::ok_atom>());
      // Worker 2 counts from clock 2 (the slowest live one then), so
      // worker 0 at clock 3 may pull without waiting for it.
      CHECK(pull(slice_a, 0, next(0)) == std::vector<float>{123});
      REQUIRE(push(slice_a, 0, next(0), {1}));
      self->send(shard, pull_atom::value, slice_pull{slice_a, 0, next(0)});
      run();
      CHECK(no_reply()); // clock 4 needs 3 of workers 1 and 2
    }
  }
}

TEST_CASE("shard: staleness 0 waits as BSP does, a large bound never waits",
          "[shard]") {
  SECTION("s = 0: a pull at clock c waits for every worker's c-th push") {
    ssp_fixture f{0};
    REQUIRE(f.push(slice_a, 0, f.next(0), {1}));
    f.self->send(f.shard, pull_atom::value, slice_pull{slice_a, 0, f.next(0)});
    f.run();
    CHECK(f.no_reply());
    REQUIRE(f.push(slice_a, 1, f.next(1), {2}));
    f.run();
    CHECK(f.no_reply());
    REQUIRE(f.push(slice_a, 2, f.next(2), {4}));
    auto value = f.reply<shared_floats>();
    REQUIRE(value);
    // The sum of the step's pushes, as a BSP round gives it.
    CHECK(value->vec() == std::vector<float>{7});
  }
  SECTION("s large: no pull waits, every push counts once") {
    ssp_fixture f{1000000};
    for (int i = 0; i < 50; ++i) {
      REQUIRE(f.push(slice_a, 0, f.next(0), {1}));
      auto v = f.pull(slice_a, 0, f.next(0));
      REQUIRE(v);
      CHECK(v->at(0) == float(i + 1));
    }
  }
}

TEST_CASE_METHOD(sync_fixture,
                 "shard: clear_pending drops the unfinished round and "
                 "releases its pulls",
                 "[shard]") {
  optimizer_config acc;
  acc.name = "accumulate";
  REQUIRE(set_optimizer(acc));
  REQUIRE(init(slice_a, {0, 0}));
  // Round 0 completes; round 1 has only worker 0's push.
  REQUIRE(push(slice_a, 0, 0, {1, 1}));
  REQUIRE(push(slice_a, 1, 0, {2, 2}));
  REQUIRE(push(slice_a, 0, 1, {10, 10}));
  self->send(shard, pull_atom::value, slice_pull{slice_a, 0, 2});
  run();
  CHECK(no_reply());
  self->send(shard, command_atom::value, command_head::clear_pending,
             std::string{});
  run();
  REQUIRE(reply<caf::ok_atom>());
  // The waiting pull gets the last applied round's value.
  auto value = reply<shared_floats>();
  REQUIRE(value);
  CHECK(value->vec() == std::vector<float>{3, 3});
  // Worker 1's push does not complete the dropped round: worker 0 pushes
  // for it again, and only then is the round applied.
  REQUIRE(push(slice_a, 1, 1, {20, 20}));
  self->send(shard, pull_atom::value, slice_pull{slice_a, 1, 2});
  run();
  CHECK(no_reply());
  REQUIRE(push(slice_a, 0, 3, {30, 30}));
  value = reply<shared_floats>();
  REQUIRE(value);
  CHECK(value->vec() == std::vector<float>{53, 53});
  // Other negative heads are reserved.
  self->send(shard, command_atom::value, int32_t{-2}, std::string{});
  run();
  require_error(reply<caf::ok_atom>(), errc::bad_config);
}

TEST_CASE_METHOD(shard_fixture,
                 "shard: clear_pending changes nothing in async mode",
                 "[shard]") {
  optimizer_config acc;
  acc.name = "accumulate";
  REQUIRE(set_optimizer(acc));
  REQUIRE(init(slice_a, {0, 0}));
  REQUIRE(push(slice_a, 0, 0, {1, 2}));
  self->send(shard, command_atom::value, command_head::clear_pending,
             std::string{});
  run();
  REQUIRE(reply<caf::ok_atom>());
  CHECK(pull(slice_a, 0, 1) == std::vector<float>{1, 2});
}

TEST_CASE("shard: with bounded staleness a waiting pull never sees its "
          "worker's later pushes",
          "[shard]") {
  // s = 0: worker 0 pushes, pulls (waits for workers 1 and 2), and pushes
  // again before its pull was answered.
  ssp_fixture f{0};
  REQUIRE(f.push(slice_a, 0, f.next(0), {1}));
  f.self->send(f.shard, pull_atom::value, slice_pull{slice_a, 0, f.next(0)});
  f.send_push(slice_a, 0, f.next(0), {5});
  f.run();
  // Neither the pull nor the later push is answered yet: the push waits
  // behind the pull, in issue order.
  CHECK(f.no_reply());
  REQUIRE(f.push(slice_a, 1, f.next(1), {10}));
  REQUIRE(f.push(slice_a, 2, f.next(2), {100}));
  auto value = f.reply<shared_floats>();
  REQUIRE(value);
  CHECK(value->vec() == std::vector<float>{111});
  // Then the held push runs.
  REQUIRE(f.reply<caf::ok_atom>());
  REQUIRE(f.push(slice_a, 1, f.next(1), {10}));
  REQUIRE(f.push(slice_a, 2, f.next(2), {100}));
  CHECK(f.pull(slice_a, 0, f.next(0)) == std::vector<float>{226});
}

namespace {

// A shard restored from a checkpoint: its coordinator says so, and each
// worker tells it how many of its pushes per slice were acknowledged.
template <class Fixture>
void await_clocks(Fixture& f) {
  f.self->send(f.shard, clocks_atom::value);
  f.run();
  REQUIRE(f.template reply<caf::ok_atom>());
}

template <class Fixture>
caf::expected<caf::ok_atom> tell_clocks(Fixture& f, uint32_t worker,
                                        std::vector<uint64_t> pushes,
                                        bool fresh = false) {
  std::vector<uint64_t> ids(pushes.size(), slice_a);
  f.self->send(f.shard, clocks_atom::value, worker, ids, pushes, fresh);
  f.run();
  return f.template reply<caf::ok_atom>();
}

} // namespace

TEST_CASE_METHOD(sync_fixture,
                 "shard: a restored shard of a sync job starts its rounds "
                 "where the workers' clocks are",
                 "[shard]") {
  optimizer_config acc;
  acc.name = "accumulate";
  REQUIRE(set_optimizer(acc));
  REQUIRE(init(slice_a, {0}));
  await_clocks(*this);
  // Worker 0's push waits for every live worker's clocks.
  send_push(slice_a, 0, 0, {1});
  run();
  CHECK(no_reply());
  // Worker 0 had 3 pushes acknowledged there, worker 1 only 2: rounds 0
  // and 1 were complete (the checkpoint stands for them), worker 0's push
  // to round 2 is lost with the dead server.
  REQUIRE(tell_clocks(*this, 0, {3}));
  CHECK(no_reply());
  SECTION("once each live worker told its clocks, the held push runs") {
    REQUIRE(tell_clocks(*this, 1, {2}));
    // Worker 0's held push, into round 3.
    REQUIRE(reply<caf::ok_atom>());
    // Round 2 waits for worker 1 only: its push completes it alone.
    REQUIRE(push(slice_a, 1, 0, {10}));
    CHECK(pull(slice_a, 1, 1) == std::vector<float>{10});
    // Round 3 has worker 0's push: worker 0's pull waits for worker 1.
    self->send(shard, pull_atom::value, slice_pull{slice_a, 0, 1});
    run();
    CHECK(no_reply());
    REQUIRE(push(slice_a, 1, 2, {100}));
    auto value = reply<shared_floats>();
    REQUIRE(value);
    CHECK(value->vec() == std::vector<float>{111});
    // A second word is not taken.
    REQUIRE(tell_clocks(*this, 1, {0}));
    REQUIRE(push(slice_a, 0, 2, {1}));
    REQUIRE(push(slice_a, 1, 3, {1}));
    CHECK(pull(slice_a, 0, 3) == std::vector<float>{113});
  }
  SECTION("a worker that leaves meanwhile is not waited for") {
    self->send(shard, workers_atom::value, std::vector<uint32_t>{0});
    run();
    REQUIRE(reply<caf::ok_atom>());
    // Rounds start at worker 0's clock; its held push completes round 3.
    REQUIRE(reply<caf::ok_atom>());
    CHECK(pull(slice_a, 0, 1) == std::vector<float>{1});
    SECTION("and when it comes back it joins the current round") {
      self->send(shard, workers_atom::value, std::vector<uint32_t>{0, 1});
      run();
      REQUIRE(reply<caf::ok_atom>());
      REQUIRE(push(slice_a, 0, 2, {1}));
      REQUIRE(push(slice_a, 1, 0, {2}));
      CHECK(pull(slice_a, 1, 1) == std::vector<float>{4});
    }
  }
  SECTION("clocks that do not check out are refused") {
    self->send(shard, clocks_atom::value, uint32_t{9},
               std::vector<uint64_t>{slice_a}, std::vector<uint64_t>{1}, false);
    run();
    require_error(reply<caf::ok_atom>(), errc::bad_config);
    CHECK(no_reply());
    // Worker 1's counts do not match its slices: it is not waited for
    // again, and joins where worker 0 is.
    self->send(shard, clocks_atom::value, uint32_t{1},
               std::vector<uint64_t>{slice_a}, std::vector<uint64_t>{}, false);
    run();
    REQUIRE(reply<caf::ok_atom>()); // worker 0's held push, into round 3
    require_error(reply<caf::ok_atom>(), errc::bad_config);
    REQUIRE(push(slice_a, 1, 0, {10}));
    CHECK(pull(slice_a, 1, 1) == std::vector<float>{11});
  }
  SECTION("a new process in a dead worker's rank joins where the others "
          "are") {
    REQUIRE(tell_clocks(*this, 1, {7}, true));
    REQUIRE(reply<caf::ok_atom>());
    // Both at worker 0's 3: its held push and worker 1's first make round 3.
    REQUIRE(push(slice_a, 1, 0, {10}));
    CHECK(pull(slice_a, 1, 1) == std::vector<float>{11});
  }
}

TEST_CASE_METHOD(sync_fixture,
                 "shard: a restored shard that waits for clocks while a "
                 "worker comes back lets the new process join the round",
                 "[shard]") {
  REQUIRE(init(slice_a, {0, 0}));
  self->send(shard, workers_atom::value, std::vector<uint32_t>{0});
  run();
  REQUIRE(reply<caf::ok_atom>());
  await_clocks(*this);
  // Rank 1 gets a new process while the shard waits: it has no clocks to
  // tell, and starts where worker 0 is.
  self->send(shard, workers_atom::value, std::vector<uint32_t>{0, 1});
  run();
  REQUIRE(reply<caf::ok_atom>());
  REQUIRE(tell_clocks(*this, 0, {5}));
  REQUIRE(push(slice_a, 1, 0, {1, 2}));
  REQUIRE(push(slice_a, 0, 0, {10, 20}));
  CHECK(pull(slice_a, 1, 1) == std::vector<float>{11, 22});
}

TEST_CASE_METHOD(ssp_fixture,
                 "shard: a restored shard with bounded staleness starts each "
                 "worker at the clock it told",
                 "[shard]") {
  await_clocks(*this);
  REQUIRE(tell_clocks(*this, 0, {5}));
  REQUIRE(tell_clocks(*this, 1, {5}));
  REQUIRE(tell_clocks(*this, 2, {4}));
  // Worker 0 at clock 5 needs the slowest at 4 (s = 1): it may pull.
  CHECK(pull(slice_a, 0, next(0)) == std::vector<float>{0});
  // At clock 6 it needs 5: worker 2 is behind.
  REQUIRE(push(slice_a, 0, next(0), {1}));
  self->send(shard, pull_atom::value, slice_pull{slice_a, 0, next(0)});
  run();
  CHECK(no_reply());
  REQUIRE(push(slice_a, 2, next(2), {100}));
  auto value = reply<shared_floats>();
  REQUIRE(value);
  CHECK(value->vec() == std::vector<float>{101});
}

TEST_CASE_METHOD(sync_fixture,
                 "shard: a worker asks where its pushes stand, except while "
                 "the shard waits for clocks",
                 "[shard]") {
  REQUIRE(init(slice_a, {0}));
  REQUIRE(push(slice_a, 1, 0, {1}));
  REQUIRE(push(slice_a, 1, 1, {1}));
  auto clocks = [&](uint32_t worker) {
    self->send(shard, clocks_atom::value, worker);
    run();
    caf::expected<std::vector<uint64_t>> result = make_error(errc::timeout,
                                                             "no reply");
    self->receive(
      [&](std::vector<uint64_t>& ids, std::vector<uint64_t>& pushes) {
        REQUIRE(ids.size() == pushes.size());
        // (Only slices it pushed to.)
        for (auto id : ids)
          CHECK(id == slice_a);
        result = std::move(pushes);
      },
      [&](caf::error& err) { result = std::move(err); },
      caf::after(std::chrono::seconds(0)) >> [] {});
    return result;
  };
  CHECK(clocks(1) == std::vector<uint64_t>{2});
  CHECK(clocks(0) == std::vector<uint64_t>{});
  require_error(clocks(5), errc::bad_config);
  await_clocks(*this);
  require_error(clocks(1), errc::bad_config);
}

TEST_CASE_METHOD(shard_fixture,
                 "shard: a restored shard of an async job holds nothing",
                 "[shard]") {
  REQUIRE(init(slice_a, {0, 0}));
  await_clocks(*this);
  REQUIRE(push(slice_a, 0, 0, {1, 2}));
  REQUIRE(tell_clocks(*this, 0, {7}));
  CHECK(pull(slice_a, 1, 0) == std::vector<float>{1, 2});
}

namespace {

// A dist_sync shard of 2 workers, "accumulate" updates and slice_a of 2
// zeros, that holds at most `bound` bytes of a worker's pushes ahead.
struct ahead_fixture : shard_fixture {
  explicit ahead_fixture(uint64_t bound) : shard_fixture(config(bound)) {
    optimizer_config acc;
    acc.name = "accumulate";
    REQUIRE(set_optimizer(acc));
    REQUIRE(init(slice_a, {0, 0}));
  }

  static shard_config config(uint64_t bound) {
    auto cfg = test::shard_cfg(0, 2, true);
    cfg.max_stash_bytes = bound;
    return cfg;
  }
};

} // namespace

TEST_CASE("shard: a dist_sync worker's pushes ahead of the others wait once "
          "they hold the bound, and run as rounds complete",
          "[shard]") {
  // At most 16 bytes of a worker's pushes past a slice's current round.
  ahead_fixture f{16};
  REQUIRE(f.init(slice_b, {0, 0}));
  // Round 0 is the current one; rounds 1 and 2 are ahead (8 bytes each).
  for (uint64_t seq = 0; seq < 3; ++seq)
    REQUIRE(f.push(slice_a, 0, seq, {1, 1}));
  // Round 3 would hold 24 bytes ahead: it waits, unanswered.
  f.send_push(slice_a, 0, 3, {1, 1});
  f.run();
  CHECK(f.no_reply());
  auto held = f.stats();
  REQUIRE(held);
  CHECK(held->held_pushes == 1);
  // Another slice's current round takes worker 0's push all the same.
  REQUIRE(f.push(slice_b, 0, 0, {5, 5}));
  // Worker 1 completes round 0: rounds 1 and 2 are still open and ahead.
  REQUIRE(f.push(slice_a, 1, 0, {2, 2}));
  CHECK(f.no_reply());
  // Worker 1 completes round 1: the held push goes into round 3.
  REQUIRE(f.push(slice_a, 1, 1, {2, 2}));
  REQUIRE(f.reply<caf::ok_atom>());
  REQUIRE(f.push(slice_a, 1, 2, {2, 2}));
  REQUIRE(f.push(slice_a, 1, 3, {2, 2}));
  // Four rounds of 1 + 2, none lost, none twice.
  auto now = f.pull(slice_a, 1, 4);
  REQUIRE(now);
  CHECK(*now == std::vector<float>{12, 12});
  auto st = f.stats();
  REQUIRE(st);
  CHECK(st->pushes == 9);
  CHECK(st->held_pushes == 0);
}

TEST_CASE("shard: clear_pending lets a push held ahead into the round then "
          "current",
          "[shard]") {
  ahead_fixture f{8};
  // Round 0 current, round 1 ahead (8 bytes), round 2 waits.
  REQUIRE(f.push(slice_a, 0, 0, {1, 1}));
  REQUIRE(f.push(slice_a, 0, 1, {1, 1}));
  f.send_push(slice_a, 0, 2, {7, 7});
  f.run();
  CHECK(f.no_reply());
  // Dropping the open rounds puts worker 0 back at round 0: its held push
  // joins it, and worker 1's completes it.
  f.self->send(f.shard, command_atom::value, command_head::clear_pending,
               std::string{});
  f.run();
  int oks = 0;
  for (int i = 0; i < 2; ++i)
    f.self->receive([&](caf::ok_atom) { ++oks; },
                    caf::after(std::chrono::seconds(0)) >> [] {});
  CHECK(oks == 2);
  REQUIRE(f.push(slice_a, 1, 0, {2, 2}));
  auto now = f.pull(slice_a, 1, 1);
  REQUIRE(now);
  CHECK(*now == std::vector<float>{9, 9});
}

TEST_CASE("shard: a dist_sync worker's waiting pulls count against its "
          "bound",
          "[shard]") {
  // Room for two waiting pulls of worker 0.
  waiting_pull one;
  one.target.single();
  ahead_fixture f{2 * shard_state::waiting_cost(one)};
  REQUIRE(f.push(slice_a, 0, 0, {1, 1}));
  f.self->send(f.shard, pull_atom::value, slice_pull{slice_a, 0, 1});
  f.self->send(f.shard, pull_atom::value, slice_pull{slice_a, 0, 2});
  f.run();
  CHECK(f.no_reply());
  // A third is refused, saying why.
  CHECK_THAT(require_error(f.pull(slice_a, 0, 3), errc::bad_config),
             Catch::Contains("over the bound"));
  // Worker 1 completes the round: both waiting pulls answer, and their
  // room is free again.
  REQUIRE(f.push(slice_a, 1, 0, {2, 2}));
  for (int i = 0; i < 2; ++i) {
    auto x = f.reply<shared_floats>();
    REQUIRE(x);
    CHECK(x->vec() == std::vector<float>{3, 3});
  }
  REQUIRE(f.push(slice_a, 0, 4, {1, 1}));
  f.self->send(f.shard, pull_atom::value, slice_pull{slice_a, 0, 5});
  f.self->send(f.shard, pull_atom::value, slice_pull{slice_a, 0, 6});
  f.run();
  CHECK(f.no_reply());
}

TEST_CASE("shard: a push_pull that completes a round answers from its own "
          "round before a held push it releases runs",
          "[shard]") {
  ahead_fixture f{16};
  for (uint64_t seq = 0; seq < 3; ++seq)
    REQUIRE(f.push(slice_a, 0, seq, {1, 1}));
  f.send_push(slice_a, 0, 3, {1, 1});
  f.run();
  CHECK(f.no_reply());
  auto push_pull = [&](uint64_t seq) {
    f.self->send(f.shard, push_pull_atom::value,
                 slice_push{slice_a, 1, seq, floats{{2, 2}}});
    f.run();
  };
  // Round 0 completes; rounds 1 and 2 still hold worker 0's 16 bytes.
  push_pull(0);
  auto first = f.reply<shared_floats>();
  REQUIRE(first);
  CHECK(first->vec() == std::vector<float>{3, 3});
  CHECK(f.no_reply());
  // Round 1 completes: worker 1 gets round 1's value, then worker 0's held
  // push goes into round 3 and is answered.
  push_pull(1);
  auto second = f.reply<shared_floats>();
  REQUIRE(second);
  CHECK(second->vec() == std::vector<float>{6, 6});
  REQUIRE(f.reply<caf::ok_atom>());
  push_pull(2);
  push_pull(3);
  auto last = f.reply<shared_floats>();
  REQUIRE(last);
  last = f.reply<shared_floats>();
  REQUIRE(last);
  CHECK(last->vec() == std::vector<float>{12, 12});
}

namespace {

// What a run of `ops_in_order` left on a shard: each slice's value as
// worker 0 pulls it at the end, the early pull's answer and the counters.
struct shard_outcome {
  std::vector<std::vector<float>> values;
  std::vector<float> early;
  shard_stats stats;
};

// Three rounds of pushes (the second as push-pulls) by every worker on
// three slices, then a pull of all: in batches (`batched`) or as single
// operations in the same order. In the second round worker 0's pull of the
// third slice comes before its push-pull there (the next sequence number
// after it), so a batch runs that slice's operation the long way. With
// `dies`, worker 1 is declared dead after the first round: worker 0 then
// completes every round alone.
shard_outcome ops_in_order(uint32_t workers, bool sync, bool accumulate,
                           bool batched, bool dies) {
  shard_fixture f{test::shard_cfg(0, workers, sync)};
  if (accumulate) {
    optimizer_config acc;
    acc.name = "accumulate";
    REQUIRE(f.set_optimizer(acc));
  }
  std::vector<slice_id> ids{slice_a, slice_b, make_slice_id(8, 0)};
  std::vector<std::vector<float>> init{{1, 2}, {3}, {4, 5, 6}};
  for (std::size_t i = 0; i < ids.size(); ++i)
    REQUIRE(f.init(ids[i], init[i]));
  // Next sequence number per worker and slice.
  std::vector<std::vector<uint64_t>> seq(workers,
                                         std::vector<uint64_t>(ids.size(), 0));
  auto values = [&](uint32_t w, int round, std::size_t i) {
    std::vector<float> v(init[i].size());
    for (std::size_t j = 0; j < v.size(); ++j)
      v[j] = static_cast<float>((w + 1) * 100 + round * 10)
             + static_cast<float>(j);
    return v;
  };
  auto send = [&](op_kind kind, uint32_t w, int round,
                  std::vector<uint64_t> seqs) {
    if (batched) {
      std::vector<float> data;
      if (kind != op_kind::pull)
        for (std::size_t i = 0; i < ids.size(); ++i)
          for (auto x : values(w, round, i))
            data.push_back(x);
      f.send_batch(kind, w, ids, std::move(seqs), std::move(data));
      return;
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (kind == op_kind::pull)
        f.self->send(f.shard, pull_atom::value, slice_pull{ids[i], w, seqs[i]});
      else if (kind == op_kind::push)
        f.send_push(ids[i], w, seqs[i], values(w, round, i));
      else
        f.self->send(f.shard, push_pull_atom::value,
                     slice_push{ids[i], w, seqs[i],
                                floats{values(w, round, i)}});
    }
  };
  auto next = [&](uint32_t w) {
    std::vector<uint64_t> out;
    for (auto& s : seq[w])
      out.push_back(s++);
    return out;
  };
  caf::scoped_actor asker{f.sys};
  shard_outcome out;
  for (int round = 0; round < 3; ++round) {
    auto live = dies && round > 0 ? 1 : workers;
    for (uint32_t w = 0; w < live; ++w) {
      auto kind = round == 1 ? op_kind::push_pull : op_kind::push;
      if (round == 1 && w == 0) {
        // The pull that follows the push-pull, sent first (by another
        // requester, whose mailbox holds its answer alone).
        auto s = seq[0];
        asker->send(f.shard, pull_atom::value, slice_pull{ids[2], 0, s[2] + 1});
        send(kind, w, round, s);
        for (auto& x : seq[0])
          ++x;
        ++seq[0][2];
      } else {
        send(kind, w, round, next(w));
      }
    }
    f.run();
    // Every operation was answered, none with an error.
    std::size_t answers = 0;
    while (!f.no_reply()) {
      f.self->receive([](caf::ok_atom) {}, [](shared_floats&) {},
                      [](float_parts&) {},
                      [](caf::error& err) { FAIL(render(err)); });
      ++answers;
    }
    CHECK(answers == live * (batched ? 1 : ids.size()));
    if (dies && round == 0) {
      f.self->send(f.shard, workers_atom::value, std::vector<uint32_t>{0});
      f.run();
      REQUIRE(f.reply<caf::ok_atom>());
    }
    if (round == 1) {
      auto early = f.reply<shared_floats>(asker);
      REQUIRE(early);
      out.early = early->take();
    }
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto v = f.pull(ids[i], 0, seq[0][i]++);
    REQUIRE(v);
    out.values.push_back(*v);
  }
  auto st = f.stats();
  REQUIRE(st);
  out.stats = *st;
  return out;
}

} // namespace

TEST_CASE("shard: a batch's operations end as the same operations sent one "
          "by one",
          "[shard][batch]") {
  struct setting {
    uint32_t workers;
    bool sync;
    bool dies;
  };
  for (auto [workers, sync, dies] :
       {setting{1, true, false}, setting{2, true, false},
        setting{2, true, true}, setting{2, false, false}})
    for (auto accumulate : {false, true}) {
      INFO(workers << " workers, sync " << sync << ", worker 1 dies " << dies
                   << ", accumulate " << accumulate);
      auto batched = ops_in_order(workers, sync, accumulate, true, dies);
      auto single = ops_in_order(workers, sync, accumulate, false, dies);
      CHECK(batched.values == single.values);
      CHECK(batched.early == single.early);
      CHECK(batched.stats.pushes == single.stats.pushes);
      CHECK(batched.stats.pulls == single.stats.pulls);
      CHECK(batched.stats.updates == single.stats.updates);
      CHECK(batched.stats.reordered == single.stats.reordered);
      REQUIRE(batched.stats.by_worker.size() == single.stats.by_worker.size());
      for (std::size_t w = 0; w < batched.stats.by_worker.size(); ++w) {
        auto& x = batched.stats.by_worker[w];
        auto& y = single.stats.by_worker[w];
        CHECK(x.pushes == y.pushes);
        CHECK(x.pulls == y.pulls);
        CHECK(x.floats_pushed == y.floats_pushed);
        CHECK(x.floats_pulled == y.floats_pulled);
      }
      // Worked out by hand for accumulate: every push added once.
      if (accumulate) {
        float sum = 0;
        for (uint32_t w = 0; w < workers; ++w)
          for (int round = 0; round < 3; ++round)
            if (!(dies && w == 1 && round > 0))
              sum += static_cast<float>((w + 1) * 100 + round * 10);
        CHECK(single.values[1] == std::vector<float>{3 + sum});
        CHECK(batched.values[1] == std::vector<float>{3 + sum});
      }
      CHECK(batched.stats.reordered >= 1);
      CHECK(batched.early.size() == 3);
    }
}
