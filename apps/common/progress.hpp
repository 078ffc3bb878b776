// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "apps/common/train.hpp"

namespace actorps::apps {

/// A training run's progress: on a terminal one bar that redraws itself,
/// otherwise a plain line at each quarter of an epoch; both with the step,
/// loss, samples/s, the time since the run started and an estimate of the
/// time left. Lines go to stdout, or each to `sink` when given (no bar).
class progress_printer {
public:
  using line_sink = std::function<void(const std::string&)>;

  explicit progress_printer(uint32_t epochs, line_sink sink = {});

  void update(const progress& p);

  void epoch_done(const epoch_report& r);

  /// "1:05" (m:ss) or "1:02:05" (h:mm:ss).
  static std::string clock_text(double seconds);

private:
  double elapsed() const;

  void line(const std::string& text);

  uint32_t epochs_;
  line_sink sink_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  uint32_t last_epoch_ = 0;
  int last_quarter_ = 0;
};

} // namespace actorps::apps
