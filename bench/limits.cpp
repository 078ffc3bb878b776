// SPDX-License-Identifier: BSD-3-Clause
#include "bench/limits.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace actorps::bench {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs.empty() ? 0.0 : xs[(xs.size() - 1) / 2];
}

std::string errno_text(const char* what) {
  return std::string{what} + ": "
         + std::error_code{errno, std::generic_category()}.message();
}

// A file descriptor closed at scope exit.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

// Moves all of `n` bytes with `io` (read or write), retrying on EINTR and
// short transfers; false on an error or end of stream.
template <class Buf, class IO>
bool transfer_all(int fd, Buf* p, size_t n, IO io) {
  while (n > 0) {
    auto k = io(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool write_all(int fd, const char* p, size_t n) {
  return transfer_all(fd, p, n, ::write);
}

bool read_all(int fd, char* p, size_t n) {
  return transfer_all(fd, p, n, ::read);
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A child process connected to the parent by a loopback TCP connection.
// `serve` runs in the child (system calls only: the child of a fork may
// not touch anything another thread could have held).
class peer {
public:
  template <class F>
  std::string start(F serve) {
    fd_guard listener{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    if (listener.fd < 0)
      return errno_text("socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0
        || ::listen(listener.fd, 1) != 0
        || ::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len)
             != 0)
      return errno_text("bind/listen on 127.0.0.1");
    pid_ = ::fork();
    if (pid_ < 0)
      return errno_text("fork");
    if (pid_ == 0) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0
          || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))
               != 0)
        ::_exit(3);
      set_nodelay(fd);
      ::_exit(serve(fd) ? 0 : 4);
    }
    conn_.fd = ::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn_.fd < 0)
      return errno_text("accept");
    set_nodelay(conn_.fd);
    return {};
  }

  int fd() const {
    return conn_.fd;
  }

  /// Closes the connection and reaps the child; an error text if it failed.
  std::string finish() {
    if (conn_.fd >= 0) {
      ::close(conn_.fd);
      conn_.fd = -1;
    }
    if (pid_ <= 0)
      return {};
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      // retry
    }
    pid_ = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return "the loopback peer process failed (status "
             + std::to_string(status) + ")";
    return {};
  }

  ~peer() {
    finish();
  }

private:
  pid_t pid_ = -1;
  fd_guard conn_;
};

double memcpy_gbps(bool quick) {
  const size_t bytes = size_t{64} << 20;
  std::vector<char> a(bytes, 1);
  std::vector<char> b(bytes, 2);
  std::vector<double> rates;
  for (int i = 0; i < (quick ? 3 : 7); ++i) {
    auto start = clock_type::now();
    auto* dst = i % 2 == 0 ? b.data() : a.data();
    std::memcpy(dst, i % 2 == 0 ? a.data() : b.data(), bytes);
    // The copy must happen: tell the compiler its result is used.
    __asm__ __volatile__("" : : "r"(dst) : "memory");
    rates.push_back(static_cast<double>(bytes) / seconds_since(start) / 1e9);
  }
  return median(rates);
}

// The child reads `total` bytes, then answers one byte.
std::string tcp_bandwidth(bool quick, double& out) {
  const size_t chunk = size_t{1} << 20;
  const size_t total = (quick ? size_t{64} : size_t{512}) << 20;
  std::vector<double> rates;
  for (int rep = 0; rep < (quick ? 1 : 3); ++rep) {
    peer p;
    auto err = p.start([total, chunk](int fd) {
      std::vector<char> buf(chunk);
      size_t got = 0;
      while (got < total) {
        auto k = ::read(fd, buf.data(), buf.size());
        if (k < 0 && errno == EINTR)
          continue;
        if (k <= 0)
          return false;
        got += static_cast<size_t>(k);
      }
      char ack = 'k';
      return write_all(fd, &ack, 1);
    });
    if (!err.empty())
      return err;
    std::vector<char> buf(chunk, 'x');
    auto start = clock_type::now();
    for (size_t sent = 0; sent < total; sent += chunk)
      if (!write_all(p.fd(), buf.data(), chunk))
        return errno_text("loopback send");
    char ack = 0;
    if (!read_all(p.fd(), &ack, 1))
      return "loopback bandwidth: the peer did not acknowledge";
    rates.push_back(static_cast<double>(total) / seconds_since(start) / 1e9);
    if (auto e = p.finish(); !e.empty())
      return e;
  }
  out = median(rates);
  return {};
}

// The child echoes 64-byte messages until the connection closes.
std::string tcp_round_trip(bool quick, double& out) {
  constexpr size_t size = 64;
  peer p;
  auto err = p.start([](int fd) {
    char buf[size];
    while (read_all(fd, buf, size))
      if (!write_all(fd, buf, size))
        return false;
    return true;
  });
  if (!err.empty())
    return err;
  char buf[size] = {};
  std::vector<double> rtts;
  const int n = quick ? 2000 : 20000;
  rtts.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto start = clock_type::now();
    if (!write_all(p.fd(), buf, size) || !read_all(p.fd(), buf, size))
      return errno_text("loopback ping-pong");
    rtts.push_back(seconds_since(start) * 1e6);
  }
  out = median(rtts);
  return p.finish();
}

// The child reads `bytes`, then writes them back, until the connection
// closes.
std::string tcp_echo(bool quick, size_t bytes, double& out) {
  peer p;
  auto err = p.start([bytes](int fd) {
    std::vector<char> buf(bytes);
    while (read_all(fd, buf.data(), bytes))
      if (!write_all(fd, buf.data(), bytes))
        return false;
    return true;
  });
  if (!err.empty())
    return err;
  std::vector<char> out_buf(bytes, 'x');
  std::vector<char> in_buf(bytes);
  // Up to 1 GB each way in all (quick: 32 MB), 10 to 2000 rounds (quick: 3
  // to 200), after 3 unmeasured ones.
  const size_t budget = quick ? size_t{32} << 20 : size_t{1} << 30;
  auto n = std::clamp<size_t>(budget / std::max<size_t>(bytes, 1),
                              quick ? 3 : 10, quick ? 200 : 2000);
  std::vector<double> rounds;
  for (size_t i = 0; i < n + 3; ++i) {
    auto start = clock_type::now();
    if (!write_all(p.fd(), out_buf.data(), bytes)
        || !read_all(p.fd(), in_buf.data(), bytes))
      return errno_text("loopback echo");
    if (i >= 3)
      rounds.push_back(seconds_since(start) * 1e6);
  }
  out = median(rounds);
  return p.finish();
}

} // namespace

std::string measure_limits(const limits_options& opts, machine_limits& out) {
  out.memcpy_gbps = memcpy_gbps(opts.quick);
  if (auto err = tcp_bandwidth(opts.quick, out.tcp_gbps); !err.empty())
    return err;
  if (auto err = tcp_round_trip(opts.quick, out.tcp_rtt_us); !err.empty())
    return err;
  for (auto bytes : opts.echo_sizes) {
    if (bytes == 0 || out.echo_us(bytes) > 0)
      continue;
    machine_limits::echo e{bytes, 0};
    if (auto err = tcp_echo(opts.quick, bytes, e.round_us); !err.empty())
      return err;
    out.echoes.push_back(e);
  }
  return {};
}

} // namespace actorps::bench
