// SPDX-License-Identifier: BSD-3-Clause
#include "actors/worker.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>

#include "caf/actor_system.hpp"
#include "caf/duration.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/message_priority.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/system_messages.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

#include "actors/fan_in.hpp"
#include "messages/errors.hpp"
#include "runtime/core/layout.hpp"

namespace actorps {

namespace {

// Routing entry of one key plus this worker's next sequence number per part.
struct route {
  key_info info;
  std::vector<uint64_t> seq;
  bool ready = false;
  // Operations issued while the lookup was in flight, in issue order.
  std::vector<std::function<void(route&)>> queued;
  std::vector<std::function<void(const caf::error&)>> failed;
};

} // namespace

struct worker_state {
  static inline const char* name = "actorps.worker";

  worker_config cfg;
  std::unordered_map<std::string, route> routes;
  // Per shard: dead or not, and the failure handlers of requests in flight,
  // so that a shard going down fails them at once (CAF 0.17 fails requests
  // to a dead remote peer only when they time out).
  std::vector<bool> dead;
  std::vector<std::unordered_map<uint64_t, std::function<void(caf::error&)>>>
    in_flight;
  uint64_t next_request = 0;

  caf::duration timeout() const {
    return caf::duration{cfg.timeout};
  }
};

namespace {

using self_ptr = worker_actor::stateful_pointer<worker_state>;

std::string quoted(const std::string& key) {
  return "'" + key + "'";
}

// Marks the route of `key` ready and runs the operations queued behind its
// lookup, in issue order, before any later one.
void ready_route(self_ptr self, const std::string& key, key_info info) {
  auto& r = self->state.routes[key];
  if (!r.ready)
    r.seq.assign(info.slices.size(), 0);
  r.info = std::move(info);
  r.ready = true;
  auto queued = std::move(r.queued);
  r.queued.clear();
  r.failed.clear();
  for (auto& g : queued)
    g(self->state.routes[key]);
}

// Runs `f` with the key's route, fetching it from the coordinator first if
// needed. Calls issued meanwhile queue behind, so issue order is kept.
void with_route(self_ptr self, const std::string& key,
                std::function<void(route&)> f,
                std::function<void(const caf::error&)> on_error) {
  auto& routes = self->state.routes;
  auto i = routes.find(key);
  if (i != routes.end()) {
    if (i->second.ready) {
      f(i->second);
    } else {
      i->second.queued.push_back(std::move(f));
      i->second.failed.push_back(std::move(on_error));
    }
    return;
  }
  auto& r = routes[key];
  r.queued.push_back(std::move(f));
  r.failed.push_back(std::move(on_error));
  self
    ->request(self->state.cfg.coordinator, self->state.timeout(),
              lookup_atom::value, key)
    .then([self,
           key](key_info& info) { ready_route(self, key, std::move(info)); },
          [self, key](caf::error& err) {
            auto i = self->state.routes.find(key);
            // An init may have made the route ready meanwhile: keep it (and its
            // sequence numbers); its queue already ran.
            if (i == self->state.routes.end() || i->second.ready)
              return;
            auto failed = std::move(i->second.failed);
            self->state.routes.erase(i);
            for (auto& g : failed)
              g(err);
          });
}

caf::error dead_shard(uint32_t index) {
  return make_error(errc::dead_node, "shard " + std::to_string(index)
                                       + " is down (its server died or "
                                         "its connection was lost)");
}

// Sends one request to shard `index` and tracks it until it completes.
// Priority > 0 goes through the shard's relay when the shard is remote (CAF
// drops priorities over the network), else with CAF's high priority.
template <class Reply, class OnOk, class... Ts>
void to_shard(self_ptr self, uint32_t index, int32_t priority, OnOk on_ok,
              std::function<void(caf::error&)> on_err, Ts&&... xs) {
  auto& st = self->state;
  if (st.dead[index]) {
    auto err = dead_shard(index);
    on_err(err);
    return;
  }
  auto id = st.next_request++;
  st.in_flight[index].emplace(id, std::move(on_err));
  auto ok = [self, index, id, on_ok](Reply& x) mutable {
    if (self->state.in_flight[index].erase(id) > 0)
      on_ok(x);
  };
  auto fail = [self, index, id](caf::error& err) {
    auto& pending = self->state.in_flight[index];
    auto i = pending.find(id);
    if (i == pending.end())
      return;
    auto f = std::move(i->second);
    pending.erase(i);
    f(err);
  };
  if (priority > 0 && !st.cfg.relays.empty())
    self->request(st.cfg.relays[index], st.timeout(), std::forward<Ts>(xs)...)
      .then(ok, fail);
  else if (priority > 0)
    self
      ->request<caf::message_priority::high>(st.cfg.shards[index], st.timeout(),
                                             std::forward<Ts>(xs)...)
      .then(ok, fail);
  else
    self->request(st.cfg.shards[index], st.timeout(), std::forward<Ts>(xs)...)
      .then(ok, fail);
}

// A shard (or its relay) went down: fail everything in flight to it.
void on_down(self_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (uint32_t i = 0; i < st.cfg.shards.size(); ++i) {
    bool hit = st.cfg.shards[i].address() == dm.source
               || (i < st.cfg.relays.size()
                   && st.cfg.relays[i].address() == dm.source);
    if (!hit || st.dead[i])
      continue;
    st.dead[i] = true;
    auto pending = std::move(st.in_flight[i]);
    st.in_flight[i].clear();
    for (auto& kvp : pending) {
      auto err = dead_shard(i);
      kvp.second(err);
    }
  }
}

void send_push(self_ptr self, route& r, int32_t priority, floats grad,
               caf::typed_response_promise<caf::ok_atom> rp) {
  const auto& info = r.info;
  if (auto st = core::check_size("push", info, grad.data.size(), "push");
      !st.ok()) {
    rp.deliver(to_error(st));
    return;
  }
  auto rank = self->state.cfg.rank;
  detail::fan_in<decltype(rp)> fan{rp, info.slices.size()};
  auto on_ok = [fan](caf::ok_atom) {
    if (fan.arrive())
      fan.promise().deliver(caf::ok_atom::value);
  };
  auto on_err = [fan](caf::error& err) { fan.fail(std::move(err)); };
  for (auto& s : info.slices) {
    slice_push msg{make_slice_id(info.id, s.part), rank, r.seq[s.part]++, {}};
    if (info.slices.size() == 1) {
      // Whole key on one shard: hand the buffer on without copying it.
      msg.grad = std::move(grad);
    } else {
      auto first = grad.data.begin() + static_cast<std::ptrdiff_t>(s.offset);
      msg.grad.data.assign(first,
                           first + static_cast<std::ptrdiff_t>(s.length));
    }
    to_shard<caf::ok_atom>(self, s.shard, priority, on_ok, on_err,
                           push_atom::value, std::move(msg));
  }
}

void send_pull(self_ptr self, route& r, int32_t priority,
               caf::typed_response_promise<floats> rp) {
  const auto& info = r.info;
  auto rank = self->state.cfg.rank;
  auto whole = info.slices.size() == 1;
  auto out = std::make_shared<floats>();
  if (!whole)
    out->data.resize(info.size);
  detail::fan_in<decltype(rp)> fan{rp, info.slices.size()};
  for (auto& s : info.slices) {
    auto on_ok = [fan, out, s, whole](floats& x) {
      if (x.data.size() != s.length) {
        fan.fail(make_error(errc::shape_mismatch,
                            "pull: shard returned "
                              + std::to_string(x.data.size())
                              + " floats for part " + std::to_string(s.part)
                              + ", expected " + std::to_string(s.length)));
        return;
      }
      if (whole)
        *out = std::move(x);
      else
        std::memcpy(out->data.data() + s.offset, x.data.data(),
                    s.length * sizeof(float));
      if (fan.arrive())
        fan.promise().deliver(std::move(*out));
    };
    to_shard<floats>(
      self, s.shard, priority, on_ok,
      [fan](caf::error& err) { fan.fail(std::move(err)); }, pull_atom::value,
      slice_pull{make_slice_id(info.id, s.part), rank, r.seq[s.part]++});
  }
}

// Rank 0 writes the value to every shard, then tells the coordinator. If a
// shard fails, the coordinator hears of it too, so the waiting ranks fail
// instead of waiting and rank 0 may try again.
void write_init(self_ptr self, key_info info, floats value,
                caf::typed_response_promise<caf::ok_atom> rp) {
  detail::fan_in<decltype(rp)> fan{rp, info.slices.size()};
  auto report = [self, id = info.id](bool ok) {
    return self->request(self->state.cfg.coordinator, self->state.timeout(),
                         init_done_atom::value, id, ok);
  };
  auto done = [self, fan, info, report]() mutable {
    report(true).then(
      [self, fan, info](caf::ok_atom) mutable {
        ready_route(self, info.name, info);
        fan.promise().deliver(caf::ok_atom::value);
      },
      [fan](caf::error& err) { fan.fail(std::move(err)); });
  };
  auto on_error = [fan, report](caf::error& err) {
    if (fan.failed())
      return;
    fan.fail(std::move(err));
    report(false).then([](caf::ok_atom) {}, [](caf::error&) {});
  };
  for (auto& s : info.slices) {
    slice_init msg{make_slice_id(info.id, s.part), {}};
    if (info.slices.size() == 1) {
      msg.value = std::move(value);
    } else {
      auto first = value.data.begin() + static_cast<std::ptrdiff_t>(s.offset);
      msg.value.data.assign(first,
                            first + static_cast<std::ptrdiff_t>(s.length));
    }
    to_shard<caf::ok_atom>(
      self, s.shard, 0,
      [fan, done](caf::ok_atom) mutable {
        if (fan.arrive())
          done();
      },
      on_error, init_atom::value, std::move(msg));
  }
}

worker_actor::behavior_type worker_impl(self_ptr self, worker_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.dead.assign(st.cfg.shards.size(), false);
  st.in_flight.resize(st.cfg.shards.size());
  for (auto& x : st.cfg.shards)
    self->monitor(x);
  for (auto& x : st.cfg.relays)
    self->monitor(x);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  return {
    [self](init_atom, const std::string& key,
           const std::vector<uint64_t>& shape,
           floats& value) -> caf::result<caf::ok_atom> {
      auto size = core::shape_size(shape);
      if (shape.empty() || size != value.data.size())
        return make_error(errc::shape_mismatch,
                          "init: key " + quoted(key) + " with shape "
                            + core::shape_string(shape) + " needs "
                            + std::to_string(size) + " floats but got "
                            + std::to_string(value.data.size()));
      auto rp = self->make_response_promise<caf::ok_atom>();
      auto rank = self->state.cfg.rank;
      self
        ->request(self->state.cfg.coordinator, self->state.timeout(),
                  declare_atom::value, key, shape, rank)
        .then(
          [self, rp, rank, value = std::move(value)](key_info& info) mutable {
            if (rank == 0) {
              write_init(self, std::move(info), std::move(value), rp);
              return;
            }
            auto name = info.name;
            ready_route(self, name, std::move(info));
            rp.deliver(caf::ok_atom::value);
          },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [self](push_atom, const std::string& key, int32_t priority,
           floats& grad) -> caf::result<caf::ok_atom> {
      auto rp = self->make_response_promise<caf::ok_atom>();
      with_route(
        self, key,
        [self, priority, rp, g = std::move(grad)](route& r) mutable {
          send_push(self, r, priority, std::move(g), rp);
        },
        [rp](const caf::error& err) mutable { rp.deliver(err); });
      return rp;
    },
    [self](pull_atom, const std::string& key,
           int32_t priority) -> caf::result<floats> {
      auto rp = self->make_response_promise<floats>();
      with_route(
        self, key,
        [self, priority, rp](route& r) { send_pull(self, r, priority, rp); },
        [rp](const caf::error& err) mutable { rp.deliver(err); });
      return rp;
    },
    [self](lookup_atom, const std::string& key) -> caf::result<key_info> {
      auto rp = self->make_response_promise<key_info>();
      with_route(
        self, key, [rp](route& r) mutable { rp.deliver(r.info); },
        [rp](const caf::error& err) mutable { rp.deliver(err); });
      return rp;
    },
    [self](barrier_atom) -> caf::result<caf::ok_atom> {
      auto rp = self->make_response_promise<caf::ok_atom>();
      self
        ->request(self->state.cfg.coordinator,
                  caf::duration{self->state.cfg.barrier_timeout},
                  barrier_atom::value, self->state.cfg.rank)
        .then([rp](caf::ok_atom) mutable { rp.deliver(caf::ok_atom::value); },
              [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [self](dead_atom, int32_t node_or_group, int32_t timeout_s) {
      return self->delegate(self->state.cfg.coordinator, dead_atom::value,
                            node_or_group, timeout_s);
    },
    [self](command_atom, int32_t head, const std::string& body) {
      return self->delegate(self->state.cfg.coordinator, command_atom::value,
                            head, body);
    },
    [self](leave_atom) {
      return self->delegate(self->state.cfg.coordinator, leave_atom::value,
                            self->state.cfg.rank);
    },
    [self](set_opt_atom, const optimizer_config& opt) {
      return self->delegate(self->state.cfg.coordinator, set_opt_atom::value,
                            opt);
    },
    [self](save_atom) {
      return self->delegate(self->state.cfg.coordinator, save_atom::value);
    },
    [self](load_atom, const state_snapshot& snap) {
      return self->delegate(self->state.cfg.coordinator, load_atom::value,
                            snap);
    },
  };
}

} // namespace

worker_actor spawn_worker(caf::actor_system& sys, worker_config cfg) {
  return sys.spawn(worker_impl, std::move(cfg));
}

} // namespace actorps
