// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <string>
#include <vector>

#include "apps/common/train.hpp"

namespace actorps::apps {

/// Writes one line per epoch (epoch, train_loss, test_accuracy,
/// samples_per_s, seconds); an error text or an empty string.
std::string write_csv(const std::string& path,
                      const std::vector<epoch_report>& rs);

/// Writes two line charts side by side (training loss, test accuracy),
/// with a marker on every epoch; an error text or an empty string.
std::string write_svg(const std::string& path, const std::string& title,
                      const std::vector<epoch_report>& rs);

} // namespace actorps::apps
