// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Internal to runtime/ucx and its tests: what a misbehaving peer could send,
// so that tests can show a plane refusing it. Not for the apps.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/ucx/plane.hpp"

namespace actorps::ucx {

struct plane_testing {
  /// Sends `to` a message whose body, `header` says, lies at `offset`,
  /// `length` bytes, slot `index` of this plane's shared-memory segment,
  /// whatever the segment holds (or whether there is one).
  static void send_shared(plane& self, peer_id to, uint64_t offset,
                          uint64_t length, uint32_t index,
                          std::vector<char> header);

  /// True once exactly `n` messages in a segment from peers not admitted
  /// were dropped unread (waits up to `limit` for that many).
  static bool wait_unheard(const plane& self, std::size_t n,
                           std::chrono::milliseconds limit);
};

} // namespace actorps::ucx
