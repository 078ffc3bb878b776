// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/kvstore.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "caf/scoped_actor.hpp"

#include "actors/worker/worker.hpp"
#include "core/layout.hpp"
#include "messages/errors.hpp"
#include "runtime/handle.hpp"

namespace actorps {

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
  int32_t staleness = -1;
  // Dist: the mode the job must have (any: take the job's).
  uint8_t mode = join_mode::any;
  // MXNet's names for where a store aggregates devices' copies (CPU or
  // GPU): the same store here, where values live in host memory.
  if (type == "local" || type == "local_async" || type == "device"
      || type == "local_update_cpu" || type == "local_allreduce_cpu"
      || type == "local_allreduce_device") {
  } else if (type == "local_sync") {
    sync = true;
  } else if (type == "local_ssp") {
    staleness = static_cast<int32_t>(
      std::min<uint32_t>(opts.staleness, std::numeric_limits<int32_t>::max()));
  } else if (type == "dist_ssp") {
    dist = true;
    mode = join_mode::ssp;
  } else if (type == "dist_async") {
    dist = true;
    mode = join_mode::async;
  } else if (type == "dist_sync" || type == "dist_device_sync"
             || type == "dist_sync_device") {
    dist = sync = true;
    mode = join_mode::sync;
  } else if (type == "dist") {
    dist = true;
  } else if (type == "nccl" || type == "horovod" || type == "byteps") {
    return make_error(errc::bad_config,
                      "create: store type '" + type
                        + "' is MXNet's for GPUs or another system; "
                          "actorps keeps values in host memory: use local "
                          "(or device), dist_sync or dist_async");
  } else {
    return make_error(errc::bad_config,
                      "create: unknown store type '" + type
                        + "' (expected local, local_async, local_sync, "
                          "local_ssp, dist, dist_sync, dist_async or "
                          "dist_ssp; MXNet's device, local_allreduce_cpu, "
                          "local_allreduce_device and dist_device_sync "
                          "name the same stores)");
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
  auto carrier = join_mode::any_transport;
  if (opts.transport == "caf")
    carrier = transport::caf;
  else if (opts.transport == "ucx")
    carrier = transport::ucx;
  else if (!opts.transport.empty())
    return make_error(errc::bad_config,
                      "create: unknown transport '" + opts.transport
                        + "' (expected caf, ucx, or none: the job's)");
  if (!dist && !opts.transport.empty())
    return make_error(errc::bad_config,
                      "create: a transport applies to dist stores only (a "
                      "local store's tensors never leave the process)");
  if (opts.metrics.enabled() && opts.metrics.port > 65535)
    return make_error(errc::bad_config, "create: metrics port "
                                          + std::to_string(opts.metrics.port)
                                          + " out of 0..65535 (-1: off)");
  if (!dist) {
    auto rt = make_local(opts, sync, staleness);
    if (auto err = start_metrics(*rt, rt->local_shards))
      return err;
    return kvstore{std::make_unique<impl>(std::move(rt), type, 0)};
  }
  auto rt = make_dist(opts, join_mode::expect(mode, carrier));
  if (!rt)
    return std::move(rt.error());
  if (auto err = start_metrics(**rt, {}))
    return err;
  auto rank = (*rt)->workers.begin()->first;
  // "dist" becomes the job's mode.
  auto joined = (*rt)->sync             ? "dist_sync"
                : (*rt)->staleness >= 0 ? "dist_ssp"
                                        : "dist_async";
  // "dist" tells the job's mode; other names stay as given (MXNet).
  return kvstore{std::make_unique<impl>(std::move(*rt),
                                        type == "dist" ? joined : type, rank)};
}

int32_t kvstore::staleness() const {
  return impl_->rt->staleness;
}

std::string kvstore::transport() const {
  auto& rt = *impl_->rt;
  if (impl_->type.rfind("dist", 0) != 0)
    return "local";
  return rt.transport == transport::ucx ? "ucx" : "caf";
}

uint16_t kvstore::metrics_port() const {
  return impl_->rt->metrics ? impl_->rt->metrics->port() : 0;
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

caf::error
kvstore::init(const std::string& key,
              const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values,
              std::vector<uint64_t> shape) {
  if (impl_->closed)
    return closed_error("init");
  if (values.empty())
    return make_error(errc::shape_mismatch,
                      "init: no value given for key '" + key + "'");
  for (auto& v : values)
    if (v.size() != values[0].size())
      return make_error(errc::shape_mismatch,
                        "init: the copies of key '" + key + "' differ in size ("
                          + std::to_string(values[0].size()) + " and "
                          + std::to_string(v.size()) + " floats)");
  return init(key, values[0], std::move(shape));
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
    if (auto st = core::check_size("push", *(*infos)->front().info, v.size(),
                                   "push");
        !st.ok())
      return to_error(st);
  // The first value is copied in one pass (no zero-fill first); the others
  // are added to it.
  auto sum = payload::pack(
    **infos, d.rt->batching,
    [&](size_t, uint64_t from, uint64_t n, auto& out) {
      Eigen::Map<Eigen::VectorXf> acc{
        payload::append(out, values[0].data() + from, n),
        static_cast<Eigen::Index>(n)};
      for (size_t i = 1; i < values.size(); ++i)
        acc += values[i].segment(static_cast<Eigen::Index>(from),
                                 static_cast<Eigen::Index>(n));
    },
    d.lender());
  if (auto err = d.throttle())
    return err;
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
  if (auto err = impl::dense_only("pull", *info))
    return err;
  auto n = info->size;
  payload::target_list targets;
  for (auto& o : outs) {
    if (auto st = core::check_size("pull", *info, o.size(), "output"); !st.ok())
      return to_error(st);
    targets.push_back(payload::target{0, n, o.data()});
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
kvstore::update(const std::string& key,
                const std::vector<Eigen::Ref<const Eigen::VectorXf>>& grads,
                std::vector<Eigen::Ref<Eigen::VectorXf>> params, int priority) {
  if (impl_->closed)
    return closed_error("update");
  if (params.empty())
    return make_error(errc::shape_mismatch,
                      "update: no parameter array given for key '" + key + "'");
  // Checked before the push leaves: a wrong output must not cost a push.
  auto info = impl_->meta(key);
  if (!info)
    return std::move(info.error());
  for (auto& p : params)
    if (auto st = core::check_size("update", *info, p.size(), "parameter");
        !st.ok())
      return to_error(st);
  if (auto err = push(key, grads, priority))
    return err;
  auto ticket = pull(key, std::move(params), priority);
  if (!ticket)
    return std::move(ticket.error());
  return wait(*ticket);
}

caf::error
kvstore::push_many(const std::vector<std::string>& keys,
                   const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values,
                   int priority) {
  auto& d = *impl_;
  auto infos = d.open_keys("push", keys);
  if (!infos)
    return std::move(infos.error());
  if (auto err = impl::check_buffers("push", **infos, values, "value"))
    return err;
  if (auto err = d.throttle())
    return err;
  d.start([](caf::ok_atom) {}, push_atom::value, d.worker_list(keys),
          static_cast<int32_t>(priority),
          payload::pack(**infos, d.rt->batching, values, d.lender()));
  return caf::none;
}

caf::expected<pull_ticket>
kvstore::pull_many(const std::vector<std::string>& keys,
                   std::vector<Eigen::Ref<Eigen::VectorXf>> outs,
                   int priority) {
  auto& d = *impl_;
  auto infos = d.open_keys("pull", keys);
  if (!infos)
    return std::move(infos.error());
  if (auto err = impl::check_buffers("pull", **infos, outs, "output"))
    return err;
  auto dst = payload::targets(**infos, outs);
  auto n = dst.back().at + dst.back().n;
  return d.start_pull(std::move(dst), n, pull_atom::value, d.worker_list(keys),
                      static_cast<int32_t>(priority));
}

caf::expected<pull_ticket> kvstore::push_pull_many(
  const std::vector<std::string>& keys,
  const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values,
  std::vector<Eigen::Ref<Eigen::VectorXf>> outs, int priority) {
  auto& d = *impl_;
  auto infos = d.open_keys("push_pull", keys);
  if (!infos)
    return std::move(infos.error());
  if (auto err = impl::check_buffers("push_pull", **infos, values, "value"))
    return err;
  if (auto err = impl::check_buffers("push_pull", **infos, outs, "output"))
    return err;
  auto dst = payload::targets(**infos, outs);
  auto n = dst.back().at + dst.back().n;
  return d.start_pull(std::move(dst), n, push_pull_atom::value,
                      d.worker_list(keys), static_cast<int32_t>(priority),
                      payload::pack(**infos, d.rt->batching, values,
                                    d.lender()));
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
  auto err = i->second();
  // Interrupted: still pending, for a later wait.
  if (code_of(err) != errc::interrupted)
    d.pending.erase(i);
  return err;
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
  if (auto err = d.call(
        d.timeout(), [](caf::ok_atom) {}, set_opt_atom::value, cfg))
    return err;
  // MXNet: set_optimizer sets the updater, ending one set before.
  d.end_rule();
  return caf::none;
}

caf::error kvstore::set_updater(core::update_rule rule) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("set_updater");
  if (!d.rt->hooks)
    return make_error(errc::bad_config,
                      "set_updater: a dist store's servers run the optimizer "
                      "(set_optimizer); an update rule of this process runs "
                      "in local stores only");
  if (auto err = wait_all())
    return err;
  d.rt->hooks->set_rule(std::move(rule));
  return caf::none;
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
  auto err = d.call(
    d.timeout(), [](caf::ok_atom) {}, compress_atom::value, key, c);
  if (!err && c.kind != codec::none)
    d.rt->compressed = true;
  return err;
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
  // Every message between a job's processes has a bound
  // (core::message_cap): a body far below it.
  if (body.size() > max_command_bytes)
    return make_error(errc::bad_config,
                      "send_command_to_servers: the body has "
                        + std::to_string(body.size()) + " bytes, at most "
                        + std::to_string(max_command_bytes) + " are sent");
  if (auto err = wait_all())
    return err;
  if (auto err = d.call(
        d.timeout(), [](caf::ok_atom) {}, command_atom::value,
        static_cast<int32_t>(head), body))
    return err;
  // Head 0 sets the optimizer, as set_optimizer does (ending a rule).
  if (head == 0)
    d.end_rule();
  return caf::none;
}

caf::error kvstore::clear_pending() {
  return send_command_to_servers(command_head::clear_pending, "");
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

caf::error kvstore::close_failed(const std::string& why) {
  impl_->barrier_before_exit = false;
  impl_->failure = why.empty() ? std::string{"failed"} : why;
  return close();
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
  auto lerr = d.failure.empty() ? d.call(
                d.timeout(), [](caf::ok_atom) {}, leave_atom::value)
                                : d.call(
                                  d.timeout(), [](caf::ok_atom) {},
                                  leave_atom::value, d.failure);
  if (!err)
    err = std::move(lerr);
  d.closed = true;
  d.pending.clear();
  // The last handle of a local store ends its update rule, and with it
  // whatever the rule holds (perhaps this very store).
  if (--d.rt->open_handles == 0)
    d.end_rule();
  // Once it left, the node has nothing more to say: its agent goes, and the
  // coordinator, which waits for every node to go down before it ends the
  // job (or a grace period of 5 s), sees it go now.
  if (d.rt->agent)
    caf::anon_send_exit(d.rt->agent, caf::exit_reason::user_shutdown);
  return err;
}

bool kvstore::closed() const {
  return impl_->closed;
}

} // namespace actorps
