// SPDX-License-Identifier: BSD-3-Clause
#include "core/status.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/node_ids.hpp"

namespace actorps {

void op_stats::record(double seconds) noexcept {
  auto i = std::lower_bound(latency_bounds.begin(), latency_bounds.end(),
                            seconds)
           - latency_bounds.begin();
  if (buckets.size() == latency_bounds.size() + 1)
    ++buckets[static_cast<size_t>(i)];
  ++count;
  latency_sum_s += seconds;
}

uint32_t job_status::dead_nodes() const noexcept {
  return static_cast<uint32_t>(std::count_if(
    nodes.begin(), nodes.end(), [](const node_status& n) { return n.dead; }));
}

uint32_t job_status::shards_without_copy() const noexcept {
  return static_cast<uint32_t>(
    std::count_if(copies.begin(), copies.end(), [&](const shard_copies& c) {
      // (Older coordinators name the first backup only.)
      auto n = std::max<size_t>(c.backups.size(),
                                c.backup == shard_copies::no_backup ? 0 : 1);
      return n + 1 < replicas || !c.ready;
    }));
}

namespace {

const char* state_of(const node_status& n) {
  return n.dead ? "dead" : n.left ? "left" : "alive";
}

// Bytes for people: "0 B", "1.5 KiB", "3.2 MiB", ...
std::string bytes(uint64_t n) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  auto x = static_cast<double>(n);
  size_t u = 0;
  while (x >= 1024 && u + 1 < std::size(units)) {
    x /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B",
                  static_cast<unsigned long long>(n));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", x, units[u]);
  return buf;
}

std::string ranks(const std::vector<uint32_t>& rs) {
  std::string out;
  for (auto r : rs)
    out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out.empty() ? "none" : out;
}

// Ranks of `role_id` in [0, n) that never joined.
std::vector<uint32_t> missing(const job_status& s, uint8_t role_id,
                              uint32_t n) {
  std::vector<bool> seen(n, false);
  for (auto& x : s.nodes)
    if (x.role == role_id && x.rank < n)
      seen[x.rank] = true;
  std::vector<uint32_t> out;
  for (uint32_t r = 0; r < n; ++r)
    if (!seen[r])
      out.push_back(r);
  return out;
}

void line(std::string& out, const char* fmt, ...)
  __attribute__((format(printf, 2, 3)));

void line(std::string& out, const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  out += buf;
  out += '\n';
}

// "dist_sync", "dist_async" or "dist_ssp (staleness 2)".
std::string mode_of(const job_status& s) {
  if (s.sync)
    return "dist_sync";
  if (s.staleness < 0)
    return "dist_async";
  return "dist_ssp (staleness " + std::to_string(s.staleness) + ")";
}

} // namespace

std::string format_status(const job_status& s) {
  std::string out;
  line(out, "job: %s, transport %s, %u keys, %u dead nodes", mode_of(s).c_str(),
       s.transport == 1 ? "ucx" : "caf", static_cast<unsigned>(s.keys),
       s.dead_nodes());
  line(out, "workers: %u of %u joined (missing ranks: %s)", s.workers_joined,
       s.num_workers, ranks(missing(s, role::worker, s.num_workers)).c_str());
  line(out, "servers: %u of %u joined (missing ranks: %s)", s.servers_joined,
       s.num_servers, ranks(missing(s, role::server, s.num_servers)).c_str());
  out += '\n';
  line(out, "%-8s %4s %6s  %-24s %-6s %12s", "ROLE", "RANK", "NODE", "ADDRESS",
       "STATE", "LAST SEEN");
  for (auto& n : s.nodes) {
    char seen[32];
    std::snprintf(seen, sizeof seen, "%.1f s ago",
                  static_cast<double>(n.last_seen_ms) / 1000.0);
    line(out, "%-8s %4u %6u  %-24s %-6s %12s", role_name(n.role), n.rank,
         n.node_id, n.address.empty() ? "-" : n.address.c_str(), state_of(n),
         seen);
  }
  out += '\n';
  if (s.barrier_open)
    line(out, "barrier: open, waits for ranks %s (%llu done)",
         ranks(s.barrier_waits_for).c_str(),
         static_cast<unsigned long long>(s.barriers_done));
  else
    line(out, "barrier: none open (%llu done)",
         static_cast<unsigned long long>(s.barriers_done));
  out += '\n';
  line(out, "%-6s %6s %8s %12s %10s %10s %10s %s", "SERVER", "SHARDS", "SLICES",
       "HELD", "PUSHES", "PULLS", "UPDATES", "");
  for (auto& x : s.servers)
    line(out, "%-6u %6llu %8llu %12s %10llu %10llu %10llu %s", x.rank,
         static_cast<unsigned long long>(x.shards),
         static_cast<unsigned long long>(x.slices),
         bytes(x.floats_stored * 4).c_str(),
         static_cast<unsigned long long>(x.pushes),
         static_cast<unsigned long long>(x.pulls),
         static_cast<unsigned long long>(x.updates),
         x.answered ? "" : "(not every shard answered)");
  if (s.replicas > 1 && s.copies.empty()) {
    out += '\n';
    line(out,
         "replicas: %u copies of each shard; not paired yet (the servers "
         "are still joining)",
         s.replicas);
  } else if (s.replicas > 1) {
    out += '\n';
    line(out,
         "replicas: %u copies of each shard; %u of %zu shards without "
         "every backup complete",
         s.replicas, s.shards_without_copy(), s.copies.size());
    line(out, "%-6s %-8s %s", "SHARD", "PRIMARY", "BACKUP");
    for (auto& c : s.copies) {
      char primary[32];
      std::snprintf(primary, sizeof primary, "server %u", c.primary);
      std::string backups;
      for (auto h : c.backups)
        backups += (backups.empty() ? "server " : ", server ")
                   + std::to_string(h);
      if (backups.empty() && c.backup != shard_copies::no_backup)
        backups = "server " + std::to_string(c.backup);
      if (backups.empty())
        line(out, "%-6u %-8s none", c.shard, primary);
      else
        line(out, "%-6u %-8s %s%s", c.shard, primary, backups.c_str(),
             c.ready ? "" : " (copying)");
    }
  }
  out += '\n';
  line(out, "%-6s %10s %10s %12s %12s", "WORKER", "PUSHES", "PULLS", "PUSHED",
       "PULLED");
  for (size_t r = 0; r < s.workers.size(); ++r) {
    auto& w = s.workers[r];
    line(out, "%-6zu %10llu %10llu %12s %12s", r,
         static_cast<unsigned long long>(w.pushes),
         static_cast<unsigned long long>(w.pulls),
         bytes(w.floats_pushed * 4).c_str(),
         bytes(w.floats_pulled * 4).c_str());
  }
  return out;
}

std::string status_json(const job_status& s) {
  using nlohmann::json;
  json j;
  j["mode"] = s.sync             ? "dist_sync"
              : s.staleness >= 0 ? "dist_ssp"
                                 : "dist_async";
  if (s.staleness >= 0)
    j["staleness"] = s.staleness;
  j["transport"] = s.transport == 1 ? "ucx" : "caf";
  j["num_workers"] = s.num_workers;
  j["num_servers"] = s.num_servers;
  j["workers_joined"] = s.workers_joined;
  j["servers_joined"] = s.servers_joined;
  j["missing_workers"] = missing(s, role::worker, s.num_workers);
  j["missing_servers"] = missing(s, role::server, s.num_servers);
  j["keys"] = s.keys;
  j["dead_nodes"] = s.dead_nodes();
  auto& nodes = j["nodes"] = json::array();
  for (auto& n : s.nodes)
    nodes.push_back({{"node_id", n.node_id},
                     {"role", role_name(n.role)},
                     {"rank", n.rank},
                     {"address", n.address},
                     {"state", state_of(n)},
                     {"last_seen_ms", n.last_seen_ms}});
  j["barrier"] = {{"open", s.barrier_open},
                  {"waits_for", s.barrier_waits_for},
                  {"done", s.barriers_done}};
  auto& servers = j["servers"] = json::array();
  for (auto& x : s.servers)
    servers.push_back({{"rank", x.rank},
                       {"answered", x.answered},
                       {"shards", x.shards},
                       {"slices", x.slices},
                       {"bytes_held", x.floats_stored * 4},
                       {"pushes", x.pushes},
                       {"pulls", x.pulls},
                       {"updates", x.updates},
                       {"waiting_pulls", x.waiting_pulls},
                       {"held_pushes", x.held_pushes}});
  j["replicas"] = s.replicas;
  if (s.replicas > 1) {
    // (Only once paired: before, no shard has a copy yet.)
    if (!s.copies.empty())
      j["shards_without_copy"] = s.shards_without_copy();
    auto& shards = j["shards"] = json::array();
    for (auto& c : s.copies) {
      json backup = nullptr;
      if (c.backup != shard_copies::no_backup)
        backup = c.backup;
      shards.push_back({{"shard", c.shard},
                        {"primary", c.primary},
                        {"backup", backup},
                        {"backups", c.backups},
                        {"backup_ready", c.ready}});
    }
  }
  auto& workers = j["workers"] = json::array();
  for (size_t r = 0; r < s.workers.size(); ++r)
    workers.push_back({{"rank", r},
                       {"pushes", s.workers[r].pushes},
                       {"pulls", s.workers[r].pulls},
                       {"bytes_pushed", s.workers[r].floats_pushed * 4},
                       {"bytes_pulled", s.workers[r].floats_pulled * 4}});
  return j.dump(2);
}

} // namespace actorps
