// SPDX-License-Identifier: BSD-3-Clause
// actorps-demo: local data-parallel pushes and pulls with exact checking.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/common/cli.hpp"
#include "apps/common/synthetic.hpp"
#include "messages/errors.hpp"
#include "runtime/kvstore.hpp"

namespace po = boost::program_options;

namespace {

const std::string app = "actorps-demo";

int run(int argc, char** argv) {
  actorps::store_options store;
  actorps::apps::synthetic_options job;
  store.num_workers = 4;
  std::string config_file;
  std::string mode = "async";
  po::options_description desc{"Options"};
  actorps::apps::add_common_options(desc, config_file);
  desc.add_options()(
    "workers", po::value(&store.num_workers)->default_value(store.num_workers),
    "worker threads")(
    "shards", po::value(&store.num_shards)->default_value(store.num_shards),
    "shard actors")("mode", po::value(&mode)->default_value(mode),
                    "async or sync")(
    "keys", po::value(&job.keys)->default_value(job.keys), "number of keys")(
    "size", po::value(&job.size)->default_value(job.size), "floats per key")(
    "rounds", po::value(&job.rounds)->default_value(job.rounds),
    "push+pull rounds per key and worker");
  po::variables_map vm;
  if (auto rc = actorps::apps::parse(
        argc, argv, desc, vm, app,
        "usage: actorps-demo [options]\n"
        "Several local worker threads push and pull through one actorps "
        "store and check the exact result."))
    return *rc;
  if (mode != "async" && mode != "sync")
    return actorps::apps::fail(
      app, "--mode must be async or sync, got '" + mode + "'", 2);
  // Each worker is a thread and every key is held whole in each worker.
  namespace cli = actorps::apps;
  if (auto rc = cli::check_range(app, "workers", store.num_workers, 1, 256))
    return *rc;
  if (auto rc = cli::check_range(app, "shards", store.num_shards, 1,
                                 cli::max_shards))
    return *rc;
  if (auto rc = cli::check_range(app, "keys", job.keys, 1, 1 << 20))
    return *rc;
  if (auto rc = cli::check_range(app, "size", job.size, 1, uint64_t{1} << 30))
    return *rc;
  if (auto rc = cli::check_range(app, "rounds", job.rounds, 1, 1u << 30))
    return *rc;
  auto type = mode == "sync" ? "local_sync" : "local_async";
  auto kv = actorps::kvstore::create(type, store);
  if (!kv)
    return actorps::apps::fail(app, actorps::render(kv.error()));
  std::printf("actorps demo: %s store, %u workers, %u shards, %u keys x %llu "
              "floats, %u rounds of push+pull per key\n",
              type, store.num_workers, store.num_shards, job.keys,
              static_cast<unsigned long long>(job.size), job.rounds);
  std::vector<actorps::kvstore> handles;
  for (uint32_t r = 0; r < store.num_workers; ++r) {
    auto h = kv->worker(r);
    if (!h)
      return actorps::apps::fail(app, actorps::render(h.error()));
    handles.push_back(std::move(*h));
  }
  std::vector<std::string> errors(store.num_workers);
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < store.num_workers; ++r)
    threads.emplace_back([&, r] {
      std::ostringstream ignored;
      errors[r] = actorps::apps::run_synthetic(handles[r], job, ignored);
    });
  for (auto& t : threads)
    t.join();
  auto secs
    = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  int rc = 0;
  for (auto& e : errors)
    if (!e.empty())
      rc = actorps::apps::fail(app, e);
  if (rc != 0)
    return rc;
  double w = store.num_workers;
  std::printf("every worker checked every key: each element = %.0f "
              "(rounds x W(W+1)/2), exact\n",
              job.rounds * w * (w + 1) / 2);
  double ops = w * job.rounds * job.keys;
  std::printf("%u workers x %u rounds x %u keys in %.3f s: %.0f push+pull per "
              "s, %.2f GB/s of payload (push + pull)\n",
              store.num_workers, job.rounds, job.keys, secs, ops / secs,
              2.0 * ops * job.size * 4 / secs / 1e9);
  std::printf("demo: all values exact\n");
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  return actorps::apps::guarded_main(app, [&] { return run(argc, argv); });
}
