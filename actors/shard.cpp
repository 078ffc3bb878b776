// SPDX-License-Identifier: BSD-3-Clause
#include "actors/shard.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/message_priority.hpp"
#include "caf/send.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

#include "messages/errors.hpp"
#include "core/optimizer.hpp"

namespace actorps {

namespace {

using ok_promise = caf::typed_response_promise<caf::ok_atom>;
using pull_promise = caf::typed_response_promise<shared_floats>;
using batch_promise = caf::typed_response_promise<float_parts>;

std::string slice_name(slice_id id) {
  return "slice " + std::to_string(key_of(id)) + "/"
         + std::to_string(part_of(id));
}

// The reply of a batch: the pulled values back to back, each slice's buffer
// shared as a piece (copy on write, as a single pull shares it), delivered
// once every operation of the batch completed, or the first error at once.
// Slices shorter than `min_shared_floats` on average are copied into one
// buffer instead: per piece, sharing costs more than copying a few floats.
struct batch_reply {
  batch_promise rp;
  float_parts out;
  // The copied reply when the slices are short.
  std::vector<float> flat;
  bool shared = true;
  std::size_t remaining = 0;
  bool failed = false;

  void arrive() {
    if (failed || --remaining > 0)
      return;
    if (shared)
      rp.deliver(std::move(out));
    else
      rp.deliver(float_parts{std::move(flat)});
  }

  void fail(caf::error err) {
    if (failed)
      return;
    failed = true;
    rp.deliver(std::move(err));
  }
};

using batch_ptr = std::shared_ptr<batch_reply>;

// Reads the floats of a pushed batch held in pieces (in order and
// contiguous, checked before), slice after slice: each in place when one
// piece holds it, else gathered into a buffer of its own that stays valid
// until the next read.
class parts_cursor {
public:
  explicit parts_cursor(const float_parts& src) : src_(src) {
    // Nothing to do.
  }

  // The floats [at, at + n) of the value; `at` never decreases.
  const float* read(uint64_t at, uint64_t n) {
    auto& ps = src_.pieces;
    while (i_ < ps.size() && ps[i_].at + ps[i_].length <= at)
      ++i_;
    if (i_ == ps.size())
      return nullptr;
    auto& p = ps[i_];
    auto* first = src_.buffers[p.buffer].data() + p.from + (at - p.at);
    if (at + n <= p.at + p.length)
      return first;
    scratch_.clear();
    scratch_.reserve(n);
    for (auto j = i_; j < ps.size() && scratch_.size() < n; ++j) {
      auto& q = ps[j];
      auto skip = j == i_ ? at - q.at : 0;
      auto k = std::min<uint64_t>(q.length - skip, n - scratch_.size());
      auto* from = src_.buffers[q.buffer].data() + q.from + skip;
      scratch_.insert(scratch_.end(), from, from + k);
    }
    return scratch_.data();
  }

private:
  const float_parts& src_;
  std::size_t i_ = 0;
  std::vector<float> scratch_;
};

// Where the outcome of one operation goes: the promise of a single push or
// pull, or a place in a batch reply.
struct op_target {
  op_kind kind = op_kind::push;
  ok_promise push_rp;
  pull_promise pull_rp;
  batch_ptr batch;
  // Where a pulled value goes in batch->out.
  uint64_t offset = 0;

  void pushed() {
    if (batch)
      batch->arrive();
    else
      push_rp.deliver(caf::ok_atom::value);
  }

  // Pulls share the slice's buffer (copy on write, see shared_floats): a
  // single pull as its reply, a batch as one piece of its reply.
  void pulled(const shared_floats& value) {
    if (!batch) {
      pull_rp.deliver(value);
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
    batch->arrive();
  }

  void fail(caf::error err) {
    if (batch)
      batch->fail(std::move(err));
    else if (kind == op_kind::push)
      push_rp.deliver(std::move(err));
    else
      pull_rp.deliver(std::move(err));
  }
};

// An operation that arrived before an earlier one of the same worker.
struct stashed_op {
  std::vector<float> grad;
  op_target target;
};

// A pull waiting for the sync round it depends on.
struct waiting_pull {
  uint64_t min_rounds = 0;
  op_target target;
};

// Aggregation of one sync round of one slice.
struct round_sum {
  std::vector<float> sum;
  std::vector<bool> contributed;
  uint32_t contributors = 0;
};

struct slice_state {
  shared_floats value;
  std::vector<float> opt_state;
  uint64_t step = 0;
  // Next expected sequence number per worker.
  std::vector<uint64_t> next_seq;
  // Operations that arrived early, by (worker, seq).
  std::map<std::pair<uint32_t, uint64_t>, stashed_op> stash;
  // Sync mode: pushes each worker contributed, rounds applied, open rounds.
  std::vector<uint64_t> pushes_of;
  uint64_t rounds_done = 0;
  std::map<uint64_t, round_sum> rounds;
  std::vector<waiting_pull> waiting;
};

} // namespace

struct shard_state {
  static inline const char* name = "actorps.shard";

  /// Operations a worker may run ahead of the next expected one per slice.
  static constexpr uint64_t max_seq_gap = 1 << 16;

  shard_config cfg;
  optimizer_config opt;
  // The rule is "assign": a round's sum becomes the value as it is.
  bool replaces = true;
  std::unordered_map<slice_id, slice_state> slices;
  std::vector<bool> live;
  shard_stats stats;

  // -- validation -------------------------------------------------------------

  caf::error check_worker(const char* op, slice_id id, uint32_t worker) const {
    if (worker >= cfg.num_workers)
      return make_error(errc::bad_config,
                        std::string{op} + ": worker " + std::to_string(worker)
                          + " out of range (shard " + std::to_string(cfg.index)
                          + " expects " + std::to_string(cfg.num_workers)
                          + " workers) on " + slice_name(id));
    return caf::none;
  }

  // Keeps an operation until its predecessors ran; a duplicate fails.
  void stash(const char* op, slice_state& s, slice_id id, uint32_t worker,
             uint64_t seq, stashed_op x) {
    auto [i, added] = s.stash.emplace(std::make_pair(worker, seq),
                                      stashed_op{});
    if (added) {
      i->second = std::move(x);
      return;
    }
    x.target.fail(
      make_error(errc::bad_config, std::string{op} + ": sequence number "
                                     + std::to_string(seq) + " of worker "
                                     + std::to_string(worker) + " on "
                                     + slice_name(id) + " is already waiting"));
  }

  slice_state* find(slice_id id) {
    auto i = slices.find(id);
    return i == slices.end() ? nullptr : &i->second;
  }

  caf::error not_initialized(const char* op, slice_id id) const {
    return make_error(errc::not_initialized, std::string{op} + ": "
                                               + slice_name(id)
                                               + " is not initialized on shard "
                                               + std::to_string(cfg.index));
  }

  // -- updates ----------------------------------------------------------------

  // Replaces the update rule; every slice's state and step start afresh.
  void set_optimizer(const optimizer_config& x) {
    opt = x;
    replaces = core::replaces_value(opt);
    for (auto& kvp : slices) {
      auto& s = kvp.second;
      s.opt_state.assign(core::state_size(opt, s.value.size()), 0.0f);
      s.step = 0;
    }
  }

  void apply(slice_state& s, const float* merged) {
    auto& w = s.value.mutate();
    core::apply_update(opt, w.data(), merged, s.opt_state.data(), w.size(),
                       s.step);
    ++s.step;
    ++stats.updates;
  }

  // Applies a merged push held in `merged`, which may be taken over: under
  // "assign" it becomes the value without a copy (readers of the old value
  // keep theirs).
  void apply(slice_state& s, std::vector<float>&& merged) {
    if (!replaces) {
      apply(s, merged.data());
      return;
    }
    s.value = shared_floats{std::move(merged)};
    ++s.step;
    ++stats.updates;
  }

  bool round_complete(const round_sum& r) const {
    for (uint32_t w = 0; w < cfg.num_workers; ++w)
      if (live[w] && !r.contributed[w])
        return false;
    // A round with no live contributor at all has nothing to apply yet.
    return r.contributors > 0;
  }

  // Applies every complete round in order and answers the pulls each unblocks.
  void advance_rounds(slice_state& s) {
    for (;;) {
      auto i = s.rounds.find(s.rounds_done);
      if (i == s.rounds.end() || !round_complete(i->second))
        return;
      apply(s, std::move(i->second.sum));
      s.rounds.erase(i);
      ++s.rounds_done;
      auto ready = [&](const waiting_pull& p) {
        return p.min_rounds <= s.rounds_done;
      };
      for (auto& p : s.waiting)
        if (ready(p))
          p.target.pulled(s.value);
      auto first = std::remove_if(s.waiting.begin(), s.waiting.end(), ready);
      stats.waiting_pulls -= static_cast<uint64_t>(s.waiting.end() - first);
      s.waiting.erase(first, s.waiting.end());
    }
  }

  // -- in-order processing ----------------------------------------------------

  // Applies (async) or adds to its round (sync) one push of `n` floats.
  // `owned`, if set, holds those floats and may be taken over as the round's
  // sum instead of copying them.
  caf::error do_push(slice_state& s, slice_id id, uint32_t worker,
                     const float* g, std::size_t n, std::vector<float>* owned) {
    ++stats.pushes;
    // Checked in order, so the refused push still uses its sequence number.
    if (!live[worker])
      return make_error(errc::dead_node,
                        "push: worker " + std::to_string(worker)
                          + " left the job or was declared dead");
    if (n != s.value.size())
      return make_error(errc::shape_mismatch,
                        "push: " + slice_name(id) + " has "
                          + std::to_string(s.value.size())
                          + " floats but the push has " + std::to_string(n));
    if (!cfg.sync) {
      if (owned != nullptr)
        apply(s, std::move(*owned));
      else
        apply(s, g);
      return caf::none;
    }
    auto round = s.pushes_of[worker]++;
    auto& r = s.rounds[round];
    if (r.contributors == 0) {
      if (owned != nullptr)
        r.sum = std::move(*owned);
      else
        r.sum.assign(g, g + n);
      r.contributed.assign(cfg.num_workers, false);
    } else {
      core::accumulate_into(r.sum.data(), g, n);
    }
    r.contributed[worker] = true;
    ++r.contributors;
    return caf::none;
  }

  void do_pull(slice_state& s, uint32_t worker, op_target& t) {
    ++stats.pulls;
    if (cfg.sync && s.rounds_done < s.pushes_of[worker]) {
      s.waiting.push_back(waiting_pull{s.pushes_of[worker], std::move(t)});
      ++stats.waiting_pulls;
      return;
    }
    t.pulled(s.value);
  }

  // Runs one operation whose predecessors all ran.
  void run(slice_state& s, slice_id id, uint32_t worker, const float* g,
           std::size_t n, op_target& t, std::vector<float>* owned = nullptr) {
    if (t.kind != op_kind::pull) {
      if (auto err = do_push(s, id, worker, g, n, owned)) {
        t.fail(std::move(err));
        return;
      }
      if (t.kind == op_kind::push) {
        t.pushed();
        advance_rounds(s);
        return;
      }
      advance_rounds(s);
    }
    do_pull(s, worker, t);
  }

  // Runs the operations of `worker` stashed behind the one just processed.
  void drain(slice_state& s, slice_id id, uint32_t worker) {
    for (;;) {
      auto i = s.stash.find({worker, s.next_seq[worker]});
      if (i == s.stash.end())
        return;
      auto op = std::move(i->second);
      s.stash.erase(i);
      ++s.next_seq[worker];
      run(s, id, worker, op.grad.data(), op.grad.size(), op.target, &op.grad);
    }
  }

  // Orders one operation on slice `id` (`s`, null if the slice does not
  // exist here) among those of its worker: runs it now, or stashes it (with
  // its pushed values) until its predecessors ran. `owned`, if set, holds the
  // pushed values and may be taken over. Errors go to the operation's target.
  void submit(const char* op, slice_state* s, slice_id id, uint32_t worker,
              uint64_t seq, const float* g, std::size_t n, op_target t,
              std::vector<float>* owned = nullptr) {
    if (s == nullptr) {
      t.fail(not_initialized(op, id));
      return;
    }
    auto now = admit(op, *s, id, worker, seq);
    if (!now) {
      t.fail(std::move(now.error()));
      return;
    }
    if (*now) {
      run(*s, id, worker, g, n, t, owned);
      drain(*s, id, worker);
      return;
    }
    stashed_op x;
    if (owned != nullptr)
      x.grad = std::move(*owned);
    else
      x.grad.assign(g, g + n);
    x.target = std::move(t);
    stash(op, *s, id, worker, seq, std::move(x));
  }

  // Submits a push or push_pull; the message's buffer may be taken over.
  void submit(const char* op, slice_push& msg, op_target t) {
    auto& g = msg.grad.data;
    submit(op, find(msg.slice), msg.slice, msg.worker, msg.seq, g.data(),
           g.size(), std::move(t), &g);
  }

  // Checks a push or pull on slice `s` and orders it among the operations of
  // its worker: returns whether it runs now (true) or must wait for an
  // earlier one (false).
  caf::expected<bool> admit(const char* op, slice_state& s, slice_id id,
                            uint32_t worker, uint64_t seq) {
    if (auto err = check_worker(op, id, worker))
      return err;
    auto expected_seq = s.next_seq[worker];
    // A gap this large means lost messages or a restarted shard: waiting
    // for the missing operations would only pile up stashed copies.
    if (seq > expected_seq + max_seq_gap)
      return make_error(
        errc::bad_config,
        std::string{op} + ": sequence number " + std::to_string(seq)
          + " of worker " + std::to_string(worker) + " on " + slice_name(id)
          + " is too far ahead (next is " + std::to_string(expected_seq) + ")");
    if (seq < expected_seq)
      return make_error(
        errc::bad_config,
        std::string{op} + ": sequence number " + std::to_string(seq)
          + " of worker " + std::to_string(worker) + " on " + slice_name(id)
          + " was used before (next is " + std::to_string(expected_seq) + ")");
    if (seq == expected_seq) {
      ++s.next_seq[worker];
      return true;
    }
    ++stats.reordered;
    return false;
  }
};

namespace {

shard_actor::behavior_type
shard_impl(shard_actor::stateful_pointer<shard_state> self, shard_config cfg) {
  auto& st = self->state;
  st.cfg = cfg;
  st.live.assign(cfg.num_workers, true);
  return {
    // Takes the message by mutable reference to keep its buffer (see push).
    [self](init_atom, slice_init& msg) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (st.find(msg.slice) != nullptr)
        return make_error(errc::already_initialized,
                          "init: " + slice_name(msg.slice)
                            + " is already initialized on shard "
                            + std::to_string(st.cfg.index));
      if (msg.value.data.empty())
        return make_error(errc::shape_mismatch, "init: " + slice_name(msg.slice)
                                                  + " has an empty value");
      auto& s = st.slices[msg.slice];
      s.value = shared_floats{std::move(msg.value.data)};
      s.opt_state.assign(core::state_size(st.opt, s.value.size()), 0.0f);
      s.next_seq.assign(st.cfg.num_workers, 0);
      s.pushes_of.assign(st.cfg.num_workers, 0);
      ++st.stats.slices;
      st.stats.floats_stored += s.value.size();
      return caf::ok_atom::value;
    },
    // Takes the message by mutable reference: CAF then hands over its own
    // copy only if the message is shared, so the shard may keep the buffer.
    [self](push_atom, slice_push& msg) -> caf::result<caf::ok_atom> {
      op_target t;
      t.kind = op_kind::push;
      t.push_rp = self->make_response_promise<caf::ok_atom>();
      auto rp = t.push_rp;
      self->state.submit("push", msg, std::move(t));
      return rp;
    },
    // A push, then a pull of the value it produced (one large slice; small
    // ones travel in batches).
    [self](push_pull_atom, slice_push& msg) -> caf::result<shared_floats> {
      op_target t;
      t.kind = op_kind::push_pull;
      t.pull_rp = self->make_response_promise<shared_floats>();
      auto rp = t.pull_rp;
      self->state.submit("push_pull", msg, std::move(t));
      return rp;
    },
    [self](pull_atom, const slice_pull& msg) -> caf::result<shared_floats> {
      op_target t;
      t.kind = op_kind::pull;
      t.pull_rp = self->make_response_promise<shared_floats>();
      auto rp = t.pull_rp;
      auto& st = self->state;
      st.submit("pull", st.find(msg.slice), msg.slice, msg.worker, msg.seq,
                nullptr, 0, std::move(t));
      return rp;
    },
    [self](batch_atom, const slice_batch& msg) -> caf::result<float_parts> {
      auto& st = self->state;
      auto n = msg.slices.size();
      if (msg.kind > static_cast<uint8_t>(op_kind::push_pull))
        return make_error(errc::bad_config, "batch: unknown operation kind "
                                              + std::to_string(msg.kind));
      if (n == 0 || msg.seqs.size() != n)
        return make_error(errc::bad_config,
                          "batch: " + std::to_string(n) + " slices and "
                            + std::to_string(msg.seqs.size())
                            + " sequence numbers (need as many, at least one)");
      ++st.stats.batches;
      auto kind = static_cast<op_kind>(msg.kind);
      const char* op = kind == op_kind::push   ? "push"
                       : kind == op_kind::pull ? "pull"
                                               : "push_pull";
      if (auto err = st.check_worker(op, msg.slices[0], msg.worker))
        return err;
      // Check every slice and the payload before running anything.
      std::vector<slice_state*> found;
      found.reserve(n);
      uint64_t total = 0;
      for (auto id : msg.slices) {
        auto s = st.find(id);
        if (s == nullptr)
          return st.not_initialized(op, id);
        found.push_back(s);
        total += s->value.size();
      }
      auto pushes = kind != op_kind::pull;
      auto& flat = msg.data.data;
      auto in_parts = flat.empty() && msg.parts.size > 0;
      if (!flat.empty() && msg.parts.size > 0)
        return make_error(errc::bad_config,
                          std::string{op}
                            + ": the batch carries values both in one "
                              "buffer and in pieces");
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
                            + ": the pieces of the batch do not cover its "
                              "values in order");
      auto reply = std::make_shared<batch_reply>();
      reply->rp = self->make_response_promise<float_parts>();
      reply->remaining = n;
      if (kind != op_kind::push) {
        reply->shared = total >= n * min_shared_floats;
        if (reply->shared) {
          reply->out.size = total;
          reply->out.buffers.reserve(n);
          reply->out.pieces.reserve(n);
        } else {
          reply->flat.resize(total);
        }
      }
      auto rp = reply->rp;
      parts_cursor cursor{msg.parts};
      uint64_t offset = 0;
      for (std::size_t i = 0; i < n; ++i) {
        auto len = found[i]->value.size();
        op_target t;
        t.kind = kind;
        t.batch = reply;
        t.offset = offset;
        const float* g = nullptr;
        if (pushes)
          g = in_parts ? cursor.read(offset, len) : flat.data() + offset;
        st.submit(op, found[i], msg.slices[i], msg.worker, msg.seqs[i], g,
                  pushes ? len : 0, std::move(t));
        offset += len;
      }
      return rp;
    },
    [self](set_opt_atom,
           const optimizer_config& opt) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (auto err = to_error(core::validate(opt)))
        return err;
      st.set_optimizer(opt);
      return caf::ok_atom::value;
    },
    [self](save_atom) -> state_snapshot {
      auto& st = self->state;
      state_snapshot snap;
      snap.optimizer = st.opt;
      snap.slices.reserve(st.slices.size());
      for (auto& [id, s] : st.slices) {
        slice_record rec;
        rec.key_id = key_of(id);
        rec.part = part_of(id);
        rec.step = s.step;
        rec.value.data = s.value.vec();
        rec.state.data = s.opt_state;
        snap.slices.push_back(std::move(rec));
      }
      // Deterministic order: by slice id.
      std::sort(snap.slices.begin(), snap.slices.end(),
                [](const slice_record& a, const slice_record& b) {
                  return std::make_pair(a.key_id, a.part)
                         < std::make_pair(b.key_id, b.part);
                });
      return snap;
    },
    [self](load_atom, const state_snapshot& snap) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (auto err = to_error(core::validate(snap.optimizer)))
        return err;
      // Check everything before changing anything: loading is all-or-nothing.
      for (auto& rec : snap.slices) {
        auto id = make_slice_id(rec.key_id, rec.part);
        auto s = st.find(id);
        if (s == nullptr)
          return make_error(errc::unknown_key,
                            "load_state: " + slice_name(id)
                              + " is not initialized on shard "
                              + std::to_string(st.cfg.index));
        auto n = s->value.size();
        if (rec.value.data.size() != n)
          return make_error(errc::checkpoint_mismatch,
                            "load_state: " + slice_name(id) + " has "
                              + std::to_string(n)
                              + " floats but the checkpoint has "
                              + std::to_string(rec.value.data.size()));
        auto want = core::state_size(snap.optimizer, n);
        if (rec.state.data.size() != want)
          return make_error(errc::checkpoint_mismatch,
                            "load_state: " + slice_name(id) + " needs "
                              + std::to_string(want) + " state floats for '"
                              + snap.optimizer.name
                              + "' but the checkpoint has "
                              + std::to_string(rec.state.data.size()));
      }
      st.set_optimizer(snap.optimizer);
      for (auto& rec : snap.slices) {
        auto& s = st.slices[make_slice_id(rec.key_id, rec.part)];
        s.value = shared_floats{rec.value.data};
        s.opt_state = rec.state.data;
        s.step = rec.step;
      }
      return caf::ok_atom::value;
    },
    [self](workers_atom,
           const std::vector<uint32_t>& live) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      std::vector<bool> next(st.cfg.num_workers, false);
      for (auto w : live) {
        if (w >= st.cfg.num_workers)
          return make_error(errc::bad_config,
                            "workers: worker " + std::to_string(w)
                              + " out of range (shard expects "
                              + std::to_string(st.cfg.num_workers)
                              + " workers)");
        next[w] = true;
      }
      for (auto& kvp : st.slices) {
        auto& sl = kvp.second;
        // A worker that comes back joins the current round, not a past one.
        for (uint32_t w = 0; w < st.cfg.num_workers; ++w)
          if (next[w] && !st.live[w])
            sl.pushes_of[w] = std::max(sl.pushes_of[w], sl.rounds_done);
      }
      st.live = std::move(next);
      for (auto& kvp : st.slices)
        st.advance_rounds(kvp.second);
      return caf::ok_atom::value;
    },
    [self](stats_atom) -> shard_stats { return self->state.stats; },
    [self](command_atom, int32_t head,
           const std::string& body) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (head == 0) {
        optimizer_config opt;
        if (auto err = to_error(core::parse_optimizer(body, opt)))
          return err;
        st.set_optimizer(opt);
        return caf::ok_atom::value;
      }
      if (!st.cfg.on_command)
        return make_error(errc::bad_config,
                          "command: shard " + std::to_string(st.cfg.index)
                            + " has no handler for command head "
                            + std::to_string(head));
      if (auto err = st.cfg.on_command(head, body))
        return err;
      return caf::ok_atom::value;
    },
  };
}

slice_id first_slice(const slice_push& x) {
  return x.slice;
}

slice_id first_slice(const slice_pull& x) {
  return x.slice;
}

slice_id first_slice(const slice_batch& x) {
  return x.slices.empty() ? 0 : x.slices.front();
}

// Re-sends `(atom, msg)` to `shard` with high priority; passes the reply back.
template <class Reply, class Atom, class Msg>
caf::result<Reply> relay_high(shard_actor::pointer self,
                              const shard_actor& shard,
                              const caf::actor& observer, Atom atom, Msg msg) {
  auto rp = self->make_response_promise<Reply>();
  auto id = first_slice(msg);
  // caf::infinite keeps the high priority in CAF 0.17 (a std::chrono timeout
  // silently drops it); the requester bounds the wait with its own timeout.
  self
    ->request<caf::message_priority::high>(shard, caf::infinite, atom,
                                           std::move(msg))
    .then([rp](Reply& x) mutable { rp.deliver(std::move(x)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  if (observer)
    caf::anon_send(observer, forwarded_atom::value, id);
  return rp;
}

shard_actor::behavior_type relay_impl(shard_actor::pointer self,
                                      shard_actor shard, caf::actor observer) {
  self->link_to(shard);
  return {
    [=](init_atom a, slice_init& msg) {
      return self->delegate(shard, a, std::move(msg));
    },
    [=](push_atom a, slice_push& msg) {
      return relay_high<caf::ok_atom>(self, shard, observer, a, std::move(msg));
    },
    [=](push_pull_atom a, slice_push& msg) {
      return relay_high<shared_floats>(self, shard, observer, a,
                                       std::move(msg));
    },
    [=](pull_atom a, slice_pull& msg) {
      return relay_high<shared_floats>(self, shard, observer, a,
                                       std::move(msg));
    },
    [=](batch_atom a, slice_batch& msg) {
      return relay_high<float_parts>(self, shard, observer, a, std::move(msg));
    },
    [=](set_opt_atom a, const optimizer_config& opt) {
      return self->delegate(shard, a, opt);
    },
    [=](save_atom a) { return self->delegate(shard, a); },
    [=](load_atom a, state_snapshot& snap) {
      return self->delegate(shard, a, std::move(snap));
    },
    [=](workers_atom a, const std::vector<uint32_t>& live) {
      return self->delegate(shard, a, live);
    },
    [=](stats_atom a) { return self->delegate(shard, a); },
    [=](command_atom a, int32_t head, const std::string& body) {
      return self->delegate(shard, a, head, body);
    },
  };
}

} // namespace

shard_actor spawn_shard(caf::actor_system& sys, shard_config cfg) {
  return sys.spawn(shard_impl, std::move(cfg));
}

shard_actor spawn_priority_relay(caf::actor_system& sys, shard_actor shard,
                                 caf::actor observer, bool detached) {
  if (detached)
    return sys.spawn<caf::detached>(relay_impl, std::move(shard),
                                    std::move(observer));
  return sys.spawn(relay_impl, std::move(shard), std::move(observer));
}

} // namespace actorps
