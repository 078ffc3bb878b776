// SPDX-License-Identifier: BSD-3-Clause
// Conversions of the `actorps._actorps` extension (see convert.hpp).
#include "python/convert.hpp"

#include <pybind11/numpy.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/compression.hpp"
#include "runtime/system_options.hpp"

namespace actorps::python {

namespace {

// actorps.Error and one subclass per errc (created at import).
py::handle error_base;
std::map<errc, py::handle> error_classes;

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

} // namespace

// -- errors -------------------------------------------------------------------

[[noreturn]] void raise(const caf::error& err) {
  throw failure{code_of(err), context_of(err)};
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

// -- options ------------------------------------------------------------------

// Set on a shard's thread while it runs a Python command handler: the
// store the handler would call is waiting for that very command.
thread_local bool in_command_handler = false;

namespace {

// A Python callable as the shards' command handler (local stores): called
// as f(head, body) on a shard's thread with the GIL taken; an exception it
// raises fails the command with its text.

// Marks this thread as running a Python callback for a shard, which the
// store it would call waits for.
struct shard_callback {
  shard_callback() {
    in_command_handler = true;
  }
  ~shard_callback() {
    in_command_handler = false;
  }
  shard_callback(const shard_callback&) = delete;
  shard_callback& operator=(const shard_callback&) = delete;
};

// A Python object that shard threads call: dropped with the GIL held,
// wherever its last copy goes.
std::shared_ptr<py::object> held(const py::handle& x) {
  return {new py::object(py::reinterpret_borrow<py::object>(x)),
          [](py::object* p) {
            if (!Py_IsInitialized())
              return; // the interpreter is gone
            py::gil_scoped_acquire locked;
            delete p;
          }};
}

command_handler command_of(const py::handle& x) {
  if (x.is_none())
    return {};
  if (!PyCallable_Check(x.ptr()))
    throw py::type_error("on_command: expected a callable f(head, body), got "
                         + describe(x));
  auto fn = held(x);
  return [fn](int32_t head, const std::string& body) -> caf::error {
    if (!Py_IsInitialized())
      return make_error(errc::closed, "on_command: Python has exited");
    py::gil_scoped_acquire locked;
    shard_callback scope;
    try {
      (*fn)(head, body);
      return caf::none;
    } catch (py::error_already_set& e) {
      return make_error(errc::bad_config,
                        "on_command raised " + std::string{e.what()});
    }
  };
}

// A key as Python named it: an int given as one comes back as an int.
py::object key_object(const std::string& key) {
  auto digits = key.size() - (key[0] == '-' ? 1 : 0);
  auto first = key.size() - digits;
  bool number = digits > 0 && digits < 19
                && key.find_first_not_of("0123456789", first)
                     == std::string::npos
                && (key[first] != '0' || digits == 1);
  if (number)
    return py::int_(std::stoll(key));
  return py::str(key);
}

} // namespace

core::update_rule rule_of(const py::handle& x) {
  if (x.is_none())
    return {};
  if (!PyCallable_Check(x.ptr()))
    throw py::type_error("_set_updater: expected a callable f(key, grad, "
                         "weight), got "
                         + describe(x));
  auto fn = held(x);
  return [fn](const std::string& key, const float* grad, float* weight,
              std::size_t n) {
    if (!Py_IsInitialized())
      return;
    py::gil_scoped_acquire locked;
    shard_callback scope;
    // Printed as Python prints an exception it cannot raise anywhere; this
    // part keeps its weights.
    const char* where = "the update rule of _set_updater";
    try {
      // Copies in and out: an array the rule keeps never points into a
      // shard.
      auto count = static_cast<py::ssize_t>(n);
      py::array_t<float> g{count, grad};
      py::array_t<float> w{count, weight};
      (*fn)(key_object(key), g, w);
      std::copy_n(w.data(), n, weight);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable(where);
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      py::error_already_set().discard_as_unraisable(where);
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
    } else if (name == "staleness")
      o.staleness = count_of<uint32_t>(v, "staleness", 1000000);
    else if (name == "max_pending")
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
    else if (name == "transport")
      o.transport = v.cast<std::string>();
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
    else if (name == "metrics_port") {
      auto port = v.cast<long long>();
      if (port < -1 || port > 65535)
        throw py::value_error("metrics_port: expected -1 (off) or 0..65535, "
                              "got "
                              + std::to_string(port));
      o.metrics.port = static_cast<int>(port);
    } else if (name == "metrics_host")
      o.metrics.host = v.cast<std::string>();
    else
      throw py::type_error(
        "create: unknown option '" + name
        + "' (options: num_workers, num_shards, bigarray_bound, "
          "slice_floats, timeout, barrier_timeout, max_bytes_in_flight, "
          "compression, staleness, max_pending, threads, scheduler, "
          "keep_freed_memory, "
          "coordinator, token, transport, connect_timeout, heartbeat, "
          "connection_timeout, tls_cert, tls_key, tls_ca, on_command, "
          "metrics_port, metrics_host)");
  }
  return o;
}

std::vector<uint64_t> ids_of(const py::handle& ids, const char* what) {
  auto a
    = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(
      ids);
  if (!a || a.ndim() > 1)
    throw py::type_error(std::string{what}
                         + ": ids must be a sequence of integers");
  std::vector<uint64_t> out;
  out.reserve(static_cast<std::size_t>(a.size()));
  auto* x = a.data();
  for (py::ssize_t i = 0; i < a.size(); ++i) {
    if (x[i] < 0)
      throw py::value_error(std::string{what} + ": row " + std::to_string(x[i])
                            + " is negative");
    out.push_back(static_cast<uint64_t>(x[i]));
  }
  return out;
}

} // namespace actorps::python
