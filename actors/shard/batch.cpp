// SPDX-License-Identifier: BSD-3-Clause
// A shard's batches: many slices' operations of one worker in one message,
// checked whole before any of them runs, answered in one reply.
#include "actors/shard/state.hpp"

#include <string>
#include <vector>

#include "core/batching.hpp"
#include "core/parts.hpp"
#include "core/prefetch.hpp"
#include "messages/errors.hpp"

namespace actorps {

caf::error shard_state::batch(const slice_batch& msg, const batch_ptr& reply) {
  auto n = msg.slices.size();
  if (msg.kind > static_cast<uint8_t>(op_kind::push_pull))
    return make_error(errc::bad_config, "batch: unknown operation kind "
                                          + std::to_string(msg.kind));
  if (n == 0 || msg.seqs.size() != n)
    return make_error(errc::bad_config,
                      "batch: " + std::to_string(n) + " slices and "
                        + std::to_string(msg.seqs.size())
                        + " sequence numbers (need as many, at least one)");
  ++stats.batches;
  auto kind = static_cast<op_kind>(msg.kind);
  const char* op = kind == op_kind::push   ? "push"
                   : kind == op_kind::pull ? "pull"
                                           : "push_pull";
  if (auto err = check_worker(op, msg.slices[0], msg.worker))
    return err;
  // Check every slice and the payload before running anything.
  // (Each slice is found first and what its size reads fetched, so that
  // the cache misses of many small slices overlap instead of one waiting
  // for the other.)
  std::vector<slice_state*> found(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto* s = find(msg.slices[i]);
    if (s == nullptr)
      return not_initialized(op, msg.slices[i]);
    s->value.prefetch_size();
    found[i] = s;
  }
  uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (found[i]->dim != 0)
      return a_table(op, msg.slices[i]);
    total += found[i]->value.size();
  }
  if (kind != op_kind::push)
    if (auto err = check_reply(op, total))
      return err;
  auto pushes = kind != op_kind::pull;
  auto& flat = msg.data.data;
  auto in_parts = flat.empty() && msg.parts.size > 0;
  if (!flat.empty() && msg.parts.size > 0)
    return make_error(errc::bad_config,
                      std::string{op}
                        + ": the batch carries values both in one buffer and "
                          "in pieces");
  auto carried = in_parts ? msg.parts.size : flat.size();
  if (pushes && carried != total)
    return make_error(errc::shape_mismatch,
                      std::string{op} + ": " + std::to_string(n)
                        + " slices hold " + std::to_string(total)
                        + " floats but the batch carries "
                        + std::to_string(carried));
  if (pushes && in_parts && !msg.parts.valid(true))
    return make_error(errc::shape_mismatch,
                      std::string{op}
                        + ": the pieces of the batch do not cover its values "
                          "in order");
  reply->remaining = n;
  if (kind != op_kind::push) {
    reply->shared = core::batching::share(n, total);
    if (reply->shared) {
      reply->out.size = total;
      reply->out.buffers.reserve(n);
      reply->out.pieces.reserve(n);
    } else {
      reply->flat.resize(total);
    }
  }
  // Whether operations may run at once where nothing waits (run_plain),
  // and whether a sync push completes its round alone.
  auto plain = !holding() && !awaiting_clocks && !cfg.ssp() && live[msg.worker];
  auto lone = plain;
  for (uint32_t w = 0; lone && w < cfg.num_workers; ++w)
    lone = w == msg.worker || !live[w];
  core::parts_cursor cursor{msg.parts};
  uint64_t offset = 0;
  // One target for every slice that runs at once (a copy of the reply's
  // pointer per slice cost two atomic operations each on 10000-slice
  // batches); one that waits takes it, and the next slice gets a new one.
  op_target t;
  // (What running a slice reads is fetched ahead in three steps, each
  // reading what the one before fetched: the slice's state, its value's
  // size, its floats. Checking 10000 slices above evicted the first ones.)
  // (Written out in the loop: GCC drops a helper's prefetches, see
  // core/prefetch.hpp.)
  for (std::size_t i = 0; i < n; ++i) {
    if (i + 12 < n)
      core::prefetch_lines(found[i + 12], slice_front(*found[i + 12]));
    if (i + 6 < n)
      found[i + 6]->value.prefetch_size();
    if (i + 3 < n)
      found[i + 3]->value.prefetch_data();
    auto len = found[i]->value.size();
    if (!t.batch) {
      t = op_target{};
      t.kind = kind;
      t.batch = reply;
    }
    t.offset = offset;
    t.gate.reset();
    t.forward = 0;
    const float* g = nullptr;
    if (pushes)
      g = in_parts ? cursor.read(offset, len) : flat.data() + offset;
    if (!plain
        || !run_plain(*found[i], msg.slices[i], msg.worker, msg.seqs[i], g, t,
                      lone))
      submit(op, found[i], msg.slices[i], msg.worker, msg.seqs[i], g,
             pushes ? len : 0, t);
    offset += len;
  }
  return caf::none;
}

bool shard_state::run_plain(slice_state& s, slice_id id, uint32_t worker,
                            uint64_t seq, const float* g, op_target& t,
                            bool lone) {
  auto& c = s.clocks[worker];
  // (Pushes held ahead wait for rounds this one may complete: submit's
  // way, as is a push into a round past the slice's current one.)
  if (seq != c.next_seq || !s.stash.empty() || !held_ahead.empty())
    return false;
  auto pushes = t.kind != op_kind::pull;
  if (pushes && cfg.sync && c.pushes != s.rounds_done)
    return false;
  ++c.next_seq;
  if (pushes) {
    auto n = s.value.size();
    if (cfg.sync && lone && s.rounds.empty() && s.waiting.empty()) {
      // The round's only push: applied without an entry for the round
      // (advance_rounds below then finds none).
      ++stats.pushes;
      count_push(worker, n);
      ++c.pushes;
      finish_round(s, plain_round, g, nullptr);
      ++s.rounds_done;
    } else if (auto err = do_push(s, id, worker, g, n, nullptr)) {
      t.fail(std::move(err));
      return true;
    }
    if (t.kind == op_kind::push) {
      t.pushed();
      advance_rounds(s);
      return true;
    }
    advance_rounds(s);
  }
  do_pull(s, worker, t);
  return true;
}

} // namespace actorps
