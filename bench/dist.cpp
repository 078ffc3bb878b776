// SPDX-License-Identifier: BSD-3-Clause
#include "bench/dist.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "bench/child.hpp"

namespace actorps::bench {

namespace {

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
  if (plan.interleave)
    common.push_back("--interleave");
  if (sys.tls.enabled()) {
    common.push_back("--tls");
    common.push_back(std::filesystem::path{sys.tls.ca}.parent_path().string());
  }
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

} // namespace

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

std::string run_dist(const std::vector<bench_case>& cases, uint32_t workers,
                     uint32_t shards, const std::string& transport,
                     const tuning& tune, const system_options& sys,
                     const round_plan& plan, std::chrono::milliseconds timeout,
                     std::vector<result>& results,
                     std::vector<server_memory>& memory) {
  auto with = role_argv(sys, plan,
                        {"--slice-floats", std::to_string(tune.slice_floats),
                         "--max-inflight",
                         tune.max_inflight % 1024 == 0
                           ? std::to_string(tune.max_inflight / 1024) + "K"
                           : std::to_string(tune.max_inflight)});
  child coordinator;
  if (auto e = coordinator.start(
        with({"--role", "coordinator", "--bench-workers",
              std::to_string(workers), "--job-transport", transport}));
      !e.empty())
    return e;
  std::string port;
  if (auto e = await_port(coordinator, "the coordinator", port); !e.empty())
    return e;
  auto address = "127.0.0.1:" + port;
  child server;
  if (auto e = server.start(
        with({"--role", "server", "--coordinator", address, "--shards",
              std::to_string(shards), "--shard-threads",
              tune.shard_threads ? "true" : "false", "--server-inflight",
              tune.server_inflight == 0
                ? std::string{"0"}
                : std::to_string(tune.server_inflight >> 20) + "M"}));
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
  const std::string mode = transport == "ucx" ? "ucx" : "dist";
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
      result res{mode, cases[index], workers, {}};
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
      std::fprintf(stderr, "  %s %s, %s, %u workers: %.1f us\n", mode.c_str(),
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
    memory.push_back({mode, workers, kb / 1024.0, weights_mb(cases)});
  }
  if (mine.size() != cases.size())
    return "dist: got results for " + std::to_string(mine.size()) + " of "
           + std::to_string(cases.size()) + " cases";
  results.insert(results.end(), mine.begin(), mine.end());
  return {};
}

} // namespace actorps::bench
