// SPDX-License-Identifier: BSD-3-Clause
#include "bench/ucx_perftest.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/child.hpp"

namespace actorps::bench {

namespace {

// The full path of `name` on the PATH, or "".
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs{path != nullptr ? path : ""};
  for (std::string dir; std::getline(dirs, dir, ':');) {
    auto full = (dir.empty() ? std::string{"."} : dir) + "/" + name;
    if (::access(full.c_str(), X_OK) == 0)
      return full;
  }
  return {};
}

// A loopback port free right now (ucx_perftest takes a port, not 0).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0
      && ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// The numbers of the client's "Final:" line: iterations, overhead
// (50th percentile, average, overall; us), bandwidth (average, overall;
// MB/s of 2^20 bytes), message rate (average, overall).
std::string final_line(child& c, std::chrono::milliseconds timeout,
                       std::vector<double>& out) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    auto line = c.next_line(std::max(left, std::chrono::milliseconds{1}));
    if (!line)
      break;
    if (line->rfind("Final:", 0) != 0)
      continue;
    std::istringstream in{line->substr(6)};
    out.clear();
    for (double x; in >> x;)
      out.push_back(x);
    if (out.size() >= 7)
      return {};
    return "an unexpected line: " + *line;
  }
  return "no result (" + c.transcript() + ")";
}

// One ucx_perftest run: a server and a client over `tls`; the client's
// figures in `out`.
std::string run_pair(const std::string& exe, const std::string& tls,
                     const std::vector<std::string>& test,
                     std::chrono::seconds timeout, std::vector<double>& out) {
  auto port = free_port();
  if (port < 0)
    return "no free loopback port";
  // Line-buffered, so that the server's "Waiting for connection" arrives
  // while it waits.
  std::vector<std::string> env{on_path("env"), "UCX_TLS=" + tls,
                               on_path("stdbuf"), "-oL"};
  auto server_argv = env;
  server_argv.insert(server_argv.end(), {exe, "-p", std::to_string(port)});
  child server;
  if (auto e = server.start(server_argv); !e.empty())
    return e;
  // It says so once it listens.
  for (;;) {
    auto line = server.next_line(timeout);
    if (!line)
      return "the server never listened (" + server.transcript() + ")";
    if (line->find("Waiting for connection") != std::string::npos)
      break;
  }
  auto client_argv = env;
  client_argv.insert(client_argv.end(),
                     {exe, "127.0.0.1", "-p", std::to_string(port)});
  client_argv.insert(client_argv.end(), test.begin(), test.end());
  child client;
  if (auto e = client.start(client_argv); !e.empty())
    return e;
  auto e = final_line(client, timeout, out);
  client.wait_exit(timeout);
  server.wait_exit(timeout);
  return e;
}

} // namespace

std::string measure_ucx_perftest(const std::vector<size_t>& sizes, bool quick,
                                 machine_limits& out,
                                 std::chrono::seconds timeout) {
  auto exe = on_path("ucx_perftest");
  if (exe.empty() || on_path("env").empty() || on_path("stdbuf").empty())
    return {};
  // UCX's names: "tcp" alone is what hosts without RDMA get; shared memory
  // is the FIFOs (posix, sysv) and cross-memory attach (cma).
  const std::pair<const char*, const char*> sets[]
    = {{"tcp", "tcp"}, {"shm", "posix,sysv,cma"}};
  for (auto [name, tls] : sets) {
    for (auto bytes : sizes) {
      // About 1 GB moved (0.1 GB quick), 10 to 100000 messages.
      auto total = quick ? size_t{100} << 20 : size_t{1} << 30;
      auto n = std::clamp<size_t>(total / std::max<size_t>(bytes, 1), 10,
                                  100000);
      std::vector<double> fig;
      if (auto e = run_pair(exe, tls,
                            {"-t", "tag_bw", "-s", std::to_string(bytes), "-n",
                             std::to_string(n), "-w",
                             std::to_string(std::max<size_t>(n / 10, 2))},
                            timeout, fig);
          !e.empty()) {
        // A yardstick that fails leaves a gap, not a failed run.
        std::fprintf(stderr, "ucx_perftest tag_bw over %s: %s\n", name,
                     e.c_str());
        continue;
      }
      out.ucx_bandwidth.push_back(
        {name, bytes, fig[5] * double(1 << 20) / 1e9});
    }
    std::vector<double> fig;
    if (auto e = run_pair(exe, tls,
                          {"-t", "tag_lat", "-s", "4096", "-n",
                           quick ? "2000" : "20000", "-w", "1000"},
                          timeout, fig);
        !e.empty())
      std::fprintf(stderr, "ucx_perftest tag_lat over %s: %s\n", name,
                   e.c_str());
    else
      out.ucx_latency_4k.push_back({name, fig[1]});
  }
  return {};
}

} // namespace actorps::bench
