// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Two planes of this process connected over loopback TCP, each with a
// shared-memory segment for its large messages to the other (the UCX
// segment and staged-send tests).

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
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

// Checks the bodies `box` got after its first: one whose header is a
// number i is `sent[i]`, whole, and no number comes twice; one with another
// header goes to `other` (none is expected without it). Returns the numbers
// seen. (The caller holds no lock on `box`.)
inline std::vector<int> check_numbered(
  inbox& box, const std::vector<std::shared_ptr<std::vector<float>>>& sent,
  const std::function<void(const std::string&, const std::vector<char>&)>& other
  = {}) {
  std::lock_guard<std::mutex> guard{box.mtx};
  std::vector<int> seen;
  for (std::size_t k = 1; k < box.headers.size(); ++k) {
    std::string h{box.headers[k].second.begin(), box.headers[k].second.end()};
    if (h.empty() || h.find_first_not_of("0123456789") != std::string::npos) {
      if (other)
        other(h, box.bodies[k]);
      else
        FAIL("a body named " << h);
      continue;
    }
    auto i = std::stoi(h);
    REQUIRE(static_cast<std::size_t>(i) < sent.size());
    CHECK(std::find(seen.begin(), seen.end(), i) == seen.end());
    seen.push_back(i);
    CHECK(same(box.bodies[k], *sent[static_cast<std::size_t>(i)]));
  }
  return seen;
}

// A connected pair: A sends to B, B answers on the connection A's hello
// opened. Both sides' segments are in use once a first message went back
// and forth (the offer and its answer travel before it).
struct pair_of_planes {
  inbox a_box;
  inbox b_box;
  // (Shared: a reply sink holds its plane weakly.)
  std::shared_ptr<ucx::plane> a;
  std::shared_ptr<ucx::plane> b;
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
