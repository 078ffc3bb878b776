// SPDX-License-Identifier: BSD-3-Clause
#include "apps/common/synthetic.hpp"

#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "messages/errors.hpp"

namespace actorps::apps {

std::string run_synthetic(kvstore& kv, const synthetic_options& opts,
                          std::ostream& out) {
  auto rank = kv.rank();
  auto fail = [&](const std::string& what, const caf::error& err) {
    return "rank " + std::to_string(rank) + ": " + what + ": " + render(err);
  };
  auto key = [](uint32_t k) { return "key" + std::to_string(k); };
  double workers = kv.num_workers();
  auto expected_after = [&](uint32_t rounds) {
    return static_cast<float>(rounds * workers * (workers + 1) / 2);
  };
  Eigen::VectorXf zeros = Eigen::VectorXf::Zero(opts.size);
  for (uint32_t k = 0; k < opts.keys; ++k)
    if (auto err = kv.init(key(k), zeros))
      return fail("init " + key(k), err);
  if (rank == 0) {
    optimizer_config acc;
    acc.name = "accumulate";
    if (auto err = kv.set_optimizer(acc))
      return fail("set_optimizer", err);
  }
  if (auto err = kv.barrier())
    return fail("barrier", err);
  // The barrier must hold everyone until the last worker arrives: each
  // worker adds 1 before the next barrier, so after it every worker must
  // read exactly W.
  // Counted exactly whatever compression the job's keys use.
  if (auto err = kv.set_gradient_compression("arrivals", compression{}))
    return fail("set_gradient_compression arrivals", err);
  if (auto err = kv.init("arrivals", Eigen::VectorXf::Zero(1)))
    return fail("init arrivals", err);
  if (auto err = kv.push("arrivals", Eigen::VectorXf::Ones(1)))
    return fail("push arrivals", err);
  if (auto err = kv.barrier())
    return fail("barrier", err);
  Eigen::VectorXf arrivals(1);
  auto ticket = kv.pull("arrivals", arrivals);
  if (!ticket)
    return fail("pull arrivals", ticket.error());
  if (auto err = kv.wait(*ticket))
    return fail("pull arrivals", err);
  if (!opts.tolerate_deaths && arrivals[0] != static_cast<float>(workers))
    return "rank " + std::to_string(rank) + ": passed the barrier after "
           + std::to_string(arrivals[0]) + " of " + std::to_string(workers)
           + " workers had arrived";
  out << "rank " << rank << ": barrier held all " << arrivals[0] << " workers"
      << std::endl;
  bool sync = kv.synchronous();
  Eigen::VectorXf grad = Eigen::VectorXf::Constant(opts.size, rank + 1.0f);
  std::vector<Eigen::VectorXf> outs(opts.keys, Eigen::VectorXf(opts.size));
  auto next_start = std::chrono::steady_clock::now();
  for (uint32_t r = 0; r < opts.rounds; ++r) {
    if (opts.round_ms > 0) {
      // Paces the load (not a synchronization: nothing waits on it).
      std::this_thread::sleep_until(next_start);
      next_start = std::chrono::steady_clock::now()
                   + std::chrono::milliseconds{opts.round_ms};
    }
    std::vector<pull_ticket> tickets;
    for (uint32_t k = 0; k < opts.keys; ++k) {
      // Earlier keys first, as a training loop's first layers.
      auto priority = static_cast<int>(opts.keys - k);
      if (auto err = kv.push(key(k), grad, priority))
        return fail("push " + key(k), err);
      auto t = kv.pull(key(k), outs[k], priority);
      if (!t)
        return fail("pull " + key(k), t.error());
      tickets.push_back(*t);
    }
    for (uint32_t k = 0; k < opts.keys; ++k)
      if (auto err = kv.wait(tickets[k]))
        return fail("wait " + key(k), err);
    if (sync && opts.check_rounds && opts.check_values && !opts.tolerate_deaths)
      for (uint32_t k = 0; k < opts.keys; ++k)
        if (!(outs[k].array() == expected_after(r + 1)).all())
          return "rank " + std::to_string(rank) + ": round " + std::to_string(r)
                 + " " + key(k) + " holds " + std::to_string(outs[k][0])
                 + ", expected " + std::to_string(expected_after(r + 1));
    // Bounded staleness: every worker's first r + 1 - s pushes are in.
    auto s = kv.staleness();
    if (s >= 0 && r + 1 > uint32_t(s) && opts.check_values
        && !opts.tolerate_deaths)
      for (uint32_t k = 0; k < opts.keys; ++k)
        if (!(outs[k].array() >= expected_after(r + 1 - uint32_t(s))).all())
          return "rank " + std::to_string(rank) + ": round " + std::to_string(r)
                 + " " + key(k) + " holds " + std::to_string(outs[k][0])
                 + ", staleness " + std::to_string(s) + " needs at least "
                 + std::to_string(expected_after(r + 1 - uint32_t(s)));
    if (opts.progress)
      out << "rank " << rank << " round " << r << std::endl;
    if (opts.hold_after == r + 1) {
      out << "rank " << rank << " holds after " << r + 1 << " of "
          << opts.rounds << " rounds" << std::endl;
      std::string line;
      std::getline(std::cin, line);
    }
  }
  if (auto err = kv.barrier())
    return fail("final barrier", err);
  if (opts.check_values && !opts.tolerate_deaths) {
    Eigen::VectorXf final_value(opts.size);
    for (uint32_t k = 0; k < opts.keys; ++k) {
      auto t = kv.pull(key(k), final_value);
      if (!t)
        return fail("final pull", t.error());
      if (auto err = kv.wait(*t))
        return fail("final pull", err);
      if (!(final_value.array() == expected_after(opts.rounds)).all())
        return "rank " + std::to_string(rank) + ": " + key(k) + " holds "
               + std::to_string(final_value[0]) + ", expected "
               + std::to_string(expected_after(opts.rounds));
    }
  }
  return {};
}

} // namespace actorps::apps
