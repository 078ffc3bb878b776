// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string>

namespace actorps {

/// Error codes of actorps. Every error crossing an actor boundary carries one
/// of these in the `actorps` category plus a human message naming the
/// operation, what was expected and what arrived.
///
/// This header is free of CAF so that pure libraries can report errors too;
/// `messages/errors.hpp` turns a code into a `caf::error`.
enum class errc : uint8_t {
  /// Not an error.
  none = 0,
  /// The key (or slice) was never declared or initialized.
  unknown_key,
  /// A value's shape or element count differs from the key's.
  shape_mismatch,
  /// A push or pull reached a slice before its init.
  not_initialized,
  /// The key (or slice) was initialized before.
  already_initialized,
  /// The optimizer name or one of its parameters is invalid.
  bad_optimizer,
  /// A node that the operation needs is dead.
  dead_node,
  /// The operation did not complete in time.
  timeout,
  /// The node presented a wrong job token.
  unauthorized,
  /// A configuration value or an argument is invalid.
  bad_config,
  /// The store handle was closed before the call.
  closed,
  /// Reading or writing a checkpoint file failed.
  checkpoint_io,
  /// A checkpoint failed its magic, length or checksum checks.
  checkpoint_corrupt,
  /// A checkpoint does not match the store it is loaded into.
  checkpoint_mismatch,
  /// The caller gave up waiting (store_options::interrupted, e.g. Ctrl-C
  /// in Python); the operation itself may still complete.
  interrupted,
};

/// Returns the name of `x`, e.g. "unknown_key".
std::string to_string(errc x);

/// Number of values in `errc`, including `none`.
constexpr uint8_t errc_count = static_cast<uint8_t>(errc::interrupted) + 1;

/// Result of a pure (CAF-free) operation: a code plus a human message.
struct status {
  errc code = errc::none;
  std::string message;

  /// True if the operation succeeded.
  bool ok() const noexcept {
    return code == errc::none;
  }
};

} // namespace actorps
