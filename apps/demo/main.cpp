// SPDX-License-Identifier: BSD-3-Clause
// actorps-demo: local data-parallel pushes and pulls with exact checking.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <boost/program_options.hpp>

#include "messages/errors.hpp"
#include "runtime/kvstore.hpp"

namespace po = boost::program_options;

namespace {

struct demo_config {
  uint32_t workers = 4;
  uint32_t shards = 2;
  std::string mode = "async";
  uint32_t keys = 4;
  uint64_t size = 100000;
  uint32_t rounds = 50;
};

// Each worker pushes (rank + 1) into every element of every key per round;
// with the accumulate rule every key ends at rounds * W * (W + 1) / 2.
std::string run_worker(actorps::kvstore kv, const demo_config& cfg) {
  auto fail = [&](const std::string& what, const caf::error& err) {
    return "worker " + std::to_string(kv.rank()) + ": " + what + ": "
           + actorps::render(err);
  };
  Eigen::VectorXf zeros = Eigen::VectorXf::Zero(cfg.size);
  for (uint32_t k = 0; k < cfg.keys; ++k)
    if (auto err = kv.init("key" + std::to_string(k), zeros))
      return fail("init", err);
  Eigen::VectorXf grad = Eigen::VectorXf::Constant(cfg.size, kv.rank() + 1.0f);
  std::vector<Eigen::VectorXf> outs(cfg.keys, Eigen::VectorXf(cfg.size));
  for (uint32_t r = 0; r < cfg.rounds; ++r) {
    std::vector<actorps::pull_ticket> tickets;
    for (uint32_t k = 0; k < cfg.keys; ++k) {
      auto key = "key" + std::to_string(k);
      if (auto err = kv.push(key, grad, static_cast<int>(cfg.keys - k)))
        return fail("push", err);
      auto t = kv.pull(key, outs[k], static_cast<int>(cfg.keys - k));
      if (!t)
        return fail("pull", t.error());
      tickets.push_back(*t);
    }
    for (auto& t : tickets)
      if (auto err = kv.wait(t))
        return fail("wait", err);
  }
  if (auto err = kv.barrier())
    return fail("barrier", err);
  return {};
}

int run(const demo_config& cfg) {
  auto type = cfg.mode == "sync" ? "local_sync" : "local_async";
  actorps::store_options opts;
  opts.num_workers = cfg.workers;
  opts.num_shards = cfg.shards;
  auto kv = actorps::kvstore::create(type, opts);
  if (!kv) {
    std::cerr << "actorps-demo: " << actorps::render(kv.error()) << '\n';
    return 1;
  }
  actorps::optimizer_config acc;
  acc.name = "accumulate";
  if (auto err = kv->set_optimizer(acc)) {
    std::cerr << "actorps-demo: " << actorps::render(err) << '\n';
    return 1;
  }
  std::printf("actorps demo: %s store, %u workers, %u shards, %u keys x %llu "
              "floats, %u rounds of push+pull per key\n",
              type, cfg.workers, cfg.shards, cfg.keys,
              static_cast<unsigned long long>(cfg.size), cfg.rounds);
  std::vector<actorps::kvstore> handles;
  for (uint32_t r = 0; r < cfg.workers; ++r) {
    auto h = kv->worker(r);
    if (!h) {
      std::cerr << "actorps-demo: " << actorps::render(h.error()) << '\n';
      return 1;
    }
    handles.push_back(std::move(*h));
  }
  std::vector<std::string> errors(cfg.workers);
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < cfg.workers; ++r)
    threads.emplace_back(
      [&, r] { errors[r] = run_worker(std::move(handles[r]), cfg); });
  for (auto& t : threads)
    t.join();
  auto secs
    = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  int rc = 0;
  for (auto& e : errors)
    if (!e.empty()) {
      std::cerr << "actorps-demo: " << e << '\n';
      rc = 1;
    }
  if (rc != 0)
    return rc;
  double expected = static_cast<double>(cfg.rounds) * cfg.workers
                    * (cfg.workers + 1) / 2;
  Eigen::VectorXf out(cfg.size);
  for (uint32_t k = 0; k < cfg.keys; ++k) {
    auto key = "key" + std::to_string(k);
    auto t = kv->pull(key, out);
    if (!t || kv->wait(*t)) {
      std::cerr << "actorps-demo: final pull of " << key << " failed\n";
      return 1;
    }
    auto bad = (out.array() != static_cast<float>(expected)).count();
    std::printf("  %s: every element = %.0f (expected %.0f): %s\n", key.c_str(),
                static_cast<double>(out[0]), expected,
                bad == 0 ? "OK" : "WRONG");
    if (bad != 0)
      rc = 1;
  }
  double bytes = 2.0 * cfg.workers * cfg.rounds * cfg.keys * cfg.size * 4;
  std::printf("%u workers x %u rounds x %u keys in %.3f s: %.0f push+pull "
              "per s, %.2f GB/s of payload\n",
              cfg.workers, cfg.rounds, cfg.keys, secs,
              cfg.workers * cfg.rounds * cfg.keys / secs, bytes / secs / 1e9);
  std::printf("%s\n", rc == 0 ? "demo: all values exact" : "demo: FAILED");
  return rc;
}

} // namespace

int main(int argc, char** argv) {
  demo_config cfg;
  std::string config_file;
  po::options_description desc{
    "actorps-demo: several local workers push and pull through actorps and "
    "check the exact result.\n\nOptions"};
  desc.add_options()("help,h", "print this help and exit")(
    "config", po::value(&config_file),
    "read options from this file (same names as the flags, name = value)")(
    "workers", po::value(&cfg.workers)->default_value(cfg.workers),
    "worker threads")("shards",
                      po::value(&cfg.shards)->default_value(cfg.shards),
                      "shard actors")(
    "mode", po::value(&cfg.mode)->default_value(cfg.mode), "async or sync")(
    "keys", po::value(&cfg.keys)->default_value(cfg.keys), "number of keys")(
    "size", po::value(&cfg.size)->default_value(cfg.size), "floats per key")(
    "rounds", po::value(&cfg.rounds)->default_value(cfg.rounds),
    "push+pull rounds per key and worker");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << '\n';
      return 0;
    }
    if (vm.count("config")) {
      auto path = vm["config"].as<std::string>();
      std::ifstream in{path};
      if (!in)
        throw std::runtime_error("cannot read config file '" + path + "'");
      po::store(po::parse_config_file(in, desc), vm);
    }
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "actorps-demo: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (cfg.mode != "async" && cfg.mode != "sync") {
    std::cerr << "actorps-demo: --mode must be async or sync, got '" << cfg.mode
              << "'\n";
    return 2;
  }
  if (cfg.workers == 0 || cfg.shards == 0 || cfg.keys == 0 || cfg.size == 0
      || cfg.rounds == 0) {
    std::cerr << "actorps-demo: --workers, --shards, --keys, --size and "
                 "--rounds must be > 0\n";
    return 2;
  }
  return run(cfg);
}
