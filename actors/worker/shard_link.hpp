// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Internal to the worker (included by the files that send to shards): how a
// request reaches a shard.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "caf/event_based_actor.hpp"
#include "caf/message_priority.hpp"
#include "caf/response_type.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "actors/fan_in.hpp"
#include "actors/worker/state.hpp"
#include "core/parts.hpp"
#include "core/send_queue.hpp"
#include "messages/errors.hpp"

namespace actorps {

/// Fills the slice's fields and the bytes of data request `out` from
/// `msg`, which the request keeps (uncompressed values travel straight
/// from its buffers, read only: a copy kept for sending again may share
/// them; compressed ones are encoded once, into a buffer of their own; a
/// batch's values travel as they lie, its slice ids and sequence numbers
/// behind them, see runtime/ucx/frames.hpp).
/// Sets `out`'s encoding and count from `values` and adds their bytes to its
/// pieces: where they lie when raw, else encoded into `encoded`. The caller
/// keeps both alive with the request (`data_request::keep`).
void add_values(data_request& out, const floats& values,
                std::vector<uint8_t>& encoded);

caf::error to_request(caf::actor_system& sys,
                      std::shared_ptr<const slice_push> msg, data_request& out);
caf::error to_request(caf::actor_system& sys,
                      std::shared_ptr<const slice_pull> msg, data_request& out);
caf::error to_request(caf::actor_system& sys,
                      std::shared_ptr<const slice_batch> msg,
                      data_request& out);
caf::error to_request(caf::actor_system& sys,
                      std::shared_ptr<const rows_push> msg, data_request& out);
caf::error to_request(caf::actor_system& sys,
                      std::shared_ptr<const rows_pull> msg, data_request& out);

/// The `caf::error` in `body`, or a `bad_config` error saying it is none.
caf::error deserialize_error(caf::actor_system& sys,
                             const std::vector<char>& body);

/// Sends one request to shard `index` and tracks it until it completes: the
/// one place where a worker's tensor bytes leave for a shard, and so the seam
/// a second data transport plugs into. Its contract, whatever carries the
/// bytes:
/// - exactly one of `on_ok` (with the reply) and `on_err` runs, once;
/// - a dead shard fails the request at once with `dead_shard`, and a shard
///   that goes down fails every request in flight to it (`on_down` in
///   worker.cpp runs the handlers kept in `in_flight`);
/// - the shard gets the same typed message, with priority > 0 overtaking its
///   normal backlog; order among one worker's operations on one slice is kept
///   by their sequence numbers, not by the transport.
/// A data channel (cfg.channel, the UCX plane) carries push, pull,
/// push_pull, batch and row requests to the shards it carries, with their
/// priority; CAF carries the rest: priority > 0 goes through the shard's
/// relay when the shard is remote (CAF drops priorities over the network,
/// see actors/shard/relay.hpp), else with CAF's high priority.
// The kind of a data request, for a data channel; none for other requests.
template <class Atom, class Msg>
constexpr std::optional<data_kind> data_kind_of() {
  if constexpr (std::is_same_v<Msg, rows_push>)
    return data_kind::rows_push;
  else if constexpr (std::is_same_v<Msg, rows_pull>)
    return data_kind::rows_pull;
  else if constexpr (std::is_same_v<Atom, push_atom>)
    return data_kind::push;
  else if constexpr (std::is_same_v<Atom, pull_atom>)
    return data_kind::pull;
  else if constexpr (std::is_same_v<Atom, push_pull_atom>)
    return data_kind::push_pull;
  else if constexpr (std::is_same_v<Atom, batch_atom>)
    return data_kind::batch;
  else
    return std::nullopt;
}

/// Takes a data channel's reply values into `x` (without copying them);
/// false if they are no such value.
bool decode_reply(data_reply& r, caf::ok_atom& x);
bool decode_reply(data_reply& r, shared_floats& x);
bool decode_reply(data_reply& r, float_parts& x);

/// Sends `(atom, msg)` over the worker's data channel as request `id`.
template <class Reply, class Atom, class Msg, class Ok, class Fail>
void to_channel(worker_ptr self, uint32_t index, int32_t priority, uint64_t id,
                Ok ok, Fail fail, std::shared_ptr<const Msg> msg) {
  auto& st = self->state;
  data_request req;
  req.kind = *data_kind_of<Atom, Msg>();
  req.shard = index;
  req.request = id;
  req.priority = priority;
  if (auto err = to_request(self->system(), std::move(msg), req)) {
    fail(err);
    return;
  }
  worker_state::channel_wait w;
  w.on_fail = fail;
  w.on_reply = [self, ok, fail](data_reply& r) mutable {
    if (r.failed) {
      auto err = deserialize_error(self->system(), r.error);
      fail(err);
      return;
    }
    Reply x;
    if (!decode_reply(r, x)) {
      auto err = make_error(errc::bad_config,
                            "ucx: a reply of " + std::to_string(r.values.size())
                              + " values is not what was asked for");
      fail(err);
      return;
    }
    ok(x);
  };
  st.channel_waiting.emplace(id, std::move(w));
  st.cfg.channel->send(std::move(req));
  self->delayed_send(self, st.cfg.timeout, ucx_atom::value, id);
}

/// Numbers a request to a replaced shard afresh: `next` holds each slice's
/// next sequence number there (requests reach to_shard in the order of their
/// sequence numbers per slice, see core/send_queue.hpp). Inits carry none.
template <class Msg>
constexpr bool has_one_seq_v
  = std::is_same_v<
      Msg,
      slice_push> || std::is_same_v<Msg, slice_pull> || std::is_same_v<Msg, rows_push> || std::is_same_v<Msg, rows_pull>;

template <class Msg>
void renumber(std::unordered_map<slice_id, uint64_t>& next, Msg& x) {
  if constexpr (std::is_same_v<Msg, slice_batch>) {
    for (size_t i = 0; i < x.slices.size() && i < x.seqs.size(); ++i)
      x.seqs[i] = next[x.slices[i]]++;
  } else if constexpr (has_one_seq_v<Msg>) {
    x.seq = next[x.slice]++;
  }
}

/// The slices whose pushes `x` carries.
template <class Msg>
std::vector<slice_id> pushed_slices(const Msg& x) {
  if constexpr (std::is_same_v<Msg, slice_batch>) {
    if (x.kind == static_cast<uint8_t>(op_kind::pull))
      return {};
    return x.slices;
  } else if constexpr (std::is_same_v<
                         Msg, slice_push> || std::is_same_v<Msg, rows_push>) {
    return {x.slice};
  } else {
    return {};
  }
}

template <class Reply, class OnOk, class Atom, class Msg>
void to_shard(worker_ptr self, uint32_t index, int32_t priority, OnOk on_ok,
              std::function<void(caf::error&)> on_err, Atom atom, Msg msg) {
  auto& st = self->state;
  // The request, sent again (to a replacement server); made only when
  // needed, so that a job without replacements copies nothing.
  auto again = [&](Msg m) {
    return [self, index, priority, on_ok, on_err, atom,
            m = std::move(m)]() mutable {
      to_shard<Reply>(self, index, priority, on_ok, on_err, atom, std::move(m));
    };
  };

  if (st.dead[index] && st.recovering[index]) {
    // Sent to the replacement once there is one.
    st.parked[index].emplace(st.next_request++, again(std::move(msg)));
    return;
  }
  if (st.dead[index]) {
    auto err = shard_down_error(self, index);
    on_err(err);
    return;
  }
  if (st.renumbered[index])
    renumber(st.renumber[index], msg);
  auto id = st.next_request++;
  // Kept to be sent again (a job that replaces servers or keeps replicas):
  // the copy shares the buffers of the request in flight, read only, and
  // is copied only if it is sent again.
  auto keeps = st.cfg.recovery.count() > 0;
  // Keeps the request to send again; `copy` makes it from what is shared.
  auto keep = [&](auto copy) {
    if (keeps)
      st.retries[index].emplace(id, [self, index, priority, on_ok, on_err, atom,
                                     copy] {
        to_shard<Reply>(self, index, priority, on_ok, on_err, atom, copy());
      });
  };
  // (A kept copy calls on_err too, if it is sent again.)
  if (keeps)
    st.in_flight[index].emplace(id, on_err);
  else
    st.in_flight[index].emplace(id, std::move(on_err));
  // (Counted for a replacement's rounds or clocks: only in dist_sync and
  // dist_ssp jobs that replace, the only ones whose replacements ask.)
  auto pushed = keeps && st.cfg.sync ? pushed_slices(msg)
                                     : std::vector<slice_id>{};
  auto ok = [self, index, id, on_ok, pushed](Reply& x) mutable {
    auto& st = self->state;
    if (st.in_flight[index].erase(id) > 0) {
      st.retries[index].erase(id);
      for (auto s : pushed)
        ++st.acked[index][s];
      on_ok(x);
    }
  };
  auto fail = [self, index, id](caf::error& err) {
    auto& st = self->state;
    // The shard's process is gone, seen before its down message: the
    // request waits for the replacement with the others.
    if (st.retries[index].count(id) > 0 && st.in_flight[index].count(id) > 0
        && !st.leaving && !st.coordinator_down && shard_gone(err)) {
      await_replacement(self, index);
      return;
    }
    st.retries[index].erase(id);
    fail_pending(st.in_flight[index], id, err);
  };
  if constexpr (data_kind_of<Atom, Msg>().has_value()) {
    if (st.cfg.channel && st.cfg.channel->carries(index)) {
      auto held = std::make_shared<const Msg>(std::move(msg));
      keep([held] { return Msg{*held}; });
      to_channel<Reply, Atom, Msg>(self, index, priority, id, std::move(ok),
                                   std::move(fail), std::move(held));
      return;
    }
  }
  // Through CAF: one message, shared by the send and the copy kept (sent
  // untyped: the shard's interface is checked here instead).
  using answer
    = caf::response_type<typename shard_actor::signatures, Atom, Msg>;
  static_assert(answer::valid, "a shard does not take this message");
  static_assert(
    std::is_same_v<typename answer::type, caf::detail::type_list<Reply>>,
    "a shard answers this message with another type");
  auto m = caf::make_message(atom, std::move(msg));
  keep([m] { return Msg{m.template get_as<Msg>(1)}; });
  auto dest = priority > 0 && !st.cfg.relays.empty() ? st.cfg.relays[index]
                                                     : st.cfg.shards[index];
  auto to = caf::actor_cast<caf::actor>(dest);
  if (priority > 0 && st.cfg.relays.empty())
    self->request<caf::message_priority::high>(to, st.timeout(), std::move(m))
      .then(ok, fail);
  else
    self->request(to, st.timeout(), std::move(m)).then(ok, fail);
}

// One push, pull or push_pull on one or more keys, in flight: counts the
// shards' replies and collects the pulled slices as pieces of one output,
// without copying them (see float_parts).
struct gather {
  std::size_t remaining = 0;
  bool sealed = false;
  bool failed = false;
  float_parts out;
  // Set (sized to the whole value) when the pulled slices are many and
  // short: each reply's floats are copied here, where each belongs, instead
  // of placed as a piece per slice that the caller then looks up again
  // (core::place_flat). The value is then this one buffer.
  std::vector<float> flat;
  bool flat_out = false;
  std::function<void(float_parts)> finish;
  std::function<void(caf::error)> on_error;

  void fail(caf::error err) {
    if (failed)
      return;
    failed = true;
    on_error(std::move(err));
  }

  // The value gathered (once every reply arrived).
  float_parts take() {
    if (flat_out)
      return float_parts{std::move(flat)};
    return std::move(out);
  }

  void arrive() {
    if (!failed && --remaining == 0 && sealed)
      finish(take());
  }

  // Places a reply (see core::place and core::place_flat).
  template <class... Ts>
  void put(Ts&&... xs) {
    if (failed)
      return;
    auto st = flat_out ? core::place_flat(flat.data(), flat.size(), xs...)
                       : core::place(out, std::forward<Ts>(xs)...);
    if (!st.ok())
      fail(to_error(st));
    else
      arrive();
  }
};

using gather_ptr = std::shared_ptr<gather>;

// Queues the request `(atom, msg)` for `shard` in its send queue; its reply
// or error releases its bytes, then goes to `on_ok` or `on_err`.
template <class Reply, class OnOk, class Atom, class Msg>
void submit(worker_ptr self, uint32_t shard, int32_t priority, op_kind kind,
            uint64_t floats, OnOk on_ok,
            std::function<void(caf::error&)> on_err, Atom atom, Msg msg) {
  core::outgoing x;
  x.priority = priority;
  x.cost = core::cost_of(kind, floats, self->state.cfg.sync);
  if constexpr (std::is_same_v<Msg, slice_batch>)
    x.slices = msg.slices;
  else
    x.slices = {msg.slice};
  x.send = [self, shard, priority, cost = x.cost, on_ok = std::move(on_ok),
            on_err = std::move(on_err), atom, msg = std::move(msg)]() mutable {
    to_shard<Reply>(
      self, shard, priority,
      [self, shard, cost, on_ok](Reply& r) mutable {
        self->state.queues[shard].release(cost);
        on_ok(r);
      },
      [self, shard, cost, on_err](caf::error& err) {
        self->state.queues[shard].release(cost);
        on_err(err);
      },
      atom, std::move(msg));
  };
  self->state.queues[shard].enqueue(std::move(x));
}

// Rank 0 writes every slice of `info` (`send(slice, on_ok, on_err)` sends
// one slice's init), then tells the coordinator. If a shard fails, the
// coordinator hears of it too, so the waiting ranks fail instead of
// waiting and rank 0 may try again.
template <class Send>
void init_slices(worker_ptr self, key_info info,
                 caf::typed_response_promise<caf::ok_atom> rp, Send send) {
  detail::fan_in<decltype(rp)> fan{rp, info.slices.size()};
  auto report = [self, id = info.id](bool ok,
                                     std::function<void(caf::ok_atom&)> on_ok,
                                     std::function<void(caf::error&)> on_err) {
    ask_coordinator<caf::ok_atom>(self, self->state.timeout(), std::move(on_ok),
                                  std::move(on_err), init_done_atom::value, id,
                                  ok);
  };
  auto done = [self, fan, info, report]() mutable {
    report(
      true,
      [self, fan, info](caf::ok_atom&) mutable {
        add_route(self, info);
        fan.promise().deliver(caf::ok_atom::value);
      },
      [fan](caf::error& err) mutable { fan.fail(std::move(err)); });
  };
  std::function<void(caf::error&)> on_error
    = [fan, report](caf::error& err) mutable {
        if (fan.failed())
          return;
        fan.fail(std::move(err));
        report(
          false, [](caf::ok_atom&) {}, [](caf::error&) {});
      };
  for (auto& s : info.slices) {
    auto arrived = [fan, done](caf::ok_atom) mutable {
      if (fan.arrive())
        done();
    };
    // An init the dead primary forwarded to its backup before it could
    // answer goes again to the promoted backup, which holds the slice
    // already: that counts as done (only rank 0 writes a key's slices, once:
    // nobody else can have made it).
    auto moved = self->state.promotions[s.shard];
    std::function<void(caf::error&)> slice_error
      = [self, shard = s.shard, moved, arrived,
         on_error](caf::error& err) mutable {
          if (code_of(err) == errc::already_initialized
              && self->state.promotions[shard] != moved) {
            arrived(caf::ok_atom::value);
            return;
          }
          on_error(err);
        };
    send(s, arrived, slice_error);
  }
}

} // namespace actorps
