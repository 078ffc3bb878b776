// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "caf/error.hpp"

namespace actorps::detail {

/// Collects `n` replies for one response promise (CAF 0.17 has no
/// fan_out_request): the first error is delivered at once and the rest are
/// ignored; once all `n` succeeded, `finish` produces the value to deliver.
/// Lives inside one actor only, so the shared counter is never shared across
/// threads.
template <class Promise>
class fan_in {
public:
  fan_in(Promise rp, std::size_t n) : st_(std::make_shared<state>()) {
    st_->rp = std::move(rp);
    st_->remaining = n;
  }

  /// Records one success; returns true if it was the last one.
  bool arrive() const {
    return !st_->failed && --st_->remaining == 0;
  }

  /// Records a failure: delivers `err` unless an earlier one was delivered.
  void fail(caf::error err) const {
    if (st_->failed)
      return;
    st_->failed = true;
    st_->rp.deliver(std::move(err));
  }

  /// True once a failure was delivered.
  bool failed() const {
    return st_->failed;
  }

  /// The promise, to deliver the final value.
  Promise& promise() const {
    return st_->rp;
  }

private:
  struct state {
    Promise rp;
    std::size_t remaining = 0;
    bool failed = false;
  };
  std::shared_ptr<state> st_;
};

} // namespace actorps::detail
