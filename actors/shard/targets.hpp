// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Where a shard's operations send their outcomes (internal to
// actors/shard/): a promise, a data plane's sink or a place in a batch
// reply, and the operations that wait with them.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "caf/error.hpp"
#include "caf/typed_response_promise.hpp"

#include "actors/shard/gate.hpp"
#include "actors/shard/shard.hpp"
#include "core/rows.hpp"
#include "messages/types.hpp"

namespace actorps {

using ok_promise = caf::typed_response_promise<caf::ok_atom>;
using pull_promise = caf::typed_response_promise<shared_floats>;
using batch_promise = caf::typed_response_promise<float_parts>;

// The reply of a batch: the pulled values back to back, each slice's buffer
// shared as a piece (copy on write, as a single pull shares it), delivered
// once every operation of the batch completed, or the first error at once.
// Slices shorter than `min_shared_floats` on average are copied into one
// buffer instead: per piece, sharing costs more than copying a few floats.
struct batch_reply {
  batch_promise rp;
  // Arrived over a data plane: the reply goes to its sink instead of `rp`.
  plane_reply direct;
  float_parts out;
  // The copied reply when the slices are short.
  std::vector<float> flat;
  bool shared = true;
  std::size_t remaining = 0;
  bool failed = false;

  void arrive() {
    if (failed || --remaining > 0)
      return;
    auto value = shared ? std::move(out) : float_parts{std::move(flat)};
    if (direct.sink)
      direct.sink->parts(direct.peer, direct.request, std::move(value));
    else
      rp.deliver(std::move(value));
  }

  void fail(caf::error err) {
    if (failed)
      return;
    failed = true;
    if (direct.sink)
      direct.sink->fail(direct.peer, direct.request, err);
    else
      rp.deliver(std::move(err));
  }
};

using batch_ptr = std::shared_ptr<batch_reply>;

// Where the outcome of an operation sent on its own (not in a batch) goes:
// its promise, or the sink of a data plane it arrived over; and, on rows of
// a table slice (rows_push, rows_pull), the rows (local indices) and the
// table's row size.
struct op_single {
  ok_promise push_rp;
  pull_promise pull_rp;
  plane_reply direct;
  std::vector<uint64_t> rows;
  uint64_t dim = 0;
};

// Where the outcome of one operation goes: an op_single, or a place in a
// batch reply. Kept small (a waiting pull or an early operation holds one
// per slice, and a batch of 10000 keys makes 10000): what only a single
// operation needs lies behind `one`, shared by copies of the target.
struct op_target {
  op_kind kind = op_kind::push;
  // On rows of a table slice (see op_single).
  bool table = false;
  std::shared_ptr<op_single> one;
  batch_ptr batch;
  // Where a pulled value goes in batch->out.
  uint64_t offset = 0;

  // The single operation's part, made on first use.
  op_single& single() {
    if (!one)
      one = std::make_shared<op_single>();
    return *one;
  }

  // A data plane's sink, or null.
  reply_sink* sink() const noexcept {
    return one ? one->direct.sink.get() : nullptr;
  }

  // Run by a backup from its primary's forward: nobody waits for it.
  bool mute = false;
  // Forwarded to a backup as operation `forward` of `gate`: completes once
  // the backup acknowledged it.
  gate_ptr gate;
  uint64_t forward = 0;

  // True if the outcome must wait for the backup.
  bool waits() const {
    return gate && gate->holds(forward);
  }

  // True if the outcome must wait for the backup: `then` runs it later.
  // (Callers test `waits` before they make `then`: a copy of this target
  // costs atomic operations on every slice of a batch.)
  template <class F>
  bool held(F then) {
    if (!waits())
      return false;
    auto g = std::move(gate);
    g->hold(forward, std::move(then));
    return true;
  }

  void pushed() {
    if (mute)
      return;
    if (waits() && held([t = *this]() mutable { t.pushed(); }))
      return;
    if (batch)
      batch->arrive();
    else if (auto* out = sink())
      out->ok(one->direct.peer, one->direct.request);
    else
      single().push_rp.deliver(caf::ok_atom::value);
  }

  // Pulls share the slice's buffer (copy on write, see shared_floats): a
  // single pull as its reply, a batch as one piece of its reply.
  void pulled(const shared_floats& value) {
    if (mute)
      return;
    if (table) {
      // The rows asked for, gathered: the table is never shared.
      shared_floats x{core::gather_rows(value.data(), one->dim, single().rows)};
      if (!hold_value(x))
        pulled_value(x);
      return;
    }
    if (!batch) {
      if (!hold_value(value))
        pulled_value(value);
      return;
    }
    if (!batch->failed && !batch->shared) {
      std::memcpy(batch->flat.data() + offset, value.data(),
                  value.size() * sizeof(float));
    } else if (!batch->failed && value.size() > 0) {
      auto& out = batch->out;
      out.pieces.push_back(float_piece{
        static_cast<uint32_t>(out.buffers.size()), 0, offset, value.size()});
      out.buffers.push_back(value);
    }
    if (waits() && held([b = batch]() { b->arrive(); }))
      return;
    batch->arrive();
  }

  // True if a single pull's value `x` must wait for the backup: then it
  // leaves once the backup acknowledged. A data plane's sink may make it
  // ready to leave now (reply_sink::value_later), so that its copy is made
  // while the backup works and the slice's buffer is not held meanwhile.
  bool hold_value(const shared_floats& x) {
    if (!gate || !gate->holds(forward))
      return false;
    std::function<void()> later;
    if (auto* out = sink())
      later = out->value_later(one->direct.peer, one->direct.request, x);
    if (!later)
      later = [t = *this, x]() mutable { t.pulled_value(x); };
    return held(std::move(later));
  }

  // A single pull's value (not a batch's), once nothing holds it.
  void pulled_value(const shared_floats& x) {
    if (auto* out = sink())
      out->value(one->direct.peer, one->direct.request, x);
    else
      single().pull_rp.deliver(x);
  }

  void fail(caf::error err) {
    if (mute)
      return;
    if (waits() && held([t = *this, err]() mutable { t.fail(err); }))
      return;
    if (batch)
      batch->fail(std::move(err));
    else if (auto* out = sink())
      out->fail(one->direct.peer, one->direct.request, err);
    else if (kind == op_kind::push)
      single().push_rp.deliver(std::move(err));
    else
      single().pull_rp.deliver(std::move(err));
  }
};

// An operation that arrived before an earlier one of the same worker.
struct stashed_op {
  std::vector<float> grad;
  op_target target;
};

// A pull waiting for the sync round it depends on (bounded staleness: for
// the slowest live worker's clock it needs).
struct waiting_pull {
  uint64_t min_rounds = 0;
  op_target target;
  uint32_t worker = 0;
};

} // namespace actorps
