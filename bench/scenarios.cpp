// SPDX-License-Identifier: BSD-3-Clause
#include "bench/scenarios.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>
#include <unordered_set>

#include "bench/wire.hpp"
#include "messages/control.hpp"
#include "messages/errors.hpp"
#include "runtime/kvstore.hpp"
#include "runtime/network.hpp"

namespace actorps::bench {

namespace {

using clock_type = std::chrono::steady_clock;

// What a worker process sent and received per measured round over its TCP
// connections (to the server and the coordinator), as the kernel counts them.
struct wire_meter {
  uint64_t written = 0;
  uint64_t read = 0;
  bool ok = false;
  double sent = -1;
  double received = -1;

  void start() {
    ok = tcp_bytes(written, read);
  }

  void stop(uint32_t rounds) {
    uint64_t w = 0;
    uint64_t r = 0;
    if (ok && rounds > 0 && tcp_bytes(w, r)) {
      sent = static_cast<double>(w - written) / rounds;
      received = static_cast<double>(r - read) / rounds;
    }
  }
};

// What each worker's push of `grad` contributes in the last of `rounds`
// rounds under `c` (2-bit: by its rule, residual carried over).
float last_pushed(const compression& c, float grad, uint32_t rounds) {
  float residual = 0;
  float x = grad;
  for (uint32_t r = 0; r < rounds; ++r) {
    x = grad;
    quantize(c, &x, &residual, 1);
  }
  return x;
}

// Runs a priority case: each round pushes the backlog (one key, priority 0;
// the push returns at once, its slices queue up in the worker), then pulls
// the small key at the case's priority and times that pull alone
// (wait_only), then waits for the backlog before the next round.
std::string run_priority_case(kvstore& kv, size_t index, const bench_case& c,
                              const round_plan& plan,
                              std::vector<double>& times) {
  auto fail = [&](const std::string& what, const caf::error& err) {
    return "rank " + std::to_string(kv.rank()) + ", case "
           + std::to_string(index) + ": " + what + ": " + render(err);
  };
  auto big = "c" + std::to_string(index) + ".backlog";
  auto small = "c" + std::to_string(index) + ".small";
  const auto n = static_cast<Eigen::Index>(c.backlog);
  const auto m = static_cast<Eigen::Index>(c.floats);
  Eigen::VectorXf grad = Eigen::VectorXf::Constant(n, 1.0f);
  Eigen::VectorXf out = Eigen::VectorXf::Zero(m);
  if (auto err = kv.init(big, Eigen::VectorXf::Zero(n)))
    return fail("init", err);
  if (auto err = kv.init(small, Eigen::VectorXf::Constant(m, 3.0f)))
    return fail("init", err);
  if (auto err = kv.barrier())
    return fail("barrier", err);
  for (uint32_t r = 0; r < plan.warmup + plan.rounds; ++r) {
    if (auto err = kv.push(big, grad, 0))
      return fail("push", err);
    auto start = clock_type::now();
    auto t = kv.pull(small, out, c.priority);
    if (!t)
      return fail("pull", t.error());
    if (auto err = kv.wait_only(*t))
      return fail("pull", err);
    auto took = std::chrono::duration<double>(clock_type::now() - start);
    if (auto err = kv.wait_all())
      return fail("push", err);
    if (out[0] != 3.0f)
      return "rank " + std::to_string(kv.rank()) + ", case "
             + std::to_string(index) + ": pulled " + std::to_string(out[0])
             + ", expected 3";
    if (r >= plan.warmup)
      times.push_back(took.count());
  }
  if (auto err = kv.barrier())
    return fail("barrier", err);
  return {};
}

// Runs a row case: a table of `table_rows` rows of `floats` floats; each
// round push_rows of `keys` distinct random rows (drawn from a seed and the
// round: every worker names the same rows), wait, pull_rows of the same
// rows, wait. In the bench's sync store without an optimizer each row
// pushed in a round holds the number of workers after it.
std::string run_rows_case(kvstore& kv, size_t index, const bench_case& c,
                          const round_plan& plan, std::vector<double>& times,
                          wire_meter* meter) {
  auto fail = [&](const std::string& what, const caf::error& err) {
    return "rank " + std::to_string(kv.rank()) + ", case "
           + std::to_string(index) + ": " + what + ": " + render(err);
  };
  auto name = "c" + std::to_string(index) + ".rows";
  if (auto err = kv.init_table(name, c.table_rows, c.floats))
    return fail("init_table", err);
  if (auto err = kv.barrier())
    return fail("barrier", err);
  const auto n = static_cast<Eigen::Index>(c.keys * c.floats);
  Eigen::VectorXf grad = Eigen::VectorXf::Constant(n, 1.0f);
  Eigen::VectorXf out = Eigen::VectorXf::Zero(n);
  std::vector<uint64_t> ids;
  std::unordered_set<uint64_t> seen;
  for (uint32_t r = 0; r < plan.warmup + plan.rounds; ++r) {
    std::mt19937_64 rng{0x5eed0000ULL + r};
    ids.clear();
    seen.clear();
    while (ids.size() < c.keys)
      if (auto id = rng() % c.table_rows; seen.insert(id).second)
        ids.push_back(id);
    if (meter != nullptr && r == plan.warmup)
      meter->start();
    auto start = clock_type::now();
    if (auto err = kv.push_rows(name, ids, grad))
      return fail("push_rows", err);
    if (auto err = kv.wait_all())
      return fail("push_rows", err);
    auto t = kv.pull_rows(name, ids, out);
    if (!t)
      return fail("pull_rows", t.error());
    if (auto err = kv.wait(*t))
      return fail("pull_rows", err);
    if (r >= plan.warmup)
      times.push_back(
        std::chrono::duration<double>(clock_type::now() - start).count());
    auto expected = static_cast<float>(kv.num_workers());
    if (out[0] != expected || out[n - 1] != expected)
      return "rank " + std::to_string(kv.rank()) + ", case "
             + std::to_string(index) + ": pulled rows holding "
             + std::to_string(out[0]) + ", expected "
             + std::to_string(expected);
  }
  if (meter != nullptr)
    meter->stop(plan.rounds);
  if (auto err = kv.barrier())
    return fail("barrier", err);
  return {};
}

// Runs one case on one handle (every worker of the store runs it at the
// same time): init, barrier, warm-up and measured rounds, barrier. A split
// round pushes every key (one push_many call) and waits, then pulls every key
// (one pull_many call) and waits; a fused round makes one push_pull_many call
// and waits. Fills `times` (seconds per measured round). Returns an error
// text or an empty string.
std::string run_case(kvstore& kv, size_t index, const bench_case& c,
                     const round_plan& plan, std::vector<double>& times,
                     wire_meter* meter = nullptr) {
  if (c.priority_case())
    return run_priority_case(kv, index, c, plan, times);
  if (c.row_case())
    return run_rows_case(kv, index, c, plan, times, meter);
  auto fail = [&](const std::string& what, const caf::error& err) {
    return "rank " + std::to_string(kv.rank()) + ", case "
           + std::to_string(index) + ": " + what + ": " + render(err);
  };
  const auto n = static_cast<Eigen::Index>(c.floats);
  std::vector<std::string> names;
  for (uint32_t k = 0; k < c.keys; ++k)
    names.push_back("c" + std::to_string(index) + "." + std::to_string(k));
  Eigen::VectorXf grad = Eigen::VectorXf::Constant(n, 1.0f);
  std::vector<Eigen::VectorXf> outs(c.keys, Eigen::VectorXf::Zero(n));
  std::vector<Eigen::Ref<const Eigen::VectorXf>> values(c.keys, grad);
  std::vector<Eigen::Ref<Eigen::VectorXf>> out_refs;
  for (auto& o : outs)
    out_refs.emplace_back(o);
  for (const auto& name : names) {
    if (auto err = kv.set_gradient_compression(name, c.comp))
      return fail("set_gradient_compression", err);
    if (auto err = kv.init(name, Eigen::VectorXf::Zero(n)))
      return fail("init", err);
  }
  if (auto err = kv.barrier())
    return fail("barrier", err);
  for (uint32_t r = 0; r < plan.warmup + plan.rounds; ++r) {
    if (meter != nullptr && r == plan.warmup)
      meter->start();
    auto start = clock_type::now();
    if (c.fused) {
      if (auto t = kv.push_pull_many(names, values, out_refs); !t)
        return fail("push_pull", t.error());
      if (auto err = kv.wait_all())
        return fail("push_pull", err);
    } else {
      if (auto err = kv.push_many(names, values))
        return fail("push", err);
      if (auto err = kv.wait_all())
        return fail("push", err);
      if (auto t = kv.pull_many(names, out_refs); !t)
        return fail("pull", t.error());
      if (auto err = kv.wait_all())
        return fail("pull", err);
    }
    if (r >= plan.warmup)
      times.push_back(
        std::chrono::duration<double>(clock_type::now() - start).count());
  }
  if (meter != nullptr)
    meter->stop(plan.rounds);
  // The store sums each round's pushes (sync, no optimizer): every element
  // holds the number of workers (times what compression made of 1).
  auto expected = static_cast<float>(kv.num_workers())
                  * last_pushed(c.comp, 1.0f, plan.warmup + plan.rounds);
  for (const auto& out : outs)
    if (n > 0 && (out[0] != expected || out[n - 1] != expected))
      return "rank " + std::to_string(kv.rank()) + ", case "
             + std::to_string(index) + ": pulled " + std::to_string(out[0])
             + ", expected " + std::to_string(expected);
  if (auto err = kv.barrier())
    return fail("barrier", err);
  return {};
}

// The peak resident set (VmHWM) of process `pid` (0: this one), in KiB; 0
// if unknown.
uint64_t peak_rss_kb(pid_t pid) {
  std::ifstream in{pid == 0 ? std::string{"/proc/self/status"}
                            : "/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::strtoull(line.c_str() + 6, nullptr, 10);
  return 0;
}

// Starts a new peak for process `pid`: Linux sets its VmHWM to its current
// RSS. False if that is not allowed here.
bool reset_peak_rss(pid_t pid) {
  std::ofstream out{"/proc/" + std::to_string(pid) + "/clear_refs"};
  out << "5" << std::flush;
  return static_cast<bool>(out);
}

} // namespace

std::string run_local(const std::vector<bench_case>& cases, uint32_t workers,
                      uint32_t shards, const tuning& tune,
                      const system_options& sys, const round_plan& plan,
                      std::vector<result>& results) {
  store_options so;
  so.num_workers = workers;
  so.num_shards = shards;
  so.slice_floats = tune.slice_floats;
  so.max_bytes_in_flight = tune.max_inflight;
  so.threads = sys.threads;
  so.scheduler = sys.scheduler;
  so.tls = sys.tls;
  auto kv = kvstore::create("local_sync", so);
  if (!kv)
    return "local store: " + render(kv.error());
  std::vector<kvstore> others;
  for (uint32_t r = 1; r < workers; ++r) {
    auto h = kv->worker(r);
    if (!h)
      return "local store: " + render(h.error());
    others.push_back(std::move(*h));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::string> errors(workers);
    std::vector<std::thread> threads_;
    for (uint32_t r = 1; r < workers; ++r)
      threads_.emplace_back([&, r] {
        std::vector<double> ignored;
        errors[r] = run_case(others[r - 1], i, cases[i], plan, ignored);
      });
    result res{"local", cases[i], workers, {}};
    errors[0] = run_case(*kv, i, cases[i], plan, res.times);
    for (auto& t : threads_)
      t.join();
    for (const auto& e : errors)
      if (!e.empty())
        return e;
    results.push_back(std::move(res));
    std::fprintf(stderr, "  local %s, %s, %u workers: %.1f us\n",
                 cases[i].name.c_str(), cases[i].round().c_str(), workers,
                 results.back().median() * 1e6);
  }
  for (auto& h : others)
    h.close();
  return kv->close() ? std::string{"local store: close failed"} : std::string{};
}

int role_coordinator(uint32_t workers, uint64_t slice_floats,
                     const std::string& transport, const system_options& sys) {
  coordinator_options opts;
  opts.token = job_token;
  opts.sync = true;
  opts.num_workers = workers;
  opts.num_servers = 1;
  opts.slice_floats = slice_floats;
  opts.transport = transport == "ucx" ? actorps::transport::ucx
                                      : actorps::transport::caf;
  opts.system.threads = sys.threads;
  opts.system.scheduler = sys.scheduler;
  opts.system.tls = sys.tls;
  auto err = run_coordinator(opts, [](uint16_t port) {
    std::cout << "port " << port << std::endl;
  });
  if (err) {
    std::cout << "error " << render(err) << std::endl;
    return 1;
  }
  return 0;
}

int role_server(const std::string& coordinator, uint32_t shards,
                const tuning& tune, const system_options& sys) {
  server_options opts;
  auto where = parse_endpoint(coordinator);
  if (!where) {
    std::cout << "error " << render(where.error()) << std::endl;
    return 2;
  }
  opts.coordinator = *where;
  opts.token = job_token;
  opts.shards = shards;
  opts.shard_threads = tune.shard_threads;
  opts.inflight_bytes = tune.server_inflight;
  opts.system.threads = sys.threads;
  opts.system.scheduler = sys.scheduler;
  opts.system.tls = sys.tls;
  auto err = run_server(opts, [](uint32_t) {});
  if (err) {
    std::cout << "error " << render(err) << std::endl;
    return 1;
  }
  std::cout << "peak_rss_kb " << peak_rss_kb(0) << std::endl;
  return 0;
}

int role_worker(const std::string& coordinator, const std::string& cases_text,
                const round_plan& plan, const tuning& tune,
                const system_options& sys, pid_t server_pid) {
  store_options so;
  so.max_bytes_in_flight = tune.max_inflight;
  so.coordinator = coordinator;
  so.token = job_token;
  so.threads = sys.threads;
  so.scheduler = sys.scheduler;
  so.tls = sys.tls;
  so.connect_timeout = std::chrono::seconds{30};
  auto kv = kvstore::create("dist_sync", so);
  if (!kv) {
    std::cout << "error " << render(kv.error()) << std::endl;
    return 1;
  }
  auto cases = decode_cases(cases_text);
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<double> times;
    wire_meter meter;
    auto watch = server_pid > 0 && kv->rank() == 0
                 && reset_peak_rss(server_pid);
    auto err = run_case(*kv, i, cases[i], plan, times,
                        cases[i].priority_case() ? nullptr : &meter);
    if (!err.empty()) {
      std::cout << "error " << err << std::endl;
      return 1;
    }
    if (kv->rank() == 0) {
      if (meter.sent >= 0)
        std::cout << "wire " << i << ' ' << meter.sent << ' ' << meter.received
                  << std::endl;
      if (auto kb = watch ? peak_rss_kb(server_pid) : 0; kb > 0)
        std::cout << "memory " << i << ' ' << kb << std::endl;
      std::cout << "result " << i;
      for (auto t : times)
        std::cout << ' ' << t;
      std::cout << std::endl;
    }
  }
  kv->close();
  return 0;
}

} // namespace actorps::bench
