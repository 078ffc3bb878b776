// SPDX-License-Identifier: BSD-3-Clause
// The worker actor: its message handlers and supervision of its shards.
// The routes it caches from the coordinator are in routes.cpp; what one call
// sends to the shards is in dispatch.cpp.
#include "actors/worker/state.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/system_messages.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "core/key_groups.hpp"
#include "core/layout.hpp"
#include "core/optimizer.hpp"
#include "messages/errors.hpp"

namespace actorps {

caf::error lost_coordinator() {
  return make_error(errc::dead_node,
                    "lost the coordinator (its process died, its connection "
                    "dropped or it stopped answering heartbeats)");
}

caf::error dead_shard(uint32_t index) {
  return make_error(errc::dead_node, "shard " + std::to_string(index)
                                       + " is down (its server died or "
                                         "its connection was lost)");
}

namespace {

std::string quoted(const std::string& key) {
  return "'" + key + "'";
}

// Asks the coordinator on the caller's behalf: its answer or error, or
// `lost_coordinator()` at once when it goes down.
template <class R, class... Ts>
caf::typed_response_promise<R>
via_coordinator(worker_ptr self, caf::duration timeout, Ts&&... xs) {
  auto rp = self->make_response_promise<R>();
  ask_coordinator<R>(
    self, timeout, [rp](R& x) mutable { rp.deliver(std::move(x)); },
    [rp](caf::error& err) mutable { rp.deliver(std::move(err)); },
    std::forward<Ts>(xs)...);
  return rp;
}

// Runs `kind` on `keys` once their routes are known; delivers to `rp`. A key
// named more than once is pushed once with the sum of its values and pulled
// once into every place that names it.
template <class Promise>
void data_op(worker_ptr self, op_kind kind, core::shared_names_ptr ks,
             int32_t priority, float_parts data, Promise rp) {
  if (!ks || ks->empty()) {
    rp.deliver(make_error(errc::bad_config,
                          std::string{op_name(kind)} + ": no keys given"));
    return;
  }
  // Counted in stats once it completed or failed.
  auto since = std::chrono::steady_clock::now();
  auto& counters = self->state.stats.ops[static_cast<size_t>(kind)];
  auto fail = [rp, &counters](const caf::error& err) mutable {
    ++counters.errors;
    rp.deliver(err);
  };
  // (Shared by the operation and the route check: the key list, 10000 keys
  // in a large call, is not copied.)
  auto sent = data.size;
  auto done = [rp, since, sent, &counters](float_parts out) mutable {
    counters.record(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
        .count());
    counters.floats_out += sent;
    counters.floats_in += out.size;
    if constexpr (std::is_same_v<Promise,
                                 caf::typed_response_promise<float_parts>>)
      rp.deliver(std::move(out));
    else
      rp.deliver(caf::ok_atom::value);
  };
  // The common case: no lookup in flight (which later calls must queue
  // behind), every key known and named once: started at once.
  if (!self->state.stalled) {
    list_summary* summary = nullptr;
    if (auto rs = distinct_routes(self, ks, &summary)) {
      start_ops(self, kind, std::move(*rs), priority, std::move(data),
                std::move(done), fail, summary);
      return;
    }
  }
  auto run = [self, kind, ks, priority, fail, done,
              data = std::move(data)]() mutable {
    list_summary* summary = nullptr;
    if (auto rs = distinct_routes(self, ks, &summary)) {
      start_ops(self, kind, std::move(*rs), priority, std::move(data),
                std::move(done), fail, summary);
      return;
    }
    // As MXNet: the values pushed for one key are summed into one push, and
    // every output of a key pulled more than once gets its value.
    auto groups = core::group_keys(*ks);
    auto rs = *distinct_routes(self, core::share_names(groups.unique));
    std::vector<uint64_t> sizes;
    for (auto* r : rs)
      sizes.push_back(r->info.size);
    float_parts merged;
    if (kind != op_kind::pull) {
      auto st = core::sum_groups(groups, sizes, data, merged);
      if (!st.ok()) {
        st.message.replace(0, 4, op_name(kind));
        fail(to_error(st));
        return;
      }
    }
    start_ops(
      self, kind, std::move(rs), priority, std::move(merged),
      [groups, sizes, done](float_parts out) mutable {
        done(core::expand_groups(groups, sizes, std::move(out)));
      },
      fail);
  };
  with_routes(self, *ks, std::move(run), fail);
}

// A push, pull or push_pull of the keys `ks` from this worker's caller.
template <class Reply>
caf::result<Reply> call(worker_ptr self, op_kind kind,
                        core::shared_names_ptr ks, int32_t priority,
                        float_parts data) {
  if (auto err = self->state.trusted.check(self, op_name(kind)))
    return err;
  auto rp = self->make_response_promise<Reply>();
  data_op(self, kind, std::move(ks), priority, std::move(data), rp);
  return rp;
}

worker_actor::behavior_type worker_impl(worker_ptr self, worker_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.dead.assign(st.cfg.shards.size(), false);
  st.in_flight.resize(st.cfg.shards.size());
  st.retries.resize(st.cfg.shards.size());
  st.parked.resize(st.cfg.shards.size());
  st.recovering.assign(st.cfg.shards.size(), false);
  st.unreplaced.resize(st.cfg.shards.size());
  st.renumbered.assign(st.cfg.shards.size(), false);
  st.promotions.assign(st.cfg.shards.size(), 0);
  st.renumber.resize(st.cfg.shards.size());
  st.acked = std::move(st.cfg.clock_origins);
  st.acked.resize(st.cfg.shards.size());
  st.clocks_unknown = std::move(st.cfg.clocks_unknown);
  st.clocks_unknown.resize(st.cfg.shards.size(), false);
  st.queues.assign(st.cfg.shards.size(),
                   core::send_queue{st.cfg.max_bytes_in_flight});
  // Restored shards that wait for this worker's clocks.
  for (uint32_t i = 0; i < st.cfg.restarted.size() && i < st.cfg.shards.size();
       ++i)
    if (st.cfg.restarted[i] != 0)
      tell_clocks(self, i);
  for (auto& x : st.cfg.shards)
    self->monitor(x);
  for (auto& x : st.cfg.relays)
    self->monitor(x);
  if (st.cfg.coordinator)
    self->monitor(st.cfg.coordinator);
  self->set_down_handler([self](caf::down_msg& dm) {
    if (sent_by_source(self->current_sender(), dm.source))
      on_shard_down(self, dm);
  });
  ignore_strays(self, self->state.trusted);
  return {
    [self](init_atom, const std::string& key,
           const std::vector<uint64_t>& shape,
           floats& value) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "init"))
        return err;
      auto size = core::shape_size(shape);
      if (shape.empty() || size != value.data.size())
        return make_error(errc::shape_mismatch,
                          "init: key " + quoted(key) + " with shape "
                            + core::shape_string(shape) + " needs "
                            + std::to_string(size) + " floats but got "
                            + std::to_string(value.data.size()));
      if (auto err = init_again(self, key))
        return err;
      auto rp = self->make_response_promise<caf::ok_atom>();
      auto rank = self->state.cfg.rank;
      // Shared: std::function needs a copyable callback.
      auto v = std::make_shared<floats>(std::move(value));
      ask_coordinator<key_info>(
        self, self->state.timeout(),
        [self, rp, rank, v](key_info& info) mutable {
          if (rank == 0) {
            write_init(self, std::move(info), std::move(*v), rp);
            return;
          }
          joined(self, std::move(info), rp);
        },
        [rp](caf::error& err) mutable { rp.deliver(std::move(err)); },
        declare_atom::value, key, shape, rank);
      return rp;
    },
    [self](init_atom, const std::string& key,
           const table_init& spec) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "init"))
        return err;
      if (auto err = init_again(self, key))
        return err;
      auto rp = self->make_response_promise<caf::ok_atom>();
      auto rank = self->state.cfg.rank;
      ask_coordinator<key_info>(
        self, self->state.timeout(),
        [self, rp, rank, spec](key_info& info) mutable {
          if (rank == 0) {
            write_table(self, std::move(info), spec, rp);
            return;
          }
          joined(self, std::move(info), rp);
        },
        [rp](caf::error& err) mutable { rp.deliver(std::move(err)); },
        declare_atom::value, key, std::vector<uint64_t>{spec.rows, spec.dim},
        rank, spec.dim);
      return rp;
    },
    [self](push_atom, std::string& key, std::vector<uint64_t>& rows,
           int32_t priority, floats& values) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "push_rows"))
        return err;
      auto rp = self->make_response_promise<caf::ok_atom>();
      rows_op(
        self, op_kind::push, std::move(key), std::move(rows), priority,
        std::move(values.data),
        [rp](float_parts) mutable { rp.deliver(caf::ok_atom::value); },
        [rp](const caf::error& err) mutable { rp.deliver(err); });
      return rp;
    },
    [self](pull_atom, std::string& key, std::vector<uint64_t>& rows,
           int32_t priority) -> caf::result<float_parts> {
      if (auto err = self->state.trusted.check(self, "pull_rows"))
        return err;
      auto rp = self->make_response_promise<float_parts>();
      rows_op(
        self, op_kind::pull, std::move(key), std::move(rows), priority, {},
        [rp](float_parts out) mutable { rp.deliver(std::move(out)); },
        [rp](const caf::error& err) mutable { rp.deliver(err); });
      return rp;
    },
    [self](push_atom, std::string& key, int32_t priority,
           float_parts& grad) -> caf::result<caf::ok_atom> {
      return call<caf::ok_atom>(self, op_kind::push,
                                core::share_names({std::move(key)}), priority,
                                std::move(grad));
    },
    [self](push_atom, std::vector<std::string>& keys, int32_t priority,
           float_parts& grads) -> caf::result<caf::ok_atom> {
      return call<caf::ok_atom>(self, op_kind::push,
                                core::share_names(std::move(keys)), priority,
                                std::move(grads));
    },
    [self](pull_atom, std::string& key,
           int32_t priority) -> caf::result<float_parts> {
      return call<float_parts>(self, op_kind::pull,
                               core::share_names({std::move(key)}), priority,
                               float_parts{});
    },
    [self](pull_atom, std::vector<std::string>& keys,
           int32_t priority) -> caf::result<float_parts> {
      return call<float_parts>(self, op_kind::pull,
                               core::share_names(std::move(keys)), priority,
                               float_parts{});
    },
    [self](push_pull_atom, std::string& key, int32_t priority,
           float_parts& grad) -> caf::result<float_parts> {
      return call<float_parts>(self, op_kind::push_pull,
                               core::share_names({std::move(key)}), priority,
                               std::move(grad));
    },
    [self](push_pull_atom, std::vector<std::string>& keys, int32_t priority,
           float_parts& grads) -> caf::result<float_parts> {
      return call<float_parts>(self, op_kind::push_pull,
                               core::share_names(std::move(keys)), priority,
                               std::move(grads));
    },
    [self](push_atom, key_list& keys, int32_t priority,
           float_parts& grads) -> caf::result<caf::ok_atom> {
      return call<caf::ok_atom>(self, op_kind::push, std::move(keys.names),
                                priority, std::move(grads));
    },
    [self](pull_atom, key_list& keys,
           int32_t priority) -> caf::result<float_parts> {
      return call<float_parts>(self, op_kind::pull, std::move(keys.names),
                               priority, float_parts{});
    },
    [self](push_pull_atom, key_list& keys, int32_t priority,
           float_parts& grads) -> caf::result<float_parts> {
      return call<float_parts>(self, op_kind::push_pull, std::move(keys.names),
                               priority, std::move(grads));
    },
    [self](compress_atom, std::string& key,
           compression c) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self,
                                               "set_gradient_compression"))
        return err;
      if (auto why = check(c); !why.empty())
        return make_error(errc::bad_config, "set_gradient_compression: " + why);
      auto rp = self->make_response_promise<caf::ok_atom>();
      // Through with_routes (with no keys): behind every operation that
      // waits for a lookup, so it takes effect in issue order.
      auto apply = [self, key = std::move(key), c, rp]() mutable {
        auto& st = self->state;
        if (key.empty()) {
          st.cfg.compression = c;
          for (auto& kvp : st.routes)
            if (st.key_compression.count(kvp.first) == 0)
              set_compression(st, kvp.second, c);
        } else {
          st.key_compression[key] = c;
          if (auto i = st.routes.find(key); i != st.routes.end())
            set_compression(st, i->second, c);
        }
        rp.deliver(caf::ok_atom::value);
      };
      with_routes(self, {}, std::move(apply),
                  [rp](const caf::error& err) mutable { rp.deliver(err); });
      return rp;
    },
    [self](lookup_atom, const std::string& key) -> caf::result<key_info> {
      if (auto err = self->state.trusted.check(self, "lookup"))
        return err;
      auto rp = self->make_response_promise<key_info>();
      with_routes(
        self, {key},
        [self, key, rp]() mutable {
          rp.deliver(self->state.routes.at(key).info);
        },
        [rp](const caf::error& err) mutable { rp.deliver(err); });
      return rp;
    },
    [self](barrier_atom) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "barrier"))
        return err;
      return via_coordinator<caf::ok_atom>(
        self, caf::duration{self->state.cfg.barrier_timeout},
        barrier_atom::value, self->state.cfg.rank);
    },
    [self](dead_atom, int32_t node_or_group,
           int32_t timeout_s) -> caf::result<uint32_t> {
      if (auto err = self->state.trusted.check(self, "num_dead_node"))
        return err;
      // Without the coordinator, only the coordinator's own group is
      // known: it counts 1.
      if (self->state.coordinator_down && node_or_group < 8
          && (node_or_group & ~1) == 0)
        return static_cast<uint32_t>(node_or_group);
      return via_coordinator<uint32_t>(self, self->state.timeout(),
                                       dead_atom::value, node_or_group,
                                       timeout_s);
    },
    [self](command_atom, int32_t head,
           const std::string& body) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "send_command_to_servers"))
        return err;
      return via_coordinator<caf::ok_atom>(self, self->state.timeout(),
                                           command_atom::value, head, body);
    },
    [self](ucx_atom) {
      // Replies wait on the data channel (it only wakes us: what we read
      // comes from the channel, not from this message).
      auto& st = self->state;
      if (!st.cfg.channel)
        return;
      for (auto& r : st.cfg.channel->take()) {
        auto i = st.channel_waiting.find(r.request);
        if (i == st.channel_waiting.end())
          continue;
        auto w = std::move(i->second);
        st.channel_waiting.erase(i);
        w.on_reply(r);
      }
      // A client thread may wait for these answers in the channel, and
      // this may be another thread (data_channel::drive).
      st.cfg.channel->wake_driver();
    },
    [self](ucx_atom, uint64_t id) {
      // A request on the data channel timed out (our own timer).
      auto& st = self->state;
      if (self->current_sender() != self->ctrl())
        return;
      auto i = st.channel_waiting.find(id);
      if (i == st.channel_waiting.end())
        return;
      auto w = std::move(i->second);
      st.channel_waiting.erase(i);
      auto err = caf::make_error(caf::sec::request_timeout);
      w.on_fail(err);
      st.cfg.channel->wake_driver();
    },
    [self](leave_atom) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "leave"))
        return err;
      self->state.leaving = true;
      return via_coordinator<caf::ok_atom>(
        self, self->state.timeout(), leave_atom::value, self->state.cfg.rank);
    },
    [self](leave_atom, std::string& why) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "leave"))
        return err;
      self->state.leaving = true;
      return via_coordinator<caf::ok_atom>(self, self->state.timeout(),
                                           leave_atom::value,
                                           self->state.cfg.rank,
                                           std::move(why));
    },
    [self](set_opt_atom,
           const optimizer_config& opt) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "set_optimizer"))
        return err;
      // Checked before it leaves the process: CAF 0.17 cannot encode an
      // infinite parameter (its float encoder never returns).
      if (auto err = to_error(core::validate(opt)))
        return err;
      return via_coordinator<caf::ok_atom>(self, self->state.timeout(),
                                           set_opt_atom::value, opt);
    },
    [self](save_atom) -> caf::result<state_snapshot> {
      if (auto err = self->state.trusted.check(self, "save_optimizer_states"))
        return err;
      return via_coordinator<state_snapshot>(self, self->state.timeout(),
                                             save_atom::value);
    },
    [self](save_atom, const save_cursor& at) -> caf::result<save_piece> {
      if (auto err = self->state.trusted.check(self, "save_optimizer_states"))
        return err;
      return via_coordinator<save_piece>(self, self->state.timeout(),
                                         save_atom::value, at);
    },
    [self](load_atom, load_piece& piece) -> caf::result<uint64_t> {
      if (auto err = self->state.trusted.check(self, "load_optimizer_states"))
        return err;
      return via_coordinator<uint64_t>(self, self->state.timeout(),
                                       load_atom::value, std::move(piece));
    },
    [self](load_atom, const state_snapshot& snap) -> caf::result<caf::ok_atom> {
      if (auto err = self->state.trusted.check(self, "load_optimizer_states"))
        return err;
      if (auto err = to_error(core::validate(snap.optimizer)))
        return err;
      return via_coordinator<caf::ok_atom>(self, self->state.timeout(),
                                           load_atom::value, snap);
    },
    [self](stats_atom) -> caf::result<worker_stats> {
      if (auto err = self->state.trusted.check(self, "stats"))
        return err;
      auto& st = self->state;
      auto out = st.stats;
      out.rank = st.cfg.rank;
      std::map<int32_t, queued_requests, std::greater<>> by_priority;
      for (auto& q : st.queues) {
        out.bytes_in_flight += q.in_flight();
        q.each_queued([&](int32_t priority, uint64_t bytes) {
          auto& x = by_priority[priority];
          x.priority = priority;
          ++x.requests;
          x.bytes += bytes;
        });
      }
      for (auto& [p, x] : by_priority)
        out.queued.push_back(x);
      return out;
    },
  };
}

} // namespace

worker_actor spawn_worker(caf::actor_system& sys, worker_config cfg) {
  return sys.spawn(worker_impl, std::move(cfg));
}

} // namespace actorps
