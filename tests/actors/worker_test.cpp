// SPDX-License-Identifier: BSD-3-Clause
#include "actors/worker/worker.hpp"

#include <algorithm>
#include <numeric>
#include <type_traits>

#include "actors/coordinator/coordinator.hpp"
#include "actors/shard/shard.hpp"

#include "tests/actors/fixture.hpp"

using namespace actorps;
using actorps::test::require_error;

namespace {

// A worker of rank `rank` talking to `shards` (through `relays`, if any).
worker_config make_worker_config(uint32_t rank, coordinator_actor coord,
                                 std::vector<shard_actor> shards,
                                 std::vector<shard_actor> relays = {}) {
  worker_config wc;
  wc.rank = rank;
  wc.coordinator = std::move(coord);
  wc.shards = std::move(shards);
  wc.relays = std::move(relays);
  wc.timeout = std::chrono::milliseconds{60000};
  wc.barrier_timeout = std::chrono::milliseconds{60000};
  return wc;
}

coordinator_config make_coordinator_config(std::vector<shard_actor> shards,
                                           uint64_t bound) {
  coordinator_config cc;
  cc.num_workers = 2;
  cc.bigarray_bound = bound;
  cc.shards = std::move(shards);
  return cc;
}

// Two shards, a coordinator and two workers on the deterministic scheduler,
// by default with a small slicing bound so that a key of 100 floats is
// sliced.
struct cluster_fixture : test::deterministic_fixture {
  std::vector<shard_actor> shards;
  coordinator_actor coord;
  std::vector<worker_actor> workers;

  explicit cluster_fixture(uint64_t bound = 64) {
    for (uint32_t i = 0; i < 2; ++i)
      shards.push_back(guard(spawn_shard(sys, test::shard_cfg(i, 2, false))));
    coord
      = guard(spawn_coordinator(sys, make_coordinator_config(shards, bound)));
    for (uint32_t r = 0; r < 2; ++r)
      workers.push_back(
        guard(spawn_worker(sys, make_worker_config(r, coord, shards))));
  }

  void send_init(uint32_t rank, const std::string& key,
                 std::vector<uint64_t> shape, std::vector<float> value) {
    self->send(workers[rank], init_atom::value, key, std::move(shape),
               floats{std::move(value)});
    run();
  }

  caf::expected<caf::ok_atom> init(uint32_t rank, const std::string& key,
                                   std::vector<float> value) {
    auto n = static_cast<uint64_t>(value.size());
    send_init(rank, key, {n}, std::move(value));
    return reply<caf::ok_atom>();
  }

  caf::expected<caf::ok_atom> push(uint32_t rank, const std::string& key,
                                   std::vector<float> value,
                                   int32_t priority = 0) {
    self->send(workers[rank], push_atom::value, key, priority,
               float_parts{std::move(value)});
    run();
    return reply<caf::ok_atom>();
  }

  caf::expected<std::vector<float>> pull(uint32_t rank,
                                         const std::string& key) {
    self->send(workers[rank], pull_atom::value, key, int32_t{0});
    run();
    auto r = reply<float_parts>();
    if (!r)
      return r.error();
    return r->flatten();
  }

  shard_stats stats_of(uint32_t shard) {
    self->send(shards[shard], stats_atom::value);
    run();
    auto st = reply<shard_stats>();
    REQUIRE(st);
    return *st;
  }

  uint64_t floats_on(uint32_t shard) {
    return stats_of(shard).floats_stored;
  }

  // Sends `(atom, keys, 0, data)` or `(atom, keys, 0)` to worker `rank`.
  template <class Atom>
  void send_many(uint32_t rank, Atom atom, std::vector<std::string> keys,
                 std::vector<float> data) {
    if constexpr (std::is_same<Atom, pull_atom>::value)
      self->send(workers[rank], atom, std::move(keys), int32_t{0});
    else
      self->send(workers[rank], atom, std::move(keys), int32_t{0},
                 float_parts{std::move(data)});
  }
};

// The cluster with the default slicing bound: keys of a few thousand floats
// are not sliced.
struct wide_cluster_fixture : cluster_fixture {
  wide_cluster_fixture()
    : cluster_fixture(coordinator_config{}.bigarray_bound) {
  }
};

std::vector<float> iota(size_t n, float first) {
  std::vector<float> xs(n);
  std::iota(xs.begin(), xs.end(), first);
  return xs;
}

} // namespace

TEST_CASE_METHOD(cluster_fixture, "worker: init is collective, rank 0 wins",
                 "[worker]") {
  SECTION("rank 1 waits for rank 0 and its value is ignored") {
    send_init(1, "w", {3}, {9, 9, 9});
    CHECK(no_reply());
    REQUIRE(init(0, "w", {1, 2, 3}));
    REQUIRE(reply<caf::ok_atom>());
    CHECK(pull(1, "w") == std::vector<float>{1, 2, 3});
  }
  SECTION("a second init by the same rank is refused") {
    REQUIRE(init(0, "w", {1, 2, 3}));
    require_error(init(0, "w", {1, 2, 3}), errc::already_initialized);
    REQUIRE(init(1, "w", {1, 2, 3}));
    require_error(init(1, "w", {1, 2, 3}), errc::already_initialized);
  }
  SECTION("a value that does not fit the shape is refused") {
    send_init(0, "w", {2, 2}, {1, 2, 3});
    auto msg = require_error(reply<caf::ok_atom>(), errc::shape_mismatch);
    CHECK(msg.find("[2,2]") != std::string::npos);
  }
  SECTION("another rank declaring another shape is refused") {
    REQUIRE(init(0, "w", {1, 2, 3}));
    require_error(init(1, "w", {1, 2}), errc::shape_mismatch);
  }
}

TEST_CASE_METHOD(cluster_fixture, "worker: push and pull errors", "[worker]") {
  SECTION("unknown key") {
    auto msg = require_error(push(0, "nope", {1}), errc::unknown_key);
    CHECK(msg.find("nope") != std::string::npos);
    require_error(pull(0, "nope"), errc::unknown_key);
  }
  SECTION("declared but not yet initialized") {
    send_init(1, "w", {1}, {0});
    require_error(pull(0, "w"), errc::not_initialized);
  }
  SECTION("wrong size") {
    REQUIRE(init(0, "w", {1, 2}));
    auto msg = require_error(push(0, "w", {1, 2, 3}), errc::shape_mismatch);
    CHECK(msg.find("'w'") != std::string::npos);
  }
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: a large key is sliced over all shards and "
                 "round-trips exactly",
                 "[worker]") {
  auto value = iota(1001, 0.5f);
  REQUIRE(init(0, "big", value));
  CHECK(floats_on(0) > 0);
  CHECK(floats_on(1) > 0);
  CHECK(floats_on(0) + floats_on(1) == 1001);
  CHECK(pull(1, "big") == value);
  auto pushed = iota(1001, -7.0f);
  REQUIRE(push(1, "big", pushed, 3));
  CHECK(pull(1, "big") == pushed);
  self->send(workers[0], lookup_atom::value, std::string{"big"});
  run();
  auto info = reply<key_info>();
  REQUIRE(info);
  CHECK(info->slices.size() == 2);
  CHECK(info->size == 1001);
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: several keys in one request, small slices batched "
                 "per shard",
                 "[worker][batch]") {
  // Ten small keys (spread over both shards) and one sliced key.
  std::vector<std::string> keys;
  std::vector<float> all;
  for (int k = 0; k < 10; ++k) {
    keys.push_back("k" + std::to_string(k));
    REQUIRE(init(0, keys.back(), {0, 0}));
  }
  REQUIRE(init(0, "big", iota(100, 0)));
  keys.push_back("big");
  auto values = iota(2 * 10 + 100, 1);
  auto before = stats_of(0).batches + stats_of(1).batches;
  send_many(1, push_atom::value, keys, values);
  run();
  REQUIRE(reply<caf::ok_atom>());
  // One batch per shard for the small keys; the big key's slices (over the
  // bound of the fixture's 64 floats) are small enough to join them.
  auto after = stats_of(0).batches + stats_of(1).batches;
  CHECK(after - before <= 2);
  CHECK(stats_of(0).pushes + stats_of(1).pushes == 10 + 2);
  send_many(1, pull_atom::value, keys, {});
  run();
  auto pulled = reply<float_parts>();
  REQUIRE(pulled);
  CHECK(pulled->flatten() == values);
  CHECK(pull(0, "k3") == std::vector<float>{7, 8});
  // A push-pull returns what its pushes produced, in keys order.
  std::vector<std::string> two{"big", "k0"};
  auto next = iota(102, 500);
  send_many(0, push_pull_atom::value, two, next);
  run();
  auto both = reply<float_parts>();
  REQUIRE(both);
  CHECK(both->flatten() == next);
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: key lists shared by address act as lists of names",
                 "[worker][batch]") {
  // Lists long enough for the worker to keep (core::list_memo::min_size).
  std::vector<std::string> names;
  for (int k = 0; k < 20; ++k) {
    names.push_back("k" + std::to_string(k));
    REQUIRE(init(0, names.back(), {0}));
  }
  auto shared = [](std::vector<std::string> xs) {
    return key_list{
      std::make_shared<const std::vector<std::string>>(std::move(xs))};
  };
  auto pull_list = [&](const key_list& keys) {
    self->send(workers[1], pull_atom::value, keys, int32_t{0});
    run();
    auto r = reply<float_parts>();
    REQUIRE(r);
    return r->flatten();
  };
  auto list = shared(names);
  auto values = iota(20, 1);
  // The same list twice (found again by its address the second time), then
  // a list of the same names made apart, then the names as a vector.
  for (int i = 0; i < 2; ++i) {
    self->send(workers[1], push_atom::value, list, int32_t{0},
               float_parts{values});
    run();
    REQUIRE(reply<caf::ok_atom>());
  }
  CHECK(pull_list(list) == values);
  CHECK(pull_list(shared(names)) == values);
  send_many(1, pull_atom::value, names, {});
  run();
  auto as_names = reply<float_parts>();
  REQUIRE(as_names);
  CHECK(as_names->flatten() == values);
  // Another list of the same length: its own order, not the kept list's.
  auto reversed = names;
  std::reverse(reversed.begin(), reversed.end());
  auto backwards = values;
  std::reverse(backwards.begin(), backwards.end());
  CHECK(pull_list(shared(reversed)) == backwards);
  CHECK(pull_list(list) == values);
  // A push-pull through a shared list, a key named twice (summed), and the
  // errors of a list of names.
  auto twice = names;
  twice.push_back("k0");
  auto more = iota(21, 100);
  self->send(workers[1], push_pull_atom::value, shared(twice), int32_t{0},
             float_parts{more});
  run();
  auto pp = reply<float_parts>();
  REQUIRE(pp);
  auto expect = more;
  expect[0] = expect[20] = more[0] + more[20];
  CHECK(pp->flatten() == expect);
  self->send(workers[1], pull_atom::value, key_list{}, int32_t{0});
  run();
  require_error(reply<float_parts>(), errc::bad_config);
  self->send(workers[1], pull_atom::value, shared({}), int32_t{0});
  run();
  require_error(reply<float_parts>(), errc::bad_config);
  auto unknown = names;
  unknown[7] = "nobody";
  self->send(workers[1], pull_atom::value, shared(unknown), int32_t{0});
  run();
  require_error(reply<float_parts>(), errc::unknown_key);
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: a kept list's batches and single-key calls number "
                 "each slice in one sequence",
                 "[worker][batch]") {
  // 20 keys, each batched: 19 of one float and one of 100 floats cut into
  // two slices on the two shards (the bound is 64). A list named again is
  // sent as laid out the first time; single-key calls and another list on
  // the same keys take their numbers from the same counters, so a number
  // used twice or skipped would leave a request waiting at its shard (no
  // reply) or refused there.
  std::vector<std::string> names;
  std::vector<uint64_t> sizes;
  for (int k = 0; k < 20; ++k) {
    names.push_back("p" + std::to_string(k));
    sizes.push_back(k == 5 ? 100 : 1);
    REQUIRE(init(0, names.back(), std::vector<float>(sizes.back(), 0.0f)));
  }
  auto total = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
  auto list = key_list{std::make_shared<const std::vector<std::string>>(names)};
  auto offset_of = [&](std::size_t k) {
    return std::accumulate(sizes.begin(), sizes.begin() + k, uint64_t{0});
  };
  // The value in one buffer, or in pieces cut inside keys and across the
  // two slices of the sliced key.
  auto push_list = [&](const std::vector<float>& xs, bool pieces) {
    float_parts value{xs};
    if (pieces) {
      value = float_parts{};
      std::size_t from = 0;
      for (auto cut : {std::size_t{3}, offset_of(5) + 30, offset_of(5) + 70,
                       xs.size() - 2, xs.size()}) {
        value.append(shared_floats{
          std::vector<float>(xs.begin() + static_cast<std::ptrdiff_t>(from),
                             xs.begin() + static_cast<std::ptrdiff_t>(cut))});
        from = cut;
      }
    }
    self->send(workers[0], push_atom::value, list, int32_t{0},
               std::move(value));
    run();
    return reply<caf::ok_atom>();
  };
  auto pull_list = [&] {
    self->send(workers[0], pull_atom::value, list, int32_t{0});
    run();
    auto r = reply<float_parts>();
    REQUIRE(r);
    return r->flatten();
  };
  for (int round = 0; round < 3; ++round) {
    auto xs = iota(total, static_cast<float>(1000 * round));
    REQUIRE(push_list(xs, round == 2));
    CHECK(pull_list() == xs);
    // One key alone, then the sliced one: the list's numbers go on after
    // theirs.
    REQUIRE(push(0, "p3", {-1.0f}));
    xs[offset_of(3)] = -1.0f;
    REQUIRE(push(0, "p5", std::vector<float>(100, -2.0f)));
    std::fill_n(xs.begin() + static_cast<std::ptrdiff_t>(offset_of(5)), 100,
                -2.0f);
    CHECK(pull_list() == xs);
    CHECK(pull(0, "p5") == std::vector<float>(100, -2.0f));
    // A push-pull of the list answers what it pushed (the shards assign).
    auto ys = iota(total, static_cast<float>(-1000 * round - 500));
    self->send(workers[0], push_pull_atom::value, list, int32_t{0},
               float_parts{ys});
    run();
    auto pp = reply<float_parts>();
    REQUIRE(pp);
    CHECK(pp->flatten() == ys);
    // The same names in another order, as a list of names.
    auto reversed = names;
    std::reverse(reversed.begin(), reversed.end());
    send_many(0, pull_atom::value, reversed, {});
    run();
    auto back = reply<float_parts>();
    REQUIRE(back);
    std::vector<float> expect;
    for (auto k = names.size(); k-- > 0;) {
      auto at = ys.begin() + static_cast<std::ptrdiff_t>(offset_of(k));
      expect.insert(expect.end(), at,
                    at + static_cast<std::ptrdiff_t>(sizes[k]));
    }
    CHECK(back->flatten() == expect);
  }
}

TEST_CASE_METHOD(wide_cluster_fixture,
                 "worker: a list named again follows a key's new compression",
                 "[worker][batch][compression]") {
  // 20 keys of 1024 floats (a list the worker keeps, with what it read of
  // every key; long enough for a batch to refer to the caller's buffers
  // while no key is compressed), pushed as a list before and after one
  // key's compression changes: the shards assign what arrives, so a pull
  // shows what was sent.
  constexpr std::size_t n = 1024;
  std::vector<std::string> names;
  for (int k = 0; k < 20; ++k) {
    names.push_back("c" + std::to_string(k));
    REQUIRE(init(0, names.back(), std::vector<float>(n, 0.0f)));
  }
  auto push_list = [&](float x) {
    send_many(0, push_atom::value, names, std::vector<float>(20 * n, x));
    run();
    return reply<caf::ok_atom>();
  };
  auto compress = [&](compression c) {
    self->send(workers[0], compress_atom::value, std::string{"c3"}, c);
    run();
    return reply<caf::ok_atom>();
  };
  REQUIRE(push_list(0.75f));
  REQUIRE(push_list(0.75f));
  CHECK(pull(0, "c3") == std::vector<float>(n, 0.75f));
  REQUIRE(compress(compression{codec::two_bit, 0.5f}));
  REQUIRE(push_list(0.75f));
  // 2-bit with threshold 0.5 sends 0.5 of c3's 0.75 (and keeps 0.25); the
  // other keys go as they are.
  CHECK(pull(0, "c3") == std::vector<float>(n, 0.5f));
  CHECK(pull(0, "c4") == std::vector<float>(n, 0.75f));
  // And back: c3 without compression again.
  REQUIRE(compress(compression{}));
  REQUIRE(push_list(0.125f));
  CHECK(pull(0, "c3") == std::vector<float>(n, 0.125f));
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: operations queued behind a lookup keep issue order",
                 "[worker][batch]") {
  REQUIRE(init(0, "a", {0}));
  REQUIRE(init(0, "b", {0}));
  // Worker 1 has no route yet: its push of both keys waits for two lookups,
  // and the single pull sent right after must not overtake it.
  send_many(1, push_atom::value, {"a", "b"}, {3, 4});
  self->send(workers[1], pull_atom::value, std::string{"b"}, int32_t{0});
  run();
  REQUIRE(reply<caf::ok_atom>());
  auto value = reply<float_parts>();
  REQUIRE(value);
  CHECK(value->flatten() == std::vector<float>{4});
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: compression quantizes pushes and keeps residuals",
                 "[worker][compression]") {
  // "w" is sliced over both shards; the shards assign what is pushed, so a
  // pull shows exactly what the worker sent.
  REQUIRE(init(0, "w", std::vector<float>(100, 0.0f)));
  REQUIRE(init(0, "b", {0, 0, 0}));
  auto set = [&](std::string key, compression c) {
    self->send(workers[0], compress_atom::value, std::move(key), c);
    run();
    return reply<caf::ok_atom>();
  };
  REQUIRE(set("w", compression{codec::two_bit, 0.5f}));
  // Even values 0.25, odd 0.75: 2-bit with threshold 0.5 sends 0 and 0.5
  // first, keeping 0.25 of each; the second push sends 0.5 everywhere
  // (0.25 + 0.25 and 0.25 + 0.75), keeping 0 and 0.5.
  std::vector<float> g(100);
  std::vector<float> first(100);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = i % 2 == 1 ? 0.75f : 0.25f;
    first[i] = i % 2 == 1 ? 0.5f : 0.0f;
  }
  REQUIRE(push(0, "w", g));
  CHECK(pull(0, "w") == first);
  REQUIRE(push(0, "w", g));
  CHECK(pull(0, "w") == std::vector<float>(100, 0.5f));
  // A third push: even 0 + 0.25 sends 0; odd 0.5 + 0.75 sends 0.5.
  const auto& third = first;
  SECTION("keys without a setting keep the store's (none)") {
    std::vector<float> exact{1.00390625f, -3.0f, 0.1f};
    REQUIRE(push(0, "b", exact));
    CHECK(pull(0, "b") == exact);
  }
  SECTION("an empty key sets every key without a setting of its own") {
    REQUIRE(set("", compression{codec::fp16, 0.5f}));
    // 1.00390625 has its only mantissa bit in the lower half: dropped.
    REQUIRE(push(0, "b", {1.00390625f, 2.0f, -0.5f}));
    CHECK(pull(0, "b") == std::vector<float>{1.0f, 2.0f, -0.5f});
    REQUIRE(push(0, "w", g));
    CHECK(pull(0, "w") == third);
  }
  SECTION("a new codec starts from zero residuals") {
    REQUIRE(set("w", compression{codec::two_bit, 1.0f}));
    // Residuals reset: 0.25 and 0.75 stay below 1.
    REQUIRE(push(0, "w", g));
    CHECK(pull(0, "w") == std::vector<float>(100, 0.0f));
  }
  SECTION("keys pushed together are each quantized by their own codec") {
    auto both = std::vector<float>{0.3f, 0.7f, 1.5f};
    both.insert(both.end(), g.begin(), g.end());
    send_many(0, push_atom::value, {"b", "w"}, both);
    run();
    REQUIRE(reply<caf::ok_atom>());
    CHECK(pull(0, "b") == std::vector<float>{0.3f, 0.7f, 1.5f});
    CHECK(pull(0, "w") == third);
  }
  SECTION("a bad threshold is refused") {
    auto msg = require_error(set("w", compression{codec::two_bit, -1.0f}),
                             errc::bad_config);
    CHECK(msg.find("threshold") != std::string::npos);
  }
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: with remote shards, batched slices are quantized "
                 "by the worker",
                 "[worker][compression]") {
  // A worker that believes its shards are remote (it has relays) leaves
  // fp16 to the serializer only for a slice in a message of its own; a
  // batch may mix codecs and cross unpacked, so its slices are quantized
  // before they leave. Here nothing is serialized, so a slice the worker
  // skipped would arrive unquantized.
  auto remote
    = guard(spawn_worker(sys, make_worker_config(1, coord, shards, shards)));
  REQUIRE(init(0, "b", {0, 0, 0}));
  REQUIRE(init(0, "h", {0, 0}));
  self->send(remote, compress_atom::value, std::string{"h"},
             compression{codec::fp16});
  run();
  REQUIRE(reply<caf::ok_atom>());
  self->send(remote, push_atom::value, std::vector<std::string>{"b", "h"},
             int32_t{0},
             float_parts{{1.00390625f, 2.0f, 3.0f, 1.00390625f, -2.0f}});
  run();
  REQUIRE(reply<caf::ok_atom>());
  CHECK(pull(0, "b") == std::vector<float>{1.00390625f, 2.0f, 3.0f});
  CHECK(pull(0, "h") == std::vector<float>{1.0f, -2.0f});
}

TEST_CASE_METHOD(cluster_fixture, "worker: errors of several-key requests",
                 "[worker][batch]") {
  REQUIRE(init(0, "a", {0, 0}));
  SECTION("a payload that does not fit the keys") {
    send_many(0, push_atom::value, {"a", "a"}, {1, 2, 3});
    run();
    auto msg = require_error(reply<caf::ok_atom>(), errc::shape_mismatch);
    CHECK(msg.find("2 keys hold 4 floats") != std::string::npos);
  }
  SECTION("an unknown key among known ones fails the request") {
    send_many(0, pull_atom::value, {"a", "nope"}, {});
    run();
    auto msg = require_error(reply<float_parts>(), errc::unknown_key);
    CHECK(msg.find("nope") != std::string::npos);
    // The known key still works afterwards.
    CHECK(pull(0, "a") == std::vector<float>{0, 0});
  }
  SECTION("no keys at all") {
    send_many(0, push_pull_atom::value, {}, {});
    run();
    require_error(reply<float_parts>(), errc::bad_config);
  }
  SECTION("pieces that leave a gap") {
    float_parts gap;
    gap.size = 2;
    gap.buffers.emplace_back(std::vector<float>{1, 2});
    gap.pieces.push_back(float_piece{0, 0, 1, 1});
    self->send(workers[0], push_atom::value, std::string{"a"}, int32_t{0},
               std::move(gap));
    run();
    auto msg = require_error(reply<caf::ok_atom>(), errc::shape_mismatch);
    CHECK(msg.find("in order") != std::string::npos);
  }
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: a refused several-key request uses no sequence "
                 "number",
                 "[worker][batch]") {
  // The worker numbers each slice's operations before it checks the whole
  // request's size: a refused request must leave the numbers as they were,
  // or the shards would wait for operations that never come.
  REQUIRE(init(0, "a", {0, 0}));
  REQUIRE(init(0, "b", {0}));
  std::vector<std::string> keys{"a", "b"};
  send_many(0, push_atom::value, keys, {1, 2});
  run();
  require_error(reply<caf::ok_atom>(), errc::shape_mismatch);
  float_parts gap;
  gap.size = 3;
  gap.buffers.emplace_back(std::vector<float>{1, 2, 3});
  gap.pieces.push_back(float_piece{0, 0, 1, 2});
  self->send(workers[0], push_atom::value, keys, int32_t{0}, std::move(gap));
  run();
  require_error(reply<caf::ok_atom>(), errc::shape_mismatch);
  send_many(0, push_atom::value, keys, {1, 2, 3});
  run();
  REQUIRE(reply<caf::ok_atom>());
  send_many(0, pull_atom::value, keys, {});
  run();
  auto pulled = reply<float_parts>();
  REQUIRE(pulled);
  CHECK(pulled->flatten() == std::vector<float>{1, 2, 3});
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: pushed pieces may split or join the slices",
                 "[worker][batch]") {
  // "big" has 100 floats in slices of at most 64 (the fixture's bound).
  REQUIRE(init(0, "big", iota(100, 0)));
  REQUIRE(init(0, "s", {0, 0}));
  auto values = iota(102, 1);
  SECTION("one piece per float") {
    float_parts each;
    for (auto x : values)
      each.append(shared_floats{std::vector<float>{x}});
    self->send(workers[0], push_atom::value,
               std::vector<std::string>{"big", "s"}, int32_t{0},
               std::move(each));
    run();
    REQUIRE(reply<caf::ok_atom>());
  }
  SECTION("pieces of one shared buffer, out of step with the slices") {
    shared_floats buf{values};
    float_parts odd;
    odd.size = values.size();
    odd.buffers.push_back(buf);
    odd.pieces.push_back(float_piece{0, 0, 0, 30});
    odd.pieces.push_back(float_piece{0, 30, 30, 72});
    self->send(workers[0], push_atom::value,
               std::vector<std::string>{"big", "s"}, int32_t{0},
               std::move(odd));
    run();
    REQUIRE(reply<caf::ok_atom>());
    // The caller's buffer is still intact: the worker copied from it.
    CHECK(buf.vec() == values);
  }
  send_many(0, pull_atom::value, {"big", "s"}, {});
  run();
  auto pulled = reply<float_parts>();
  REQUIRE(pulled);
  CHECK(pulled->valid(false));
  CHECK(pulled->flatten() == values);
}

TEST_CASE_METHOD(wide_cluster_fixture,
                 "worker: batched keys of a thousand floats and more arrive "
                 "whole from any pieces",
                 "[worker][batch]") {
  // Three keys over two shards: one shard gets two of them in one batch,
  // which refers to the caller's buffers instead of copying the keys.
  std::vector<std::string> keys{"a", "b", "c"};
  for (auto& k : keys)
    REQUIRE(init(0, k, std::vector<float>(1500, 0.0f)));
  auto values = iota(3 * 1500, 1);
  SECTION("pieces out of step with the keys") {
    // The shards read each key from the caller's pieces (one key spans
    // two of them) and leave the caller's buffers as they were.
    shared_floats first{
      std::vector<float>(values.begin(), values.begin() + 2000)};
    std::vector<float> rest{-1};
    rest.insert(rest.end(), values.begin() + 2000, values.end());
    shared_floats second{rest};
    float_parts parts;
    parts.size = values.size();
    parts.buffers = {first, second};
    parts.pieces.push_back(float_piece{0, 0, 0, 2000});
    parts.pieces.push_back(float_piece{1, 1, 2000, 2500});
    auto before = stats_of(0).batches + stats_of(1).batches;
    self->send(workers[1], push_atom::value, keys, int32_t{0},
               std::move(parts));
    run();
    REQUIRE(reply<caf::ok_atom>());
    CHECK(stats_of(0).batches + stats_of(1).batches == before + 1);
    CHECK(first.vec()
          == std::vector<float>(values.begin(), values.begin() + 2000));
    CHECK(second.vec() == rest);
  }
  SECTION("a push-pull of one buffer") {
    send_many(1, push_pull_atom::value, keys, values);
    run();
    auto produced = reply<float_parts>();
    REQUIRE(produced);
    CHECK(produced->flatten() == values);
  }
  send_many(0, pull_atom::value, keys, {});
  run();
  auto pulled = reply<float_parts>();
  REQUIRE(pulled);
  CHECK(pulled->flatten() == values);
}

TEST_CASE_METHOD(wide_cluster_fixture,
                 "worker: a small key's buffer travels to its shard uncopied",
                 "[worker][batch]") {
  REQUIRE(init(0, "k", std::vector<float>(2048, 0.0f)));
  auto value = iota(2048, 3);
  const float* where = value.data();
  // The shards run "assign": a push's buffer becomes the value, which a
  // pull shares.
  REQUIRE(push(1, "k", std::move(value)));
  self->send(workers[1], pull_atom::value, std::string{"k"}, int32_t{0});
  run();
  auto pulled = reply<float_parts>();
  REQUIRE(pulled);
  REQUIRE(pulled->buffers.size() == 1);
  CHECK(pulled->buffers[0].data() == where);
  CHECK(pulled->flatten() == iota(2048, 3));
}

namespace {

// The replies `self` got so far, in the order they arrived: "ok" for a push,
// the first pulled value for a pull, the rendered error for a failure.
std::vector<std::string> replies_of(caf::scoped_actor& self) {
  std::vector<std::string> out;
  for (bool more = true; more;)
    self->receive([&](caf::ok_atom) { out.emplace_back("ok"); },
                  [&](float_parts& x) {
                    out.push_back(
                      std::to_string(static_cast<int>(x.flatten().at(0))));
                  },
                  [&](caf::error& err) { out.push_back(render(err)); },
                  caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  return out;
}

// One shard, one worker that keeps at most one request in flight (any request
// exceeds a bound of one byte, and one always may go alone).
struct outbox_fixture : test::deterministic_fixture {
  shard_actor shard;
  coordinator_actor coord;
  worker_actor worker;

  outbox_fixture() {
    shard = guard(spawn_shard(sys, test::shard_cfg(0, 1, false)));
    coordinator_config cc;
    cc.num_workers = 1;
    cc.shards = {shard};
    coord = guard(spawn_coordinator(sys, cc));
    worker_config wc;
    wc.coordinator = coord;
    wc.shards = {shard};
    wc.max_bytes_in_flight = 1;
    worker = guard(spawn_worker(sys, wc));
    for (auto key : {"a", "b", "c", "d"}) {
      self->send(worker, init_atom::value, std::string{key},
                 std::vector<uint64_t>{1}, floats{{0}});
      run();
      REQUIRE(reply<caf::ok_atom>());
    }
  }

  void push(const char* key, float x, int32_t priority = 0) {
    self->send(worker, push_atom::value, std::string{key}, priority,
               float_parts{{x}});
  }

  void pull(const char* key, int32_t priority) {
    self->send(worker, pull_atom::value, std::string{key}, priority);
  }

  std::vector<std::string> replies() {
    return replies_of(self);
  }
};

} // namespace

TEST_CASE_METHOD(outbox_fixture,
                 "worker: a high-priority request overtakes queued ones",
                 "[worker][priority]") {
  self->send(shard, set_opt_atom::value, optimizer_config{"accumulate"});
  run();
  REQUIRE(reply<caf::ok_atom>());
  push("d", 7);
  run();
  REQUIRE(reply<caf::ok_atom>());
  // The push of a goes at once; b and c wait for it in the worker.
  push("a", 1);
  push("b", 1);
  push("c", 1);
  SECTION("priority 10: the pull goes next") {
    pull("d", 10);
    run();
    CHECK(replies() == std::vector<std::string>{"ok", "7", "ok", "ok"});
  }
  SECTION("equal priorities: issue order") {
    pull("d", 0);
    run();
    CHECK(replies() == std::vector<std::string>{"ok", "ok", "ok", "7"});
  }
}

TEST_CASE_METHOD(outbox_fixture,
                 "worker: a high-priority request never overtakes earlier ones "
                 "on its key",
                 "[worker][priority]") {
  push("a", 1);
  push("a", 2);
  push("b", 5);
  // The second push of a is raised to the pull's priority and goes first:
  // the pull sees it.
  pull("a", 10);
  run();
  CHECK(replies() == std::vector<std::string>{"ok", "ok", "2", "ok"});
}

namespace {

// One shard, two sync workers that keep one request in flight per shard
// (any request exceeds a bound of one byte) and send every slice alone;
// keys a, b, c of one float each, initialized to 0.
struct sync_pair_fixture : test::deterministic_fixture {
  shard_actor shard;
  std::vector<worker_actor> ws;

  sync_pair_fixture() {
    shard = guard(spawn_shard(sys, test::shard_cfg(0, 2, true)));
    coordinator_config cc;
    cc.num_workers = 2;
    cc.shards = {shard};
    auto coord = guard(spawn_coordinator(sys, cc));
    for (uint32_t r = 0; r < 2; ++r) {
      worker_config wc;
      wc.rank = r;
      wc.coordinator = coord;
      wc.shards = {shard};
      wc.max_bytes_in_flight = 1;
      wc.batching.batch_floats = 0;
      wc.sync = true;
      ws.push_back(guard(spawn_worker(sys, wc)));
    }
    for (auto key : {"a", "b", "c"}) {
      self->send(ws[0], init_atom::value, std::string{key},
                 std::vector<uint64_t>{1}, floats{{0}});
      run();
      REQUIRE(reply<caf::ok_atom>());
      self->send(ws[1], lookup_atom::value, std::string{key});
      run();
      REQUIRE(reply<key_info>());
    }
  }

  void push(uint32_t r, const char* key, float x) {
    self->send(ws[r], push_atom::value, std::string{key}, int32_t{0},
               float_parts{{x}});
  }

  void pull(uint32_t r, const char* key) {
    self->send(ws[r], pull_atom::value, std::string{key}, int32_t{0});
  }

  std::vector<std::string> replies() {
    return replies_of(self);
  }

  uint64_t waiting_pulls() {
    self->send(shard, stats_atom::value);
    run();
    auto st = reply<shard_stats>();
    REQUIRE(st);
    return st->waiting_pulls;
  }
};

} // namespace

TEST_CASE_METHOD(sync_pair_fixture,
                 "worker: sync push-pulls in opposite orders under a tight "
                 "bound all complete",
                 "[worker][priority]") {
  // Worker 0 goes a, b; worker 1 goes b, a: each round needs the other's
  // second request, which waits in its worker behind the first.
  auto send = [&](uint32_t r, const char* key, float x) {
    self->send(ws[r], push_pull_atom::value, std::string{key}, int32_t{0},
               float_parts{{x}});
  };
  send(0, "a", 1);
  send(0, "b", 2);
  send(1, "b", 20);
  send(1, "a", 10);
  run();
  std::vector<float> seen;
  for (int i = 0; i < 4; ++i) {
    auto x = reply<float_parts>();
    REQUIRE(x);
    seen.push_back(x->flatten().at(0));
  }
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<float>{11, 11, 22, 22});
}

TEST_CASE_METHOD(sync_pair_fixture,
                 "worker: sync pulls wait in the worker under their own bound",
                 "[worker][priority]") {
  for (auto key : {"a", "b", "c"})
    push(0, key, 1);
  for (auto key : {"a", "b", "c"})
    pull(0, key);
  run();
  // The pulls wait for worker 1's pushes: only one of them at the shard.
  CHECK(replies() == std::vector<std::string>{"ok", "ok", "ok"});
  CHECK(waiting_pulls() == 1);
  for (auto key : {"a", "b", "c"})
    push(1, key, 10);
  run();
  auto got = replies();
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<std::string>{"11", "11", "11", "ok", "ok", "ok"});
  CHECK(waiting_pulls() == 0);
}

TEST_CASE_METHOD(sync_pair_fixture,
                 "worker: a push never waits behind a sync pull waiting for "
                 "room, and never overtakes one on its key",
                 "[worker][priority]") {
  push(0, "a", 1);
  // Waits at the shard for worker 1's push of a, holding the pull bound.
  pull(0, "a");
  // Waits in the worker for room, until the push of b sends it first: it
  // sees b before that push (0), not after its round (12).
  pull(0, "b");
  push(0, "b", 5);
  // Goes while the pull of a still waits.
  push(0, "c", 2);
  run();
  CHECK(replies() == std::vector<std::string>{"ok", "0", "ok", "ok"});
  for (auto [key, x] : {std::pair{"a", 10.0f}, {"b", 7.0f}, {"c", 3.0f}})
    push(1, key, x);
  run();
  auto got = replies();
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<std::string>{"11", "ok", "ok", "ok"});
  pull(0, "b");
  pull(0, "c");
  run();
  CHECK(replies() == std::vector<std::string>{"12", "5"});
}

TEST_CASE_METHOD(sync_pair_fixture,
                 "worker: sync pushes and pulls in opposite orders under a "
                 "tight bound all complete",
                 "[worker][priority]") {
  // Worker 0 goes a, b; worker 1 goes b, a: each pull waits for the other
  // worker's push, which comes after a pull of its own.
  push(0, "a", 1);
  pull(0, "a");
  push(0, "b", 2);
  pull(0, "b");
  push(1, "b", 20);
  pull(1, "b");
  push(1, "a", 10);
  pull(1, "a");
  run();
  auto got = replies();
  std::sort(got.begin(), got.end());
  CHECK(got
        == std::vector<std::string>{"11", "11", "22", "22", "ok", "ok", "ok",
                                    "ok"});
}

TEST_CASE_METHOD(cluster_fixture, "worker: barrier releases everyone at once",
                 "[worker]") {
  self->send(workers[0], barrier_atom::value);
  run();
  CHECK(no_reply());
  self->send(workers[1], barrier_atom::value);
  run();
  REQUIRE(reply<caf::ok_atom>());
  REQUIRE(reply<caf::ok_atom>());
  SECTION("the barrier can be used again") {
    self->send(workers[1], barrier_atom::value);
    run();
    CHECK(no_reply());
  }
  SECTION("entering again before the release just waits again") {
    self->send(coord, barrier_atom::value, uint32_t{0});
    self->send(coord, barrier_atom::value, uint32_t{0});
    run();
    CHECK(no_reply());
    self->send(coord, barrier_atom::value, uint32_t{1});
    run();
    for (int i = 0; i < 3; ++i)
      REQUIRE(reply<caf::ok_atom>());
  }
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: a worker that leaves no longer holds anyone",
                 "[worker]") {
  self->send(workers[0], barrier_atom::value);
  run();
  CHECK(no_reply());
  self->send(workers[1], leave_atom::value);
  run();
  // The barrier is released and the leave is acknowledged.
  REQUIRE(reply<caf::ok_atom>());
  REQUIRE(reply<caf::ok_atom>());
  SECTION("a left worker cannot enter a barrier") {
    self->send(coord, barrier_atom::value, uint32_t{1});
    run();
    require_error(reply<caf::ok_atom>(), errc::dead_node);
  }
  SECTION("a left worker's pushes are refused by the shards") {
    REQUIRE(init(0, "k", {1}));
    require_error(push(1, "k", {2}), errc::dead_node);
  }
  SECTION("leaving twice is harmless") {
    self->send(workers[1], leave_atom::value);
    run();
    REQUIRE(reply<caf::ok_atom>());
  }
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: a lost coordinator fails its calls at once",
                 "[worker]") {
  REQUIRE(init(0, "k", {1}));
  self->send(workers[0], barrier_atom::value);
  run();
  CHECK(no_reply());
  // The coordinator dies holding the barrier: CAF would leave the call
  // waiting for its timeout (10 minutes by default).
  caf::anon_send_exit(coord, caf::exit_reason::kill);
  run();
  auto text = require_error(reply<caf::ok_atom>(), errc::dead_node);
  CHECK(text.find("lost the coordinator") != std::string::npos);
  // Every later call that needs it fails at once.
  self->send(workers[1], barrier_atom::value);
  run();
  require_error(reply<caf::ok_atom>(), errc::dead_node);
  require_error(push(0, "unknown", {1}), errc::dead_node);
  self->send(workers[0], leave_atom::value);
  run();
  require_error(reply<caf::ok_atom>(), errc::dead_node);
  self->send(workers[0], save_atom::value);
  run();
  require_error(reply<state_snapshot>(), errc::dead_node);
  // num_dead_node answers for the coordinator's own group, and only there.
  self->send(workers[0], dead_atom::value, int32_t{1}, int32_t{60});
  run();
  auto dead = reply<uint32_t>();
  REQUIRE(dead);
  CHECK(*dead == 1);
  self->send(workers[0], dead_atom::value, int32_t{4}, int32_t{60});
  run();
  require_error(reply<uint32_t>(), errc::dead_node);
  // Keys already routed still reach their (live) shards.
  REQUIRE(push(0, "k", {2}));
  auto v = pull(0, "k");
  REQUIRE(v);
  CHECK(*v == std::vector<float>{2});
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: a failed init fails the waiting ranks", "[worker]") {
  // The first key gets id 0; occupy its slice on both shards beforehand so
  // that rank 0's write fails.
  for (auto& s : shards)
    self->send(s, init_atom::value, slice_init{make_slice_id(0, 0), {{1}}});
  run();
  REQUIRE(reply<caf::ok_atom>());
  REQUIRE(reply<caf::ok_atom>());
  send_init(1, "k", {1}, {5});
  CHECK(no_reply());
  send_init(0, "k", {1}, {5});
  auto first = reply<caf::ok_atom>();
  auto second = reply<caf::ok_atom>();
  REQUIRE_FALSE(first);
  REQUIRE_FALSE(second);
  std::vector<errc> codes{code_of(first.error()), code_of(second.error())};
  std::sort(codes.begin(), codes.end());
  CHECK(codes
        == std::vector<errc>{errc::not_initialized, errc::already_initialized});
  // Rank 0 may declare the key again: it is not poisoned.
  self->send(coord, declare_atom::value, std::string{"k"},
             std::vector<uint64_t>{1}, uint32_t{0});
  run();
  REQUIRE(reply<key_info>());
}

TEST_CASE_METHOD(cluster_fixture, "worker: set_optimizer reaches every shard",
                 "[worker]") {
  REQUIRE(init(0, "big", std::vector<float>(200, 1.0f)));
  optimizer_config acc;
  acc.name = "accumulate";
  self->send(workers[1], set_opt_atom::value, acc);
  run();
  REQUIRE(reply<caf::ok_atom>());
  REQUIRE(push(0, "big", std::vector<float>(200, 2.0f)));
  CHECK(pull(0, "big") == std::vector<float>(200, 3.0f));
  optimizer_config bad;
  bad.name = "adam";
  bad.beta1 = 1.5f;
  self->send(workers[1], set_opt_atom::value, bad);
  run();
  require_error(reply<caf::ok_atom>(), errc::bad_optimizer);
}

TEST_CASE_METHOD(cluster_fixture,
                 "coordinator: save names the slices, load checks them",
                 "[coordinator]") {
  REQUIRE(init(0, "big", iota(100, 0)));
  REQUIRE(init(0, "small", {42}));
  self->send(coord, save_atom::value);
  run();
  auto snap = reply<state_snapshot>();
  REQUIRE(snap);
  REQUIRE(snap->slices.size() == 3);
  CHECK(snap->slices[0].key == "big");
  CHECK(snap->slices[0].offset == 0);
  CHECK(snap->slices[1].key == "big");
  CHECK(snap->slices[1].offset == 50);
  CHECK(snap->slices[2].key == "small");
  CHECK(snap->slices[2].value.data == std::vector<float>{42});
  SECTION("load restores values") {
    REQUIRE(push(0, "small", {7}));
    self->send(coord, load_atom::value, *snap);
    run();
    REQUIRE(reply<caf::ok_atom>());
    CHECK(pull(0, "small") == std::vector<float>{42});
  }
  SECTION("a key this store does not have is refused") {
    auto bad = *snap;
    bad.slices[2].key = "other";
    self->send(coord, load_atom::value, bad);
    run();
    require_error(reply<caf::ok_atom>(), errc::unknown_key);
  }
  SECTION("slices that overlap are refused") {
    auto bad = *snap;
    bad.slices[1].offset = 49;
    self->send(coord, load_atom::value, bad);
    run();
    require_error(reply<caf::ok_atom>(), errc::checkpoint_mismatch);
  }
  SECTION("a key saved in other slices is cut anew") {
    // "big" as one saved slice of 100 floats; this store cuts it at 50.
    auto whole = *snap;
    auto& first = whole.slices[0];
    first.value.data.insert(first.value.data.end(),
                            whole.slices[1].value.data.begin(),
                            whole.slices[1].value.data.end());
    first.value.data[99] = -5;
    whole.slices.erase(whole.slices.begin() + 1);
    self->send(coord, load_atom::value, whole);
    run();
    REQUIRE(reply<caf::ok_atom>());
    CHECK(pull(0, "big") == first.value.data);
  }
}

TEST_CASE_METHOD(cluster_fixture, "coordinator: declare and lookup errors",
                 "[coordinator]") {
  self->send(coord, lookup_atom::value, std::string{"x"});
  run();
  require_error(reply<key_info>(), errc::unknown_key);
  self->send(coord, declare_atom::value, std::string{"x"},
             std::vector<uint64_t>{3}, uint32_t{7});
  run();
  require_error(reply<key_info>(), errc::bad_config);
  self->send(coord, declare_atom::value, std::string{"x"},
             std::vector<uint64_t>{0}, uint32_t{0});
  run();
  require_error(reply<key_info>(), errc::shape_mismatch);
  self->send(coord, init_done_atom::value, uint32_t{5}, true);
  run();
  require_error(reply<caf::ok_atom>(), errc::unknown_key);
}

TEST_CASE_METHOD(cluster_fixture,
                 "worker: a row request whose part for one shard exceeds the "
                 "job's largest message is refused before it is sent",
                 "[worker][table]") {
  // A job whose messages carry at most 2 MiB: 1 MiB of headers, so one
  // shard's part may hold 1 MiB of rows of 16 floats and an id each.
  auto wc = make_worker_config(0, coord, shards);
  wc.message_cap = uint64_t{2} << 20;
  auto capped = guard(spawn_worker(sys, wc));
  table_init t;
  t.rows = 100000;
  t.dim = 16;
  self->send(capped, init_atom::value, std::string{"t"}, t);
  run();
  REQUIRE(reply<caf::ok_atom>());
  auto fits = (uint64_t{1} << 20) / (4 * 16 + 8); // rows per shard
  auto request = [&](uint64_t per_shard) {
    // Ids 0, 2, 4, ... on shard 0; as many on shard 1.
    std::vector<uint64_t> ids;
    for (uint64_t i = 0; i < 2 * per_shard; ++i)
      ids.push_back(i);
    return ids;
  };
  auto ok = request(fits);
  self->send(capped, pull_atom::value, std::string{"t"}, ok, int32_t{0});
  run();
  auto got = reply<float_parts>();
  REQUIRE(got);
  auto big = request(fits + 1);
  self->send(capped, pull_atom::value, std::string{"t"}, big, int32_t{0});
  run();
  auto refused = reply<float_parts>();
  require_error(refused, errc::bad_config);
  CHECK(render(refused.error()).find("in parts") != std::string::npos);
  self->send(capped, push_atom::value, std::string{"t"}, big, int32_t{0},
             floats{std::vector<float>(big.size() * 16, 1.0f)});
  run();
  require_error(reply<caf::ok_atom>(), errc::bad_config);
  // Nothing of the refused push arrived.
  self->send(capped, pull_atom::value, std::string{"t"},
             std::vector<uint64_t>{0}, int32_t{0});
  run();
  auto row = reply<float_parts>();
  REQUIRE(row);
  CHECK(row->flatten() == std::vector<float>(16, 0.0f));
}
