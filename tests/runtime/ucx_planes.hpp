// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Planes for the UCX tests: a plane whose frames go into a frame_queue,
// each tagged with the identity its sender proved, as start_plane does for
// the apps (runtime/ucx/ingress.cpp).

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/ucx/ingress.hpp"
#include "runtime/ucx/plane.hpp"

namespace actorps::test {

/// Starts a plane with `opts` whose frames go into `queue`; `seen` (if set)
/// sees each frame's header first, `handlers.on_peer_down` is kept.
inline std::shared_ptr<ucx::plane>
plane_into_queue(std::shared_ptr<ucx::frame_queue> queue,
                 const ucx::plane_options& opts,
                 ucx::plane_handlers handlers = {},
                 std::function<void(const std::vector<char>&)> seen = {}) {
  auto ids = std::make_shared<std::map<ucx::peer_id, uint32_t>>();
  handlers.on_peer_up = [ids](ucx::peer_id id, const std::vector<char>&,
                              uint32_t who) { (*ids)[id] = who; };
  handlers.on_message = [queue, seen, ids](ucx::peer_id from,
                                           std::vector<char> header,
                                           ucx::buffer body) {
    // Counted once queued (and handed on, if the queue has a handler), so
    // that a test waiting on the count sees the frame where it goes next.
    auto copy = seen ? header : std::vector<char>{};
    queue->push(
      ucx::frame{from, (*ids)[from], std::move(header), std::move(body)});
    if (seen)
      seen(copy);
  };
  std::string error;
  std::shared_ptr<ucx::plane> result = ucx::plane::start(opts, handlers, error);
  INFO(error);
  REQUIRE(result);
  return result;
}

} // namespace actorps::test
