// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Internal to runtime/: the state and blocking machinery of one kvstore
// handle (its worker actor, tickets of operations in flight, waits bounded
// by timeouts, the key metadata cache). kvstore.cpp implements the public
// calls on top of it; deploy.hpp builds the actors it talks to.

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "caf/duration.hpp"
#include "caf/mailbox_element.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/sec.hpp"

#include "actors/run_here.hpp"
#include "core/layout.hpp"
#include "core/list_memo.hpp"
#include "messages/errors.hpp"
#include "runtime/blocking.hpp"
#include "runtime/deploy.hpp"
#include "runtime/kvstore.hpp"
#include "runtime/payload.hpp"

namespace actorps {

/// Writes the rows a table's slice record holds (`rec.part`: rows part,
/// part + parts, ... of `dim` floats) into the whole table `values`, and,
/// with `states`, its optimizer state (`J` floats per value, kept row by
/// row on the shard) into one table per block. Error: `checkpoint_corrupt`
/// for a record that does not fit.
caf::error place_table_rows(const slice_record& rec, uint64_t dim,
                            uint64_t parts, std::vector<float>& values,
                            std::vector<std::vector<float>>* states);

/// The error of an operation on a closed handle.
inline caf::error closed_error(const char* op) {
  return make_error(errc::closed,
                    std::string{op} + ": the store handle was closed");
}

// Turns CAF's system errors into actorps errors a user can act on. `inner`
// is the timeout the actors use for their own requests.
inline caf::error translate(caf::error err, std::chrono::milliseconds inner) {
  if (err == caf::sec::request_receiver_down)
    return make_error(errc::dead_node,
                      "the worker actor or a shard it needs is down");
  if (err == caf::sec::request_timeout)
    return make_error(errc::timeout,
                      "no reply within " + std::to_string(inner.count())
                        + " ms (a worker, shard or the coordinator is stuck "
                          "or dead, or a sync round lacks a worker)");
  return err;
}

struct kvstore::impl {
  // Declared first so it is destroyed last: the scoped actor below belongs to
  // its actor system.
  std::shared_ptr<store_runtime> rt;
  std::string type;
  uint32_t rank = 0;
  worker_actor worker;
  std::unique_ptr<caf::scoped_actor> self;
  std::unordered_map<std::string, key_info> keys;
  // The last key lists resolved, found again without hashing each name
  // (entries only ever join `keys`, which keeps them in place).
  core::list_memo<payload::resolved_keys> resolved;
  // The last list too short for `resolved` (see key_infos).
  payload::resolved_keys short_list;
  // The names `key_infos` resolved last, as `resolved` keeps them (null for
  // a list too short to keep): what a call on them sends to the worker.
  core::shared_names_ptr last_list;
  // Operations in flight, by ticket number; each finisher receives the reply.
  std::map<uint64_t, std::function<caf::error()>> pending;
  uint64_t next_ticket = 1;
  // First error of an operation finished on the way (reported by next wait).
  caf::error deferred;
  bool closed = false;
  // Set while close() drains: pulls nobody waited for must not write into
  // their outputs, which the caller may have freed already.
  bool discarding = false;
  bool barrier_before_exit = false;
  // Set by close_failed: the leave tells the coordinator why.
  std::string failure;

  impl(std::shared_ptr<store_runtime> runtime, std::string t, uint32_t r)
    : rt(std::move(runtime)), type(std::move(t)), rank(r) {
    worker = rt->workers.at(r);
    self = std::make_unique<caf::scoped_actor>(rt->sys, true);
    ++rt->open_handles;
  }

  // Where a push's slices of their own may be written in place: room the
  // worker's data channel lends (none without one, or when compressed).
  payload::lender lender() const {
    if (rt->compressed || !rt->channel)
      return {};
    return [channel = rt->channel](uint32_t shard, uint64_t n) {
      return channel->lease(shard, n * sizeof(float));
    };
  }

  ~impl() {
    self.reset();
  }

  // A local store's own update rule (set_updater) ends: the optimizer
  // applies again. Nothing in a dist store.
  void end_rule() {
    if (rt->hooks)
      rt->hooks->set_rule({});
  }

  // The facade waits a little longer than the actors' own request timeouts,
  // so that their more precise errors arrive before the facade gives up.
  static std::chrono::milliseconds outer(std::chrono::milliseconds inner) {
    return inner + std::max(inner / 10, std::chrono::milliseconds{1000});
  }

  std::chrono::milliseconds timeout() const {
    return outer(rt->opts.timeout);
  }

  // Receives the reply with id `mid` within `dur` (see detail::await_reply).
  template <class OnValue>
  caf::error
  await(caf::message_id mid, std::chrono::milliseconds dur, OnValue& on_value) {
    return translate(detail::await_reply(self->ptr(), mid, dur, on_value,
                                         rt->opts.interrupted),
                     rt->opts.timeout);
  }

  // How long a wait receives its reply itself before it waits as usual.
  static constexpr std::chrono::milliseconds drive_window{20};

  // Lets this thread receive the reply it waits for itself over the worker's
  // data channel (data_channel::drive), for at most `drive_window`: a reply
  // that comes that way then runs the worker here and wakes no other thread
  // on its way to this one. The drive ends as soon as any message is in the
  // mailbox (the reply, or something `await` sorts out), and a reply that
  // comes another way (an error found by CAF's supervision) is seen at the
  // end of the window at the latest. The test is `empty()` alone on
  // purpose: CAF's templates that walk or refill the mailbox (fetch_more,
  // peek_all) cast the queues' sentinel nodes to mailbox_element, and an
  // instance of them here would stand in for libcaf's own in every caller,
  // which UBSan's vptr check turns into a crash.
  void drive_until_mail() {
    if (!rt->caller_progress)
      return;
    auto* me = self->ptr();
    auto arrived = [me] { return !me->mailbox().empty(); };
    if (!arrived())
      rt->channel->drive(arrived,
                         std::chrono::steady_clock::now() + drive_window);
  }

  // Sends a request to the worker actor and returns the id of its reply.
  // With `here`, this thread runs the worker if the request wakes it
  // (detail::send_and_run, which only sends under other schedulers): a caller
  // about to wait for the reply then saves the hand-off to a scheduler
  // thread and back.
  template <class... Ts>
  caf::message_id send_worker(bool here, Ts&&... xs) {
    // (CAF's request answers a missing worker with an error at once.)
    if (!here || !worker) {
      auto h = (*self)->request(worker, caf::infinite, std::forward<Ts>(xs)...);
      return h.id();
    }
    using token
      = caf::detail::type_list<typename caf::detail::implicit_conversions<
        typename std::decay<Ts>::type>::type...>;
    static_assert(caf::response_type_unbox<caf::signatures_of_t<worker_actor>,
                                           token>::valid,
                  "the worker does not accept this message");
    auto* me = self->ptr();
    auto id = me->new_request_id(caf::message_priority::normal);
    detail::send_and_run(me->ctrl(), id, caf::actor_cast<caf::actor>(worker),
                         caf::make_message(std::forward<Ts>(xs)...));
    // The worker may have answered another handle's thread that waits in
    // data_channel::drive.
    if (rt->caller_progress)
      rt->channel->wake_driver();
    return id.response_id();
  }

  // Blocking request to the worker actor; `on_value` gets the reply.
  template <class OnValue, class... Ts>
  caf::error call(std::chrono::milliseconds dur, OnValue on_value, Ts&&... xs) {
    auto mid = send_worker(true, std::forward<Ts>(xs)...);
    return await(mid, dur, on_value);
  }

  // Sends a request and keeps its finisher under a new ticket number. The
  // hop to the worker actor keeps normal priority on purpose: the mailbox
  // must not reorder one handle's operations before the worker numbers them;
  // the worker applies the priority on its way to the shards.
  template <class OnValue, class... Ts>
  uint64_t start(OnValue on_value, Ts&&... xs) {
    auto id = next_ticket++;
    // Runs the worker here only for an operation started alone: one that
    // joins others in flight goes on while this thread goes on too.
    auto mid = send_worker(pending.empty(), std::forward<Ts>(xs)...);
    // (Moved: a pull's finisher holds its list of outputs, one per key.)
    pending.emplace(id, [this, mid, on_value = std::move(on_value)]() mutable {
      drive_until_mail();
      return await(mid, timeout(), on_value);
    });
    return id;
  }

  // The whole store's state (every shard's slices, the optimizer), as the
  // coordinator gathers it.
  // Calls `f` with each piece of a save, in order, until the last or the
  // first error (the coordinator walks the shards one piece at a time).
  // A failure gives the save up, so that no shard keeps its copy.
  template <class F>
  caf::error each_saved_piece(F f) {
    save_cursor at;
    auto give_up = [&](caf::error err) {
      if (at.session != 0) {
        at.position = save_cursor::give_up;
        call(
          timeout(), [](save_piece&) {}, save_atom::value, at);
      }
      return err;
    };
    for (;;) {
      save_piece piece;
      if (auto err = call(
            timeout(), [&](save_piece& x) { piece = std::move(x); },
            save_atom::value, at))
        return give_up(std::move(err));
      at.session = piece.next.session;
      if (auto err = f(piece))
        return give_up(std::move(err));
      if (piece.done)
        return caf::none;
      at = piece.next;
    }
  }

  // The whole store's state gathered in pieces (a large slice comes as
  // several records, each with its `first`).
  caf::expected<state_snapshot> snapshot() {
    state_snapshot snap;
    auto err = each_saved_piece([&](save_piece& piece) -> caf::error {
      snap.optimizer = piece.optimizer;
      for (auto& rec : piece.records)
        snap.slices.push_back(std::move(rec));
      return caf::none;
    });
    if (err)
      return err;
    return snap;
  }

  // Finishes every pending operation up to and including `last`. An
  // interrupted wait (store_options::interrupted) stops at once and leaves
  // that operation and the later ones pending: a later wait finishes them.
  caf::error finish_until(uint64_t last) {
    caf::error first = std::move(deferred);
    deferred = caf::none;
    while (!pending.empty() && pending.begin()->first <= last) {
      auto i = pending.begin();
      auto err = i->second();
      if (code_of(err) == errc::interrupted) {
        deferred = std::move(first);
        return err;
      }
      pending.erase(i);
      if (err && !first)
        first = std::move(err);
    }
    return first;
  }

  // Bounds the operations in flight: finishes the oldest ones. Only an
  // interrupted wait is returned (the caller then sends nothing); other
  // errors are kept for the next wait.
  caf::error throttle() {
    auto cap = std::max<std::size_t>(rt->opts.max_pending, 1);
    while (pending.size() >= cap) {
      auto i = pending.begin();
      auto err = i->second();
      if (code_of(err) == errc::interrupted)
        return err;
      pending.erase(i);
      if (err && !deferred)
        deferred = std::move(err);
    }
    return caf::none;
  }

  caf::expected<key_info> meta(const std::string& key) {
    auto i = keys.find(key);
    if (i != keys.end())
      return i->second;
    key_info info;
    auto err = call(
      timeout(), [&](key_info& x) { info = std::move(x); }, lookup_atom::value,
      key);
    if (err)
      return err;
    return keys.emplace(key, std::move(info)).first->second;
  }

  // Each key as a call reads it (pointers into `keys`, which keeps its
  // elements in place). The list lives in `resolved` or `short_list`: valid
  // until the next call of key_infos.
  caf::expected<const payload::resolved_keys*>
  key_infos(const char* op, const std::vector<std::string>& names) {
    last_list = nullptr;
    if (names.empty())
      return make_error(errc::bad_config, std::string{op} + ": no keys given");
    // (Kept only once every key passed dense_only, which never changes.)
    if (auto known = resolved.find(names)) {
      last_list = resolved.names_of(known);
      return known;
    }
    payload::resolved_keys out;
    out.reserve(names.size());
    for (auto& name : names) {
      // One lookup and no copy for a known key (10000-key calls).
      const key_info* info = nullptr;
      if (auto i = keys.find(name); i != keys.end()) {
        info = &i->second;
      } else if (auto got = meta(name); !got) {
        return std::move(got.error());
      } else {
        info = &keys.at(name);
      }
      if (auto err = dense_only(op, *info))
        return err;
      out.push_back(payload::resolve(*info, rt->batching));
    }
    if (names.size() < resolved.min_size) {
      short_list = std::move(out);
      return &short_list;
    }
    last_list = resolved.keep(names, std::move(out));
    return resolved.find(last_list);
  }

  // `names` (which `key_infos` resolved last) for the worker: the list kept
  // in `resolved`, shared, or else a copy.
  key_list worker_list(const std::vector<std::string>& names) {
    if (last_list)
      return key_list{std::move(last_list)};
    return key_list{core::share_names(names)};
  }

  // A row table moves by its rows only: refused at the call (the worker
  // would refuse it too, but a push's error waits for the next call).
  static caf::error dense_only(const char* op, const key_info& info) {
    if (info.dim == 0)
      return caf::none;
    return make_error(errc::shape_mismatch,
                      std::string{op} + ": key '" + info.name
                        + "' is a row table (push_rows and pull_rows move "
                          "its rows)");
  }

  // The routing entries of `keys` for `op` on this handle: fails once the
  // handle is closed, and on an empty or unknown key.
  caf::expected<const payload::resolved_keys*>
  open_keys(const char* op, const std::vector<std::string>& names) {
    if (closed)
      return make_error(errc::closed,
                        std::string{op} + ": the store handle was closed");
    return key_infos(op, names);
  }

  // Checks that `buffers` holds one buffer per key, of the key's size
  // (`what` names them).
  template <class Buffers>
  static caf::error check_buffers(const char* op,
                                  const payload::resolved_keys& infos,
                                  const Buffers& buffers, const char* what) {
    if (buffers.size() != infos.size())
      return make_error(errc::shape_mismatch,
                        std::string{op} + ": " + std::to_string(infos.size())
                          + " keys but " + std::to_string(buffers.size()) + " "
                          + what + "s");
    for (size_t i = 0; i < infos.size(); ++i) {
      auto got = static_cast<uint64_t>(buffers[i].size());
      if (got != infos[i].size)
        return to_error(core::check_size(op, *infos[i].info, got, what));
    }
    return caf::none;
  }

  // Starts a request whose reply holds the pulled floats of `dst`.
  template <class... Ts>
  caf::expected<pull_ticket>
  start_pull(payload::target_list dst, uint64_t n, Ts&&... xs) {
    if (auto err = throttle())
      return err;
    auto id = start(
      [this, dst = std::move(dst), n](const float_parts& x) {
        // The worker checked the sizes; outputs nobody waits for any more
        // (close after an error) are left alone.
        if (x.size != n || discarding || !x.valid(false))
          return;
        payload::copy_out(x, dst);
      },
      std::forward<Ts>(xs)...);
    return pull_ticket{id};
  }
};

} // namespace actorps
