// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include "caf/actor_system_config.hpp"
#include "caf/error.hpp"

#include <actorps/runtime/system_options.hpp>

namespace actorps {

/// Actor-system configuration with every actorps message type and the
/// actorps error category registered. No command-line parsing: the apps parse
/// their own options and set what they need. With `opts.network` and
/// `opts.tls` set, CAF's OpenSSL module is loaded with those files: call
/// `check_tls` first (CAF aborts on some incomplete settings).
class system_config : public caf::actor_system_config {
public:
  explicit system_config(const system_options& opts = {});
};

/// `tls_problem(tls)` as an error: `none`, or `bad_config` with its text.
caf::error check_tls(const tls_files& tls);

} // namespace actorps
