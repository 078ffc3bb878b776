// SPDX-License-Identifier: BSD-3-Clause
#include "bench/child.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <system_error>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace actorps::bench {

namespace {

using clock_type = std::chrono::steady_clock;

std::string errno_text(const char* what, int err) {
  return std::string{what} + ": "
         + std::error_code{err, std::generic_category()}.message();
}

std::optional<int> decode(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return -WTERMSIG(status);
  return std::nullopt;
}

} // namespace

child::~child() {
  if (pid_ > 0 && !status_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      // retry
    }
  }
  if (fd_ >= 0)
    ::close(fd_);
}

std::string child::start(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return errno_text("pipe", errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  std::vector<char*> args;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int err = ::posix_spawn(&pid_, args[0], &actions, nullptr, args.data(),
                          environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (err != 0) {
    ::close(fds[0]);
    pid_ = -1;
    return errno_text(("cannot start " + argv[0]).c_str(), err);
  }
  fd_ = fds[0];
  return {};
}

bool child::fill(clock_type::time_point deadline) {
  if (eof_)
    return false;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
    deadline - clock_type::now());
  if (left.count() <= 0)
    return false;
  pollfd p{fd_, POLLIN, 0};
  int n = ::poll(&p, 1, static_cast<int>(left.count()));
  if (n < 0 && errno == EINTR)
    return true;
  if (n <= 0)
    return false;
  char buf[4096];
  auto k = ::read(fd_, buf, sizeof(buf));
  if (k < 0 && errno == EINTR)
    return true;
  if (k <= 0) {
    eof_ = true;
    return false;
  }
  buffer_.append(buf, static_cast<size_t>(k));
  transcript_.append(buf, static_cast<size_t>(k));
  return true;
}

std::optional<std::string> child::next_line(std::chrono::milliseconds timeout) {
  auto deadline = clock_type::now() + timeout;
  for (;;) {
    if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
      auto line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (!fill(deadline))
      return std::nullopt;
  }
}

std::optional<int> child::wait_exit(std::chrono::milliseconds timeout) {
  if (status_)
    return status_;
  auto deadline = clock_type::now() + timeout;
  // Drain the output while waiting, so that the child never blocks on a
  // full pipe; the exit itself is polled with WNOHANG.
  for (;;) {
    int status = 0;
    auto r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = decode(status);
      return status_;
    }
    if (r < 0 && errno != EINTR)
      return std::nullopt;
    if (clock_type::now() >= deadline)
      return std::nullopt;
    if (!fill(
          std::min(deadline, clock_type::now() + std::chrono::milliseconds{20}))
        && eof_) {
      // Output closed: the exit is imminent; wait for it with the deadline
      // still applying, in short steps.
      pollfd none{-1, 0, 0};
      ::poll(&none, 0, 5);
    }
  }
}

std::string self_path() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return {};
  return std::string(buf, static_cast<size_t>(n));
}

} // namespace actorps::bench
