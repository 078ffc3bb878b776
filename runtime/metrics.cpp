// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/metrics.hpp"

#include <cstdio>
#include <exception>
#include <limits>
#include <sstream>
#include <unistd.h>
#include <utility>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include "core/link_proof.hpp"
#include "core/node_ids.hpp"
#include "core/secret.hpp"

namespace actorps {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using labels = std::vector<ClientMetric::Label>;

const char* op_names[] = {"push", "pull", "push_pull"};

struct families {
  std::vector<MetricFamily> list;

  MetricFamily& family(const std::string& name, const std::string& help,
                       MetricType type) {
    for (auto& f : list)
      if (f.name == name)
        return f;
    list.push_back(MetricFamily{name, help, type, {}});
    return list.back();
  }

  void counter(const std::string& name, const std::string& help, double v,
               labels ls = {}) {
    ClientMetric m;
    m.label = std::move(ls);
    m.counter.value = v;
    family(name, help, MetricType::Counter).metric.push_back(std::move(m));
  }

  void gauge(const std::string& name, const std::string& help, double v,
             labels ls = {}) {
    ClientMetric m;
    m.label = std::move(ls);
    m.gauge.value = v;
    family(name, help, MetricType::Gauge).metric.push_back(std::move(m));
  }

  void histogram(const std::string& name, const std::string& help,
                 const op_stats& x, labels ls) {
    ClientMetric m;
    m.label = std::move(ls);
    m.histogram.sample_count = x.count;
    m.histogram.sample_sum = x.latency_sum_s;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < x.buckets.size(); ++i) {
      cumulative += x.buckets[i];
      ClientMetric::Bucket b;
      b.cumulative_count = cumulative;
      b.upper_bound = i < latency_bounds.size()
                        ? latency_bounds[i]
                        : std::numeric_limits<double>::infinity();
      m.histogram.bucket.push_back(b);
    }
    family(name, help, MetricType::Histogram).metric.push_back(std::move(m));
  }
};

// Resident memory of this process, in bytes (0 if unknown).
double resident_bytes() {
  long pages = 0;
  long resident = 0;
  if (auto* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2)
      resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident)
         * static_cast<double>(sysconf(_SC_PAGESIZE));
}

void add_workers(families& fs, const std::vector<worker_stats>& ws) {
  for (auto& w : ws) {
    auto rank = std::to_string(w.rank);
    uint64_t out = 0;
    uint64_t in = 0;
    for (size_t k = 0; k < w.ops.size() && k < 3; ++k) {
      auto& x = w.ops[k];
      labels ls{{"op", op_names[k]}, {"worker", rank}};
      fs.counter("actorps_worker_operations_total",
                 "data operations completed by a worker", double(x.count), ls);
      fs.counter("actorps_worker_operation_errors_total",
                 "data operations of a worker that failed", double(x.errors),
                 ls);
      fs.histogram("actorps_worker_request_latency_seconds",
                   "time from a data operation's arrival at the worker "
                   "actor to its reply",
                   x, ls);
      out += x.floats_out;
      in += x.floats_in;
    }
    fs.counter("actorps_worker_bytes_total",
               "tensor bytes a worker pushed to and pulled from the shards",
               double(out) * 4, {{"direction", "push"}, {"worker", rank}});
    fs.counter("actorps_worker_bytes_total",
               "tensor bytes a worker pushed to and pulled from the shards",
               double(in) * 4, {{"direction", "pull"}, {"worker", rank}});
    fs.gauge("actorps_worker_bytes_in_flight",
             "bytes of requests sent to shards and not answered yet",
             double(w.bytes_in_flight), {{"worker", rank}});
    for (auto& q : w.queued) {
      labels ls{{"priority", std::to_string(q.priority)}, {"worker", rank}};
      fs.gauge("actorps_worker_queued_requests",
               "requests waiting for room under the bytes-in-flight bound",
               double(q.requests), ls);
      fs.gauge("actorps_worker_queued_bytes",
               "bytes of the requests waiting under the bound", double(q.bytes),
               ls);
    }
  }
}

void add_shards(families& fs, const server_status& s, const worker_traffic& t) {
  fs.gauge("actorps_shards", "shards of this process that answered",
           double(s.shards));
  fs.counter("actorps_shard_pushes_total", "pushes applied to slices",
             double(s.pushes));
  fs.counter("actorps_shard_pulls_total", "pulls answered from slices",
             double(s.pulls));
  fs.counter("actorps_shard_updates_total",
             "optimizer updates (rounds completed per slice in sync mode)",
             double(s.updates));
  fs.counter("actorps_shard_bytes_total",
             "tensor bytes the shards received "
             "(push) and sent (pull)",
             double(t.floats_pushed) * 4, {{"direction", "push"}});
  fs.counter("actorps_shard_bytes_total",
             "tensor bytes the shards received (push) and sent (pull)",
             double(t.floats_pulled) * 4, {{"direction", "pull"}});
  fs.gauge("actorps_shard_slices", "slices held", double(s.slices));
  fs.gauge("actorps_shard_bytes_held", "bytes of parameter values held",
           double(s.floats_stored) * 4);
  fs.gauge("actorps_shard_waiting_pulls",
           "pulls waiting for a synchronous round", double(s.waiting_pulls));
  fs.gauge("actorps_shard_held_pushes",
           "workers' pushes held until the others complete rounds "
           "(per worker and slice)",
           double(s.held_pushes));
}

void add_job(families& fs, const job_status& j) {
  struct count {
    uint32_t alive = 0, left = 0, dead = 0;
  };
  count workers;
  count servers;
  for (auto& n : j.nodes) {
    auto& c = n.role == role::worker ? workers : servers;
    ++(n.dead ? c.dead : n.left ? c.left : c.alive);
  }
  for (auto [who, c] : {std::pair{"worker", workers}, {"server", servers}}) {
    for (auto [state, v] :
         {std::pair{"alive", c.alive}, {"left", c.left}, {"dead", c.dead}})
      fs.gauge("actorps_job_nodes", "nodes of the job by role and state",
               double(v), {{"role", who}, {"state", state}});
  }
  fs.gauge("actorps_job_expected_nodes", "nodes the job expects by role",
           double(j.num_workers), {{"role", "worker"}});
  fs.gauge("actorps_job_expected_nodes", "nodes the job expects by role",
           double(j.num_servers), {{"role", "server"}});
  fs.gauge("actorps_job_dead_nodes", "nodes that died", double(j.dead_nodes()));
  fs.gauge("actorps_job_keys", "keys registered", double(j.keys));
  fs.gauge("actorps_job_replicas", "copies the job keeps of each shard",
           double(j.replicas));
  if (j.replicas > 1 && !j.copies.empty())
    fs.gauge("actorps_job_shards_without_copy",
             "shards whose backup is missing or still being sent (a second "
             "death would lose them)",
             double(j.shards_without_copy()));
  fs.gauge("actorps_job_barrier_open", "1 while a barrier waits",
           j.barrier_open ? 1.0 : 0.0);
  fs.counter("actorps_job_barriers_total", "barriers released",
             double(j.barriers_done));
  for (size_t r = 0; r < j.workers.size(); ++r) {
    auto rank = std::to_string(r);
    fs.counter("actorps_job_worker_bytes_total",
               "tensor bytes each worker moved, as the shards counted them",
               double(j.workers[r].floats_pushed) * 4,
               {{"direction", "push"}, {"worker", rank}});
    fs.counter("actorps_job_worker_bytes_total",
               "tensor bytes each worker moved, as the shards counted them",
               double(j.workers[r].floats_pulled) * 4,
               {{"direction", "pull"}, {"worker", rank}});
  }
}

std::vector<MetricFamily> collect(const process_counters& c) {
  families fs;
  add_workers(fs, c.workers);
  if (c.shards)
    add_shards(fs, *c.shards, c.shard_traffic);
  if (c.job)
    add_job(fs, *c.job);
  if (c.plane) {
    fs.counter("actorps_ucx_segment_sends_total",
               "large messages sent through shared-memory segments to "
               "processes of this host",
               double(c.plane->segment_sends));
    fs.counter("actorps_ucx_in_place_sends_total",
               "of those, pushes sent from where the client wrote them, "
               "without a copy",
               double(c.plane->in_place_sends));
    fs.counter("actorps_ucx_caller_receives_total",
               "waits for a reply in which the waiting client thread "
               "received it itself",
               double(c.plane->caller_receives));
    fs.counter("actorps_ucx_plane_thread_runs_total",
               "requests whose shard the data plane's thread ran itself, "
               "without waking another thread",
               double(c.plane->thread_runs));
    fs.gauge("actorps_ucx_waiting_messages",
             "large messages announced to this process and not received "
             "yet",
             double(c.plane->waiting));
  }
  fs.gauge("process_resident_memory_bytes", "resident memory size in bytes",
           resident_bytes());
  return std::move(fs.list);
}

class collectable : public prometheus::Collectable {
public:
  explicit collectable(metrics_gatherer gather) : gather_(std::move(gather)) {
    // nop
  }

  std::vector<MetricFamily> Collect() const override {
    try {
      return collect(gather_());
    } catch (const std::exception&) {
      return collect(process_counters{});
    }
  }

private:
  metrics_gatherer gather_;
};

} // namespace

std::string metrics_password(std::string_view token) {
  auto raw = core::derive_secret(token, "actorps metrics password");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char ch : raw) {
    out += hex[ch >> 4];
    out += hex[ch & 15];
  }
  return out;
}

std::string render_metrics(const process_counters& c) {
  std::ostringstream out;
  prometheus::TextSerializer{}.Serialize(out, collect(c));
  return out.str();
}

struct metrics_server::impl {
  std::shared_ptr<collectable> source;
  // Declared last: stops serving (and joins its threads) first.
  std::unique_ptr<prometheus::Exposer> exposer;
};

metrics_server::metrics_server(std::unique_ptr<impl> x, uint16_t port)
  : impl_(std::move(x)), port_(port) {
  // nop
}

metrics_server::~metrics_server() {
  impl_->exposer.reset();
}

std::unique_ptr<metrics_server>
metrics_server::start(const metrics_options& opts, metrics_gatherer gather,
                      std::string& why) {
  if (opts.port < 0 || opts.port > 65535) {
    why = "metrics: port " + std::to_string(opts.port) + " out of 0..65535";
    return nullptr;
  }
  auto x = std::make_unique<impl>();
  x->source = std::make_shared<collectable>(std::move(gather));
  auto host = opts.host.find(':') != std::string::npos ? "[" + opts.host + "]"
                                                       : opts.host;
  try {
    x->exposer = std::make_unique<prometheus::Exposer>(
      host + ":" + std::to_string(opts.port), 1);
  } catch (const std::exception& e) {
    why = "metrics: cannot listen on " + host + ":" + std::to_string(opts.port)
          + " (" + e.what() + ")";
    return nullptr;
  }
  if (!opts.token.empty()) {
    auto password = metrics_password(opts.token);
    x->exposer->RegisterAuth(
      [password](const std::string&, const std::string& given) {
        return core::constant_time_equal(given, password);
      },
      "actorps");
  }
  x->exposer->RegisterCollectable(x->source);
  auto ports = x->exposer->GetListeningPorts();
  if (ports.empty()) {
    why = "metrics: the exposer reports no port";
    return nullptr;
  }
  auto port = static_cast<uint16_t>(ports.front());
  return std::unique_ptr<metrics_server>(
    new metrics_server(std::move(x), port));
}

} // namespace actorps
