// SPDX-License-Identifier: BSD-3-Clause
// actorps-optimizer-bench: how long a shard's optimizer update takes (core
// alone, no actors), per optimizer.
//   build/bench/actorps-optimizer-bench [N] [ROUNDS]
// updates one slice of N floats (core::apply_update), cycling through 8
// gradient buffers as a shard sees fresh pushes;
//   build/bench/actorps-optimizer-bench rows [ROWS] [BATCH] [ROUNDS] [PAGES]
//     [SETS]
// updates BATCH random rows of a table of ROWS rows of 16 floats
// (core::apply_rows, a lazy update as push_rows makes), SETS sets of rows
// (16 by default, from a fixed seed) in turn: 16 sets of 1000 rows stay in
// the caches, thousands make each row a miss as fresh ids of a real job
// do; the table, its state and its steps on huge pages as a shard holds
// them (PAGES `huge`, the default) or on the small pages malloc gives
// (`small`);
//   build/bench/actorps-optimizer-bench split [ROWS] [BATCH] [ROUNDS]
//     [SHARDS] [SETS]
// times the work around the rows of a push_rows and a pull_rows of BATCH
// distinct random rows of a table of ROWS rows of 16 floats over SHARDS
// shards: the worker's split by shard (core::split_rows) and its values
// per shard (core::shard_values), the shard's look for repeated rows
// (core::sum_repeats) and its answer to a pull (core::gather_rows), and the
// worker's scatter of that answer (core::scatter_rows).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/huge_pages.hpp"
#include "core/optimizer.hpp"
#include "core/rows.hpp"

namespace {

using namespace actorps;

const char* const rules[] = {"sgd",     "sgd+momentum", "nesterov",
                             "adagrad", "adam",         "rmsprop"};

optimizer_config config_of(const std::string& name) {
  optimizer_config cfg;
  cfg.name = name == "sgd+momentum" ? "sgd" : name;
  cfg.momentum = name == "sgd+momentum" || name == "nesterov" ? 0.9f : 0.0f;
  return cfg;
}

// Times `rounds` calls of `update(round)`: microseconds per call.
double time_rounds(int rounds, const std::function<void(int)>& update) {
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < rounds; ++r)
    update(r);
  std::chrono::duration<double, std::micro> took
    = std::chrono::steady_clock::now() - start;
  return took.count() / rounds;
}

float gradient(uint64_t i, uint64_t b) {
  return static_cast<float>((i + b) % 13) * 0.01f - 0.06f;
}

int dense(uint64_t n, int rounds) {
  std::vector<std::vector<float>> grads(8, std::vector<float>(n));
  for (size_t b = 0; b < grads.size(); ++b)
    for (uint64_t i = 0; i < n; ++i)
      grads[b][i] = gradient(i, b);
  std::printf("floats %llu, rounds %d\n", static_cast<unsigned long long>(n),
              rounds);
  for (std::string name : rules) {
    auto cfg = config_of(name);
    std::vector<float> w(n, 0.5f);
    std::vector<float> state(core::state_size(cfg, n), 0.0f);
    auto us = time_rounds(rounds, [&](int r) {
      core::apply_update(cfg, w.data(), grads[r % grads.size()].data(),
                         state.data(), n, static_cast<uint64_t>(r));
    });
    std::printf("%-13s %9.1f us per update  %6.2f ns per float  (w[1] %g)\n",
                name.c_str(), us, us * 1000.0 / static_cast<double>(n), w[1]);
  }
  return 0;
}

int rows(uint64_t rows, uint64_t batch, int rounds, bool huge, uint64_t sets) {
  constexpr uint64_t dim = 16;
  std::vector<float> grads(batch * dim);
  for (uint64_t i = 0; i < grads.size(); ++i)
    grads[i] = gradient(i, 0);
  std::printf(
    "table %llu x %llu, %llu rows a round, rounds %d, %s pages, %llu sets\n",
    static_cast<unsigned long long>(rows), static_cast<unsigned long long>(dim),
    static_cast<unsigned long long>(batch), rounds, huge ? "huge" : "small",
    static_cast<unsigned long long>(sets));
  for (std::string name : rules) {
    auto cfg = config_of(name);
    std::vector<float> table;
    std::vector<float> state;
    std::vector<uint64_t> steps;
    if (huge) {
      core::assign_large(table, rows * dim, 0.5f);
      core::assign_large(state, rows * core::state_size(cfg, dim), 0.0f);
      core::assign_large(steps, rows, uint64_t{0});
    } else {
      table.assign(rows * dim, 0.5f);
      state.assign(rows * core::state_size(cfg, dim), 0.0f);
      steps.assign(rows, 0);
    }
    std::mt19937_64 gen{42};
    std::vector<std::vector<uint64_t>> ids(sets, std::vector<uint64_t>(batch));
    for (auto& round : ids)
      for (auto& id : round)
        id = gen() % rows;
    auto us = time_rounds(rounds, [&](int r) {
      core::apply_rows(cfg, table.data(), state.data(), steps.data(), dim,
                       ids[static_cast<size_t>(r) % ids.size()], grads.data());
    });
    double sum = 0;
    for (auto x : table)
      sum += x;
    std::printf("%-13s %9.1f us per update  %6.1f ns per row  (sum %.6g)\n",
                name.c_str(), us, us * 1000.0 / static_cast<double>(batch),
                sum);
  }
  return 0;
}

int split(uint64_t rows, uint64_t batch, int rounds, uint32_t shards,
          uint64_t sets) {
  const uint64_t dim = 16;
  std::printf("table %llu x %llu, %llu distinct rows a round, %u shards, "
              "rounds %d, %llu sets\n",
              static_cast<unsigned long long>(rows),
              static_cast<unsigned long long>(dim),
              static_cast<unsigned long long>(batch), shards, rounds,
              static_cast<unsigned long long>(sets));
  core::row_layout layout{rows, dim, shards};
  std::mt19937_64 gen{42};
  std::vector<std::vector<uint64_t>> ids(sets);
  for (auto& round : ids) {
    std::vector<char> taken(rows, 0);
    while (round.size() < batch)
      if (auto id = gen() % rows; !taken[id]) {
        taken[id] = 1;
        round.push_back(id);
      }
  }
  std::vector<float> values(batch * dim, 1.0f);
  // The shard's part of the table, on huge pages as a shard holds it.
  std::vector<float> table;
  core::assign_large(table, layout.rows_on(0) * dim, 0.5f);
  std::vector<float> out(batch * dim);
  std::vector<std::vector<core::shard_rows>> splits(sets);
  double check = 0;
  auto at = [&](int r) { return static_cast<size_t>(r) % sets; };
  auto report = [](const char* what, double us, uint64_t n) {
    std::printf("%-13s %9.2f us per call  %6.2f ns per row\n", what, us,
                us * 1000.0 / static_cast<double>(n));
  };
  report(
    "split_rows",
    time_rounds(rounds,
                [&](int r) {
                  if (!core::split_rows(layout, ids[at(r)], splits[at(r)]).ok())
                    std::abort();
                }),
    batch);
  // Times `f(part)` over each shard's part of a round's split; what it
  // returns adds to the check.
  auto per_part = [&](const char* what, auto f) {
    report(what,
           time_rounds(rounds,
                       [&](int r) {
                         for (auto& part : splits[at(r)])
                           check += f(part);
                       }),
           batch);
  };
  per_part("shard_values", [&](const core::shard_rows& part) {
    return static_cast<double>(
      core::shard_values(part, values.data(), dim).size());
  });
  std::vector<float> summed;
  per_part("sum_repeats", [&](core::shard_rows& part) {
    return core::sum_repeats(part.local, values.data(), dim, summed) ? 1.0
                                                                     : 0.0;
  });
  per_part("gather_rows", [&](const core::shard_rows& part) {
    return static_cast<double>(
      core::gather_rows(table.data(), dim, part.local).size());
  });
  per_part("scatter_rows", [&](const core::shard_rows& part) {
    core::scatter_rows(part, table.data(), dim, out.data());
    return 0.0;
  });
  std::printf("(check %g)\n", check + out[0]);
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: actorps-optimizer-bench [N floats in 1..2^28] [ROUNDS "
               "> 0]\n       actorps-optimizer-bench rows [ROWS in 1..2^26] "
               "[BATCH in 1..ROWS] [ROUNDS > 0] [huge|small] [SETS in "
               "1..2^16]\n       actorps-optimizer-bench split [ROWS in "
               "1..2^26] [BATCH in 1..ROWS] [ROUNDS > 0] [SHARDS in 1..64] "
               "[SETS in 1..256]\n");
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  auto arg = [&](int i, uint64_t fallback) {
    return argc > i ? std::strtoull(argv[i], nullptr, 10) : fallback;
  };
  if (argc > 1 && std::strcmp(argv[1], "rows") == 0) {
    const auto n = arg(2, 1000000);
    const auto batch = arg(3, 1000);
    const auto rounds = arg(4, 2000);
    const std::string pages = argc > 5 ? argv[5] : "huge";
    const auto sets = arg(6, 16);
    if (n == 0 || n > (uint64_t{1} << 26) || batch == 0 || batch > n
        || rounds == 0 || rounds > (uint64_t{1} << 30)
        || (pages != "huge" && pages != "small") || sets == 0
        || sets > (uint64_t{1} << 16) || batch * sets > (uint64_t{1} << 27))
      return usage();
    return rows(n, batch, static_cast<int>(rounds), pages == "huge", sets);
  }
  if (argc > 1 && std::strcmp(argv[1], "split") == 0) {
    const auto n = arg(2, 10000000);
    const auto batch = arg(3, 1000);
    const auto rounds = arg(4, 20000);
    const auto shards = arg(5, 1);
    const auto sets = arg(6, 16);
    if (n == 0 || n > (uint64_t{1} << 26) || batch == 0 || batch > n / 2
        || rounds == 0 || rounds > (uint64_t{1} << 30) || shards == 0
        || shards > 64 || sets == 0 || sets > 256)
      return usage();
    return split(n, batch, static_cast<int>(rounds),
                 static_cast<uint32_t>(shards), sets);
  }
  const auto n = arg(1, 235146);
  const auto rounds = arg(2, 2000);
  if (n == 0 || n > (uint64_t{1} << 28) || rounds == 0
      || rounds > (uint64_t{1} << 30))
    return usage();
  return dense(n, static_cast<int>(rounds));
}
