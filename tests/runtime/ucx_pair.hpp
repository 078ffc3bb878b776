// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Two planes of this process connected over loopback TCP, each with a
// shared-memory segment for its large messages to the other (the UCX
// segment and staged-send tests).

#include <cstddef>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/ucx/plane.hpp"
#include "tests/runtime/ucx_planes.hpp"

namespace actorps::test {

// Planes over connections UCX watches (loopback TCP), with a segment of
// `segment` bytes each for their large messages to one another.
inline std::unique_ptr<ucx::plane>
start_plane(inbox& box, std::size_t segment,
            const std::string& secret = "job-secret",
            std::size_t max_body = 1 << 30) {
  ucx::plane_options opts;
  opts.secret = secret;
  opts.shared_memory = false;
  opts.shared_segment = segment;
  opts.max_body = max_body;
  return started(opts, box.handlers());
}

inline std::vector<char> bytes(const std::string& text) {
  return {text.begin(), text.end()};
}

// `n` floats counting up from `first`.
inline std::shared_ptr<std::vector<float>> counting(std::size_t n,
                                                    float first) {
  auto x = std::make_shared<std::vector<float>>(n);
  std::iota(x->begin(), x->end(), first);
  return x;
}

inline bool same(const std::vector<char>& got, const std::vector<float>& want) {
  return got.size() == want.size() * sizeof(float)
         && std::memcmp(got.data(), want.data(), got.size()) == 0;
}

// A connected pair: A sends to B, B answers on the connection A's hello
// opened. Both sides' segments are in use once a first message went back
// and forth (the offer and its answer travel before it).
struct pair_of_planes {
  inbox a_box;
  inbox b_box;
  std::unique_ptr<ucx::plane> a;
  std::unique_ptr<ucx::plane> b;
  ucx::peer_id to_b = 0;
  ucx::peer_id to_a = 0;

  explicit pair_of_planes(std::size_t segment, std::size_t b_max_body = 1 << 30)
    : a(start_plane(a_box, segment)),
      b(start_plane(b_box, segment, "job-secret", b_max_body)) {
    to_b = a->connect(b->address());
    a->send(to_b, bytes("ping"), ucx::payload{});
    REQUIRE(b_box.wait([](inbox& x) { return x.bodies.size() == 1; }));
    REQUIRE(a_box.wait([](inbox& x) { return x.up.size() == 1; }));
    // B's peer id for A: the one its messages came from.
    to_a = b->connect(a->address());
    b->send(to_a, bytes("pong"), ucx::payload{});
    REQUIRE(a_box.wait([](inbox& x) { return x.bodies.size() == 1; }));
  }
};

} // namespace actorps::test
