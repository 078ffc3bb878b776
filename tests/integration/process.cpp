// SPDX-License-Identifier: BSD-3-Clause
#include "tests/integration/process.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace actorps::test {

using clock_type = std::chrono::steady_clock;

process::process(std::vector<std::string> argv, bool stdin_pipe) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  int in[2] = {-1, -1};
  if (stdin_pipe)
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  pid_ = ::fork();
  REQUIRE(pid_ >= 0);
  if (pid_ == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    if (stdin_pipe)
      ::dup2(in[0], STDIN_FILENO); // (dup2 clears O_CLOEXEC on the copy)
    std::vector<char*> args;
    for (auto& a : argv)
      args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  fd_ = fds[0];
  if (stdin_pipe) {
    ::close(in[0]);
    in_fd_ = in[1];
  }
}

void process::send_line(const std::string& line) {
  REQUIRE(in_fd_ >= 0);
  auto text = line + "\n";
  // (A process that died closed its end: EPIPE, not SIGPIPE.)
  auto old = std::signal(SIGPIPE, SIG_IGN);
  auto n = ::write(in_fd_, text.data(), text.size());
  std::signal(SIGPIPE, old);
  REQUIRE(n == static_cast<ssize_t>(text.size()));
}

process::~process() {
  if (!status_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  if (fd_ >= 0)
    ::close(fd_);
  if (in_fd_ >= 0)
    ::close(in_fd_);
}

bool process::read_some(std::chrono::milliseconds timeout) {
  if (eof_)
    return false;
  pollfd p{fd_, POLLIN, 0};
  auto n = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (n <= 0)
    return true;
  char buf[4096];
  auto got = ::read(fd_, buf, sizeof(buf));
  if (got <= 0) {
    eof_ = true;
    return false;
  }
  output_.append(buf, static_cast<size_t>(got));
  return true;
}

bool process::wait_for(const std::string& text,
                       std::chrono::milliseconds timeout) {
  auto deadline = clock_type::now() + timeout;
  while (output_.find(text) == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - clock_type::now());
    if (left.count() <= 0 || !read_some(left))
      return output_.find(text) != std::string::npos;
  }
  return true;
}

const std::string& process::drained() {
  while (!eof_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0)
      break;
    read_some(std::chrono::milliseconds{0});
  }
  return output_;
}

std::optional<int> process::wait_exit(std::chrono::milliseconds timeout) {
  if (status_)
    return status_;
  auto deadline = clock_type::now() + timeout;
  // The pipe closes when the process exits; then waitpid does not block long.
  while (!eof_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - clock_type::now());
    if (left.count() <= 0)
      return std::nullopt;
    read_some(left);
  }
  int st = 0;
  if (::waitpid(pid_, &st, 0) != pid_)
    return std::nullopt;
  status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  return status_;
}

void process::kill9() {
  if (!status_ && pid_ > 0)
    ::kill(pid_, SIGKILL);
}

void process::stop() {
  if (!status_ && pid_ > 0)
    ::kill(pid_, SIGSTOP);
}

uint16_t unused_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(s);
  return ntohs(addr.sin_port);
}

} // namespace actorps::test
