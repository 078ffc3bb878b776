// SPDX-License-Identifier: BSD-3-Clause
// actorps-bench: push+pull round throughput and latency of actorps, locally
// and across processes on loopback, beside this machine's own limits.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/io/middleman.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/stateful_actor.hpp"

#include "apps/common/cli.hpp"
#include "bench/broker_round.hpp"
#include "bench/child.hpp"
#include "bench/limits.hpp"
#include "bench/wire.hpp"
#include "core/layout.hpp"
#include "messages/errors.hpp"
#include "runtime/kvstore.hpp"
#include "runtime/network.hpp"
#include "runtime/system.hpp"

namespace po = boost::program_options;
namespace cli = actorps::apps;
using namespace actorps;
using namespace actorps::bench;

namespace {

constexpr const char* app = "actorps-bench";
constexpr const char* token = "actorps-bench";

using clock_type = std::chrono::steady_clock;

// -- cases --------------------------------------------------------------------

// One benchmark case: `keys` keys of `floats` floats each, pushed and pulled
// in every round.
struct bench_case {
  std::string name;
  uint32_t keys = 1;
  uint64_t floats = 0;
  // One push_pull request per round instead of a push and a pull.
  bool fused = false;
  // Priority cases (priority >= 0): each round pushes `backlog` floats at
  // priority 0, then pulls the one key of `floats` floats at `priority`; the
  // time is that pull's latency.
  int32_t priority = -1;
  uint64_t backlog = 0;
  // Compression of the case's pushes (set per key).
  compression comp{};

  bool priority_case() const {
    return priority >= 0;
  }

  std::string round() const {
    if (priority_case())
      return "prio" + std::to_string(priority);
    return fused ? "fused" : "split";
  }

  uint64_t payload_bytes() const {
    return uint64_t{keys} * floats * sizeof(float);
  }
};

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB"};
  int u = 0;
  while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + " " + units[u];
}

// "4K", "256K", "4M", "64M", "100" (bytes): one key of that many bytes.
bool parse_size(const std::string& text, uint64_t& bytes) {
  if (text.empty())
    return false;
  uint64_t scale = 1;
  auto digits = text;
  switch (text.back()) {
    case 'K':
    case 'k':
      scale = 1024;
      digits.pop_back();
      break;
    case 'M':
    case 'm':
      scale = 1024 * 1024;
      digits.pop_back();
      break;
    default:
      break;
  }
  if (digits.empty()
      || digits.find_first_not_of("0123456789") != std::string::npos
      || digits.size() > 9)
    return false;
  bytes = std::stoull(digits) * scale;
  return bytes >= sizeof(float) && bytes % sizeof(float) == 0;
}

// A whole number of at most 9 digits.
bool parse_count(const std::string& text, uint64_t& out) {
  if (text.empty() || text.size() > 9
      || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = std::stoull(text);
  return true;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in{text};
  std::string item;
  while (std::getline(in, item, sep))
    if (!item.empty())
      out.push_back(item);
  return out;
}

// What --compression and --compressed-sizes ask for.
struct compressed_cases {
  std::string codecs;
  std::string sizes;
};

// The entries of a comma-separated list option; "none" (or nothing) is an
// empty list.
std::vector<std::string> list_option(const std::string& text) {
  if (text == "none")
    return {};
  return split(text, ',');
}

// Builds the case list from --sizes ("4K,256K") and --many ("1000x1024",
// keys x floats); "none" turns either off. Returns an error text or an empty
// string.
std::string make_cases(const std::string& sizes, const std::string& many,
                       const std::string& rounds, const std::string& backlog,
                       const compressed_cases& compressed,
                       std::vector<bench_case>& out) {
  std::vector<bool> kinds;
  for (const auto& r : split(rounds, ',')) {
    if (r != "fused" && r != "split")
      return "--round: '" + r + "' is not fused or split";
    kinds.push_back(r == "fused");
  }
  if (kinds.empty())
    return "--round: give fused, split or both";
  std::vector<bench_case> shapes;
  for (const auto& s : list_option(sizes)) {
    uint64_t bytes = 0;
    if (!parse_size(s, bytes))
      return "--sizes: '" + s
             + "' is not a size such as 4K, 256K, 4M or 64M (a multiple of "
               "4 bytes)";
    shapes.push_back({human_bytes(bytes), 1, bytes / sizeof(float)});
  }
  for (const auto& m : list_option(many)) {
    auto parts = split(m, 'x');
    uint64_t keys = 0;
    uint64_t floats = 0;
    if (parts.size() != 2 || !parse_count(parts[0], keys)
        || !parse_count(parts[1], floats) || keys == 0 || keys > 1000000
        || floats == 0)
      return "--many: '" + m
             + "' is not KEYSxFLOATS such as 1000x1024 (keys at most 1e6)";
    shapes.push_back(
      {std::to_string(keys) + " keys x " + std::to_string(floats) + " floats",
       static_cast<uint32_t>(keys), floats});
  }
  for (const auto& c : shapes)
    for (auto fused : kinds) {
      out.push_back(c);
      out.back().fused = fused;
    }
  if (backlog != "0") {
    uint64_t bytes = 0;
    if (!parse_size(backlog, bytes))
      return "--backlog: '" + backlog
             + "' is not a size such as 256M (or 0 for no priority cases)";
    // The same pull at priority 10 and at the backlog's priority 0.
    for (int32_t prio : {10, 0}) {
      bench_case c{"4 KB pull, " + human_bytes(bytes) + " queued", 1, 1024};
      c.priority = prio;
      c.backlog = bytes / sizeof(float);
      out.push_back(c);
    }
  }
  // Compressed pushes: fused rounds of one key per size and codec.
  for (const auto& s : split(compressed.sizes, ',')) {
    uint64_t bytes = 0;
    if (!parse_size(s, bytes))
      return "--compressed-sizes: '" + s + "' is not a size such as 4M";
    for (const auto& text : split(compressed.codecs, ',')) {
      auto c = parse_compression(text);
      if (!c)
        return "--compression: '" + text
               + "' is not fp16, 2bit or 2bit:THRESHOLD";
      if (c->kind == codec::none)
        continue;
      bench_case x{human_bytes(bytes) + " " + text, 1, bytes / sizeof(float),
                   true};
      x.comp = *c;
      out.push_back(x);
    }
  }
  if (out.empty())
    return "no cases: give --sizes and/or --many";
  return {};
}

// Cases travel to the worker processes as
// "keys:floats:fused:priority:backlog:codec:threshold;...".
std::string encode_cases(const std::vector<bench_case>& cases) {
  std::string out;
  for (const auto& c : cases) {
    char threshold[32];
    std::snprintf(threshold, sizeof(threshold), "%.9g",
                  static_cast<double>(c.comp.threshold));
    out += std::to_string(c.keys) + ":" + std::to_string(c.floats) + ":"
           + (c.fused ? "1" : "0") + ":" + std::to_string(c.priority + 1) + ":"
           + std::to_string(c.backlog) + ":"
           + std::to_string(static_cast<int>(c.comp.kind)) + ":" + threshold
           + ";";
  }
  return out;
}

std::vector<bench_case> decode_cases(const std::string& text) {
  std::vector<bench_case> out;
  for (const auto& item : split(text, ';')) {
    auto parts = split(item, ':');
    uint64_t keys = 0;
    uint64_t floats = 0;
    uint64_t prio = 0;
    uint64_t backlog = 0;
    uint64_t kind = 0;
    if (parts.size() == 7 && parse_count(parts[0], keys)
        && parse_count(parts[1], floats) && parse_count(parts[3], prio)
        && parse_count(parts[4], backlog) && parse_count(parts[5], kind)
        && kind <= static_cast<uint64_t>(codec::two_bit)) {
      out.push_back({"", static_cast<uint32_t>(keys), floats, parts[2] == "1"});
      out.back().priority = static_cast<int32_t>(prio) - 1;
      out.back().backlog = backlog;
      out.back().comp = compression{static_cast<codec>(kind),
                                    std::strtof(parts[6].c_str(), nullptr)};
    }
  }
  return out;
}

// -- rounds -------------------------------------------------------------------

// Store settings every mode uses.
struct tuning {
  uint64_t slice_floats = core::default_slice_floats;
  uint64_t max_inflight = store_options{}.max_bytes_in_flight;
};

struct round_plan {
  uint32_t warmup = 3;
  uint32_t rounds = 10;
};

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

// -- results ------------------------------------------------------------------

struct result {
  std::string mode; // "local" or "dist"
  bench_case what;
  uint32_t workers = 1;
  std::vector<double> times; // seconds per round
  // Dist: bytes rank 0's process sent and received per round (-1: unknown).
  double wire_sent = -1;
  double wire_received = -1;
  // Dist: the server's peak RSS while this case ran, and the weights it held
  // then (this case's keys and every earlier case's), MB (-1: unknown).
  double server_peak_mb = -1;
  double server_weights_mb = -1;

  double median() const {
    auto xs = times;
    std::sort(xs.begin(), xs.end());
    return xs[(xs.size() - 1) / 2];
  }

  double min() const {
    return *std::min_element(times.begin(), times.end());
  }

  double max() const {
    return *std::max_element(times.begin(), times.end());
  }

  /// One-direction payload per round over the median round time, GB/s.
  double gbps() const {
    return static_cast<double>(what.payload_bytes()) / median() / 1e9;
  }
};

// The bound on a server's peak RSS: 1.3 x (weights + optimizer
// state) + 50 MB.
double rss_bound_mb(double weights_mb) {
  return 1.3 * weights_mb + 50;
}

// The server process of one dist run: its peak RSS and the weights it held
// (every case's keys; "assign" keeps no optimizer state).
struct server_memory {
  uint32_t workers = 1;
  double peak_mb = 0;
  double weights_mb = 0;

  double bound_mb() const {
    return rss_bound_mb(weights_mb);
  }
};

double weights_mb(const std::vector<bench_case>& cases) {
  uint64_t bytes = 0;
  for (const auto& c : cases)
    bytes += c.payload_bytes() + c.backlog * sizeof(float);
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

// The echo round a dist case compares with: the same bytes each way over a
// plain loopback socket (0: none, as for priority and compressed cases).
double echo_us(const result& r, const machine_limits& m) {
  if (r.mode != "dist" || r.what.priority_case()
      || r.what.comp.kind != codec::none)
    return 0;
  return m.echo_us(r.what.payload_bytes());
}

// The same through CAF's network layer alone (0: none).
double basp_echo_us(const result& r, const machine_limits& m) {
  if (echo_us(r, m) <= 0)
    return 0;
  return m.basp_echo_us(r.what.payload_bytes());
}

// The broker round of the same size (0: none).
double broker_round_us(const result& r, const machine_limits& m) {
  if (echo_us(r, m) <= 0)
    return 0;
  return m.broker_round_us(r.what.payload_bytes());
}

// How a result compares with the machine: local against memcpy; dist
// against the broker round and the BASP and TCP echo rounds of the same
// size, and against loopback TCP bandwidth (large payloads) or round trip
// (small).
std::string versus_limit(const result& r, const machine_limits& m) {
  char buf[96];
  if (r.what.priority_case())
    return "-";
  if (m.tcp_gbps <= 0)
    return "-";
  if (r.mode == "local") {
    std::snprintf(buf, sizeof(buf), "%.0f%% of memcpy",
                  100 * r.gbps() / m.memcpy_gbps);
    return buf;
  }
  std::string out;
  if (auto broker = broker_round_us(r, m); broker > 0) {
    std::snprintf(buf, sizeof(buf), "%.0f%% of broker round, ",
                  100 * broker / (r.median() * 1e6));
    out = buf;
  }
  if (auto basp = basp_echo_us(r, m); basp > 0) {
    std::snprintf(buf, sizeof(buf), "%.0f%% of BASP echo, ",
                  100 * basp / (r.median() * 1e6));
    out += buf;
  }
  if (auto echo = echo_us(r, m); echo > 0) {
    std::snprintf(buf, sizeof(buf), "%.0f%% of TCP echo, ",
                  100 * echo / (r.median() * 1e6));
    out += buf;
  }
  if (r.what.payload_bytes() <= 64 * 1024)
    std::snprintf(buf, sizeof(buf), "%.1fx TCP RTT",
                  r.median() * 1e6 / m.tcp_rtt_us);
  else
    std::snprintf(buf, sizeof(buf), "%.0f%% of TCP",
                  100 * r.gbps() / m.tcp_gbps);
  return out + buf;
}

// One line of echo rounds (nothing if none were measured).
void print_echoes(const char* title,
                  const std::vector<machine_limits::echo>& echoes) {
  if (echoes.empty())
    return;
  std::printf("%s", title);
  for (const auto& e : echoes)
    std::printf(" %.0f KB %.1f us (%.2f GB/s);",
                static_cast<double>(e.bytes) / 1024, e.round_us,
                static_cast<double>(e.bytes) / e.round_us / 1e3);
  std::printf("\n\n");
}

void print_table(const std::vector<result>& results, const machine_limits& m,
                 bool limits) {
  if (limits)
    std::printf("machine: memcpy %.2f GB/s, loopback TCP %.2f GB/s, 64 B TCP "
                "round trip %.1f us\n\n",
                m.memcpy_gbps, m.tcp_gbps, m.tcp_rtt_us);
  if (limits) {
    print_echoes("TCP echo rounds (that many bytes each way, store and "
                 "forward):",
                 m.echoes);
    print_echoes("BASP echo rounds (a float payload each way between two "
                 "actor systems, CAF's network layer alone):",
                 m.basp_echoes);
    print_echoes("Broker rounds (raw bytes between two CAF io brokers, no "
                 "actor between: the server sums and answers, the client "
                 "copies out; see bench/broker_round.hpp):",
                 m.broker_rounds);
  }
  std::printf("%-6s %-26s %-6s %7s %12s %12s %12s %9s %17s  %s\n", "mode",
              "case", "round", "workers", "median us", "min us", "max us",
              "GB/s", "wire KB out/in", "vs limit");
  for (const auto& r : results) {
    auto vs = versus_limit(r, m);
    // A priority-10 pull against the same pull at the backlog's priority.
    if (r.what.priority > 0)
      for (const auto& e : results)
        if (e.what.priority == 0 && e.mode == r.mode && e.workers == r.workers
            && e.what.backlog == r.what.backlog) {
          char buf[64];
          std::snprintf(buf, sizeof(buf), "%.1fx sooner than prio0",
                        e.median() / r.median());
          vs = buf;
        }
    char wire[64] = "-";
    if (r.wire_sent >= 0)
      std::snprintf(wire, sizeof(wire), "%.1f/%.1f", r.wire_sent / 1024,
                    r.wire_received / 1024);
    std::printf("%-6s %-26s %-6s %7u %12.1f %12.1f %12.1f %9.3f %17s  %s\n",
                r.mode.c_str(), r.what.name.c_str(), r.what.round().c_str(),
                r.workers, r.median() * 1e6, r.min() * 1e6, r.max() * 1e6,
                r.gbps(), wire, vs.c_str());
  }
}

// The server's peak RSS per dist case, against the bound for the weights it
// held (every case's keys stay on the server).
void print_memory(const std::vector<result>& results) {
  auto any = std::any_of(results.begin(), results.end(),
                         [](const result& r) { return r.server_peak_mb >= 0; });
  if (!any)
    return;
  std::printf("\ndist server, peak RSS while each case ran (bound: 1.3 x "
              "weights held + 50 MB)\n");
  std::printf("%-26s %-6s %7s %12s %12s %12s\n", "case", "round", "workers",
              "peak MB", "weights MB", "bound MB");
  for (const auto& r : results)
    if (r.server_peak_mb >= 0) {
      auto bound = rss_bound_mb(r.server_weights_mb);
      std::printf("%-26s %-6s %7u %12.1f %12.1f %12.1f%s\n",
                  r.what.name.c_str(), r.what.round().c_str(), r.workers,
                  r.server_peak_mb, r.server_weights_mb, bound,
                  r.server_peak_mb > bound ? "  over" : "");
    }
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\')
      out += '\\';
    out += ch;
  }
  return out;
}

void write_json(std::ostream& out, const std::vector<result>& results,
                const std::vector<server_memory>& memory,
                const machine_limits& m, bool limits, const round_plan& plan,
                uint32_t shards) {
  out << "{\n  \"tool\": \"actorps-bench\",\n";
  out << "  \"warmup_rounds\": " << plan.warmup
      << ",\n  \"measured_rounds\": " << plan.rounds
      << ",\n  \"shards\": " << shards << ",\n";
  if (limits) {
    out << "  \"machine\": {\"memcpy_gbps\": " << m.memcpy_gbps
        << ", \"tcp_gbps\": " << m.tcp_gbps
        << ", \"tcp_rtt_us\": " << m.tcp_rtt_us << ", \"tcp_echo\": [";
    for (size_t i = 0; i < m.echoes.size(); ++i)
      out << (i == 0 ? "" : ", ") << "{\"bytes\": " << m.echoes[i].bytes
          << ", \"round_us\": " << m.echoes[i].round_us << "}";
    out << "], \"basp_echo\": [";
    for (size_t i = 0; i < m.basp_echoes.size(); ++i)
      out << (i == 0 ? "" : ", ") << "{\"bytes\": " << m.basp_echoes[i].bytes
          << ", \"round_us\": " << m.basp_echoes[i].round_us << "}";
    out << "], \"broker_round\": [";
    for (size_t i = 0; i < m.broker_rounds.size(); ++i)
      out << (i == 0 ? "" : ", ") << "{\"bytes\": " << m.broker_rounds[i].bytes
          << ", \"round_us\": " << m.broker_rounds[i].round_us << "}";
    out << "]},\n";
  }
  out << "  \"results\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    out << (i == 0 ? "\n" : ",\n") << "    {\"mode\": \"" << r.mode
        << "\", \"case\": \"" << json_escape(r.what.name) << "\", \"round\": \""
        << r.what.round() << "\", \"priority\": " << r.what.priority
        << ", \"backlog_bytes\": " << r.what.backlog * sizeof(float)
        << ", \"keys\": " << r.what.keys
        << ", \"floats_per_key\": " << r.what.floats
        << ", \"payload_bytes\": " << r.what.payload_bytes()
        << ", \"workers\": " << r.workers
        << ", \"round_us\": {\"median\": " << r.median() * 1e6
        << ", \"min\": " << r.min() * 1e6 << ", \"max\": " << r.max() * 1e6
        << "}, \"gbps\": " << r.gbps() << ", \"compression\": \""
        << to_string(r.what.comp) << "\"";
    if (r.server_peak_mb >= 0)
      out << ", \"server_peak_rss_mb\": " << r.server_peak_mb
          << ", \"server_weights_mb\": " << r.server_weights_mb
          << ", \"server_bound_mb\": " << rss_bound_mb(r.server_weights_mb);
    if (r.wire_sent >= 0)
      out << ", \"wire_sent_bytes_per_round\": " << r.wire_sent
          << ", \"wire_received_bytes_per_round\": " << r.wire_received;
    if (limits && m.tcp_gbps > 0 && !r.what.priority_case()) {
      if (r.mode == "local") {
        out << ", \"fraction_of_memcpy\": " << r.gbps() / m.memcpy_gbps;
      } else {
        if (auto echo = echo_us(r, m); echo > 0)
          out << ", \"fraction_of_tcp_echo\": " << echo / (r.median() * 1e6);
        if (auto basp = basp_echo_us(r, m); basp > 0)
          out << ", \"fraction_of_basp_echo\": " << basp / (r.median() * 1e6);
        if (auto broker = broker_round_us(r, m); broker > 0)
          out << ", \"fraction_of_broker_round\": "
              << broker / (r.median() * 1e6);
        out << ", \"fraction_of_tcp\": " << r.gbps() / m.tcp_gbps
            << ", \"multiple_of_tcp_rtt\": " << r.median() * 1e6 / m.tcp_rtt_us;
      }
    }
    out << ", \"rounds_us\": [";
    for (size_t k = 0; k < r.times.size(); ++k)
      out << (k == 0 ? "" : ", ") << r.times[k] * 1e6;
    out << "]}";
  }
  out << "\n  ],\n  \"server_memory\": [";
  for (size_t i = 0; i < memory.size(); ++i)
    out << (i == 0 ? "\n" : ",\n") << "    {\"workers\": " << memory[i].workers
        << ", \"peak_rss_mb\": " << memory[i].peak_mb
        << ", \"weights_mb\": " << memory[i].weights_mb
        << ", \"bound_mb\": " << memory[i].bound_mb() << "}";
  out << "\n  ]\n}\n";
}

// -- local mode ---------------------------------------------------------------

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

// -- dist mode: the roles -----------------------------------------------------

// The peak resident set (VmHWM) of process `pid` (0: this one), in KiB; 0
// if unknown.
uint64_t peak_rss_kb(pid_t pid = 0) {
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

int role_coordinator(uint32_t workers, uint64_t slice_floats,
                     const system_options& sys) {
  coordinator_options opts;
  opts.token = token;
  opts.sync = true;
  opts.num_workers = workers;
  opts.num_servers = 1;
  opts.slice_floats = slice_floats;
  opts.system.threads = sys.threads;
  opts.system.scheduler = sys.scheduler;
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
                const system_options& sys) {
  server_options opts;
  auto where = parse_endpoint(coordinator);
  if (!where) {
    std::cout << "error " << render(where.error()) << std::endl;
    return 2;
  }
  opts.coordinator = *where;
  opts.token = token;
  opts.shards = shards;
  opts.system.threads = sys.threads;
  opts.system.scheduler = sys.scheduler;
  auto err = run_server(opts, [](uint32_t) {});
  if (err) {
    std::cout << "error " << render(err) << std::endl;
    return 1;
  }
  std::cout << "peak_rss_kb " << peak_rss_kb() << std::endl;
  return 0;
}

// Rank 0 prints "result INDEX T1 T2 ..." (seconds) per case, and with a
// `server_pid` "memory INDEX KB": the server's peak RSS from the case's start
// (before its keys are initialized) to its end.
int role_worker(const std::string& coordinator, const std::string& cases_text,
                const round_plan& plan, const tuning& tune,
                const system_options& sys, pid_t server_pid) {
  store_options so;
  so.max_bytes_in_flight = tune.max_inflight;
  so.coordinator = coordinator;
  so.token = token;
  so.threads = sys.threads;
  so.scheduler = sys.scheduler;
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

// Builds the command lines of the harness's own child processes: this
// program with the scheduler settings, the round plan and `shared`, then
// each call's arguments (`--role ...`).
auto role_argv(const system_options& sys, const round_plan& plan,
               std::vector<std::string> shared = {}) {
  std::vector<std::string> common{self_path(),
                                  "--threads",
                                  std::to_string(sys.threads),
                                  "--scheduler",
                                  to_string(sys.scheduler),
                                  "--warmup",
                                  std::to_string(plan.warmup),
                                  "--rounds",
                                  std::to_string(plan.rounds)};
  common.insert(common.end(), shared.begin(), shared.end());
  return [common](std::vector<std::string> extra) {
    auto argv = common;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
}

// Reads the "port N" line a child prints once it listens (within 30 s).
std::string await_port(child& c, const std::string& who, std::string& port) {
  while (port.empty()) {
    auto line = c.next_line(std::chrono::seconds{30});
    if (!line)
      return who + " did not report its port; it said:\n" + c.transcript();
    if (line->rfind("port ", 0) == 0)
      port = line->substr(5);
  }
  return {};
}

// Waits for a child's exit: an error text (naming `who`, with what it
// said) unless it exited with 0 within `timeout`.
std::string await_exit(child& c, const std::string& who,
                       std::chrono::milliseconds timeout) {
  auto rc = c.wait_exit(timeout);
  if (rc == 0)
    return {};
  return who + " failed ("
         + (rc ? "exit " + std::to_string(*rc) : std::string{"hung"})
         + "); it said:\n" + c.transcript();
}

// -- the BASP echo: CAF's network layer alone ---------------------------------

// State of the echo actor: whether it watches its client yet.
struct echo_state {
  bool watching = false;
};

// Answers every `floats` with itself (moved: no copy in the process). Quits
// when its client's node goes away, or after `idle` without a message (a
// harness that died never sends one).
caf::behavior echo_actor(caf::stateful_actor<echo_state>* self,
                         std::chrono::milliseconds idle) {
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  return {
    [self](floats& x) -> floats {
      if (!self->state.watching) {
        self->state.watching = true;
        self->monitor(self->current_sender());
      }
      return std::move(x);
    },
    caf::after(idle) >> [self] { self->quit(); },
  };
}

// Publishes an echo actor on a free loopback port, prints "port N", and runs
// until its client is gone (or silent for `idle`).
int role_basp_echo(system_options sys, std::chrono::milliseconds idle) {
  sys.network = true;
  system_config cfg{sys};
  caf::actor_system system{cfg};
  auto echo = system.spawn(echo_actor, idle);
  auto port = system.middleman().publish(echo, 0, "127.0.0.1");
  if (!port) {
    caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
    std::cout << "error " << render(port.error()) << std::endl;
    return 1;
  }
  std::cout << "port " << *port << std::endl;
  return 0; // the system's destructor waits for the echo actor
}

// The address and sizes of a yardstick client role: "host:port" and bytes,
// comma-separated. Prints "error TEXT" and returns nothing if either is bad.
std::optional<std::pair<endpoint, std::vector<uint64_t>>>
parse_client_args(const std::string& address, const std::string& sizes_text) {
  auto where = parse_endpoint(address);
  if (!where) {
    std::cout << "error " << render(where.error()) << std::endl;
    return std::nullopt;
  }
  std::vector<uint64_t> sizes;
  for (const auto& text : split(sizes_text, ',')) {
    uint64_t bytes = 0;
    if (!parse_size(text, bytes)) {
      std::cout << "error bad size '" << text << "'" << std::endl;
      return std::nullopt;
    }
    sizes.push_back(bytes);
  }
  return std::make_pair(std::move(*where), std::move(sizes));
}

// Sends one `floats` of each size in `sizes_text` (bytes, comma-separated)
// to the echo at `address` and waits for it to come back, warm-up rounds
// first; prints "basp BYTES MEDIAN_US" per size.
int role_basp_client(const std::string& address, const std::string& sizes_text,
                     const round_plan& plan, system_options sys,
                     std::chrono::milliseconds timeout) {
  auto args = parse_client_args(address, sizes_text);
  if (!args)
    return 2;
  auto& [where, sizes] = *args;
  sys.network = true;
  system_config cfg{sys};
  caf::actor_system system{cfg};
  auto echo = system.middleman().remote_actor(where.host, where.port);
  if (!echo) {
    std::cout << "error " << render(echo.error()) << std::endl;
    return 1;
  }
  caf::scoped_actor self{system};
  for (auto bytes : sizes) {
    // One message, sent again every round: serialized each time, never
    // copied in this process.
    auto n = bytes / sizeof(float);
    auto msg = caf::make_message(floats{std::vector<float>(n, 1.0f), {}});
    std::vector<double> times;
    for (uint32_t r = 0; r < plan.warmup + plan.rounds; ++r) {
      auto start = clock_type::now();
      // An infinite request and a bounded wait: a timed request would leave
      // its timeout message in a blocking actor's mailbox.
      auto h = self->request(*echo, caf::infinite, msg);
      std::string err;
      caf::blocking_actor::accept_one_cond rc;
      self->varargs_receive(
        rc, h.id(),
        [&](const floats& x) {
          if (x.data.size() != n)
            err = "echoed " + std::to_string(x.data.size()) + " of "
                  + std::to_string(n) + " floats";
        },
        [&](caf::error& e) { err = render(e); },
        caf::after(timeout) >> [&] { err = "no echo in time"; });
      if (!err.empty()) {
        std::cout << "error " << err << std::endl;
        return 1;
      }
      if (r >= plan.warmup)
        times.push_back(
          std::chrono::duration<double>(clock_type::now() - start).count());
    }
    if (times.empty()) {
      std::cout << "error no measured rounds (--rounds 0)" << std::endl;
      return 2;
    }
    std::sort(times.begin(), times.end());
    std::cout << "basp " << bytes << ' ' << times[(times.size() - 1) / 2] * 1e6
              << std::endl;
  }
  return 0;
}

// The broker round's client role: parses its address and sizes, then runs
// the rounds (bench/broker_round.hpp).
int run_broker_client(const std::string& address, const std::string& sizes_text,
                      const round_plan& plan, const system_options& sys,
                      std::chrono::milliseconds timeout) {
  auto args = parse_client_args(address, sizes_text);
  if (!args)
    return 2;
  const auto& [where, sizes] = *args;
  return role_broker_client(where.host, where.port, sizes, plan.warmup,
                            plan.rounds, sys, timeout);
}

// What one pair of yardstick processes measures: a server role, a client
// role that prints "TAG BYTES MEDIAN_US" per size, and where the figures go.
struct yardstick {
  const char* who;
  const char* server_role;
  const char* client_role;
  const char* tag;
  std::vector<machine_limits::echo> machine_limits::*out;
};

const yardstick basp_echo{"the BASP echo", "basp-echo", "basp-client", "basp",
                          &machine_limits::basp_echoes};
const yardstick broker_round{"the broker round", "broker-server",
                             "broker-client", "broker",
                             &machine_limits::broker_rounds};

// Measures a round of every size in `sizes` with the server and client
// processes of `what`, run as the dist roles are; adds them to `limits`.
std::string
run_yardstick(const yardstick& what, const std::vector<size_t>& sizes,
              const system_options& sys, const round_plan& plan,
              std::chrono::milliseconds timeout, machine_limits& limits) {
  if (sizes.empty())
    return {};
  auto with = role_argv(sys, plan);
  std::string server_name = std::string{what.who} + " server";
  std::string client_name = std::string{what.who} + " client";
  child server;
  if (auto e = server.start(with({"--role", what.server_role})); !e.empty())
    return e;
  std::string port;
  if (auto e = await_port(server, server_name, port); !e.empty())
    return e;
  std::string list;
  for (auto bytes : sizes)
    list += (list.empty() ? "" : ",") + std::to_string(bytes);
  child client;
  if (auto e = client.start(with({"--role", what.client_role, "--coordinator",
                                  "127.0.0.1:" + port, "--sizes", list}));
      !e.empty())
    return e;
  auto& out = limits.*what.out;
  while (auto line = client.next_line(timeout)) {
    std::istringstream in{*line};
    std::string tag;
    machine_limits::echo e;
    if (in >> tag >> e.bytes >> e.round_us && tag == what.tag)
      out.push_back(e);
  }
  if (auto e = await_exit(client, client_name, timeout); !e.empty())
    return e;
  if (auto e = await_exit(server, server_name, timeout); !e.empty())
    return e;
  if (out.size() != sizes.size())
    return std::string{what.who} + ": got " + std::to_string(out.size())
           + " of " + std::to_string(sizes.size()) + " sizes";
  return {};
}

// -- dist mode: the harness side ----------------------------------------------

std::string
run_dist(const std::vector<bench_case>& cases, uint32_t workers,
         uint32_t shards, const tuning& tune, const system_options& sys,
         const round_plan& plan, std::chrono::milliseconds timeout,
         std::vector<result>& results, std::vector<server_memory>& memory) {
  auto with = role_argv(sys, plan,
                        {"--slice-floats", std::to_string(tune.slice_floats),
                         "--max-inflight",
                         tune.max_inflight % 1024 == 0
                           ? std::to_string(tune.max_inflight / 1024) + "K"
                           : std::to_string(tune.max_inflight)});
  child coordinator;
  if (auto e = coordinator.start(with(
        {"--role", "coordinator", "--bench-workers", std::to_string(workers)}));
      !e.empty())
    return e;
  std::string port;
  if (auto e = await_port(coordinator, "the coordinator", port); !e.empty())
    return e;
  auto address = "127.0.0.1:" + port;
  child server;
  if (auto e = server.start(with({"--role", "server", "--coordinator", address,
                                  "--shards", std::to_string(shards)}));
      !e.empty())
    return e;
  std::vector<std::unique_ptr<child>> procs;
  for (uint32_t w = 0; w < workers; ++w) {
    procs.push_back(std::make_unique<child>());
    if (auto e = procs.back()->start(with(
          {"--role", "worker", "--coordinator", address, "--cases",
           encode_cases(cases), "--server-pid", std::to_string(server.pid())}));
        !e.empty())
      return e;
  }
  // Read every worker's output; rank 0's result lines carry the times.
  std::vector<result> mine;
  std::map<size_t, std::pair<double, double>> wire;
  std::map<size_t, double> peak_kb;
  for (auto& p : procs) {
    for (;;) {
      auto line = p->next_line(timeout);
      if (!line)
        break;
      std::istringstream in{*line};
      std::string tag;
      size_t index = 0;
      if (!(in >> tag) || (tag != "result" && tag != "wire" && tag != "memory")
          || !(in >> index) || index >= cases.size())
        continue;
      if (tag == "wire") {
        in >> wire[index].first >> wire[index].second;
        continue;
      }
      if (tag == "memory") {
        in >> peak_kb[index];
        continue;
      }
      result res{"dist", cases[index], workers, {}};
      if (auto w = wire.find(index); w != wire.end()) {
        res.wire_sent = w->second.first;
        res.wire_received = w->second.second;
      }
      if (auto m = peak_kb.find(index); m != peak_kb.end()) {
        res.server_peak_mb = m->second / 1024.0;
        res.server_weights_mb = weights_mb(
          {cases.begin(),
           cases.begin() + static_cast<std::ptrdiff_t>(index) + 1});
      }
      double t = 0;
      while (in >> t)
        res.times.push_back(t);
      std::fprintf(stderr, "  dist %s, %s, %u workers: %.1f us\n",
                   cases[index].name.c_str(), cases[index].round().c_str(),
                   workers, res.median() * 1e6);
      mine.push_back(std::move(res));
    }
  }
  for (size_t w = 0; w < procs.size(); ++w)
    if (auto e = await_exit(*procs[w], "worker process " + std::to_string(w),
                            timeout);
        !e.empty())
      return e;
  for (auto* c : {&server, &coordinator})
    if (auto e = await_exit(*c, c == &server ? "the server" : "the coordinator",
                            timeout);
        !e.empty())
      return e;
  // The server reports its peak RSS as it exits: the peak since the last
  // case began, when rank 0 measured each case; the run's peak is the
  // largest of all.
  while (server.next_line(std::chrono::milliseconds{200})) {
  }
  const auto& said = server.transcript();
  if (auto at = said.find("peak_rss_kb "); at != std::string::npos) {
    auto kb = std::strtod(said.c_str() + at + 12, nullptr);
    for (const auto& [index, case_kb] : peak_kb)
      kb = std::max(kb, case_kb);
    memory.push_back({workers, kb / 1024.0, weights_mb(cases)});
  }
  if (mine.size() != cases.size())
    return "dist: got results for " + std::to_string(mine.size()) + " of "
           + std::to_string(cases.size()) + " cases";
  results.insert(results.end(), mine.begin(), mine.end());
  return {};
}

} // namespace

int main(int argc, char** argv) {
  std::string config_file;
  std::string modes = "local,dist";
  std::string sizes = "4K,256K,4M,64M";
  std::string many = "1000x1024,10000x1";
  std::string workers_text = "1,2";
  std::string round_kinds = "fused,split";
  std::string backlog = "256M";
  compressed_cases compressed{"fp16,2bit:1", "4M,64M"};
  std::string json_path;
  std::string role;
  std::string coordinator;
  std::string cases_text;
  uint32_t shards = 2;
  uint32_t bench_workers = 1;
  pid_t server_pid = 0;
  tuning tune;
  std::string max_inflight = std::to_string(tune.max_inflight);
  system_options sys;
  std::string scheduler = "auto";
  long timeout_s = 600;
  round_plan plan;
  bool quick = false;
  bool no_limits = false;
  po::options_description desc{"Options"};
  cli::add_common_options(desc, config_file);
  desc.add_options()("modes", po::value(&modes)->default_value(modes),
                     "local, dist or both (comma-separated)")(
    "sizes", po::value(&sizes)->default_value(sizes),
    "one-key cases: sizes in bytes (K, M suffixes; none: no such cases)")(
    "many", po::value(&many)->default_value(many),
    "many-key cases: KEYSxFLOATS, comma-separated (none: no such cases)")(
    "round", po::value(&round_kinds)->default_value(round_kinds),
    "round kinds, comma-separated: fused (one push_pull request per round) "
    "and/or split (a push request, wait, a pull request, wait)")(
    "backlog", po::value(&backlog)->default_value(backlog),
    "priority cases: the latency of a 4 KB pull at priority 10, and at "
    "priority 0, issued right after a push of this size at priority 0 (0: "
    "no priority cases)")(
    "compression",
    po::value(&compressed.codecs)->default_value(compressed.codecs),
    "compressed cases: codecs, comma-separated (fp16, 2bit, "
    "2bit:THRESHOLD; none: no such cases); one fused case per codec and "
    "--compressed-sizes entry, with bytes on the wire per round")(
    "compressed-sizes",
    po::value(&compressed.sizes)->default_value(compressed.sizes),
    "compressed cases: sizes of the one key, comma-separated")(
    "workers", po::value(&workers_text)->default_value(workers_text),
    "worker counts to run, comma-separated")(
    "shards", po::value(&shards)->default_value(shards),
    "shards (local: in the process; dist: in the one server process)")(
    "slice-floats",
    po::value(&tune.slice_floats)->default_value(tune.slice_floats),
    "largest slice of a sliced key, in floats")(
    "max-inflight", po::value(&max_inflight)->default_value(max_inflight),
    "per shard, bytes a worker keeps in flight before further requests wait "
    "in it, by priority (K, M suffixes)")(
    "warmup", po::value(&plan.warmup)->default_value(plan.warmup),
    "warm-up rounds per case (not measured)")(
    "rounds", po::value(&plan.rounds)->default_value(plan.rounds),
    "measured rounds per case")(
    "threads", po::value(&sys.threads)->default_value(sys.threads),
    "scheduler threads of every actor system (0: CAF's default)")(
    "scheduler", po::value(&scheduler)->default_value(scheduler),
    "CAF scheduler policy of every actor system: auto (sharing with the "
    "network, else work stealing), sharing or stealing")(
    "quick", po::bool_switch(&quick),
    "tiny sizes and few rounds (CI): --sizes 4K,64K --many 10x256,100x1 "
    "--backlog 1M --compressed-sizes 64K --warmup 1 --rounds 3, quick "
    "limits")("no-limits", po::bool_switch(&no_limits),
              "skip measuring memcpy and loopback TCP")(
    "json", po::value(&json_path), "also write the results as JSON here")(
    "timeout-s", po::value(&timeout_s)->default_value(timeout_s),
    "dist: bound on each process's silence and exit, in seconds");
  po::options_description hidden{"Roles (started by the harness itself)"};
  hidden.add_options()("role", po::value(&role),
                       "coordinator|server|worker|basp-echo|basp-client|"
                       "broker-server|broker-client")(
    "coordinator", po::value(&coordinator),
    "host:port")("cases", po::value(&cases_text), "encoded cases")(
    "bench-workers", po::value(&bench_workers)->default_value(1),
    "workers of the job")("server-pid", po::value(&server_pid),
                          "the server process, whose peak RSS a worker "
                          "measures per case");
  po::options_description all;
  all.add(desc).add(hidden);
  po::variables_map vm;
  if (auto rc = cli::parse(
        argc, argv, all, vm, app,
        "usage: actorps-bench [options]\n"
        "Measures push+pull rounds (split: push every key, wait, pull every "
        "key, wait; fused: push_pull every key, wait; the shards sum the "
        "pushes of a round, no optimizer) in local "
        "mode (one process) and dist mode (coordinator, server and worker "
        "processes on 127.0.0.1), next to this machine's memcpy and loopback "
        "TCP limits. Prints a table; --json writes the figures."))
    return *rc;
  if (!parse_scheduler_policy(scheduler, sys.scheduler))
    return cli::fail(app,
                     "--scheduler: expected auto, sharing or stealing, got '"
                       + scheduler + "'",
                     2);
  if (!parse_size(max_inflight, tune.max_inflight))
    return cli::fail(app,
                     "--max-inflight: '" + max_inflight
                       + "' is not a size such as 8M (a multiple of 4 bytes)",
                     2);
  if (role == "coordinator")
    return role_coordinator(bench_workers, tune.slice_floats, sys);
  if (role == "server")
    return role_server(coordinator, shards, sys);
  if (role == "worker")
    return role_worker(coordinator, cases_text, plan, tune, sys, server_pid);
  if (role == "basp-echo")
    return role_basp_echo(sys, std::chrono::seconds{timeout_s});
  if (role == "basp-client")
    return role_basp_client(coordinator, sizes, plan, sys,
                            std::chrono::seconds{timeout_s});
  if (role == "broker-server")
    return role_broker_server(sys, std::chrono::seconds{timeout_s});
  if (role == "broker-client")
    return run_broker_client(coordinator, sizes, plan, sys,
                             std::chrono::seconds{timeout_s});
  if (!role.empty())
    return cli::fail(app, "--role: unknown role '" + role + "'", 2);
  if (quick) {
    if (vm["sizes"].defaulted())
      sizes = "4K,64K";
    if (vm["many"].defaulted())
      many = "10x256,100x1";
    if (vm["warmup"].defaulted())
      plan.warmup = 1;
    if (vm["rounds"].defaulted())
      plan.rounds = 3;
    if (vm["backlog"].defaulted())
      backlog = "1M";
    if (vm["compressed-sizes"].defaulted())
      compressed.sizes = "64K";
  }
  std::vector<bench_case> cases;
  if (auto e = make_cases(sizes, many, round_kinds, backlog, compressed, cases);
      !e.empty())
    return cli::fail(app, e, 2);
  std::vector<uint32_t> worker_counts;
  for (const auto& w : split(workers_text, ',')) {
    if (w.find_first_not_of("0123456789") != std::string::npos || w.size() > 3
        || std::stoul(w) == 0)
      return cli::fail(app, "--workers: '" + w + "' is not a count from 1", 2);
    worker_counts.push_back(static_cast<uint32_t>(std::stoul(w)));
  }
  bool local = false;
  bool dist = false;
  for (const auto& m : split(modes, ',')) {
    if (m == "local")
      local = true;
    else if (m == "dist")
      dist = true;
    else
      return cli::fail(app, "--modes: unknown mode '" + m + "'", 2);
  }
  if (worker_counts.empty() || (!local && !dist) || plan.rounds == 0
      || shards == 0 || timeout_s <= 0 || tune.slice_floats == 0
      || tune.slice_floats > core::max_slice_floats)
    return cli::fail(app,
                     "need at least one worker count and mode, --rounds, "
                     "--shards and --timeout-s > 0, --slice-floats 1.."
                       + std::to_string(core::max_slice_floats),
                     2);
  machine_limits limits;
  if (!no_limits) {
    // Before any actor system exists: the socket measurements fork.
    std::fprintf(stderr, "measuring this machine's limits...\n");
    limits_options lo{quick, {}};
    if (dist)
      for (const auto& c : cases)
        if (!c.priority_case() && c.comp.kind == codec::none)
          lo.echo_sizes.push_back(c.payload_bytes());
    if (auto e = measure_limits(lo, limits); !e.empty())
      return cli::fail(app, "measuring the machine's limits: " + e);
    if (dist) {
      std::vector<size_t> sizes;
      for (const auto& e : limits.echoes)
        sizes.push_back(e.bytes);
      for (const auto* y : {&basp_echo, &broker_round}) {
        std::fprintf(stderr, "measuring %s...\n", y->who);
        if (auto e = run_yardstick(*y, sizes, sys, plan,
                                   std::chrono::seconds{timeout_s}, limits);
            !e.empty())
          return cli::fail(app, "measuring " + std::string{y->who} + ": " + e);
      }
    }
  }
  std::vector<result> results;
  std::vector<server_memory> memory;
  for (auto w : worker_counts) {
    if (local)
      if (auto e = run_local(cases, w, shards, tune, sys, plan, results);
          !e.empty())
        return cli::fail(app, "local, " + std::to_string(w) + " workers: " + e);
    if (dist)
      if (auto e = run_dist(cases, w, shards, tune, sys, plan,
                            std::chrono::seconds{timeout_s}, results, memory);
          !e.empty())
        return cli::fail(app, "dist, " + std::to_string(w) + " workers: " + e);
  }
  print_table(results, limits, !no_limits);
  print_memory(results);
  for (const auto& m : memory)
    std::printf("dist server, %u workers: peak RSS %.1f MB, weights %.1f MB "
                "(bound 1.3 x weights + 50 MB = %.1f MB)\n",
                m.workers, m.peak_mb, m.weights_mb, m.bound_mb());
  if (!json_path.empty()) {
    std::ofstream out{json_path};
    write_json(out, results, memory, limits, !no_limits, plan, shards);
    out.close();
    if (!out)
      return cli::fail(app, "cannot write " + json_path);
    std::printf("\nwrote %s\n", json_path.c_str());
  }
  return 0;
}
