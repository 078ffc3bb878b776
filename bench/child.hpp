// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

/// The processes of actorps-bench's dist mode: each role runs as a child
/// whose stdout and stderr the harness reads line by line. Free of CAF.
namespace actorps::bench {

class child {
public:
  child() = default;
  child(const child&) = delete;
  child& operator=(const child&) = delete;

  /// Kills the process if it still runs.
  ~child();

  /// Starts `argv[0]` with `argv`; an error text or an empty string.
  std::string start(const std::vector<std::string>& argv);

  /// The next complete output line, or nothing when `timeout` passed or the
  /// output ended first.
  std::optional<std::string> next_line(std::chrono::milliseconds timeout);

  /// Waits for the exit: the exit code, -signal when killed, or nothing
  /// after `timeout`.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);

  /// The process id (-1 before `start`).
  pid_t pid() const noexcept {
    return pid_;
  }

  /// Every line read so far, for error messages.
  const std::string& transcript() const {
    return transcript_;
  }

private:
  bool fill(std::chrono::steady_clock::time_point deadline);

  pid_t pid_ = -1;
  int fd_ = -1;
  bool eof_ = false;
  std::optional<int> status_;
  std::string buffer_;
  std::string transcript_;
};

/// The path of the running executable (for starting its roles).
std::string self_path();

} // namespace actorps::bench
