// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/kvstore.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>

#include "caf/actor_cast.hpp"
#include "caf/actor_system.hpp"
#include "caf/after.hpp"
#include "caf/blocking_actor.hpp"
#include "caf/duration.hpp"
#include "caf/exit_reason.hpp"
#include "caf/io/middleman.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/sec.hpp"
#include "caf/send.hpp"

#include "actors/coordinator.hpp"
#include "actors/node.hpp"
#include "actors/shard.hpp"
#include "actors/worker.hpp"
#include "messages/errors.hpp"
#include "runtime/blocking.hpp"
#include "core/checkpoint.hpp"
#include "core/layout.hpp"
#include "core/parallel.hpp"
#include "runtime/network.hpp"
#include "runtime/system.hpp"

namespace actorps {

namespace {

// Everything a store runs in this process: shared by all its handles.
struct store_runtime {
  system_config cfg;
  caf::actor_system sys;
  store_options opts;
  uint32_t num_workers = 0;
  std::map<uint32_t, worker_actor> workers;
  bool sync = false;
  // Long-lived actors of this process, sent an exit in this order.
  std::vector<caf::actor> owned;

  store_runtime(const system_options& so, const store_options& o)
    : cfg(so), sys(cfg), opts(o) {
  }

  ~store_runtime() {
    for (auto& a : owned)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }

  template <class Handle>
  Handle own(Handle h) {
    owned.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }
};

std::shared_ptr<store_runtime> make_local(const store_options& o, bool sync) {
  system_options so;
  so.threads = o.threads;
  so.scheduler = o.scheduler;
  so.keep_freed_memory = o.keep_freed_memory;
  auto rt = std::make_shared<store_runtime>(so, o);
  rt->num_workers = o.num_workers;
  rt->sync = sync;
  std::vector<shard_actor> shards;
  for (uint32_t i = 0; i < o.num_shards; ++i) {
    shard_config sc;
    sc.index = i;
    sc.num_workers = o.num_workers;
    sc.sync = sync;
    shards.push_back(spawn_shard(rt->sys, sc));
  }
  coordinator_config cc;
  cc.num_workers = o.num_workers;
  cc.bigarray_bound = o.bigarray_bound;
  cc.slice_floats = o.slice_floats;
  cc.timeout = o.timeout;
  cc.shards = shards;
  auto coordinator = spawn_coordinator(rt->sys, cc);
  for (uint32_t r = 0; r < o.num_workers; ++r) {
    worker_config wc;
    wc.rank = r;
    wc.coordinator = coordinator;
    wc.shards = shards;
    wc.timeout = o.timeout;
    wc.barrier_timeout = o.barrier_timeout;
    wc.max_bytes_in_flight = o.max_bytes_in_flight;
    wc.sync = sync;
    wc.compression = o.compression;
    rt->workers.emplace(r, rt->own(spawn_worker(rt->sys, wc)));
  }
  rt->own(coordinator);
  for (auto& x : shards)
    rt->own(x);
  return rt;
}

caf::expected<std::shared_ptr<store_runtime>> make_dist(const store_options& o,
                                                        bool sync) {
  auto where = parse_endpoint(o.coordinator);
  if (!where)
    return std::move(where.error());
  system_options so;
  so.threads = o.threads;
  so.scheduler = o.scheduler;
  so.keep_freed_memory = o.keep_freed_memory;
  so.network = true;
  so.heartbeat = o.heartbeat;
  so.connection_timeout = o.connection_timeout;
  auto rt = std::make_shared<store_runtime>(so, o);
  auto any = connect_coordinator(rt->sys, *where, o.connect_timeout);
  if (!any)
    return make_error(errc::dead_node, "create: " + context_of(any.error()));
  auto coord = caf::actor_cast<coordinator_actor>(*any);
  auto agent = rt->own(spawn_node_agent(rt->sys, coord, caf::actor{}));
  caf::scoped_actor self{rt->sys, true};
  job_info job;
  if (auto err = detail::ask(
        self.ptr(), agent, o.timeout, [&](job_info& x) { job = x; },
        join_atom::value, role::worker, o.token,
        sync ? join_mode::sync : join_mode::async))
    return err;
  routing_table table;
  if (auto err = detail::ask(
        self.ptr(), coord, o.timeout,
        [&](routing_table& x) { table = std::move(x); }, routing_atom::value))
    return err;
  // Direct connections to every server (see routing_table::servers).
  for (auto& server : table.servers) {
    auto at = parse_endpoint(server);
    if (!at)
      return std::move(at.error());
    auto direct = rt->sys.middleman().remote_actor<shard_actor>(at->host,
                                                                at->port);
    if (!direct)
      return make_error(errc::dead_node, "create: cannot reach the server at "
                                           + server + " ("
                                           + render(direct.error()) + ")");
  }
  worker_config wc;
  wc.rank = job.rank;
  wc.coordinator = coord;
  for (auto& x : table.shards)
    wc.shards.push_back(caf::actor_cast<shard_actor>(x));
  for (auto& x : table.relays)
    wc.relays.push_back(caf::actor_cast<shard_actor>(x));
  wc.timeout = o.timeout;
  wc.barrier_timeout = o.barrier_timeout;
  wc.max_bytes_in_flight = o.max_bytes_in_flight;
  wc.sync = job.sync;
  wc.compression = o.compression;
  rt->num_workers = job.num_workers;
  rt->sync = job.sync;
  rt->opts.bigarray_bound = job.bigarray_bound;
  auto worker = spawn_worker(rt->sys, wc);
  rt->owned.insert(rt->owned.begin(), caf::actor_cast<caf::actor>(worker));
  rt->workers.emplace(job.rank, worker);
  return rt;
}

// Turns CAF's system errors into actorps errors a user can act on. `inner`
// is the timeout the actors use for their own requests.
caf::error translate(caf::error err, std::chrono::milliseconds inner) {
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

caf::error closed_error(const char* op) {
  return make_error(errc::closed,
                    std::string{op} + ": the store handle was closed");
}

} // namespace

struct kvstore::impl {
  // Declared first so it is destroyed last: the scoped actor below belongs to
  // its actor system.
  std::shared_ptr<store_runtime> rt;
  std::string type;
  uint32_t rank = 0;
  worker_actor worker;
  std::unique_ptr<caf::scoped_actor> self;
  std::unordered_map<std::string, key_info> keys;
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

  impl(std::shared_ptr<store_runtime> runtime, std::string t, uint32_t r)
    : rt(std::move(runtime)), type(std::move(t)), rank(r) {
    worker = rt->workers.at(r);
    self = std::make_unique<caf::scoped_actor>(rt->sys, true);
  }

  ~impl() {
    self.reset();
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
    return translate(detail::await_reply(self->ptr(), mid, dur, on_value),
                     rt->opts.timeout);
  }

  // Blocking request to the worker actor; `on_value` gets the reply.
  template <class OnValue, class... Ts>
  caf::error call(std::chrono::milliseconds dur, OnValue on_value, Ts&&... xs) {
    auto h = (*self)->request(worker, caf::infinite, std::forward<Ts>(xs)...);
    return await(h.id(), dur, on_value);
  }

  // Sends a request and keeps its finisher under a new ticket number. The
  // hop to the worker actor keeps normal priority on purpose: the mailbox
  // must not reorder one handle's operations before the worker numbers them;
  // the worker applies the priority on its way to the shards.
  template <class OnValue, class... Ts>
  uint64_t start(OnValue on_value, Ts&&... xs) {
    auto id = next_ticket++;
    auto h = (*self)->request(worker, caf::infinite, std::forward<Ts>(xs)...);
    pending.emplace(id, [this, mid = h.id(), on_value]() mutable {
      return await(mid, timeout(), on_value);
    });
    return id;
  }

  // Finishes every pending operation up to and including `last`.
  caf::error finish_until(uint64_t last) {
    caf::error first = std::move(deferred);
    deferred = caf::none;
    while (!pending.empty() && pending.begin()->first <= last) {
      auto f = std::move(pending.begin()->second);
      pending.erase(pending.begin());
      if (auto err = f(); err && !first)
        first = std::move(err);
    }
    return first;
  }

  // Bounds the operations in flight: finishes the oldest ones.
  void throttle() {
    auto cap = std::max<std::size_t>(rt->opts.max_pending, 1);
    while (pending.size() >= cap) {
      auto f = std::move(pending.begin()->second);
      pending.erase(pending.begin());
      if (auto err = f(); err && !deferred)
        deferred = std::move(err);
    }
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

  // The routing entry of each key (pointers into `keys`, which keeps its
  // elements in place).
  caf::expected<std::vector<const key_info*>>
  key_infos(const char* op, const std::vector<std::string>& names) {
    if (names.empty())
      return make_error(errc::bad_config, std::string{op} + ": no keys given");
    std::vector<const key_info*> out;
    out.reserve(names.size());
    for (auto& name : names) {
      if (auto info = meta(name); !info)
        return std::move(info.error());
      out.push_back(&keys.at(name));
    }
    return out;
  }

  // Checks that `buffers` holds one buffer per key, of the key's size
  // (`what` names them).
  template <class Buffers>
  static caf::error check_buffers(const char* op,
                                  const std::vector<const key_info*>& infos,
                                  const Buffers& buffers, const char* what) {
    if (buffers.size() != infos.size())
      return make_error(errc::shape_mismatch,
                        std::string{op} + ": " + std::to_string(infos.size())
                          + " keys but " + std::to_string(buffers.size()) + " "
                          + what + "s");
    for (size_t i = 0; i < infos.size(); ++i) {
      auto got = static_cast<uint64_t>(buffers[i].size());
      if (got != infos[i]->size)
        return to_error(core::check_size(op, *infos[i], got, what));
    }
    return caf::none;
  }

  // Lays out a pushed value of the keys `infos`, back to back: each slice
  // that the worker sends alone gets a buffer of its own, which then travels
  // to its shard without another copy; the other slices are packed together.
  // `fill(i, from, n, out)` appends the floats [from, from + n) of key i to
  // `out` (appended, not resized and overwritten: one pass over the memory).
  // Slices of their own are filled on two threads when large enough (see
  // core::split_in_two), so `fill` must be safe to call concurrently for
  // distinct outputs.
  template <class Fill>
  static float_parts
  pack(const std::vector<const key_info*>& infos, Fill fill) {
    uint64_t small = 0;
    struct own_slice {
      size_t key;
      const slice_range* slice;
    };
    std::vector<own_slice> alone;
    for (size_t i = 0; i < infos.size(); ++i)
      for (auto& s : infos[i]->slices) {
        if (s.length <= default_batch_floats)
          small += s.length;
        else
          alone.push_back(own_slice{i, &s});
      }
    // Allocated here, so that the helper thread only copies.
    std::vector<std::vector<float>> owns(alone.size());
    std::vector<uint64_t> weights(alone.size());
    for (size_t j = 0; j < alone.size(); ++j) {
      owns[j].reserve(alone[j].slice->length);
      weights[j] = alone[j].slice->length;
    }
    core::split_in_two(weights, core::parallel_min_floats, [&](size_t j) {
      fill(alone[j].key, alone[j].slice->offset, alone[j].slice->length,
           owns[j]);
    });
    float_parts out;
    std::vector<float> run;
    run.reserve(small);
    auto end_run = [&] {
      if (!run.empty())
        out.append(shared_floats{std::move(run)});
      run = std::vector<float>{};
    };
    size_t next_own = 0;
    for (size_t i = 0; i < infos.size(); ++i) {
      for (auto& s : infos[i]->slices) {
        if (s.length <= default_batch_floats) {
          fill(i, s.offset, s.length, run);
          continue;
        }
        end_run();
        out.append(shared_floats{std::move(owns[next_own++])});
      }
    }
    end_run();
    return out;
  }

  // Packs one value per key.
  static float_parts
  pack(const std::vector<const key_info*>& infos,
       const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values) {
    return pack(infos, [&](size_t i, uint64_t from, uint64_t n,
                           std::vector<float>& out) {
      auto first = values[i].data() + from;
      out.insert(out.end(), first, first + n);
    });
  }

  // Where pulled floats go: `n` floats of the value, from `at`, to `dst`.
  struct target {
    uint64_t at = 0;
    uint64_t n = 0;
    float* dst = nullptr;
  };

  // Sorted by `at`; ranges may coincide (one key pulled into several
  // outputs) but not overlap partly.
  using target_list = std::vector<target>;

  // One output per key, the keys back to back (outputs checked).
  static target_list targets(const std::vector<const key_info*>& infos,
                             std::vector<Eigen::Ref<Eigen::VectorXf>>& outs) {
    target_list out;
    uint64_t at = 0;
    for (size_t i = 0; i < outs.size(); ++i) {
      out.push_back(target{at, infos[i]->size, outs[i].data()});
      at += infos[i]->size;
    }
    return out;
  }

  // Copies every piece of `x` into the outputs whose range holds it (on two
  // threads when large enough, see core::split_in_two).
  static void copy_out(const float_parts& x, const target_list& dst) {
    // Calls `f(to, from, n)` for every copy to make.
    auto each_copy = [&](auto&& f) {
      for (auto& p : x.pieces) {
        auto src = x.buffers[p.buffer].data() + p.from;
        // The first output that ends after the piece's start.
        auto t = std::partition_point(dst.begin(), dst.end(),
                                      [&](const target& y) {
                                        return y.at + y.n <= p.at;
                                      });
        for (; t != dst.end() && t->at <= p.at; ++t)
          if (p.at + p.length <= t->at + t->n)
            f(t->dst + (p.at - t->at), src, p.length);
      }
    };
    auto copy_now = [](float* to, const float* from, uint64_t n) {
      std::memcpy(to, from, n * sizeof(float));
    };
    // Small pulls (every small round) copy at once, without collecting.
    if (x.size < core::parallel_min_floats) {
      each_copy(copy_now);
      return;
    }
    struct copy {
      float* to;
      const float* from;
      uint64_t n;
    };
    std::vector<copy> copies;
    std::vector<uint64_t> weights;
    each_copy([&](float* to, const float* from, uint64_t n) {
      copies.push_back(copy{to, from, n});
      weights.push_back(n);
    });
    core::split_in_two(weights, core::parallel_min_floats, [&](size_t i) {
      copy_now(copies[i].to, copies[i].from, copies[i].n);
    });
  }

  // Starts a request whose reply holds the pulled floats of `dst`.
  template <class... Ts>
  pull_ticket start_pull(target_list dst, uint64_t n, Ts&&... xs) {
    throttle();
    auto id = start(
      [this, dst = std::move(dst), n](const float_parts& x) {
        // The worker checked the sizes; outputs nobody waits for any more
        // (close after an error) are left alone.
        if (x.size != n || discarding || !x.valid(false))
          return;
        copy_out(x, dst);
      },
      std::forward<Ts>(xs)...);
    return pull_ticket{id};
  }
};

kvstore::kvstore(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
}

kvstore::kvstore(kvstore&&) noexcept = default;

kvstore& kvstore::operator=(kvstore&&) noexcept = default;

kvstore::~kvstore() {
  if (impl_ && !impl_->closed)
    static_cast<void>(close());
}

caf::expected<kvstore> kvstore::create(const std::string& type,
                                       const store_options& opts) {
  bool sync = false;
  bool dist = false;
  if (type == "local" || type == "local_async") {
  } else if (type == "local_sync") {
    sync = true;
  } else if (type == "dist_async") {
    dist = true;
  } else if (type == "dist_sync" || type == "dist") {
    dist = sync = true;
  } else {
    return make_error(errc::bad_config,
                      "create: unknown store type '" + type
                        + "' (expected local, local_async, local_sync, "
                          "dist_sync or dist_async)");
  }
  if (!dist && (opts.num_workers == 0 || opts.num_shards == 0))
    return make_error(errc::bad_config,
                      "create: need at least one worker and one shard, got "
                        + std::to_string(opts.num_workers) + " workers and "
                        + std::to_string(opts.num_shards) + " shards");
  if (opts.bigarray_bound == 0)
    return make_error(errc::bad_config, "create: bigarray_bound must be > 0");
  if (opts.slice_floats == 0 || opts.slice_floats > core::max_slice_floats)
    return make_error(errc::bad_config,
                      "create: slice_floats must be 1.."
                        + std::to_string(core::max_slice_floats) + ", got "
                        + std::to_string(opts.slice_floats));
  if (opts.timeout.count() <= 0 || opts.barrier_timeout.count() <= 0)
    return make_error(errc::bad_config, "create: timeouts must be > 0");
  if (auto why = check(opts.compression); !why.empty())
    return make_error(errc::bad_config, "create: " + why);
  if (!dist) {
    auto rt = make_local(opts, sync);
    return kvstore{std::make_unique<impl>(std::move(rt), type, 0)};
  }
  auto rt = make_dist(opts, sync);
  if (!rt)
    return std::move(rt.error());
  auto rank = (*rt)->workers.begin()->first;
  return kvstore{std::make_unique<impl>(std::move(*rt), type, rank)};
}

caf::expected<kvstore> kvstore::worker(uint32_t rank) const {
  if (impl_->closed)
    return closed_error("worker");
  if (rank >= impl_->rt->opts.num_workers)
    return make_error(
      errc::bad_config,
      "worker: rank " + std::to_string(rank) + " out of range (store has "
        + std::to_string(impl_->rt->opts.num_workers) + " workers)");
  return kvstore{std::make_unique<impl>(impl_->rt, impl_->type, rank)};
}

const std::string& kvstore::type() const {
  return impl_->type;
}

bool kvstore::synchronous() const {
  return impl_->rt->sync;
}

uint32_t kvstore::rank() const {
  return impl_->rank;
}

uint32_t kvstore::num_workers() const {
  return impl_->rt->num_workers;
}

caf::error kvstore::init(const std::string& key,
                         const Eigen::Ref<const Eigen::VectorXf>& value,
                         std::vector<uint64_t> shape) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("init");
  if (shape.empty())
    shape.push_back(static_cast<uint64_t>(value.size()));
  floats payload;
  payload.data.assign(value.data(), value.data() + value.size());
  return d.call(
    d.timeout(), [](caf::ok_atom) {}, init_atom::value, key, std::move(shape),
    std::move(payload));
}

caf::error kvstore::push(const std::string& key,
                         const Eigen::Ref<const Eigen::VectorXf>& value,
                         int priority) {
  return push(key, std::vector<Eigen::Ref<const Eigen::VectorXf>>{value},
              priority);
}

caf::error
kvstore::push(const std::string& key,
              const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values,
              int priority) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("push");
  if (values.empty())
    return make_error(errc::shape_mismatch,
                      "push: no value given for key '" + key + "'");
  auto infos = d.key_infos("push", {key});
  if (!infos)
    return std::move(infos.error());
  for (auto& v : values)
    if (auto st = core::check_size("push", *infos->front(), v.size(), "push");
        !st.ok())
      return to_error(st);
  // The first value is copied in one pass (no zero-fill first); the others
  // are added to it.
  auto sum = impl::pack(*infos, [&](size_t, uint64_t from, uint64_t n,
                                    std::vector<float>& out) {
    auto start = out.size();
    out.insert(out.end(), values[0].data() + from, values[0].data() + from + n);
    Eigen::Map<Eigen::VectorXf> acc{out.data() + start,
                                    static_cast<Eigen::Index>(n)};
    for (size_t i = 1; i < values.size(); ++i)
      acc += values[i].segment(static_cast<Eigen::Index>(from),
                               static_cast<Eigen::Index>(n));
  });
  d.throttle();
  d.start([](caf::ok_atom) {}, push_atom::value, key,
          static_cast<int32_t>(priority), std::move(sum));
  return caf::none;
}

caf::expected<pull_ticket> kvstore::pull(const std::string& key,
                                         Eigen::Ref<Eigen::VectorXf> out,
                                         int priority) {
  return pull(key, std::vector<Eigen::Ref<Eigen::VectorXf>>{out}, priority);
}

caf::expected<pull_ticket>
kvstore::pull(const std::string& key,
              std::vector<Eigen::Ref<Eigen::VectorXf>> outs, int priority) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("pull");
  if (outs.empty())
    return make_error(errc::shape_mismatch,
                      "pull: no output given for key '" + key + "'");
  auto info = d.meta(key);
  if (!info)
    return std::move(info.error());
  auto n = info->size;
  impl::target_list targets;
  for (auto& o : outs) {
    if (auto st = core::check_size("pull", *info, o.size(), "output"); !st.ok())
      return to_error(st);
    targets.push_back(impl::target{0, n, o.data()});
  }
  return d.start_pull(std::move(targets), n, pull_atom::value, key,
                      static_cast<int32_t>(priority));
}

caf::expected<pull_ticket>
kvstore::push_pull(const std::string& key,
                   const Eigen::Ref<const Eigen::VectorXf>& value,
                   Eigen::Ref<Eigen::VectorXf> out, int priority) {
  return push_pull_many({key}, {value}, {out}, priority);
}

caf::error
kvstore::push_many(const std::vector<std::string>& keys,
                   const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values,
                   int priority) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("push");
  auto infos = d.key_infos("push", keys);
  if (!infos)
    return std::move(infos.error());
  if (auto err = impl::check_buffers("push", *infos, values, "value"))
    return err;
  d.throttle();
  d.start([](caf::ok_atom) {}, push_atom::value, keys,
          static_cast<int32_t>(priority), impl::pack(*infos, values));
  return caf::none;
}

caf::expected<pull_ticket>
kvstore::pull_many(const std::vector<std::string>& keys,
                   std::vector<Eigen::Ref<Eigen::VectorXf>> outs,
                   int priority) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("pull");
  auto infos = d.key_infos("pull", keys);
  if (!infos)
    return std::move(infos.error());
  if (auto err = impl::check_buffers("pull", *infos, outs, "output"))
    return err;
  auto dst = impl::targets(*infos, outs);
  auto n = dst.back().at + dst.back().n;
  return d.start_pull(std::move(dst), n, pull_atom::value, keys,
                      static_cast<int32_t>(priority));
}

caf::expected<pull_ticket> kvstore::push_pull_many(
  const std::vector<std::string>& keys,
  const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values,
  std::vector<Eigen::Ref<Eigen::VectorXf>> outs, int priority) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("push_pull");
  auto infos = d.key_infos("push_pull", keys);
  if (!infos)
    return std::move(infos.error());
  if (auto err = impl::check_buffers("push_pull", *infos, values, "value"))
    return err;
  if (auto err = impl::check_buffers("push_pull", *infos, outs, "output"))
    return err;
  auto dst = impl::targets(*infos, outs);
  auto n = dst.back().at + dst.back().n;
  return d.start_pull(std::move(dst), n, push_pull_atom::value, keys,
                      static_cast<int32_t>(priority),
                      impl::pack(*infos, values));
}

caf::error kvstore::wait(pull_ticket ticket) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("wait");
  if (d.pending.count(ticket.id()) == 0 && ticket.id() >= d.next_ticket)
    return make_error(errc::bad_config, "wait: ticket "
                                          + std::to_string(ticket.id())
                                          + " was not issued by this handle");
  return d.finish_until(ticket.id());
}

caf::error kvstore::wait_only(pull_ticket ticket) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("wait_only");
  if (ticket.id() >= d.next_ticket)
    return make_error(errc::bad_config, "wait_only: ticket "
                                          + std::to_string(ticket.id())
                                          + " was not issued by this handle");
  auto i = d.pending.find(ticket.id());
  if (i == d.pending.end())
    return caf::none;
  auto f = std::move(i->second);
  d.pending.erase(i);
  return f();
}

caf::error kvstore::wait_all() {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("wait_all");
  return d.finish_until(d.next_ticket);
}

caf::error kvstore::barrier() {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("barrier");
  if (auto err = wait_all())
    return err;
  return d.call(
    impl::outer(d.rt->opts.barrier_timeout), [](caf::ok_atom) {},
    barrier_atom::value);
}

caf::error kvstore::set_optimizer(const optimizer_config& cfg) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("set_optimizer");
  if (auto err = wait_all())
    return err;
  return d.call(
    d.timeout(), [](caf::ok_atom) {}, set_opt_atom::value, cfg);
}

caf::error kvstore::set_gradient_compression(const compression& c) {
  return set_gradient_compression(std::string{}, c);
}

caf::error kvstore::set_gradient_compression(const std::string& key,
                                             const compression& c) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("set_gradient_compression");
  if (auto why = check(c); !why.empty())
    return make_error(errc::bad_config, "set_gradient_compression: " + why);
  return d.call(
    d.timeout(), [](caf::ok_atom) {}, compress_atom::value, key, c);
}

caf::error kvstore::save_optimizer_states(const std::string& path) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("save_optimizer_states");
  if (auto err = wait_all())
    return err;
  state_snapshot snap;
  auto err = d.call(
    d.timeout(), [&](state_snapshot& x) { snap = std::move(x); },
    save_atom::value);
  if (err)
    return err;
  return to_error(core::write_file_atomic(path, core::encode_checkpoint(snap)));
}

caf::error kvstore::load_optimizer_states(const std::string& path) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("load_optimizer_states");
  if (auto err = wait_all())
    return err;
  std::vector<char> bytes;
  if (auto st = core::read_file(path, bytes); !st.ok())
    return to_error(st);
  state_snapshot snap;
  if (auto st = core::decode_checkpoint(bytes, snap); !st.ok())
    return make_error(st.code, st.message + " in " + path);
  return d.call(
    d.timeout(), [](caf::ok_atom) {}, load_atom::value, std::move(snap));
}

caf::expected<uint32_t> kvstore::num_dead_node(int node_id,
                                               std::chrono::seconds timeout) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("num_dead_node");
  uint32_t count = 0;
  auto err = d.call(
    d.timeout(), [&](uint32_t x) { count = x; }, dead_atom::value,
    static_cast<int32_t>(node_id), static_cast<int32_t>(timeout.count()));
  if (err)
    return err;
  return count;
}

caf::error kvstore::send_command_to_servers(int head, const std::string& body) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("send_command_to_servers");
  if (auto err = wait_all())
    return err;
  return d.call(
    d.timeout(), [](caf::ok_atom) {}, command_atom::value,
    static_cast<int32_t>(head), body);
}

caf::expected<std::vector<uint64_t>> kvstore::shape(const std::string& key) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("shape");
  auto info = d.meta(key);
  if (!info)
    return std::move(info.error());
  return info->shape;
}

void kvstore::set_barrier_before_exit(bool value) {
  impl_->barrier_before_exit = value;
}

caf::error kvstore::close() {
  auto& d = *impl_;
  if (d.closed)
    return caf::none;
  d.discarding = true;
  auto err = wait_all();
  if (d.barrier_before_exit) {
    auto berr = barrier();
    if (!err)
      err = std::move(berr);
  }
  // Leave the job, so barriers and sync rounds of the other workers stop
  // waiting for this one.
  auto lerr = d.call(
    d.timeout(), [](caf::ok_atom) {}, leave_atom::value);
  if (!err)
    err = std::move(lerr);
  d.closed = true;
  d.pending.clear();
  return err;
}

bool kvstore::closed() const {
  return impl_->closed;
}

} // namespace actorps
