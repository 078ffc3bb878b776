// SPDX-License-Identifier: BSD-3-Clause
// The shard actor's message handlers: each unpacks its message and calls
// into the shard's state (state.hpp), which does the work.
#include "actors/shard/forward.hpp"

#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "caf/actor_cast.hpp"
#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/exit_reason.hpp"
#include "caf/sec.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "core/optimizer.hpp"
#include "messages/errors.hpp"

namespace actorps {

namespace {

// A data operation in worker `worker`'s name: trusted, and not on a
// standby backup.
caf::error check_data(shard_ptr self, const char* op, uint32_t worker) {
  auto& st = self->state;
  if (auto err = st.trusted.check(self, op, worker))
    return err;
  if (st.standby())
    return make_error(errc::bad_config,
                      std::string{op} + ": shard "
                        + std::to_string(st.cfg.index)
                        + " is a backup and was not promoted");
  return caf::none;
}

// Forwards a change to the backup before it runs here (so that it comes
// before any operation it releases): the change's reply then waits for the
// backup's. `local` runs the change here.
template <class Local, class... Ts>
caf::result<caf::ok_atom> change(shard_ptr self, Local local, Ts... xs) {
  auto& st = self->state;
  flush(self);
  std::shared_ptr<change_reply> p;
  if constexpr (sizeof...(Ts) > 0) {
    if (st.backup) {
      p = std::make_shared<change_reply>();
      // A change that came over the link (a backup passing its primary's
      // on to its own backup) is answered there, once this one's backup
      // ran it too (see from_link): no promise then.
      if (!st.link_change)
        p->rp = self->make_response_promise<caf::ok_atom>();
      forward_change(self, caf::make_message(std::move(xs)...), p);
    }
  }
  auto err = local();
  flush(self);
  if (p && st.link_change) {
    p->failed_here = err.operator bool();
    if (err)
      return err;
    return caf::ok_atom::value;
  }
  if (!p && st.losing) {
    // The backup is being reported lost: answered once the coordinator
    // knows (a promoted stale backup would lack the change), numbered like
    // the operations held meanwhile. (One that came over the link is held
    // there, see from_link.)
    auto n = ++st.forwarded;
    if (!st.link_change) {
      auto rp = self->make_response_promise<caf::ok_atom>();
      auto answer = [rp, err]() mutable {
        if (err)
          rp.deliver(err);
        else
          rp.deliver(caf::ok_atom::value);
      };
      st.gate->after(n, std::move(answer));
      return rp;
    }
  }
  if (p) {
    // (Once a promise exists, an error returned would be dropped.)
    if (err) {
      p->failed_here = true;
      p->rp.deliver(err);
    }
    return p->rp;
  }
  if (err)
    return err;
  return caf::ok_atom::value;
}

// A push or push_pull of one slice, answered through `Reply`'s promise.
template <class Reply>
caf::result<Reply>
push_one(shard_ptr self, const char* op, op_kind kind, slice_push& msg) {
  op_target t;
  t.kind = kind;
  auto rp = self->make_response_promise<Reply>();
  if constexpr (std::is_same_v<Reply, caf::ok_atom>)
    t.single().push_rp = rp;
  else
    t.single().pull_rp = rp;
  self->state.submit(op, msg, std::move(t));
  flush(self);
  return rp;
}

// A data plane's message: it names a sink, and came from this process. A
// standby backup answers it with an error.
bool from_plane(shard_ptr self, const plane_reply& r) {
  auto sender = self->current_sender();
  if (r.sink == nullptr
      || (sender != nullptr && sender->node() != self->node()))
    return false;
  if (!self->state.standby())
    return true;
  r.sink->fail(r.peer, r.request,
               make_error(errc::bad_config,
                          "shard " + std::to_string(self->state.cfg.index)
                            + " is a backup and was not promoted"));
  return false;
}

// A push or push_pull from a data plane, answered through its sink.
void push_from_plane(shard_ptr self, const char* op, op_kind kind,
                     slice_push& msg, plane_reply& r) {
  // The values are used up (or taken over) once this returns.
  auto hold = std::move(r.hold);
  auto values = std::move(r.values);
  if (!from_plane(self, r))
    return;
  op_target t;
  t.kind = kind;
  t.single().direct = std::move(r);
  auto& st = self->state;
  if (!values.empty()) {
    // Read where they lie, also by a forward to the backup (an operation
    // that must wait copies them).
    st.submit(op, st.find(msg.slice), msg.slice, msg.worker, msg.seq,
              values.data(), values.size(), t, nullptr, &values);
  } else {
    st.submit(op, msg, std::move(t));
  }
  flush(self);
}

// Orders a push or pull of rows of a table slice; its outcome goes to `t`
// (a promise or a plane's sink).
void submit_rows(shard_ptr self, rows_push& msg, op_target t) {
  t.kind = op_kind::push;
  t.table = true;
  t.single().rows = std::move(msg.rows);
  auto& st = self->state;
  auto& g = msg.values.data;
  st.submit("push_rows", st.find(msg.slice), msg.slice, msg.worker, msg.seq,
            g.data(), g.size(), t, &g);
  flush(self);
}

void submit_rows(shard_ptr self, rows_pull& msg, op_target t) {
  t.kind = op_kind::pull;
  t.table = true;
  t.single().rows = std::move(msg.rows);
  auto& st = self->state;
  st.submit("pull_rows", st.find(msg.slice), msg.slice, msg.worker, msg.seq,
            nullptr, 0, t);
  flush(self);
}

shard_actor::behavior_type shard_impl(shard_ptr self, shard_config cfg) {
  auto& st = self->state;
  st.cfg = cfg;
  st.forward_now = [self] { flush(self); };
  st.trusted.add_admitters(cfg.trusted);
  ignore_strays(self, st.trusted);
  st.live.assign(cfg.num_workers, true);
  st.stashed_bytes.assign(cfg.num_workers, 0);
  st.ahead_bytes.assign(cfg.num_workers, 0);
  // A backup watched over a link that dies is lost at once (see pair).
  self->set_down_handler([self](caf::down_msg& m) {
    auto& st = self->state;
    if (st.backup && m.source == st.backup.address()
        && sent_by_source(self->current_sender(), m.source))
      lose_backup(self, make_error(caf::sec::request_receiver_down));
  });
  shard_actor::behavior_type bhvr{
    // Takes the message by mutable reference to keep its buffer (see push).
    [self](init_atom, slice_init& msg) -> caf::result<caf::ok_atom> {
      if (auto err = check_change(self, "init", false))
        return err;
      if (!self->state.backup)
        return change(self, [&] { return self->state.init(msg); });
      return change(
        self, [&] { return self->state.init(msg); }, init_atom::value, msg);
    },
    // Takes the message by mutable reference: CAF then hands over its own
    // copy only if the message is shared, so the shard may keep the buffer.
    [self](push_atom, slice_push& msg) -> caf::result<caf::ok_atom> {
      if (auto err = check_data(self, "push", msg.worker))
        return err;
      return push_one<caf::ok_atom>(self, "push", op_kind::push, msg);
    },
    // A push, then a pull of the value it produced (one large slice; small
    // ones travel in batches).
    [self](push_pull_atom, slice_push& msg) -> caf::result<shared_floats> {
      if (auto err = check_data(self, "push_pull", msg.worker))
        return err;
      return push_one<shared_floats>(self, "push_pull", op_kind::push_pull,
                                     msg);
    },
    [self](pull_atom, const slice_pull& msg) -> caf::result<shared_floats> {
      if (auto err = check_data(self, "pull", msg.worker))
        return err;
      op_target t;
      t.kind = op_kind::pull;
      auto rp = self->make_response_promise<shared_floats>();
      t.single().pull_rp = rp;
      auto& st = self->state;
      st.submit("pull", st.find(msg.slice), msg.slice, msg.worker, msg.seq,
                nullptr, 0, t);
      flush(self);
      return rp;
    },
    [self](batch_atom, const slice_batch& msg) -> caf::result<float_parts> {
      if (auto err = check_data(self, "batch", msg.worker))
        return err;
      // Once a promise exists, a returned error would be dropped: errors go
      // through the promise.
      auto reply = std::make_shared<batch_reply>();
      reply->rp = self->make_response_promise<float_parts>();
      auto rp = reply->rp;
      if (auto err = self->state.batch(msg, reply))
        reply->fail(std::move(err));
      flush(self);
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
      t.single().direct = std::move(r);
      auto& st = self->state;
      st.submit("pull", st.find(msg.slice), msg.slice, msg.worker, msg.seq,
                nullptr, 0, t);
      flush(self);
    },
    [self](batch_atom, const slice_batch& msg, plane_reply& r) {
      // The values are used up (a waiting slice keeps a copy) once this
      // returns.
      auto hold = std::move(r.hold);
      if (!from_plane(self, r))
        return;
      auto reply = std::make_shared<batch_reply>();
      reply->direct = std::move(r);
      if (auto err = self->state.batch(msg, reply))
        reply->fail(std::move(err));
      flush(self);
    },
    [self](init_atom, const table_init& msg) -> caf::result<caf::ok_atom> {
      if (auto err = check_change(self, "init", false))
        return err;
      return change(
        self, [&] { return self->state.init(msg); }, init_atom::value, msg);
    },
    [self](push_atom, rows_push& msg) -> caf::result<caf::ok_atom> {
      if (auto err = check_data(self, "push_rows", msg.worker))
        return err;
      op_target t;
      auto rp = self->make_response_promise<caf::ok_atom>();
      t.single().push_rp = rp;
      submit_rows(self, msg, std::move(t));
      return rp;
    },
    [self](pull_atom, rows_pull& msg) -> caf::result<shared_floats> {
      if (auto err = check_data(self, "pull_rows", msg.worker))
        return err;
      op_target t;
      auto rp = self->make_response_promise<shared_floats>();
      t.single().pull_rp = rp;
      submit_rows(self, msg, std::move(t));
      return rp;
    },
    [self](push_atom, rows_push& msg, plane_reply& r) {
      auto hold = std::move(r.hold);
      if (!from_plane(self, r))
        return;
      op_target t;
      t.single().direct = std::move(r);
      submit_rows(self, msg, std::move(t));
    },
    [self](pull_atom, rows_pull& msg, plane_reply& r) {
      auto hold = std::move(r.hold);
      if (!from_plane(self, r))
        return;
      op_target t;
      t.single().direct = std::move(r);
      submit_rows(self, msg, std::move(t));
    },
    [self](set_opt_atom,
           const optimizer_config& opt) -> caf::result<caf::ok_atom> {
      if (auto err = check_change(self, "set_optimizer", false))
        return err;
      if (auto err = to_error(core::validate(opt)))
        return err;
      return change(
        self,
        [&] {
          self->state.set_optimizer(opt);
          return caf::error{};
        },
        set_opt_atom::value, opt);
    },
    [self](save_atom) -> caf::result<state_snapshot> {
      if (auto err = self->state.trusted.check(self, "save_optimizer_states"))
        return err;
      return self->state.save();
    },
    // Takes the message by mutable reference: the saved buffers become the
    // slices' own without a copy (CAF copies a shared message first).
    [self](load_atom, state_snapshot& snap) -> caf::result<caf::ok_atom> {
      if (auto err = check_change(self, "load_optimizer_states", false))
        return err;
      if (!self->state.backup)
        return change(self, [&] { return self->state.load(snap); });
      return change(
        self, [&] { return self->state.load(snap); }, load_atom::value, snap);
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
    [self](load_atom, uint64_t session, const optimizer_config& opt,
           bool weights) -> caf::result<caf::ok_atom> {
      if (auto err = check_change(self, "load_optimizer_states", false))
        return err;
      return change(
        self, [&] { return self->state.open_load(session, opt, weights); },
        load_atom::value, session, opt, weights);
    },
    [self](load_atom, uint64_t session,
           std::vector<slice_record>& pieces) -> caf::result<caf::ok_atom> {
      if (auto err = check_change(self, "load_optimizer_states", false))
        return err;
      if (!self->state.backup)
        return change(self,
                      [&] { return self->state.load_pieces(session, pieces); });
      return change(
        self, [&] { return self->state.load_pieces(session, pieces); },
        load_atom::value, session, pieces);
    },
    [self](load_atom, uint64_t session,
           bool commit) -> caf::result<caf::ok_atom> {
      if (auto err = check_change(self, "load_optimizer_states", false))
        return err;
      return change(
        self, [&] { return self->state.end_load(session, commit); },
        load_atom::value, session, commit);
    },
    [self](workers_atom,
           const std::vector<uint32_t>& live) -> caf::result<caf::ok_atom> {
      // Who is live decides whom sync rounds wait for: the coordinator's.
      if (auto err = check_change(self, "workers", true))
        return err;
      return change(
        self, [&] { return self->state.set_live(live); }, workers_atom::value,
        live);
    },
    // A replacement restored from a checkpoint (its coordinator says so)
    // holds the workers' operations until each live worker told its clocks
    // (dist_sync and dist_ssp, see shard_state::await_clocks).
    [self](clocks_atom) -> caf::result<caf::ok_atom> {
      if (auto err = check_change(self, "clocks", true))
        return err;
      self->state.await_clocks();
      return caf::ok_atom::value;
    },
    [self](clocks_atom, uint32_t worker, const std::vector<uint64_t>& slices,
           const std::vector<uint64_t>& pushes,
           bool fresh) -> caf::result<caf::ok_atom> {
      if (auto err = check_data(self, "clocks", worker))
        return err;
      auto err = self->state.take_clocks(worker, slices, pushes, fresh);
      flush(self);
      if (err)
        return err;
      return caf::ok_atom::value;
    },
    // A new process in a dead worker's rank asks where its counts start.
    [self](clocks_atom, uint32_t worker)
      -> caf::result<std::vector<uint64_t>, std::vector<uint64_t>> {
      if (auto err = check_data(self, "clocks", worker))
        return err;
      auto x = self->state.clocks_of(worker);
      if (!x)
        return std::move(x.error());
      return {std::move(x->first), std::move(x->second)};
    },
    [self](stats_atom) -> caf::result<shard_stats> {
      if (auto err = self->state.trusted.check(self, "stats"))
        return err;
      auto s = self->state.stats;
      s.held_pushes = self->state.held_ahead.size();
      return s;
    },
    [self](command_atom, int32_t head,
           const std::string& body) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      // Heads that change the slices go to the backup too.
      auto changes = head == 0 || head == command_head::clear_pending;
      auto checked = changes
                       ? check_change(self, "send_command_to_servers", false)
                       : st.trusted.check(self, "send_command_to_servers");
      if (checked)
        return checked;
      if (head == command_head::clear_pending)
        return change(
          self,
          [&] {
            st.clear_pending();
            return caf::error{};
          },
          command_atom::value, head, body);
      if (head < 0)
        return make_error(errc::bad_config,
                          "command: head " + std::to_string(head)
                            + " is reserved (-1: clear_pending)");
      if (head == 0) {
        optimizer_config opt;
        if (auto err = to_error(core::parse_optimizer(body, opt)))
          return err;
        return change(
          self,
          [&] {
            st.set_optimizer(opt);
            return caf::error{};
          },
          command_atom::value, head, body);
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
      self->state.trusted.bind_workers(self->node(), workers);
      return caf::ok_atom::value;
    },
    [self](replica_atom, caf::actor peer,
           bool peer_is_backup) -> caf::result<caf::ok_atom> {
      return pair(self, std::move(peer), peer_is_backup, std::string{});
    },
    [self](replica_atom, caf::actor peer, bool peer_is_backup,
           const std::string& address) -> caf::result<caf::ok_atom> {
      return pair(self, std::move(peer), peer_is_backup, address);
    },
    [self](replicate_atom, replica_batch& batch) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      auto sender = self->current_sender();
      // (A promoted copy takes none: its primary is gone.)
      if (!st.standby() || sender == nullptr || !st.primary
          || caf::actor_cast<caf::actor_addr>(sender) != st.primary)
        return make_error(errc::unauthorized,
                          "replicate: shard " + std::to_string(st.cfg.index)
                            + " is no backup of the sender");
      st.replay(batch);
      // A backup with a backup of its own (a chain, replicas 3) answers
      // once that one ran the batch too.
      if (!st.holding()) {
        flush(self);
        return caf::ok_atom::value;
      }
      auto rp = self->make_response_promise<caf::ok_atom>();
      after_forwards(self, [rp]() mutable { rp.deliver(caf::ok_atom::value); });
      return rp;
    },
    [self](replicate_atom, replica_state& x) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (!st.standby())
        return make_error(errc::bad_config,
                          "replica_state: shard " + std::to_string(st.cfg.index)
                            + " is no backup waiting for its primary");
      if (auto err = check_change(self, "replica_state", true))
        return err;
      // A backup with a backup of its own passes the state on: that one's
      // copy is replaced too.
      if (st.backup)
        return change(
          self, [&] { return self->state.take_state(x); },
          replicate_atom::value, x);
      if (auto err = st.take_state(x))
        return err;
      return caf::ok_atom::value;
    },
    // Forwards over this process's data plane (plane_reply has no type id:
    // no other node can send one; the plane checked that a server sent
    // them).
    [self](replicate_atom, uint64_t number, replica_batch& batch,
           plane_reply& r) {
      from_link(self, number, r, [self, b = std::move(batch)]() mutable {
        self->state.replay(b);
        return caf::error{};
      });
    },
    [self](replicate_atom, uint64_t number, caf::message& msg, plane_reply& r) {
      from_link(self, number, r, [self, m = std::move(msg)]() mutable {
        return run_change(self, m);
      });
    },
    // A backup's answer over the link (replica_ack has no type id either).
    [self](replicate_atom, const replica_ack& a) {
      auto sender = self->current_sender();
      if (sender == nullptr || sender->node() == self->node())
        on_ack(self, a);
    },
    [self](promote_atom) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (auto err = st.trusted.check_admitter(self, "promote"))
        return err;
      if (!st.cfg.backup)
        return make_error(errc::bad_config, "promote: shard "
                                              + std::to_string(st.cfg.index)
                                              + " is no backup");
      if (st.rebuilding)
        return make_error(errc::bad_config,
                          "promote: shard " + std::to_string(st.cfg.index)
                            + " has not taken its primary's whole state yet");
      if (!st.promoted)
        std::fprintf(stderr,
                     "actorps: shard %u: the backup takes over from its "
                     "primary\n",
                     st.cfg.index);
      st.promoted = true;
      // Forwards that waited for one before them never run: the primary
      // that sent them is gone.
      st.link_early.clear();
      return caf::ok_atom::value;
    },
  };
  st.own = bhvr.unbox();
  return bhvr;
}

} // namespace

shard_actor spawn_shard(caf::actor_system& sys, shard_config cfg) {
  if (cfg.own_thread)
    return sys.spawn<caf::detached>(shard_impl, std::move(cfg));
  return sys.spawn(shard_impl, std::move(cfg));
}

} // namespace actorps
