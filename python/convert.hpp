// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Internal to python/: what the extension's store (module.cpp) converts
// between Python and the C++ facade: actorps errors as Python exceptions,
// numpy arrays and torch tensors as float views, keys, and the options of
// KVStore.create. convert.cpp implements it.

#include <pybind11/pybind11.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "messages/errors.hpp"
#include "runtime/kvstore.hpp"

namespace actorps::python {

namespace py = pybind11;

// -- errors -------------------------------------------------------------------

/// An actorps error on its way to Python (module.cpp's translator raises
/// the exception class of its code).
struct failure {
  errc code;
  std::string message;
};

/// Throws `err` as a `failure`.
[[noreturn]] void raise(const caf::error& err);

/// Throws `err` if it is an error.
inline void check(const caf::error& err) {
  if (err)
    raise(err);
}

/// The value of `x`, or throws its error.
template <class T>
T check(caf::expected<T>&& x) {
  if (!x)
    raise(x.error());
  return std::move(*x);
}

/// Adds actorps.Error and one subclass per errc to `m`, and the translator
/// that raises them.
void make_errors(py::module_& m);

// -- values -------------------------------------------------------------------

/// The floats of a numpy array or a CPU torch tensor, and what keeps them
/// alive.
struct floats_view {
  float* data = nullptr;
  std::size_t size = 0;
  py::object keep;
};

/// The floats of `x` (refused with TypeError unless float32, C-contiguous,
/// on the CPU, and writable when `writable`); `what` names it in errors.
floats_view view_of(const py::handle& x, const char* what, bool writable);

/// Row ids: a sequence (or 1-D numpy array) of integers >= 0; `what`
/// names the call in errors.
std::vector<uint64_t> ids_of(const py::handle& ids, const char* what);

/// One value or a list of them.
std::vector<floats_view> views_of(const py::handle& x, const char* what,
                                  bool writable);

using in_ref = Eigen::Ref<const Eigen::VectorXf>;
using out_ref = Eigen::Ref<Eigen::VectorXf>;

in_ref in_of(const floats_view& v);
out_ref out_of(const floats_view& v);
std::vector<in_ref> ins_of(const std::vector<floats_view>& vs);
std::vector<out_ref> outs_of(const std::vector<floats_view>& vs);

/// A key: a str, or an int as its decimal digits.
std::string key_of(const py::handle& k);

/// A list of keys.
std::vector<std::string> keys_of(const py::handle& ks);

// -- options ------------------------------------------------------------------

/// True on a shard's thread while it runs a Python command handler or
/// update rule.
extern thread_local bool in_command_handler;

/// A Python callable f(key, grad, weight) as a local store's update rule
/// (MXNet's _set_updater; None: none).
core::update_rule rule_of(const py::handle& f);

/// KVStore.create's keyword options as store_options.
store_options options_of(const py::dict& kwargs);

} // namespace actorps::python
