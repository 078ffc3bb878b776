// SPDX-License-Identifier: BSD-3-Clause
#include "bench/report.hpp"

#include <algorithm>
#include <cstdio>
#include <ostream>

#include <nlohmann/json.hpp>

namespace actorps::bench {

namespace {

// The echo round a dist case compares with: the same bytes each way over a
// plain loopback socket (0: none, as for priority and compressed cases).
double echo_us(const result& r, const machine_limits& m) {
  if (r.mode == "local" || r.what.priority_case()
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

// ucx_perftest's figures (bench/ucx_perftest.hpp), when it ran.
void print_ucx(const machine_limits& m) {
  if (m.ucx_bandwidth.empty())
    return;
  std::printf("ucx_perftest between two processes (one-way tag_bw, GB/s; "
              "tag_lat at 4 KB, us one-way):\n");
  for (const auto& f : m.ucx_bandwidth)
    std::printf("  %-4s %10.0f KB  %8.2f GB/s\n", f.transport.c_str(),
                static_cast<double>(f.bytes) / 1024, f.gbps);
  for (const auto& l : m.ucx_latency_4k)
    std::printf("  %-4s tag_lat 4 KB  %8.1f us\n", l.transport.c_str(), l.us);
  std::printf("\n");
}

} // namespace

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
    print_ucx(m);
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
// held (every case's keys stay on the server), then per dist run.
void print_memory(const std::vector<result>& results,
                  const std::vector<server_memory>& memory) {
  auto any = std::any_of(results.begin(), results.end(),
                         [](const result& r) { return r.server_peak_mb >= 0; });
  if (any) {
    std::printf("\ndist server, peak RSS while each case ran (bound: 1.3 x "
                "weights held + 50 MB)\n");
    std::printf("%-6s %-26s %-6s %7s %12s %12s %12s\n", "mode", "case", "round",
                "workers", "peak MB", "weights MB", "bound MB");
  }
  for (const auto& r : results)
    if (r.server_peak_mb >= 0) {
      auto bound = rss_bound_mb(r.server_weights_mb);
      std::printf("%-6s %-26s %-6s %7u %12.1f %12.1f %12.1f%s\n",
                  r.mode.c_str(), r.what.name.c_str(), r.what.round().c_str(),
                  r.workers, r.server_peak_mb, r.server_weights_mb, bound,
                  r.server_peak_mb > bound ? "  over" : "");
    }
  for (const auto& m : memory)
    std::printf("%s server, %u workers: peak RSS %.1f MB, weights %.1f MB "
                "(bound 1.3 x weights + 50 MB = %.1f MB)\n",
                m.mode.c_str(), m.workers, m.peak_mb, m.weights_mb,
                m.bound_mb());
}

void write_json(std::ostream& out, const std::vector<result>& results,
                const std::vector<server_memory>& memory,
                const machine_limits& m, bool limits, const round_plan& plan,
                uint32_t shards) {
  using json = nlohmann::ordered_json;
  auto rounds = [](const std::vector<machine_limits::echo>& xs) {
    auto arr = json::array();
    for (const auto& e : xs)
      arr.push_back({{"bytes", e.bytes}, {"round_us", e.round_us}});
    return arr;
  };
  json doc = {{"tool", "actorps-bench"},
              {"warmup_rounds", plan.warmup},
              {"measured_rounds", plan.rounds},
              {"shards", shards}};
  if (limits)
    doc["machine"] = {{"memcpy_gbps", m.memcpy_gbps},
                      {"tcp_gbps", m.tcp_gbps},
                      {"tcp_rtt_us", m.tcp_rtt_us},
                      {"tcp_echo", rounds(m.echoes)},
                      {"basp_echo", rounds(m.basp_echoes)},
                      {"broker_round", rounds(m.broker_rounds)}};
  if (limits && !m.ucx_bandwidth.empty()) {
    auto bw = json::array();
    for (const auto& f : m.ucx_bandwidth)
      bw.push_back(
        {{"transport", f.transport}, {"bytes", f.bytes}, {"gbps", f.gbps}});
    auto lat = json::array();
    for (const auto& l : m.ucx_latency_4k)
      lat.push_back({{"transport", l.transport}, {"us", l.us}});
    doc["machine"]["ucx_perftest"] = {{"tag_bw", bw}, {"tag_lat_4k", lat}};
  }
  auto& rows = doc["results"] = json::array();
  for (const auto& r : results) {
    const auto us = r.median() * 1e6;
    json row
      = {{"mode", r.mode},
         {"case", r.what.name},
         {"round", r.what.round()},
         {"priority", r.what.priority},
         {"backlog_bytes", r.what.backlog * sizeof(float)},
         {"keys", r.what.keys},
         {"floats_per_key", r.what.floats},
         {"payload_bytes", r.what.payload_bytes()},
         {"workers", r.workers},
         {"round_us",
          {{"median", us}, {"min", r.min() * 1e6}, {"max", r.max() * 1e6}}},
         {"gbps", r.gbps()},
         {"compression", to_string(r.what.comp)}};
    if (r.server_peak_mb >= 0) {
      row["server_peak_rss_mb"] = r.server_peak_mb;
      row["server_weights_mb"] = r.server_weights_mb;
      row["server_bound_mb"] = rss_bound_mb(r.server_weights_mb);
    }
    if (r.wire_sent >= 0) {
      row["wire_sent_bytes_per_round"] = r.wire_sent;
      row["wire_received_bytes_per_round"] = r.wire_received;
    }
    if (limits && m.tcp_gbps > 0 && !r.what.priority_case()) {
      if (r.mode == "local") {
        row["fraction_of_memcpy"] = r.gbps() / m.memcpy_gbps;
      } else {
        if (auto echo = echo_us(r, m); echo > 0)
          row["fraction_of_tcp_echo"] = echo / us;
        if (auto basp = basp_echo_us(r, m); basp > 0)
          row["fraction_of_basp_echo"] = basp / us;
        if (auto broker = broker_round_us(r, m); broker > 0)
          row["fraction_of_broker_round"] = broker / us;
        row["fraction_of_tcp"] = r.gbps() / m.tcp_gbps;
        row["multiple_of_tcp_rtt"] = us / m.tcp_rtt_us;
      }
    }
    auto& times = row["rounds_us"] = json::array();
    for (auto t : r.times)
      times.push_back(t * 1e6);
    rows.push_back(std::move(row));
  }
  auto& mem = doc["server_memory"] = json::array();
  for (const auto& x : memory)
    mem.push_back({{"mode", x.mode},
                   {"workers", x.workers},
                   {"peak_rss_mb", x.peak_mb},
                   {"weights_mb", x.weights_mb},
                   {"bound_mb", x.bound_mb()}});
  out << doc.dump(2) << '\n';
}

} // namespace actorps::bench
