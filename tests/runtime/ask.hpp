// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Asking an actor from a test, the test failing on an error or no reply.

#include <chrono>
#include <utility>

#include <catch2/catch.hpp>

#include "caf/error.hpp"
#include "caf/scoped_actor.hpp"

namespace actorps::test {

// Sends `xs` to `to` and returns its reply of type `Reply` (10 s at most).
template <class Reply, class Handle, class... Ts>
Reply ask(caf::scoped_actor& self, const Handle& to, Ts&&... xs) {
  Reply out{};
  bool ok = false;
  self->request(to, std::chrono::seconds(10), std::forward<Ts>(xs)...)
    .receive(
      [&](Reply& x) {
        out = std::move(x);
        ok = true;
      },
      [&](caf::error& err) { FAIL(to_string(err)); });
  REQUIRE(ok);
  return out;
}

} // namespace actorps::test
