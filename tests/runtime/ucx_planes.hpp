// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Planes for the UCX tests: a plane whose frames go into a frame_queue,
// each tagged with the identity its sender proved, as start_plane does for
// the apps (runtime/ucx/ingress.cpp).

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/ucx/frames.hpp"
#include "runtime/ucx/ingress.hpp"
#include "runtime/ucx/plane.hpp"

namespace actorps::test {

/// A plane started with `opts` and `handlers`; REQUIREs that it started.
inline std::unique_ptr<ucx::plane> started(const ucx::plane_options& opts,
                                           ucx::plane_handlers handlers) {
  std::string error;
  auto p = ucx::plane::start(opts, std::move(handlers), error);
  INFO(error);
  REQUIRE(p);
  return p;
}

/// `bytes` in hex (how a plane's address reaches a helper process).
inline std::string hex_of(const std::vector<char>& bytes) {
  std::string hex;
  for (auto ch : bytes) {
    char two[3];
    std::snprintf(two, sizeof(two), "%02x", static_cast<unsigned char>(ch));
    hex += two;
  }
  return hex;
}

/// What a plane's handlers saw, with waits that time out.
struct inbox {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<std::pair<ucx::peer_id, std::vector<char>>> headers;
  std::vector<std::vector<char>> bodies;
  std::vector<ucx::peer_id> up;
  std::vector<std::string> down;
  // Set (under `mtx`), the plane's thread waits on it in the message with
  // header "0" (and reads nothing else meanwhile).
  std::shared_future<void> gate_at_zero;
  // Set (under `mtx`), every received buffer is kept here as it came (a
  // view of a peer's segment keeps its slot).
  bool keep_buffers = false;
  std::vector<ucx::buffer> buffers;

  ucx::plane_handlers handlers() {
    ucx::plane_handlers h;
    h.on_message = [this](ucx::peer_id from, std::vector<char> header,
                          ucx::buffer body) {
      std::shared_future<void> gate;
      {
        std::lock_guard<std::mutex> guard{mtx};
        gate = gate_at_zero;
      }
      if (gate.valid() && header == std::vector<char>{'0'})
        gate.wait();
      std::lock_guard<std::mutex> guard{mtx};
      headers.emplace_back(from, std::move(header));
      bodies.push_back(body.bytes());
      if (keep_buffers)
        buffers.push_back(std::move(body));
      cv.notify_all();
    };
    h.on_peer_up = [this](ucx::peer_id id, const std::vector<char>&, uint32_t) {
      std::lock_guard<std::mutex> guard{mtx};
      up.push_back(id);
      cv.notify_all();
    };
    h.on_peer_down = [this](ucx::peer_id, const std::string& why) {
      std::lock_guard<std::mutex> guard{mtx};
      down.push_back(why);
      cv.notify_all();
    };
    return h;
  }

  /// Waits for the frame that answers request `req`: its kind and body
  /// (a failure with no body if none came).
  std::pair<ucx::frame_kind, std::vector<char>> reply_to(uint64_t req) {
    auto answered = wait([&](inbox& x) {
      for (auto& [from, header] : x.headers)
        if (auto r = ucx::decode(header); r && r->request == req)
          return true;
      return false;
    });
    CHECK(answered);
    std::lock_guard<std::mutex> guard{mtx};
    for (size_t i = 0; i < headers.size(); ++i)
      if (auto r = ucx::decode(headers[i].second); r && r->request == req)
        return std::make_pair(r->kind, bodies[i]);
    return std::make_pair(ucx::frame_kind::failure, std::vector<char>{});
  }

  std::size_t count() {
    std::lock_guard<std::mutex> guard{mtx};
    return bodies.size();
  }

  template <class Pred>
  bool
  wait(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock{mtx};
    return cv.wait_for(lock, limit, [&] { return pred(*this); });
  }
};

// Options of a plane holding the data secret "s" whose peers prove the
// identity secrets `secret_of` gives; with an identity of its own (worker
// `identity - 1`), it proves that one's.
inline ucx::plane_options
identity_options(const std::function<std::string(uint32_t)>& secret_of,
                 uint32_t identity) {
  ucx::plane_options opts;
  opts.secret = "s";
  opts.secret_of = secret_of;
  opts.identity = identity;
  if (identity != 0)
    opts.identity_secret = secret_of(identity);
  return opts;
}

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
  // As start_plane's: what the queue's users put off runs between passes
  // (an ingress that runs its shards on the plane's thread needs it).
  if (!handlers.on_idle)
    handlers.on_idle = [queue] { queue->flush(); };
  std::string error;
  std::shared_ptr<ucx::plane> result = ucx::plane::start(opts, handlers, error);
  INFO(error);
  REQUIRE(result);
  return result;
}

} // namespace actorps::test
