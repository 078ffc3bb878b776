// SPDX-License-Identifier: BSD-3-Clause
// The `actorps._actorps` extension: the C++ facade (runtime/kvstore.hpp) in
// Python's idioms. Values are float32 C-contiguous numpy arrays or CPU
// torch tensors, read and written in place; the GIL is released while
// actorps works and waits. The package around it is python/actorps/.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <pybind11/numpy.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/compression.hpp"
#include "core/optimizer.hpp"
#include "messages/errors.hpp"
#include "python/convert.hpp"
#include "runtime/kvstore.hpp"

namespace py = pybind11;

namespace actorps::python {

namespace {

// -- the store ----------------------------------------------------------------

// Runs `f` without the GIL (it touches no Python object) and returns what
// it returns.
template <class F>
auto unlocked(F f) {
  py::gil_scoped_release released;
  return f();
}

/// A pending pull: wait on it (or on the store) before reading the output.
struct ticket {
  uint64_t id;
};

class store {
public:
  store(kvstore kv, std::shared_ptr<std::atomic<bool>> interruptible)
    : kv_(std::move(kv)), interruptible_(std::move(interruptible)) {
    // nop
  }

  // Lets Ctrl-C end a wait: asked every 100 ms by the waiting thread.
  static std::function<bool()>
  signal_check(std::shared_ptr<std::atomic<bool>> interruptible) {
    return [interruptible] {
      if (!interruptible->load())
        return false;
      py::gil_scoped_acquire locked;
      return PyErr_CheckSignals() != 0;
    };
  }

  ~store() {
    // No Python code from here on (the interpreter may be finalizing).
    interruptible_->store(false);
    // The outputs of pulls never waited for stay alive until the handle is
    // closed (closing writes none of them).
    // The store's actors go down here too, without the GIL: a Python
    // command handler (on_command) is dropped on one of their threads and
    // takes the GIL to do so.
    py::gil_scoped_release unlocked;
    if (!kv_.closed())
      static_cast<void>(kv_.close());
    auto last = std::move(kv_);
  }

  // Runs `f` on this handle without the GIL. One call at a time: a handle
  // used from several Python threads serves them in turn (a thread waiting
  // for its turn still sees Ctrl-C).
  template <class F>
  auto run(F f) {
    if (in_command_handler)
      throw py::type_error("a command handler or update rule must not call "
                           "the store (it waits for the handler)");
    py::gil_scoped_release released;
    std::unique_lock<std::timed_mutex> turn{use_, std::defer_lock};
    while (!turn.try_lock_for(std::chrono::milliseconds{100})) {
      py::gil_scoped_acquire locked;
      if (PyErr_CheckSignals() != 0)
        throw py::error_already_set();
    }
    return f();
  }

  static std::unique_ptr<store> create(const std::string& type,
                                       const py::kwargs& kwargs) {
    auto opts = options_of(kwargs);
    // A distributed worker started by actorps-launch (or by hand) finds its
    // job in the environment when the call does not name it.
    if (type.rfind("dist", 0) == 0) {
      if (!kwargs.contains("coordinator"))
        if (auto* x = std::getenv("ACTORPS_COORDINATOR"))
          opts.coordinator = x;
      if (!kwargs.contains("token"))
        if (auto* x = std::getenv("ACTORPS_TOKEN"))
          opts.token = x;
    }
    auto interruptible = std::make_shared<std::atomic<bool>>(true);
    opts.interrupted = signal_check(interruptible);
    auto kv = unlocked([&] { return kvstore::create(type, opts); });
    return std::make_unique<store>(check(std::move(kv)), interruptible);
  }

  std::unique_ptr<store> worker(uint32_t rank) {
    auto kv = run([&] { return kv_.worker(rank); });
    return std::make_unique<store>(check(std::move(kv)), interruptible_);
  }

  std::string type() const {
    return kv_.type();
  }

  uint32_t rank() const {
    return kv_.rank();
  }

  uint32_t num_workers() const {
    return kv_.num_workers();
  }

  void clear_pending() {
    check(run([&] { return kv_.clear_pending(); }));
  }

  int32_t staleness() const {
    return kv_.staleness();
  }

  std::string transport() const {
    return kv_.transport();
  }

  uint16_t metrics_port() const {
    return kv_.metrics_port();
  }

  bool synchronous() const {
    return kv_.synchronous();
  }

  bool closed() const {
    return kv_.closed();
  }

  void init(const py::handle& key, const py::handle& value) {
    auto k = key_of(key);
    auto v = view_of(value, "init", false);
    std::vector<uint64_t> shape;
    if (py::hasattr(value, "shape"))
      for (auto d : value.attr("shape"))
        shape.push_back(d.cast<uint64_t>());
    if (shape.empty())
      shape.push_back(v.size);
    auto err = run([&] { return kv_.init(k, in_of(v), shape); });
    check(err);
  }

  void push(const py::handle& key, const py::handle& value, int priority) {
    auto k = key_of(key);
    auto vs = views_of(value, "push", false);
    auto refs = ins_of(vs);
    auto err = run([&] { return kv_.push(k, refs, priority); });
    check(err);
  }

  ticket pull(const py::handle& key, const py::handle& out, int priority) {
    auto k = key_of(key);
    auto vs = views_of(out, "pull", true);
    auto refs = outs_of(vs);
    auto t
      = run([&] { return issued(kv_.pull(k, std::move(refs), priority)); });
    return hold(check(std::move(t)), vs);
  }

  void init_table(const py::handle& key, uint64_t rows, uint64_t dim,
                  const std::string& fill, float low, float high,
                  uint64_t seed) {
    auto k = key_of(key);
    table_fill f;
    if (fill == "uniform")
      f.rule = table_fill::uniform;
    else if (fill != "constant")
      throw py::value_error("init_table: fill must be constant or uniform, "
                            "got '"
                            + fill + "'");
    f.low = low;
    f.high = high;
    f.seed = seed;
    check(run([&] { return kv_.init_table(k, rows, dim, f); }));
  }

  void push_rows(const py::handle& key, const py::handle& ids,
                 const py::handle& values, int priority) {
    auto k = key_of(key);
    auto rows = ids_of(ids, "push_rows");
    auto v = view_of(values, "push_rows", false);
    check(run([&] { return kv_.push_rows(k, rows, in_of(v), priority); }));
  }

  ticket pull_rows(const py::handle& key, const py::handle& ids,
                   const py::handle& out, int priority) {
    auto k = key_of(key);
    auto rows = ids_of(ids, "pull_rows");
    auto o = view_of(out, "pull_rows", true);
    auto t = run(
      [&] { return issued(kv_.pull_rows(k, rows, out_of(o), priority)); });
    return hold(check(std::move(t)), {o});
  }

  ticket push_pull(const py::handle& key, const py::handle& value,
                   const py::handle& out, int priority) {
    auto k = key_of(key);
    auto v = view_of(value, "push_pull", false);
    auto o = view_of(out, "push_pull", true);
    auto t = run(
      [&] { return issued(kv_.push_pull(k, in_of(v), out_of(o), priority)); });
    return hold(check(std::move(t)), {o});
  }

  void push_many(const py::handle& keys, const py::handle& values,
                 int priority) {
    auto ks = keys_of(keys);
    auto vs = list_views(values, ks.size(), "push_many", false);
    auto refs = ins_of(vs);
    auto err = run([&] { return kv_.push_many(ks, refs, priority); });
    check(err);
  }

  ticket pull_many(const py::handle& keys, const py::handle& outs,
                   int priority) {
    auto ks = keys_of(keys);
    auto vs = list_views(outs, ks.size(), "pull_many", true);
    auto refs = outs_of(vs);
    auto t = run(
      [&] { return issued(kv_.pull_many(ks, std::move(refs), priority)); });
    return hold(check(std::move(t)), vs);
  }

  ticket push_pull_many(const py::handle& keys, const py::handle& values,
                        const py::handle& outs, int priority) {
    auto ks = keys_of(keys);
    auto vs = list_views(values, ks.size(), "push_pull_many", false);
    auto os = list_views(outs, ks.size(), "push_pull_many", true);
    auto ins = ins_of(vs);
    auto refs = outs_of(os);
    auto t = run([&] {
      return issued(kv_.push_pull_many(ks, ins, std::move(refs), priority));
    });
    return hold(check(std::move(t)), os);
  }

  void wait(const ticket& t) {
    auto i = pending_.find(t.id);
    if (i == pending_.end()) {
      // Waited for already: what was issued before it may still run.
      wait_all();
      return;
    }
    auto pt = i->second.ticket;
    auto err = run([&] { return kv_.wait(pt); });
    // This pull and every earlier one are done with their outputs (unless
    // Ctrl-C ended the wait: they are all still pending then).
    if (code_of(err) != errc::interrupted)
      pending_.erase(pending_.begin(), pending_.upper_bound(t.id));
    check(err);
  }

  void wait_only(const ticket& t) {
    auto i = pending_.find(t.id);
    if (i == pending_.end())
      return;
    auto pt = i->second.ticket;
    auto err = run([&] { return kv_.wait_only(pt); });
    if (code_of(err) != errc::interrupted)
      pending_.erase(t.id);
    check(err);
  }

  void wait_all() {
    finish_issued([this] { return kv_.wait_all(); });
  }

  void barrier() {
    finish_issued([this] { return kv_.barrier(); });
  }

  void set_optimizer(const std::string& name, const py::kwargs& params) {
    std::ostringstream text;
    text << "name=" << name;
    for (auto [k, v] : params) {
      auto value = py::isinstance<py::bool_>(v)
                     ? std::string{v.cast<bool>() ? "true" : "false"}
                     : py::str(v).cast<std::string>();
      text << "," << k.cast<std::string>() << "=" << value;
    }
    optimizer_config cfg;
    auto st = core::parse_optimizer(text.str(), cfg);
    if (!st.ok())
      check(to_error(st));
    check(run([&] { return kv_.set_optimizer(cfg); }));
  }

  void set_gradient_compression(const std::string& spec,
                                const py::object& key) {
    auto c = parse_compression(spec);
    if (!c)
      throw py::value_error("set_gradient_compression: expected none, fp16, "
                            "2bit or 2bit:THRESHOLD, got '"
                            + spec + "'");
    std::string k = key.is_none() ? std::string{} : key_of(key);
    auto err = run([&] {
      return key.is_none() ? kv_.set_gradient_compression(*c)
                           : kv_.set_gradient_compression(k, *c);
    });
    check(err);
  }

  void save_optimizer_states(const std::string& path, bool dump_optimizer) {
    check(run([&] { return kv_.save_optimizer_states(path, dump_optimizer); }));
  }

  void export_weights(const std::string& path, bool optimizer_state) {
    check(run([&] { return kv_.export_weights(path, optimizer_state); }));
  }

  void load_optimizer_states(const std::string& path) {
    check(run([&] { return kv_.load_optimizer_states(path); }));
  }

  void load_checkpoint(const std::string& path) {
    check(run([&] { return kv_.load_checkpoint(path); }));
  }

  // MXNet's _set_updater: f(key, grad, weight) updates weight in place.
  void set_updater(const py::object& f) {
    auto rule = rule_of(f);
    check(run([&] { return kv_.set_updater(std::move(rule)); }));
  }

  uint32_t num_dead_node(int node_id, double timeout) {
    if (!std::isfinite(timeout) || timeout < 0 || timeout > 1e9)
      throw py::value_error("num_dead_node: timeout must be seconds >= 0");
    auto t = std::chrono::seconds{static_cast<int64_t>(std::ceil(timeout))};
    auto n = run([&] { return kv_.num_dead_node(node_id, t); });
    return check(std::move(n));
  }

  void send_command_to_servers(int head, const std::string& body) {
    check(run([&] { return kv_.send_command_to_servers(head, body); }));
  }

  std::vector<uint64_t> shape(const py::handle& key) {
    auto k = key_of(key);
    auto s = run([&] { return kv_.shape(k); });
    return check(std::move(s));
  }

  void set_barrier_before_exit(bool value) {
    kv_.set_barrier_before_exit(value);
  }

  // The median split round (push, wait, pull, wait) of `key` driven from
  // C++ on this handle, in microseconds: what bench/python_overhead.py
  // sets the same round from Python against, on the same store.
  double cpp_round_us(const py::handle& key, std::size_t warmup,
                      std::size_t rounds) {
    auto k = key_of(key);
    auto n = run([&] { return kv_.shape(k); });
    auto shape = check(std::move(n));
    uint64_t size = 1;
    for (auto d : shape)
      size *= d;
    auto us = run([&] {
      Eigen::VectorXf grad
        = Eigen::VectorXf::Ones(static_cast<Eigen::Index>(size));
      Eigen::VectorXf out{static_cast<Eigen::Index>(size)};
      std::vector<double> times;
      for (std::size_t r = 0; r < warmup + rounds; ++r) {
        auto start = std::chrono::steady_clock::now();
        if (kv_.push(k, grad) || kv_.wait_all())
          return -1.0;
        auto t = kv_.pull(k, out);
        if (!t || kv_.wait(*t))
          return -1.0;
        if (r >= warmup)
          times.push_back(std::chrono::duration<double, std::micro>(
                            std::chrono::steady_clock::now() - start)
                            .count());
      }
      std::sort(times.begin(), times.end());
      return times.empty() ? 0.0 : times[times.size() / 2];
    });
    if (us < 0)
      throw py::value_error("_cpp_round_us: a push or pull failed");
    return us;
  }

  void close() {
    auto err = run([&] { return kv_.close(); });
    pending_.clear();
    check(err);
  }

private:
  struct held {
    pull_ticket ticket;
    std::vector<py::object> outputs;
  };

  // Keeps the outputs of a pull alive until it is waited for.
  ticket hold(pull_ticket t, const std::vector<floats_view>& outs) {
    held h{t, {}};
    for (auto& o : outs)
      h.outputs.push_back(o.keep);
    pending_.emplace(t.id(), std::move(h));
    return ticket{t.id()};
  }

  std::vector<floats_view> list_views(const py::handle& xs, std::size_t n,
                                      const char* what, bool writable) {
    std::vector<floats_view> out;
    for (auto x : xs)
      out.push_back(view_of(x, what, writable));
    if (out.size() != n)
      throw py::value_error(std::string{what} + ": " + std::to_string(n)
                            + " keys but " + std::to_string(out.size())
                            + (writable ? " outputs" : " values"));
    return out;
  }

  // Runs `f`, a wait that finishes every operation issued before it, and
  // lets go of those pulls' outputs; pulls another thread issues meanwhile
  // stay held. Nothing is let go when Ctrl-C ended the wait.
  template <class F>
  void finish_issued(F f) {
    uint64_t last = 0;
    auto err = run([&] {
      last = last_issued_;
      return f();
    });
    if (code_of(err) != errc::interrupted)
      pending_.erase(pending_.begin(), pending_.upper_bound(last));
    check(err);
  }

  // Notes the ticket of a pull just issued (called under `use_`).
  caf::expected<pull_ticket> issued(caf::expected<pull_ticket> t) {
    if (t)
      last_issued_ = std::max(last_issued_, t->id());
    return t;
  }

  kvstore kv_;
  std::timed_mutex use_;
  // The newest pull ticket issued on this handle (guarded by `use_`).
  uint64_t last_issued_ = 0;
  std::shared_ptr<std::atomic<bool>> interruptible_;
  std::map<uint64_t, held> pending_;
};

} // namespace

} // namespace actorps::python

PYBIND11_MODULE(_actorps, m) {
  using namespace actorps::python;
  m.doc() = "actorps: a parameter server (the C++ facade, see actorps)";
  make_errors(m);
  py::class_<ticket>(m, "Ticket",
                     "A pending pull: wait on it before reading the output.")
    .def_readonly("id", &ticket::id)
    .def("__repr__", [](const ticket& t) {
      return "<actorps.Ticket " + std::to_string(t.id) + ">";
    });
  py::class_<store>(m, "KVStore")
    .def_static("create", &store::create, py::arg("type") = "local",
                "Creates a store: local, local_sync, local_ssp, dist_sync, "
                "dist_async, dist_ssp or "
                "dist; options are store_options' fields by name (durations "
                "in seconds).")
    .def("worker", &store::worker, py::arg("rank"),
         "Another handle on the same local store, for worker `rank`.")
    .def_property_readonly("type", &store::type)
    .def_property_readonly("rank", &store::rank)
    .def_property_readonly("num_workers", &store::num_workers)
    .def_property_readonly("staleness", &store::staleness,
                           "the bound of a local_ssp or dist_ssp store; -1 "
                           "for others")
    .def_property_readonly("transport", &store::transport,
                           "what carries tensor bytes between processes: "
                           "caf or ucx (dist stores, the job's), local")
    .def_property_readonly("metrics_port", &store::metrics_port,
                           "port of this process's /metrics (0: none; "
                           "see the metrics_port option)")
    .def_property_readonly("synchronous", &store::synchronous)
    .def_property_readonly("closed", &store::closed)
    .def("init", &store::init, py::arg("key"), py::arg("value"))
    .def("push", &store::push, py::arg("key"), py::arg("value"),
         py::arg("priority") = 0)
    .def("pull", &store::pull, py::arg("key"), py::arg("out"),
         py::arg("priority") = 0)
    .def("push_pull", &store::push_pull, py::arg("key"), py::arg("value"),
         py::arg("out"), py::arg("priority") = 0)
    .def("init_table", &store::init_table, py::arg("key"), py::arg("rows"),
         py::arg("dim"), py::arg("fill") = "constant", py::arg("low") = 0.0f,
         py::arg("high") = 0.0f, py::arg("seed") = 0,
         "a row-sparse table of rows x dim floats (MXNet's row_sparse), each "
         "shard making its rows: all `low`, or fill='uniform' in [low, high) "
         "from `seed`")
    .def("push_rows", &store::push_rows, py::arg("key"), py::arg("ids"),
         py::arg("values"), py::arg("priority") = 0,
         "pushes one row of dim floats per id (repeated ids summed); only "
         "those rows change (lazy update)")
    .def("pull_rows", &store::pull_rows, py::arg("key"), py::arg("ids"),
         py::arg("out"), py::arg("priority") = 0,
         "pulls one row per id into `out`, in order (row_sparse_pull)")
    .def("push_many", &store::push_many, py::arg("keys"), py::arg("values"),
         py::arg("priority") = 0)
    .def("pull_many", &store::pull_many, py::arg("keys"), py::arg("outs"),
         py::arg("priority") = 0)
    .def("push_pull_many", &store::push_pull_many, py::arg("keys"),
         py::arg("values"), py::arg("outs"), py::arg("priority") = 0)
    .def("wait", &store::wait, py::arg("ticket"))
    .def("wait_only", &store::wait_only, py::arg("ticket"))
    .def("wait_all", &store::wait_all)
    .def("barrier", &store::barrier)
    .def("clear_pending", &store::clear_pending,
         "DataPredict's clearGradients: the shards drop the pushes of sync "
         "rounds not applied yet (README)")
    .def("set_optimizer", &store::set_optimizer, py::arg("name"))
    .def("set_gradient_compression", &store::set_gradient_compression,
         py::arg("spec"), py::arg("key") = py::none())
    .def("save_optimizer_states", &store::save_optimizer_states,
         py::arg("fname"), py::arg("dump_optimizer") = false,
         "Writes a checkpoint: weights, optimizer states and settings "
         "(dump_optimizer: load_optimizer_states takes the settings too)")
    .def("load_optimizer_states", &store::load_optimizer_states,
         py::arg("fname"),
         "MXNet's: loads the optimizer states of a checkpoint; the weights "
         "stay as they are (README)")
    .def("_set_updater", &store::set_updater, py::arg("updater"),
         "MXNet's: a local store runs updater(key, grad, weight) on every "
         "merged push instead of the optimizer (weight updated in place; "
         "None or set_optimizer ends it)")
    .def("load_checkpoint", &store::load_checkpoint, py::arg("fname"),
         "Loads a checkpoint whole (weights, states, optimizer): an exact "
         "resume")
    .def("export_weights", &store::export_weights, py::arg("path"),
         py::arg("optimizer_state") = false,
         "Writes every key's weights (and optionally optimizer state) as a "
         "safetensors file; read it with actorps.load_safetensors.")
    .def("num_dead_node", &store::num_dead_node, py::arg("node_id"),
         py::arg("timeout") = 60.0)
    .def("send_command_to_servers", &store::send_command_to_servers,
         py::arg("head"), py::arg("body"))
    .def("shape", &store::shape, py::arg("key"))
    .def("set_barrier_before_exit", &store::set_barrier_before_exit,
         py::arg("value"))
    .def("close", &store::close)
    .def("_cpp_round_us", &store::cpp_round_us, py::arg("key"),
         py::arg("warmup"), py::arg("rounds"),
         "The median split round of `key` driven from C++ (benchmarks).")
    .def("__enter__", [](py::object self) { return self; })
    .def("__exit__", [](store& s, const py::handle& type, const py::handle&,
                        const py::handle&) {
      // Leaving on an exception: no exit barrier (the others may wait
      // for this worker's pushes, not at the barrier).
      if (type.is_none()) {
        s.close();
        return false;
      }
      s.set_barrier_before_exit(false);
      try {
        s.close();
      } catch (const failure&) {
        // The exception that left the block is the one to see.
      }
      return false;
    });
}
