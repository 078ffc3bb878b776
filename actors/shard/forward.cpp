// SPDX-License-Identifier: BSD-3-Clause
// A primary's forwards to its backup, through CAF or over a replica_link,
// and a backup's side of those that come over its process's data plane
// (shard.hpp, "Replicas").
#include "actors/shard/forward.hpp"

#include <cstdio>
#include <deque>
#include <limits>
#include <type_traits>
#include <utility>

#include "caf/actor_cast.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/exit_reason.hpp"
#include "caf/sec.hpp"
#include "caf/stateful_actor.hpp"

#include "messages/errors.hpp"

namespace actorps {

gate_ptr shard_state::new_gate() {
  gates.erase(std::remove_if(gates.begin(), gates.end(),
                             [](const auto& g) { return g.expired(); }),
              gates.end());
  auto g = std::make_shared<replica_gate>();
  gates.push_back(g);
  return g;
}

shard_state::~shard_state() {
  // Nobody answers what the gates still hold: their completions go
  // (outside the gate, which they may release).
  for (auto& weak : gates)
    if (auto g = weak.lock()) {
      auto held = std::move(g->held);
      g->held.clear();
    }
}

namespace {

// Most values (row ids count as two) in one forward over the link with more
// than one operation: a quarter of a plane's largest message. One operation
// alone may carry up to what a worker's frame did (a server's plane takes
// that and the forward's metadata, see runtime/ucx/ingress.cpp).
constexpr uint64_t link_frame_floats = (uint64_t{1} << 28) / sizeof(float);

// How long a forward may wait for the backup's answer: the replica
// timeout, half of it for a backup's own backup (a chain): a hung last copy
// is then given up by the copy before it, which answers its primary in
// time, not by the primary, which would end the healthy middle copy.
std::chrono::milliseconds forward_timeout(const shard_state& st) {
  return st.standby() ? st.cfg.replica_timeout / 2 : st.cfg.replica_timeout;
}

// Reminds the primary, after the forward timeout, that forward `number`
// over the link was not answered yet.
void remind(shard_ptr self, uint64_t number) {
  auto& st = self->state;
  replica_ack a;
  a.peer = st.link_peer;
  a.number = number;
  a.timer = true;
  a.err = make_error(caf::sec::request_timeout);
  self->delayed_send(self, forward_timeout(st), replicate_atom::value,
                     std::move(a));
}

// The answers owed over the link run with `err` (they are lost with it).
void drop_link(shard_ptr self, const caf::error& err) {
  auto& st = self->state;
  if (st.link_peer == 0)
    return;
  st.cfg.link->forget(st.link_peer, st.cfg.index);
  st.link_peer = 0;
  auto waits = std::move(st.link_waits);
  st.link_waits.clear();
  for (auto& w : waits)
    w.second(err);
}

// Sends forward `x` (the operations of a replica_batch, or a change) to the
// backup, over the link if there is one, else through CAF; `done` runs with
// the backup's answer (an error if it failed, refused or did not answer).
template <class T>
void send_forward(shard_ptr self, T x,
                  std::function<void(const caf::error&)> done,
                  bool state_part = false) {
  auto& st = self->state;
  if (st.sending_state && !state_part) {
    // Behind the state's parts: sent once the backup took them all. (Views
    // of workers' segments are copied out meanwhile: they would hold the
    // workers' slots for the whole transfer.)
    if constexpr (std::is_same_v<T, replica_batch>)
      for (auto& op : x.ops)
        if (op.shared.is_view())
          op.values.data = op.shared.take();
    auto later = std::make_shared<T>(std::move(x));
    st.deferred.emplace_back(
      [self, later, done] { send_forward(self, std::move(*later), done); });
    return;
  }
  if (st.link_peer != 0) {
    auto k = ++st.link_sent;
    st.link_waits.emplace(k, std::move(done));
    st.cfg.link->send(st.link_peer, st.cfg.index, k, std::move(x),
                      caf::actor_cast<caf::actor>(self));
    remind(self, k);
    return;
  }
  auto answered = [done](caf::ok_atom) { done(caf::error{}); };
  auto failed = [done](caf::error& err) { done(err); };
  if constexpr (std::is_same_v<T, replica_batch>)
    self
      ->request(caf::actor_cast<shard_actor>(st.backup),
                caf::duration{forward_timeout(st)}, replicate_atom::value,
                std::move(x))
      .then(answered, failed);
  else
    self->request(st.backup, caf::duration{forward_timeout(st)}, std::move(x))
      .then(answered, failed);
}

// A primary's state on its way to a new backup (see pair).
struct state_transfer {
  std::deque<replica_state> parts;
  uint64_t next = 0;
  caf::typed_response_promise<caf::ok_atom> rp;
  gate_ptr gate;
  caf::actor_addr backup;
  bool answered = false;
};

// Sends the next part of `job`, or, after the last, the forwards that
// waited, and answers the pairing.
void send_part(shard_ptr self, std::shared_ptr<state_transfer> job) {
  auto& st = self->state;
  if (job->parts.empty()) {
    st.sending_state = false;
    auto waiting = std::move(st.deferred);
    st.deferred.clear();
    for (auto& f : waiting)
      f();
    // A backup with a backup of its own answered its primary's forwards
    // meanwhile without waiting (see after_forwards): the new copy counts
    // as complete once it ran those too.
    auto n = st.forwarded;
    auto deliver = [self, job] {
      auto& st = self->state;
      if (job->answered)
        return;
      job->answered = true;
      if (st.backup && st.backup.address() == job->backup)
        job->rp.deliver(caf::ok_atom::value);
      else
        job->rp.deliver(make_error(errc::dead_node,
                                   "replica: the backup was lost while it "
                                   "took the primary's state"));
    };
    job->gate->after(n, deliver);
    return;
  }
  auto part = std::move(job->parts.front());
  job->parts.pop_front();
  auto n = job->next++;
  send_forward(
    self, caf::make_message(replicate_atom::value, std::move(part)),
    [self, job, n](const caf::error& err) {
      auto& st = self->state;
      bool current = st.backup && st.backup.address() == job->backup;
      if (err || !current) {
        if (!job->answered) {
          job->answered = true;
          job->rp.deliver(err ? err
                              : make_error(errc::dead_node,
                                           "replica: the backup was lost while "
                                           "it took the primary's state"));
        }
        if (current)
          lose_backup(self, err, job->backup);
        return;
      }
      job->gate->ack(n);
      send_part(self, job);
    },
    true);
}

} // namespace

// Unless the coordinator said so, the primary first tells the coordinator
// (which ends the backup, so that it is never promoted behind its primary),
// and holds every answer, also of the operations it runs meanwhile, until
// the coordinator confirmed: nothing is answered that a promoted stale
// backup would lack.
void lose_backup(shard_ptr self, const caf::error& why,
                 const caf::actor_addr& of) {
  auto& st = self->state;
  if (!st.backup || (of && st.backup.address() != of))
    return;
  auto b = std::move(st.backup);
  st.backup = nullptr;
  st.outbox.clear();
  // (What waited for the state's transfer is released with the gate.)
  st.sending_state = false;
  st.deferred.clear();
  std::fprintf(stderr,
               "actorps: shard %u: lost its backup (%s); goes on without one\n",
               st.cfg.index, why ? render(why).c_str() : "told so");
  auto release = [gate = st.gate] {
    gate->ack(std::numeric_limits<uint64_t>::max());
  };
  // (Forwards in flight fail: their answers are released below, or once
  // the coordinator knows.)
  drop_link(self, why ? why : make_error(errc::dead_node, "backup lost"));
  if (!why || !st.pairer) {
    release();
    return;
  }
  if (why != caf::sec::request_receiver_down)
    self->send_exit(b, caf::exit_reason::kill);
  st.losing = true;
  self
    ->request(st.pairer, caf::duration{st.cfg.replica_timeout},
              replica_atom::value, st.cfg.index)
    .then(
      [self, release](caf::ok_atom) {
        self->state.losing = false;
        release();
      },
      [self, release](caf::error& err) {
        // (A coordinator that cannot be told promotes nothing either.)
        std::fprintf(stderr,
                     "actorps: shard %u: could not tell the coordinator that "
                     "its backup is gone (%s)\n",
                     self->state.cfg.index, render(err).c_str());
        self->state.losing = false;
        release();
      });
}

void flush(shard_ptr self) {
  auto& st = self->state;
  if (st.outbox.empty())
    return;
  replica_batch b;
  b.ops = std::move(st.outbox);
  st.outbox.clear();
  if (!st.backup)
    return;
  // Acknowledges the gate up to `upto` once the backup ran a forward.
  auto acked = [self, gate = st.gate, b = st.backup.address()](uint64_t upto) {
    return [self, gate, b, upto](const caf::error& err) {
      if (err)
        lose_backup(self, err, b);
      else
        gate->ack(upto);
    };
  };
  if (st.link_peer == 0) {
    // (CAF sends `values`: shared ones are copied there, once.)
    for (auto& op : b.ops)
      if (!op.shared.empty())
        op.values.data = op.shared.take();
    send_forward(self, std::move(b), acked(st.forwarded));
    return;
  }
  // The operations are numbered up to st.forwarded, in order; over the
  // link they leave in frames of at most link_frame_floats values each (a
  // plane refuses a message over 1 GiB, and would cut the whole server off).
  auto first = st.forwarded + 1 - b.ops.size();
  std::size_t at = 0;
  while (at < b.ops.size()) {
    replica_batch part;
    uint64_t floats = 0;
    while (at < b.ops.size()) {
      auto& op = b.ops[at];
      auto n = (op.shared.empty() ? op.values.data.size() : op.shared.size())
               + 2 * op.rows.size();
      // (One operation alone may be larger: at most a worker's frame.)
      if (!part.ops.empty() && floats + n > link_frame_floats)
        break;
      floats += n;
      part.ops.push_back(std::move(op));
      ++at;
    }
    send_forward(self, std::move(part), acked(first + at - 1));
  }
}

void forward_change(shard_ptr self, caf::message msg,
                    std::shared_ptr<change_reply> p) {
  auto& st = self->state;
  // Numbered like an operation: what the change releases here (a round a
  // change of the live workers completes) waits for the backup to have run
  // the change too, and so does its reply: both wait on the gate, for the
  // backup or, if it is lost, for the coordinator to know.
  auto n = ++st.forwarded;
  auto gate = st.gate;
  auto deliver = [p] {
    if (!p->failed_here && p->rp.pending())
      p->rp.deliver(caf::ok_atom::value);
  };
  gate->after(n, deliver);
  send_forward(self, std::move(msg),
               [self, p, gate, n,
                b = st.backup.address()](const caf::error& err) {
                 // The backup failed, or refused what this shard took (its
                 // copy would differ): it is dropped either way, unless it
                 // refused what this shard refused too.
                 if (err && (code_of(err) == errc::none || !p->failed_here)) {
                   lose_backup(self, err, b);
                   return;
                 }
                 gate->ack(n);
               });
}

void after_forwards(shard_ptr self, std::function<void()> answer) {
  auto& st = self->state;
  flush(self);
  auto n = st.forwarded;
  // A backup sending its whole state to a new backup of its own answers
  // at once: the new one counts as complete only once it ran all this
  // too (see send_part), and holding these answers for the whole transfer
  // would outlast the primary's timeout.
  if (st.sending_state) {
    answer();
    return;
  }
  if (st.holding())
    st.gate->after(n, std::move(answer));
  else
    answer();
}

caf::error check_change(shard_ptr self, const char* op, bool admitter_only) {
  auto& st = self->state;
  if (!st.standby())
    return admitter_only ? st.trusted.check_admitter(self, op)
                         : st.trusted.check(self, op);
  auto sender = self->current_sender();
  if (st.link_change
      || (sender != nullptr && st.primary
          && caf::actor_cast<caf::actor_addr>(sender) == st.primary))
    return caf::none;
  return make_error(errc::unauthorized,
                    std::string{op} + ": shard " + std::to_string(st.cfg.index)
                      + " is a backup: it takes changes from its primary "
                        "only");
}

caf::result<caf::ok_atom> pair(shard_ptr self, caf::actor peer,
                               bool peer_is_backup,
                               const std::string& address) {
  auto& st = self->state;
  if (auto err = st.trusted.check_admitter(self, "replica"))
    return err;
  if (!peer_is_backup) {
    if (!st.cfg.backup || !peer)
      return make_error(errc::bad_config, "replica: shard "
                                            + std::to_string(st.cfg.index)
                                            + " is no backup");
    if (st.primary && st.primary != peer.address()) {
      // Another primary (the one before it in a chain was cut): its
      // forwards over the link are numbered from 1, over a connection of
      // their own, and its whole state comes first. (What the copy cut
      // sent last may still arrive: only the named server's are taken.)
      st.link_from = 0;
      st.link_next = 1;
      st.link_early.clear();
    }
    st.primary = peer.address();
    st.link_source = address;
    // (A token holder must not pass for it on a connection of its own.)
    never_connects_in(self->node(), peer.node());
    return caf::ok_atom::value;
  }
  // (A standby backup may have a backup of its own: a chain, replicas 3.
  // It passes on what its primary forwards, see after_forwards.)
  if (!peer) {
    // The coordinator says the backup is gone: what went to it counts as
    // given (it ran it, or is never promoted).
    flush(self);
    drop_link(self, caf::error{});
    lose_backup(self, caf::error{});
    return caf::ok_atom::value;
  }
  if (st.backup)
    return make_error(errc::bad_config, "replica: shard "
                                          + std::to_string(st.cfg.index)
                                          + " has a backup already");
  // (It would pass on a part of a state, and mark it the last.)
  if (st.rebuilding)
    return make_error(errc::bad_config,
                      "replica: shard " + std::to_string(st.cfg.index)
                        + " is still taking its primary's state");
  // A checkpoint being loaded in pieces is no part of the state: the
  // backup would refuse its later pieces.
  if (!st.loads.empty())
    return make_error(errc::bad_config,
                      "replica: shard " + std::to_string(st.cfg.index)
                        + " is loading a checkpoint; pair it once that ended");
  // (Its rounds and clocks start once the workers told theirs: nothing a
  // backup could take yet.)
  if (st.awaiting_clocks)
    return make_error(errc::bad_config,
                      "replica: shard " + std::to_string(st.cfg.index)
                        + " waits for the workers' clocks; pair it once they "
                          "told them");
  never_connects_in(self->node(), peer.node());
  st.backup = std::move(peer);
  st.gate = st.new_gate();
  st.link_sent = 0;
  if (st.cfg.link && !address.empty()) {
    st.link_peer = st.cfg.link->open(address);
    if (st.link_peer != 0) {
      std::fprintf(stderr,
                   "actorps: shard %u: forwards to its backup over the data "
                   "plane\n",
                   st.cfg.index);
      // A backup that dies is lost at once, not after the replica timeout
      // (CAF fails the requests of a dead receiver; the link does not).
      self->monitor(st.backup);
    }
  }
  // Told when the backup is lost (see lose_backup).
  st.pairer = caf::actor_cast<caf::actor>(self->current_sender());
  // The backup first takes this shard's whole state (nothing, at the start
  // of a job; everything, for a replica rebuilt after a server died), one
  // part at a time, numbered before every later forward, which waits until
  // then: the pairing is answered once it has all of it, and only then may
  // the backup be promoted.
  auto job = std::make_shared<state_transfer>();
  auto parts = st.state_parts();
  job->parts.assign(std::make_move_iterator(parts.begin()),
                    std::make_move_iterator(parts.end()));
  job->next = st.forwarded + 1;
  st.forwarded += job->parts.size();
  job->rp = self->make_response_promise<caf::ok_atom>();
  job->gate = st.gate;
  job->backup = st.backup.address();
  st.sending_state = true;
  st.deferred.clear();
  send_part(self, job);
  return job->rp;
}

void on_ack(shard_ptr self, const replica_ack& a) {
  auto& st = self->state;
  // (An answer of an earlier link, or of a forward answered already.)
  if (st.link_peer == 0 || a.peer != st.link_peer)
    return;
  auto i = st.link_waits.find(a.number);
  if (i == st.link_waits.end())
    return;
  auto f = std::move(i->second);
  st.link_waits.erase(i);
  f(a.err);
}

void from_link(shard_ptr self, uint64_t number, plane_reply& r,
               std::function<caf::error()> run) {
  auto& st = self->state;
  auto sender = self->current_sender();
  if (r.sink == nullptr
      || (sender != nullptr && sender->node() != self->node()))
    return;
  // The connection of the primary's server (named in the pairing; if not,
  // the first forward's): no other server's forwards are taken.
  if (st.standby() && st.primary && st.link_from == 0) {
    if (st.link_source.empty())
      st.link_from = r.peer;
    else if (st.cfg.link)
      st.link_from = st.cfg.link->source(st.link_source);
  }
  const char* refused = !st.standby() || !st.primary
                          ? " is no backup waiting for a primary's forwards"
                        : r.peer != st.link_from
                          ? " takes forwards from its primary's server only"
                          : nullptr;
  if (refused != nullptr) {
    r.sink->fail(r.peer, r.request,
                 make_error(errc::unauthorized, "replicate: shard "
                                                  + std::to_string(st.cfg.index)
                                                  + refused));
    return;
  }
  if (number < st.link_next || st.link_early.count(number) > 0) {
    r.sink->fail(r.peer, r.request,
                 make_error(errc::bad_config, "replicate: forward "
                                                + std::to_string(number)
                                                + " came twice"));
    return;
  }
  // (Held until its turn: not for a turn that is never coming.)
  if (number - st.link_next > shard_state::max_seq_gap) {
    r.sink->fail(r.peer, r.request,
                 make_error(errc::bad_config,
                            "replicate: forward " + std::to_string(number)
                              + " is too far ahead (next is "
                              + std::to_string(st.link_next) + ")"));
    return;
  }
  // (A backup with a backup of its own answers once that one ran it too.)
  st.link_early.emplace(number, [self, r, run = std::move(run)] {
    auto err = run();
    after_forwards(self, [r, err] {
      if (err)
        r.sink->fail(r.peer, r.request, err);
      else
        r.sink->ok(r.peer, r.request);
    });
  });
  // Runs what is next in the primary's order (a large forward may arrive
  // after a small one sent behind it).
  while (!st.link_early.empty() && st.link_early.begin()->first == st.link_next
         && st.standby()) {
    auto f = std::move(st.link_early.begin()->second);
    st.link_early.erase(st.link_early.begin());
    ++st.link_next;
    f();
  }
}

caf::error run_change(shard_ptr self, caf::message& m) {
  auto& st = self->state;
  // Only what change() forwards: nothing else may pass for the primary.
  auto is_change = m.match_elements<replicate_atom, replica_state>()
                   || m.match_element<init_atom>(0)
                   || m.match_element<set_opt_atom>(0)
                   || m.match_element<load_atom>(0)
                   || m.match_element<workers_atom>(0)
                   || m.match_element<command_atom>(0);
  if (m.empty() || !is_change || !st.own)
    return make_error(errc::bad_config, "replicate: shard "
                                          + std::to_string(st.cfg.index)
                                          + " got a forward that is no change");
  st.link_change = true;
  auto res = st.own(m);
  st.link_change = false;
  if (!res)
    return make_error(errc::bad_config, "replicate: shard "
                                          + std::to_string(st.cfg.index)
                                          + " takes no such change");
  if (res->match_elements<caf::error>())
    return res->get_as<caf::error>(0);
  return caf::none;
}

// A backup runs its primary's forwards (see shard.hpp, "Replicas").
void shard_state::replay(replica_batch& batch) {
  for (auto& op : batch.ops) {
    auto s = find(op.slice);
    if (s == nullptr || op.worker >= cfg.num_workers
        || op.kind > static_cast<uint8_t>(op_kind::push_pull))
      continue;
    // Seen already: a worker sent it again to the promoted shard first.
    if (op.seq < s->clocks[op.worker].next_seq)
      continue;
    s->clocks[op.worker].next_seq = op.seq + 1;
    if (op.kind == static_cast<uint8_t>(op_kind::pull)) {
      // A backup with a backup of its own passes the pull's number on.
      if (backup)
        outbox.push_back(op);
      if (holding())
        ++forwarded;
    } else {
      op_target t;
      t.mute = true;
      t.table = op.table;
      if (op.table)
        t.single().rows = std::move(op.rows);
      auto& g = op.values.data;
      if (g.empty() && !op.shared.empty())
        // Read where they lie in the primary's segment (runtime/ucx).
        run(*s, op.slice, op.worker, op.seq, op.shared.data(), op.shared.size(),
            t, nullptr, &op.shared);
      else
        run(*s, op.slice, op.worker, op.seq, g.data(), g.size(), t, &g);
    }
    // Promoted: what the worker sent again behind it may run now.
    if (promoted)
      drain(*s, op.slice, op.worker);
  }
}

} // namespace actorps
