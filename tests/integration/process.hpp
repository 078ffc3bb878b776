// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace actorps::test {

/// A child process whose stdout and stderr go to one pipe that the test
/// reads. Waiting is event-driven (poll on the pipe, waitpid), each wait
/// bounded by a deadline. The destructor kills a child that is still
/// running, so a failed REQUIRE leaves no process behind.
class process {
public:
  /// Starts `argv[0]` with `argv`; REQUIREs that it started. With
  /// `stdin_pipe` its standard input is a pipe the test writes (`send_line`),
  /// else the test's own.
  explicit process(std::vector<std::string> argv, bool stdin_pipe = false);

  process(const process&) = delete;
  process& operator=(const process&) = delete;

  ~process();

  /// Reads output until it contains `text`; false after `timeout` or when the
  /// process closed its output first.
  bool wait_for(const std::string& text, std::chrono::milliseconds timeout);

  /// Waits for the exit; the exit code, or -signal when killed, or nothing
  /// after `timeout`.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);

  /// Writes `line` and a newline to the process's standard input (a
  /// `stdin_pipe` process); REQUIREs that it was written.
  void send_line(const std::string& line);

  /// Sends SIGKILL.
  void kill9();

  /// Sends SIGSTOP: the process hangs without closing its connections.
  void stop();

  /// Reads what the process printed so far without waiting; everything
  /// read.
  const std::string& drained();

  /// Everything read so far.
  const std::string& output() const {
    return output_;
  }

  pid_t pid() const {
    return pid_;
  }

private:
  // Reads what is available within `timeout`; false once the pipe is closed.
  bool read_some(std::chrono::milliseconds timeout);

  pid_t pid_ = -1;
  int fd_ = -1;
  int in_fd_ = -1;
  bool eof_ = false;
  std::optional<int> status_;
  std::string output_;
};

/// A loopback port on which nothing listens right now.
uint16_t unused_port();

} // namespace actorps::test
