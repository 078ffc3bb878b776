// SPDX-License-Identifier: BSD-3-Clause
// actorps-optimizer-bench: how long a shard's update of one slice takes
// (core::apply_update alone, no actors), per optimizer, for a slice of N
// floats, cycling through 8 gradient buffers as a shard sees fresh pushes.
//   build/bench/actorps-optimizer-bench [N] [ROUNDS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/optimizer.hpp"

int main(int argc, char** argv) {
  using namespace actorps;
  const auto n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 235146;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 2000;
  if (n == 0 || n > (uint64_t{1} << 28) || rounds <= 0) {
    std::fprintf(stderr, "usage: actorps-optimizer-bench [N floats in "
                         "1..2^28] [ROUNDS > 0]\n");
    return 2;
  }
  std::vector<std::vector<float>> grads(8, std::vector<float>(n));
  for (size_t b = 0; b < grads.size(); ++b)
    for (uint64_t i = 0; i < n; ++i)
      grads[b][i] = static_cast<float>((i + b) % 13) * 0.01f - 0.06f;
  std::printf("floats %llu, rounds %d\n", static_cast<unsigned long long>(n),
              rounds);
  for (std::string name :
       {"sgd", "sgd+momentum", "nesterov", "adagrad", "adam", "rmsprop"}) {
    optimizer_config cfg;
    cfg.name = name == "sgd+momentum" ? "sgd" : name;
    cfg.momentum = name == "sgd+momentum" || name == "nesterov" ? 0.9f : 0.0f;
    std::vector<float> w(n, 0.5f);
    std::vector<float> state(core::state_size(cfg, n), 0.0f);
    auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < rounds; ++r)
      core::apply_update(cfg, w.data(), grads[r % grads.size()].data(),
                         state.data(), n, static_cast<uint64_t>(r));
    std::chrono::duration<double, std::micro> took
      = std::chrono::steady_clock::now() - start;
    auto us = took.count() / rounds;
    std::printf("%-13s %9.1f us per update  %6.2f ns per float  (w[1] %g)\n",
                name.c_str(), us, us * 1000.0 / static_cast<double>(n), w[1]);
  }
  return 0;
}
