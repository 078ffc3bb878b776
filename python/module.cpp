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
#include "runtime/kvstore.hpp"

namespace py = pybind11;

namespace actorps::python {

namespace {

// -- errors -------------------------------------------------------------------

// An actorps error on its way to Python.
struct failure {
  errc code;
  std::string message;
};

// actorps.Error and one subclass per errc (created at import).
py::handle error_base;
std::map<errc, py::handle> error_classes;

[[noreturn]] void raise(const caf::error& err) {
  throw failure{code_of(err), context_of(err)};
}

void check(const caf::error& err) {
  if (err)
    raise(err);
}

template <class T>
T check(caf::expected<T>&& x) {
  if (!x)
    raise(x.error());
  return std::move(*x);
}

void make_errors(py::module_& m) {
  error_base = PyErr_NewExceptionWithDoc(
    "actorps.Error",
    "An actorps operation failed; the subclass tells how (errc).", nullptr,
    nullptr);
  m.add_object("Error", error_base);
  struct spec {
    errc code;
    const char* name;
    PyObject* also; // a built-in base besides actorps.Error, or null
  };
  const spec specs[] = {
    {errc::unknown_key, "UnknownKey", PyExc_LookupError},
    {errc::shape_mismatch, "ShapeMismatch", PyExc_ValueError},
    {errc::not_initialized, "NotInitialized", nullptr},
    {errc::already_initialized, "AlreadyInitialized", nullptr},
    {errc::bad_optimizer, "BadOptimizer", PyExc_ValueError},
    {errc::dead_node, "DeadNode", PyExc_ConnectionError},
    {errc::timeout, "Timeout", PyExc_TimeoutError},
    {errc::unauthorized, "Unauthorized", PyExc_PermissionError},
    {errc::bad_config, "BadConfig", PyExc_ValueError},
    {errc::closed, "Closed", nullptr},
    {errc::checkpoint_io, "CheckpointIO", PyExc_OSError},
    {errc::checkpoint_corrupt, "CheckpointCorrupt", nullptr},
    {errc::checkpoint_mismatch, "CheckpointMismatch", nullptr},
  };
  for (const auto& s : specs) {
    auto bases = s.also != nullptr
                   ? py::make_tuple(py::handle{error_base}, py::handle{s.also})
                   : py::make_tuple(py::handle{error_base});
    auto full = std::string{"actorps."} + s.name;
    py::handle cls = PyErr_NewException(full.c_str(), bases.ptr(), nullptr);
    m.add_object(s.name, cls);
    error_classes[s.code] = cls;
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const failure& e) {
      if (e.code == errc::interrupted) {
        // Ctrl-C during a wait: the signal handler's KeyboardInterrupt is
        // pending already.
        if (PyErr_Occurred() == nullptr)
          PyErr_SetNone(PyExc_KeyboardInterrupt);
        return;
      }
      auto i = error_classes.find(e.code);
      auto cls = i != error_classes.end() ? i->second : error_base;
      PyErr_SetString(cls.ptr(), e.message.c_str());
    }
  });
}

// -- values -------------------------------------------------------------------

// The floats of a numpy array or a CPU torch tensor, and what keeps them
// alive.
struct floats_view {
  float* data = nullptr;
  std::size_t size = 0;
  py::object keep;
};

std::string describe(const py::handle& x) {
  auto type = py::type::handle_of(x);
  std::string text = py::str(type.attr("__module__")).cast<std::string>() + "."
                     + py::str(type.attr("__name__")).cast<std::string>();
  if (py::hasattr(x, "dtype"))
    text += " of " + py::str(x.attr("dtype")).cast<std::string>();
  return text;
}

bool is_torch_tensor(const py::handle& x) {
  auto type = py::type::handle_of(x);
  auto module = py::str(type.attr("__module__")).cast<std::string>();
  return module.rfind("torch", 0) == 0 && py::hasattr(x, "is_contiguous")
         && py::hasattr(x, "numpy");
}

// `what` names the argument in errors; `writable` for outputs.
floats_view view_of(const py::handle& x, const char* what, bool writable) {
  auto refuse = [&](const std::string& why) -> floats_view {
    throw py::type_error(std::string{what} + ": " + why + ", got "
                         + describe(x));
  };
  py::object arr;
  py::object keep = py::reinterpret_borrow<py::object>(x);
  if (is_torch_tensor(x)) {
    auto device = py::str(x.attr("device")).cast<std::string>();
    if (py::str(x.attr("device").attr("type")).cast<std::string>() != "cpu")
      return refuse("a tensor must be on the CPU (call .cpu() first), not on "
                    + device);
    if (py::str(x.attr("dtype")).cast<std::string>() != "torch.float32")
      return refuse("a tensor must be torch.float32");
    if (py::hasattr(x, "is_sparse") && x.attr("is_sparse").cast<bool>())
      return refuse("a tensor must be dense (call .to_dense())");
    if (!x.attr("is_contiguous")().cast<bool>())
      return refuse("a tensor must be contiguous (call .contiguous())");
    // A conjugate or negative view has no plain memory to share.
    for (const char* lazy : {"is_neg", "is_conj"})
      if (py::hasattr(x, lazy) && x.attr(lazy)().cast<bool>())
        return refuse("a tensor must not be a lazy negative or conjugate "
                      "view (call .resolve_neg())");
    // Shares the tensor's memory.
    arr = x.attr("detach")().attr("numpy")();
  } else if (py::isinstance<py::array>(x)) {
    arr = py::reinterpret_borrow<py::object>(x);
  } else {
    return refuse("expected a float32 numpy array or a CPU torch.Tensor");
  }
  auto a = py::reinterpret_borrow<py::array>(arr);
  if (!a.dtype().is(py::dtype::of<float>()))
    return refuse("values must be float32");
  if ((a.flags() & py::array::c_style) == 0)
    return refuse("an array must be C-contiguous (numpy.ascontiguousarray)");
  if (writable && !a.writeable())
    return refuse("an output must be writable");
  floats_view out;
  out.size = static_cast<std::size_t>(a.size());
  out.data = writable ? static_cast<float*>(a.mutable_data())
                      : const_cast<float*>(static_cast<const float*>(a.data()));
  out.keep = py::make_tuple(keep, arr);
  return out;
}

using in_ref = Eigen::Ref<const Eigen::VectorXf>;
using out_ref = Eigen::Ref<Eigen::VectorXf>;

in_ref in_of(const floats_view& v) {
  return Eigen::Map<const Eigen::VectorXf>{v.data,
                                           static_cast<Eigen::Index>(v.size)};
}

out_ref out_of(const floats_view& v) {
  return Eigen::Map<Eigen::VectorXf>{v.data, static_cast<Eigen::Index>(v.size)};
}

std::vector<in_ref> ins_of(const std::vector<floats_view>& vs) {
  std::vector<in_ref> out;
  for (const auto& v : vs)
    out.push_back(in_of(v));
  return out;
}

std::vector<out_ref> outs_of(const std::vector<floats_view>& vs) {
  std::vector<out_ref> out;
  for (const auto& v : vs)
    out.push_back(out_of(v));
  return out;
}

// One value or a list of them (several devices: summed on push, each
// filled on pull).
std::vector<floats_view> views_of(const py::handle& x, const char* what,
                                  bool writable) {
  std::vector<floats_view> out;
  if (py::isinstance<py::list>(x) || py::isinstance<py::tuple>(x)) {
    for (auto item : x)
      out.push_back(view_of(item, what, writable));
    if (out.empty())
      throw py::value_error(std::string{what} + ": an empty list");
  } else {
    out.push_back(view_of(x, what, writable));
  }
  return out;
}

std::string key_of(const py::handle& k) {
  if (py::isinstance<py::str>(k))
    return k.cast<std::string>();
  if (py::isinstance<py::int_>(k) && !py::isinstance<py::bool_>(k)) {
    // Any size of int, its decimal digits (an IntEnum member too).
    return py::str(py::reinterpret_steal<py::object>(PyNumber_Long(k.ptr())))
      .cast<std::string>();
  }
  throw py::type_error("a key must be a str or an int, got " + describe(k));
}

std::vector<std::string> keys_of(const py::handle& ks) {
  if (py::isinstance<py::str>(ks))
    throw py::type_error("keys: expected a list of keys, got one str");
  std::vector<std::string> out;
  for (auto k : ks)
    out.push_back(key_of(k));
  return out;
}

std::chrono::milliseconds seconds_of(const py::handle& x, const char* name,
                                     bool zero_ok = false) {
  auto s = x.cast<double>();
  if (!std::isfinite(s) || s < 0 || (s == 0 && !zero_ok) || s > 1e9)
    throw py::value_error(std::string{name} + ": seconds must be a number "
                          + (zero_ok ? ">= 0" : "> 0") + ", got "
                          + py::str(x).cast<std::string>());
  return std::chrono::milliseconds{static_cast<int64_t>(s * 1000.0 + 0.5)};
}

template <class T>
T count_of(const py::handle& x, const char* name, long long max) {
  auto n = x.cast<long long>();
  if (n < 0 || n > max)
    throw py::value_error(std::string{name} + ": must be 0.."
                          + std::to_string(max) + ", got " + std::to_string(n));
  return static_cast<T>(n);
}

// A Python callable as the shards' command handler (local stores): called
// as f(head, body) on a shard's thread with the GIL taken; an exception it
// raises fails the command with its text.
// Set on a shard's thread while it runs a Python command handler: the
// store the handler would call is waiting for that very command.
thread_local bool in_command_handler = false;

command_handler command_of(const py::handle& x) {
  if (x.is_none())
    return {};
  if (!PyCallable_Check(x.ptr()))
    throw py::type_error("on_command: expected a callable f(head, body), got "
                         + describe(x));
  // Dropped with the GIL held, wherever the last copy of the handler goes.
  std::shared_ptr<py::object> fn{
    new py::object(py::reinterpret_borrow<py::object>(x)), [](py::object* p) {
      if (!Py_IsInitialized())
        return; // the interpreter is gone
      py::gil_scoped_acquire locked;
      delete p;
    }};
  return [fn](int32_t head, const std::string& body) -> caf::error {
    if (!Py_IsInitialized())
      return make_error(errc::closed, "on_command: Python has exited");
    py::gil_scoped_acquire locked;
    in_command_handler = true;
    struct reset {
      ~reset() {
        in_command_handler = false;
      }
    } on_exit;
    try {
      (*fn)(head, body);
      return caf::none;
    } catch (py::error_already_set& e) {
      return make_error(errc::bad_config,
                        "on_command raised " + std::string{e.what()});
    }
  };
}

store_options options_of(const py::dict& kwargs) {
  store_options o;
  for (auto [k, v] : kwargs) {
    auto name = k.cast<std::string>();
    if (name == "num_workers")
      o.num_workers = count_of<uint32_t>(v, "num_workers", 1 << 20);
    else if (name == "num_shards")
      o.num_shards = count_of<uint32_t>(v, "num_shards", 1 << 20);
    else if (name == "bigarray_bound")
      o.bigarray_bound = count_of<uint64_t>(v, "bigarray_bound", 1LL << 40);
    else if (name == "slice_floats")
      o.slice_floats = count_of<uint64_t>(v, "slice_floats", 1LL << 40);
    else if (name == "timeout")
      o.timeout = seconds_of(v, "timeout");
    else if (name == "barrier_timeout")
      o.barrier_timeout = seconds_of(v, "barrier_timeout");
    else if (name == "max_bytes_in_flight")
      o.max_bytes_in_flight = count_of<uint64_t>(v, "max_bytes_in_flight",
                                                 1LL << 40);
    else if (name == "compression") {
      auto text = v.cast<std::string>();
      auto c = parse_compression(text);
      if (!c)
        throw py::value_error("compression: expected none, fp16, 2bit or "
                              "2bit:THRESHOLD, got '"
                              + text + "'");
      o.compression = *c;
    } else if (name == "max_pending")
      o.max_pending = count_of<std::size_t>(v, "max_pending", 1 << 30);
    else if (name == "threads")
      o.threads = count_of<std::size_t>(v, "threads", 1024);
    else if (name == "scheduler") {
      auto text = v.cast<std::string>();
      if (!parse_scheduler_policy(text, o.scheduler))
        throw py::value_error("scheduler: expected auto, sharing or "
                              "stealing, got '"
                              + text + "'");
    } else if (name == "keep_freed_memory")
      o.keep_freed_memory = v.cast<bool>();
    else if (name == "coordinator")
      o.coordinator = v.cast<std::string>();
    else if (name == "token")
      o.token = v.cast<std::string>();
    else if (name == "connect_timeout")
      o.connect_timeout = seconds_of(v, "connect_timeout");
    else if (name == "heartbeat")
      o.heartbeat = seconds_of(v, "heartbeat", true); // 0: none
    else if (name == "connection_timeout")
      o.connection_timeout = seconds_of(v, "connection_timeout");
    else if (name == "tls_cert")
      o.tls.cert = v.cast<std::string>();
    else if (name == "tls_key")
      o.tls.key = v.cast<std::string>();
    else if (name == "tls_ca")
      o.tls.ca = v.cast<std::string>();
    else if (name == "on_command")
      o.on_command = command_of(v);
    else
      throw py::type_error(
        "create: unknown option '" + name
        + "' (options: num_workers, num_shards, bigarray_bound, "
          "slice_floats, timeout, barrier_timeout, max_bytes_in_flight, "
          "compression, max_pending, threads, scheduler, keep_freed_memory, "
          "coordinator, token, connect_timeout, heartbeat, "
          "connection_timeout, tls_cert, tls_key, tls_ca, on_command)");
  }
  return o;
}

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
      throw py::type_error("on_command: a command handler must not call the "
                           "store (it waits for the handler)");
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
    uint64_t last = 0;
    auto err = run([&] {
      last = last_issued_;
      return kv_.wait_all();
    });
    // Pulls another thread issued after this wait began stay held.
    if (code_of(err) != errc::interrupted)
      pending_.erase(pending_.begin(), pending_.upper_bound(last));
    check(err);
  }

  void barrier() {
    uint64_t last = 0;
    auto err = run([&] {
      last = last_issued_;
      return kv_.barrier();
    });
    if (code_of(err) != errc::interrupted)
      pending_.erase(pending_.begin(), pending_.upper_bound(last));
    check(err);
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
    auto err = run([&] { return kv_.set_optimizer(cfg); });
    check(err);
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

  void save_optimizer_states(const std::string& path) {
    auto err = run([&] { return kv_.save_optimizer_states(path); });
    check(err);
  }

  void export_weights(const std::string& path, bool optimizer_state) {
    auto err = run([&] { return kv_.export_weights(path, optimizer_state); });
    check(err);
  }

  void load_optimizer_states(const std::string& path) {
    auto err = run([&] { return kv_.load_optimizer_states(path); });
    check(err);
  }

  uint32_t num_dead_node(int node_id, double timeout) {
    if (!std::isfinite(timeout) || timeout < 0 || timeout > 1e9)
      throw py::value_error("num_dead_node: timeout must be seconds >= 0");
    auto t = std::chrono::seconds{static_cast<int64_t>(std::ceil(timeout))};
    auto n = run([&] { return kv_.num_dead_node(node_id, t); });
    return check(std::move(n));
  }

  void send_command_to_servers(int head, const std::string& body) {
    auto err = run([&] { return kv_.send_command_to_servers(head, body); });
    check(err);
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
                "Creates a store: local, local_sync, dist_sync, dist_async or "
                "dist; options are store_options' fields by name (durations "
                "in seconds).")
    .def("worker", &store::worker, py::arg("rank"),
         "Another handle on the same local store, for worker `rank`.")
    .def_property_readonly("type", &store::type)
    .def_property_readonly("rank", &store::rank)
    .def_property_readonly("num_workers", &store::num_workers)
    .def_property_readonly("synchronous", &store::synchronous)
    .def_property_readonly("closed", &store::closed)
    .def("init", &store::init, py::arg("key"), py::arg("value"))
    .def("push", &store::push, py::arg("key"), py::arg("value"),
         py::arg("priority") = 0)
    .def("pull", &store::pull, py::arg("key"), py::arg("out"),
         py::arg("priority") = 0)
    .def("push_pull", &store::push_pull, py::arg("key"), py::arg("value"),
         py::arg("out"), py::arg("priority") = 0)
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
    .def("set_optimizer", &store::set_optimizer, py::arg("name"))
    .def("set_gradient_compression", &store::set_gradient_compression,
         py::arg("spec"), py::arg("key") = py::none())
    .def("save_optimizer_states", &store::save_optimizer_states,
         py::arg("path"))
    .def("load_optimizer_states", &store::load_optimizer_states,
         py::arg("path"))
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
