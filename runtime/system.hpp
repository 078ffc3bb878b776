// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include "caf/actor_system_config.hpp"

#include <actorps/runtime/system_options.hpp>

namespace actorps {

/// Actor-system configuration with every actorps message type and the
/// actorps error category registered. No command-line parsing: the apps parse
/// their own options and set what they need.
class system_config : public caf::actor_system_config {
public:
  explicit system_config(const system_options& opts = {});
};

} // namespace actorps
