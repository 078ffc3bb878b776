// SPDX-License-Identifier: BSD-3-Clause
#include "bench/scenarios.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
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

// One case's rounds on one handle, a round at a time, so that the cases
// of a run may take turns (--interleave: each case's rounds then meet the
// same moments of a busy machine). Every worker of the store runs the same
// calls in the same order. Each member returns an error text or "".
class case_run {
public:
  case_run(kvstore& kv, size_t index) : kv_(kv), index_(index) {
    // nop
  }

  virtual ~case_run() = default;

  // Inits the case's keys, then a barrier.
  virtual std::string setup() = 0;

  // Round `r` (from 0, warm-up ones first); its time goes to `times` if
  // `measured`.
  virtual std::string
  round(uint32_t r, bool measured, std::vector<double>& times)
    = 0;

  // Checks what the rounds left, then a barrier.
  virtual std::string finish() {
    return barrier();
  }

protected:
  std::string fail(const std::string& what, const caf::error& err) const {
    return "rank " + std::to_string(kv_.rank()) + ", case "
           + std::to_string(index_) + ": " + what + ": " + render(err);
  }

  std::string wrong(const std::string& what) const {
    return "rank " + std::to_string(kv_.rank()) + ", case "
           + std::to_string(index_) + ": " + what;
  }

  std::string barrier() {
    if (auto err = kv_.barrier())
      return fail("barrier", err);
    return {};
  }

  static double since(clock_type::time_point start) {
    return std::chrono::duration<double>(clock_type::now() - start).count();
  }

  kvstore& kv_;
  size_t index_;
};

// A priority case: each round pushes the backlog (one key, priority 0; the
// push returns at once, its slices queue up in the worker), then pulls the
// small key at the case's priority and times that pull alone (wait_only),
// then waits for the backlog before the next round.
class priority_run : public case_run {
public:
  priority_run(kvstore& kv, size_t index, const bench_case& c)
    : case_run(kv, index),
      c_(c),
      big_("c" + std::to_string(index) + ".backlog"),
      small_("c" + std::to_string(index) + ".small"),
      grad_(
        Eigen::VectorXf::Constant(static_cast<Eigen::Index>(c.backlog), 1.0f)),
      out_(Eigen::VectorXf::Zero(static_cast<Eigen::Index>(c.floats))) {
    // nop
  }

  std::string setup() override {
    if (auto err = kv_.init(big_, Eigen::VectorXf::Zero(grad_.size())))
      return fail("init", err);
    if (auto err = kv_.init(small_,
                            Eigen::VectorXf::Constant(out_.size(), 3.0f)))
      return fail("init", err);
    return barrier();
  }

  std::string round(uint32_t, bool measured,
                    std::vector<double>& times) override {
    if (auto err = kv_.push(big_, grad_, 0))
      return fail("push", err);
    auto start = clock_type::now();
    auto t = kv_.pull(small_, out_, c_.priority);
    if (!t)
      return fail("pull", t.error());
    if (auto err = kv_.wait_only(*t))
      return fail("pull", err);
    auto took = since(start);
    if (auto err = kv_.wait_all())
      return fail("push", err);
    if (out_[0] != 3.0f)
      return wrong("pulled " + std::to_string(out_[0]) + ", expected 3");
    if (measured)
      times.push_back(took);
    return {};
  }

private:
  const bench_case& c_;
  std::string big_;
  std::string small_;
  Eigen::VectorXf grad_;
  Eigen::VectorXf out_;
};

// A row case: a table of `table_rows` rows of `floats` floats; each round
// push_rows of `keys` distinct random rows (drawn from a seed and the
// round: every worker names the same rows), wait, pull_rows of the same
// rows, wait. In the bench's sync store without an optimizer each row
// pushed in a round holds the number of workers after it.
class rows_run : public case_run {
public:
  rows_run(kvstore& kv, size_t index, const bench_case& c)
    : case_run(kv, index),
      c_(c),
      name_("c" + std::to_string(index) + ".rows"),
      grad_(Eigen::VectorXf::Constant(
        static_cast<Eigen::Index>(c.keys * c.floats), 1.0f)),
      out_(Eigen::VectorXf::Zero(grad_.size())) {
    // nop
  }

  std::string setup() override {
    if (auto err = kv_.init_table(name_, c_.table_rows, c_.floats))
      return fail("init_table", err);
    return barrier();
  }

  std::string round(uint32_t r, bool measured,
                    std::vector<double>& times) override {
    std::mt19937_64 rng{0x5eed0000ULL + r};
    ids_.clear();
    seen_.clear();
    while (ids_.size() < c_.keys)
      if (auto id = rng() % c_.table_rows; seen_.insert(id).second)
        ids_.push_back(id);
    auto start = clock_type::now();
    if (auto err = kv_.push_rows(name_, ids_, grad_))
      return fail("push_rows", err);
    if (auto err = kv_.wait_all())
      return fail("push_rows", err);
    auto t = kv_.pull_rows(name_, ids_, out_);
    if (!t)
      return fail("pull_rows", t.error());
    if (auto err = kv_.wait(*t))
      return fail("pull_rows", err);
    if (measured)
      times.push_back(since(start));
    auto expected = static_cast<float>(kv_.num_workers());
    if (out_[0] != expected || out_[out_.size() - 1] != expected)
      return wrong("pulled rows holding " + std::to_string(out_[0])
                   + ", expected " + std::to_string(expected));
    return {};
  }

private:
  const bench_case& c_;
  std::string name_;
  Eigen::VectorXf grad_;
  Eigen::VectorXf out_;
  std::vector<uint64_t> ids_;
  std::unordered_set<uint64_t> seen_;
};

// A dense case. A split round pushes every key (one push_many call) and
// waits, then pulls every key (one pull_many call) and waits; a fused round
// makes one push_pull_many call and waits.
class dense_run : public case_run {
public:
  dense_run(kvstore& kv, size_t index, const bench_case& c)
    : case_run(kv, index),
      c_(c),
      grad_(
        Eigen::VectorXf::Constant(static_cast<Eigen::Index>(c.floats), 1.0f)),
      outs_(c.keys, Eigen::VectorXf::Zero(grad_.size())),
      values_(c.keys, grad_) {
    for (uint32_t k = 0; k < c.keys; ++k)
      names_.push_back("c" + std::to_string(index) + "." + std::to_string(k));
    for (auto& o : outs_)
      out_refs_.emplace_back(o);
  }

  std::string setup() override {
    for (const auto& name : names_) {
      if (auto err = kv_.set_gradient_compression(name, c_.comp))
        return fail("set_gradient_compression", err);
      if (auto err = kv_.init(name, Eigen::VectorXf::Zero(grad_.size())))
        return fail("init", err);
    }
    return barrier();
  }

  std::string round(uint32_t, bool measured,
                    std::vector<double>& times) override {
    auto start = clock_type::now();
    if (c_.fused) {
      if (auto t = kv_.push_pull_many(names_, values_, out_refs_); !t)
        return fail("push_pull", t.error());
      if (auto err = kv_.wait_all())
        return fail("push_pull", err);
    } else {
      if (auto err = kv_.push_many(names_, values_))
        return fail("push", err);
      if (auto err = kv_.wait_all())
        return fail("push", err);
      if (auto t = kv_.pull_many(names_, out_refs_); !t)
        return fail("pull", t.error());
      if (auto err = kv_.wait_all())
        return fail("pull", err);
    }
    if (measured)
      times.push_back(since(start));
    ++rounds_;
    return {};
  }

  // The store sums each round's pushes (sync, no optimizer): every element
  // holds the number of workers (times what compression made of 1).
  std::string finish() override {
    auto expected = static_cast<float>(kv_.num_workers())
                    * last_pushed(c_.comp, 1.0f, rounds_);
    for (const auto& out : outs_)
      if (out.size() > 0
          && (out[0] != expected || out[out.size() - 1] != expected))
        return wrong("pulled " + std::to_string(out[0]) + ", expected "
                     + std::to_string(expected));
    return barrier();
  }

private:
  const bench_case& c_;
  Eigen::VectorXf grad_;
  std::vector<std::string> names_;
  std::vector<Eigen::VectorXf> outs_;
  std::vector<Eigen::Ref<const Eigen::VectorXf>> values_;
  std::vector<Eigen::Ref<Eigen::VectorXf>> out_refs_;
  uint32_t rounds_ = 0;
};

std::unique_ptr<case_run> make_run(kvstore& kv, size_t index,
                                   const bench_case& c) {
  if (c.priority_case())
    return std::make_unique<priority_run>(kv, index, c);
  if (c.row_case())
    return std::make_unique<rows_run>(kv, index, c);
  return std::make_unique<dense_run>(kv, index, c);
}

// Runs one case on one handle (every worker of the store runs it at the
// same time): init, barrier, warm-up and measured rounds, barrier. Fills
// `times` (seconds per measured round); `meter`, if set, counts the bytes
// of the measured rounds (not for priority cases). Returns an error text or
// an empty string.
std::string run_case(kvstore& kv, size_t index, const bench_case& c,
                     const round_plan& plan, std::vector<double>& times,
                     wire_meter* meter = nullptr) {
  auto run = make_run(kv, index, c);
  if (auto e = run->setup(); !e.empty())
    return e;
  if (c.priority_case())
    meter = nullptr;
  for (uint32_t r = 0; r < plan.warmup + plan.rounds; ++r) {
    if (meter != nullptr && r == plan.warmup)
      meter->start();
    if (auto e = run->round(r, r >= plan.warmup, times); !e.empty())
      return e;
  }
  if (meter != nullptr)
    meter->stop(plan.rounds);
  return run->finish();
}

// Runs every case on one handle, the cases taking turns round by round
// (--interleave): all set up, then round 0 of each case in order, round 1
// of each, ..., then all checked. Fills `times[i]` for case i.
std::string run_interleaved(kvstore& kv, const std::vector<bench_case>& cases,
                            const round_plan& plan,
                            std::vector<std::vector<double>>& times) {
  std::vector<std::unique_ptr<case_run>> runs;
  times.assign(cases.size(), {});
  for (size_t i = 0; i < cases.size(); ++i) {
    runs.push_back(make_run(kv, i, cases[i]));
    if (auto e = runs.back()->setup(); !e.empty())
      return e;
  }
  for (uint32_t r = 0; r < plan.warmup + plan.rounds; ++r)
    for (size_t i = 0; i < runs.size(); ++i)
      if (auto e = runs[i]->round(r, r >= plan.warmup, times[i]); !e.empty())
        return e;
  for (auto& run : runs)
    if (auto e = run->finish(); !e.empty())
      return e;
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
  if (plan.interleave) {
    std::vector<std::string> errors(workers);
    std::vector<std::vector<std::vector<double>>> times(workers);
    std::vector<std::thread> threads_;
    for (uint32_t r = 1; r < workers; ++r)
      threads_.emplace_back([&, r] {
        errors[r] = run_interleaved(others[r - 1], cases, plan, times[r]);
      });
    errors[0] = run_interleaved(*kv, cases, plan, times[0]);
    for (auto& t : threads_)
      t.join();
    for (const auto& e : errors)
      if (!e.empty())
        return e;
    for (size_t i = 0; i < cases.size(); ++i)
      results.push_back(result{"local", cases[i], workers, times[0][i]});
  }
  for (size_t i = 0; i < cases.size() && !plan.interleave; ++i) {
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
  if (plan.interleave) {
    std::vector<std::vector<double>> times;
    if (auto err = run_interleaved(*kv, cases, plan, times); !err.empty()) {
      std::cout << "error " << err << std::endl;
      return 1;
    }
    for (size_t i = 0; i < cases.size() && kv->rank() == 0; ++i) {
      std::cout << "result " << i;
      for (auto t : times[i])
        std::cout << ' ' << t;
      std::cout << std::endl;
    }
  }
  for (size_t i = 0; i < cases.size() && !plan.interleave; ++i) {
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
