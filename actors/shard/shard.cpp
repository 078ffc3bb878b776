// SPDX-License-Identifier: BSD-3-Clause
// The shard actor's message handlers: each unpacks its message and calls
// into the shard's state (state.hpp), which does the work.
#include "actors/shard/state.hpp"

#include <string>
#include <type_traits>
#include <utility>

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "core/optimizer.hpp"
#include "messages/errors.hpp"

namespace actorps {

namespace {

using shard_ptr = shard_actor::stateful_pointer<shard_state>;

// A push or push_pull of one slice, answered through `Reply`'s promise.
template <class Reply>
caf::result<Reply>
push_one(shard_ptr self, const char* op, op_kind kind, slice_push& msg) {
  op_target t;
  t.kind = kind;
  auto rp = self->make_response_promise<Reply>();
  if constexpr (std::is_same_v<Reply, caf::ok_atom>)
    t.push_rp = rp;
  else
    t.pull_rp = rp;
  self->state.submit(op, msg, std::move(t));
  return rp;
}

// A data plane's message: it names a sink, and came from this process.
bool from_plane(shard_ptr self, const plane_reply& r) {
  auto sender = self->current_sender();
  return r.sink != nullptr
         && (sender == nullptr || sender->node() == self->node());
}

// A push or push_pull from a data plane, answered through its sink.
void push_from_plane(shard_ptr self, const char* op, op_kind kind,
                     slice_push& msg, plane_reply& r) {
  if (!from_plane(self, r))
    return;
  op_target t;
  t.kind = kind;
  t.direct = std::move(r);
  self->state.submit(op, msg, std::move(t));
}

// Orders a push or pull of rows of a table slice; its outcome goes to `t`
// (a promise or a plane's sink).
void submit_rows(shard_ptr self, rows_push& msg, op_target t) {
  t.kind = op_kind::push;
  t.table = true;
  t.rows = std::move(msg.rows);
  auto& st = self->state;
  auto& g = msg.values.data;
  st.submit("push_rows", st.find(msg.slice), msg.slice, msg.worker, msg.seq,
            g.data(), g.size(), std::move(t), &g);
}

void submit_rows(shard_ptr self, rows_pull& msg, op_target t) {
  t.kind = op_kind::pull;
  t.table = true;
  t.rows = std::move(msg.rows);
  auto& st = self->state;
  st.submit("pull_rows", st.find(msg.slice), msg.slice, msg.worker, msg.seq,
            nullptr, 0, std::move(t));
}

shard_actor::behavior_type shard_impl(shard_ptr self, shard_config cfg) {
  auto& st = self->state;
  st.cfg = cfg;
  st.trusted.add_admitters(cfg.trusted);
  ignore_strays(self, st.trusted);
  st.live.assign(cfg.num_workers, true);
  return {
    // Takes the message by mutable reference to keep its buffer (see push).
    [self](init_atom, slice_init& msg) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "init"))
        return err;
      if (auto err = self->state.init(msg))
        return err;
      return caf::ok_atom::value;
    },
    // Takes the message by mutable reference: CAF then hands over its own
    // copy only if the message is shared, so the shard may keep the buffer.
    [self](push_atom, slice_push& msg) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "push", msg.worker))
        return err;
      return push_one<caf::ok_atom>(self, "push", op_kind::push, msg);
    },
    // A push, then a pull of the value it produced (one large slice; small
    // ones travel in batches).
    [self](push_pull_atom, slice_push& msg) -> caf::result<shared_floats> {
      if (auto err = self->state.trusted.check(self, "push_pull", msg.worker))
        return err;
      return push_one<shared_floats>(self, "push_pull", op_kind::push_pull,
                                     msg);
    },
    [self](pull_atom, const slice_pull& msg) -> caf::result<shared_floats> {
      if (auto err = self->state.trusted.check(self, "pull", msg.worker))
        return err;
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
      if (auto err = self->state.trusted.check(self, "batch", msg.worker))
        return err;
      // Once a promise exists, a returned error would be dropped: errors go
      // through the promise.
      auto reply = std::make_shared<batch_reply>();
      reply->rp = self->make_response_promise<float_parts>();
      auto rp = reply->rp;
      if (auto err = self->state.batch(msg, reply))
        reply->fail(std::move(err));
      return rp;
    },
    // The same operations from a data plane of this process (plane_reply
    // has no type id: no other node can send one). The plane admitted the
    // peer; the outcome goes to the sink.
    [self](push_atom, slice_push& msg, plane_reply& r) {
      push_from_plane(self, "push", op_kind::push, msg, r);
    },
    [self](push_pull_atom, slice_push& msg, plane_reply& r) {
      push_from_plane(self, "push_pull", op_kind::push_pull, msg, r);
    },
    [self](pull_atom, const slice_pull& msg, plane_reply& r) {
      if (!from_plane(self, r))
        return;
      op_target t;
      t.kind = op_kind::pull;
      t.direct = std::move(r);
      auto& st = self->state;
      st.submit("pull", st.find(msg.slice), msg.slice, msg.worker, msg.seq,
                nullptr, 0, std::move(t));
    },
    [self](batch_atom, const slice_batch& msg, plane_reply& r) {
      if (!from_plane(self, r))
        return;
      auto reply = std::make_shared<batch_reply>();
      reply->direct = std::move(r);
      if (auto err = self->state.batch(msg, reply))
        reply->fail(std::move(err));
    },
    [self](init_atom, const table_init& msg) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "init"))
        return err;
      if (auto err = self->state.init(msg))
        return err;
      return caf::ok_atom::value;
    },
    [self](push_atom, rows_push& msg) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "push_rows", msg.worker))
        return err;
      op_target t;
      t.push_rp = self->make_response_promise<caf::ok_atom>();
      auto rp = t.push_rp;
      submit_rows(self, msg, std::move(t));
      return rp;
    },
    [self](pull_atom, rows_pull& msg) -> caf::result<shared_floats> {
      if (auto err = self->state.trusted.check(self, "pull_rows", msg.worker))
        return err;
      op_target t;
      t.pull_rp = self->make_response_promise<shared_floats>();
      auto rp = t.pull_rp;
      submit_rows(self, msg, std::move(t));
      return rp;
    },
    [self](push_atom, rows_push& msg, plane_reply& r) {
      if (!from_plane(self, r))
        return;
      op_target t;
      t.direct = std::move(r);
      submit_rows(self, msg, std::move(t));
    },
    [self](pull_atom, rows_pull& msg, plane_reply& r) {
      if (!from_plane(self, r))
        return;
      op_target t;
      t.direct = std::move(r);
      submit_rows(self, msg, std::move(t));
    },
    [self](set_opt_atom,
           const optimizer_config& opt) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "set_optimizer"))
        return err;
      if (auto err = to_error(core::validate(opt)))
        return err;
      self->state.set_optimizer(opt);
      return caf::ok_atom::value;
    },
    [self](save_atom) -> caf::result<state_snapshot> {
      if (auto err = self->state.trusted.check(self, "save_optimizer_states"))
        return err;
      return self->state.save();
    },
    // Takes the message by mutable reference: the saved buffers become the
    // slices' own without a copy (CAF copies a shared message first).
    [self](load_atom, state_snapshot& snap) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "load_optimizer_states"))
        return err;
      if (auto err = self->state.load(snap))
        return err;
      return caf::ok_atom::value;
    },
    // Saves and loads in pieces: no message carries more than a piece.
    [self](save_atom, uint64_t session) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "save_optimizer_states"))
        return err;
      self->state.open_save(session);
      return caf::ok_atom::value;
    },
    [self](save_atom, const save_cursor& at) -> caf::result<save_piece> {
      if (auto err = self->state.trusted.check(self, "save_optimizer_states"))
        return err;
      auto piece = self->state.save_next(at.session, at.position);
      if (!piece)
        return std::move(piece.error());
      return std::move(*piece);
    },
    [self](load_atom, uint64_t session,
           const optimizer_config& opt) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "load_optimizer_states"))
        return err;
      if (auto err = self->state.open_load(session, opt))
        return err;
      return caf::ok_atom::value;
    },
    [self](load_atom, uint64_t session,
           std::vector<slice_record>& pieces) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "load_optimizer_states"))
        return err;
      if (auto err = self->state.load_pieces(session, pieces))
        return err;
      return caf::ok_atom::value;
    },
    [self](load_atom, uint64_t session,
           bool commit) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "load_optimizer_states"))
        return err;
      if (auto err = self->state.end_load(session, commit))
        return err;
      return caf::ok_atom::value;
    },
    [self](workers_atom,
           const std::vector<uint32_t>& live) -> caf::result<caf::ok_atom> {
      // Who is live decides whom sync rounds wait for: the coordinator's.
      if (auto err = self->state.trusted.check_admitter(self, "workers"))
        return err;
      if (auto err = self->state.set_live(live))
        return err;
      return caf::ok_atom::value;
    },
    [self](stats_atom) -> caf::result<shard_stats> {
      if (auto err = self->state.trusted.check(self, "stats"))
        return err;
      return self->state.stats;
    },
    [self](command_atom, int32_t head,
           const std::string& body) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "send_command_to_servers"))
        return err;
      auto& st = self->state;
      if (head == command_head::clear_pending) {
        st.clear_pending();
        return caf::ok_atom::value;
      }
      if (head < 0)
        return make_error(errc::bad_config,
                          "command: head " + std::to_string(head)
                            + " is reserved (-1: clear_pending)");
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
    [self](
      admit_atom, const std::vector<caf::node_id>& nodes,
      const std::vector<caf::node_id>& workers) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check_admitter(self, "admit"))
        return err;
      self->state.trusted.add(nodes);
      self->state.trusted.bind_workers(workers);
      return caf::ok_atom::value;
    },
  };
}

} // namespace

shard_actor spawn_shard(caf::actor_system& sys, shard_config cfg) {
  return sys.spawn(shard_impl, std::move(cfg));
}

} // namespace actorps
