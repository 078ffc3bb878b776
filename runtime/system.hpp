// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include "caf/actor_system_config.hpp"
#include "caf/error.hpp"

#include <chrono>
#include <string>

#include <actorps/runtime/system_options.hpp>

namespace actorps {

/// Actor-system configuration with every actorps message type and the
/// actorps error category registered. No command-line parsing: the apps parse
/// their own options and set what they need. With `opts.network` and
/// `opts.tls` set, every connection the system publishes or opens through
/// actorps speaks mutual TLS with those files (check them with `check_tls`
/// first); without them but with `opts.token`, each opens with the proof
/// of the token (runtime/proof.hpp).
class system_config : public caf::actor_system_config {
public:
  explicit system_config(const system_options& opts = {});

  /// The TLS files of a networked system; none set otherwise.
  const tls_files& tls() const noexcept {
    return tls_;
  }

  /// The secret every plain TCP connection of a networked system proves
  /// (`core::link_secret` of its token): "" with TLS or without a token.
  const std::string& link_secret() const noexcept {
    return link_secret_;
  }

  /// How long an accepted connection may take to shake hands.
  std::chrono::milliseconds handshake_timeout() const noexcept {
    return handshake_timeout_;
  }

private:
  tls_files tls_;
  std::string link_secret_;
  std::chrono::milliseconds handshake_timeout_{10000};
};

/// `tls_problem(tls)` as an error: `none`, or `bad_config` with its text.
caf::error check_tls(const tls_files& tls);

} // namespace actorps
