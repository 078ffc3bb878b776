// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "apps/common/train.hpp"

namespace actorps::apps {

/// Writes one line per epoch (epoch, train_loss, test_accuracy,
/// samples_per_s, seconds); an error text or an empty string.
std::string write_csv(const std::string& path,
                      const std::vector<epoch_report>& rs);

/// Writes one line per training step (step, epoch, train_loss, seconds)
/// as the steps come: the per-step curve of a run.
class step_csv {
public:
  /// Opens `path` (truncating it) and writes the header; `error()` says
  /// if that failed.
  explicit step_csv(const std::string& path);

  /// Appends one step (flushed at each epoch's end and on close).
  void add(const step_report& r);

  /// Flushes; an error text or an empty string.
  std::string close();

  const std::string& error() const noexcept {
    return error_;
  }

private:
  std::string path_;
  std::ofstream out_;
  uint32_t epoch_ = 0;
  std::string error_;
};

/// Writes two line charts side by side (training loss, test accuracy),
/// with a marker on every epoch; an error text or an empty string.
std::string write_svg(const std::string& path, const std::string& title,
                      const std::vector<epoch_report>& rs);

} // namespace actorps::apps
