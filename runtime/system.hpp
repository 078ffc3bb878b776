// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>

#include "caf/actor_system_config.hpp"

namespace actorps {

/// Scheduler settings of an actorps actor system.
struct system_options {
  /// Scheduler threads; 0 keeps CAF's default (max(cores, 4)).
  std::size_t threads = 0;
  /// Use CAF's deterministic test scheduler (message-level tests).
  bool testing = false;
};

/// Actor-system configuration with every actorps message type and the
/// actorps error category registered. No command-line parsing: the apps parse
/// their own options and set what they need.
class system_config : public caf::actor_system_config {
public:
  explicit system_config(const system_options& opts = {});
};

} // namespace actorps
