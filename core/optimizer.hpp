// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <actorps/core/errc.hpp>
#include <actorps/core/values.hpp>

/// Update rules of a shard, free of CAF. A shard keeps, beside each slice of
/// n weights, `state_size(cfg, n)` floats of optimizer state (zero at start)
/// and a step counter t (the number of updates applied so far).
///
/// The rules are MXNet's (optimizer_op-inl.h, optimizer.py). Let g be the
/// merged push of a round and clip(x) = clamp(x, -clip_gradient,
/// clip_gradient) when clip_gradient > 0, else x. For the optimizers (not
/// for "assign" and "accumulate"), g is first preprocessed, element-wise:
///   g = rescale_grad * g;  if ascent: g = -g;
///   except for adam and rmsprop: g = clip(g)
/// Then, with lr = scheduled_learning_rate(cfg, t) (learning_rate unless a
/// schedule is set), wd = weight_decay, mu = momentum:
/// - assign:     w = merged push                (MXNet without optimizer)
/// - accumulate: w = w + clip(rescale_grad * merged push) (ps-lite's
///   default; no ascent; "test" is the same, MXNet's Test optimizer)
/// - sgd, mu = 0: w = w - lr * (g + wd * w)
/// - sgd, mu > 0: m = mu * m - lr * (g + wd * w);  w = w + m      (state: m)
/// - nesterov:   d = g + wd * w;  m = mu * m + d;  w = w - lr * (d + mu * m)
/// - adagrad:    h = h + g^2;  w = w - lr * (g / sqrt(h + epsilon) + wd * w)
/// - adam:       d = clip(g + wd * w);  m = beta1 * m + (1 - beta1) * d;
///               v = beta2 * v + (1 - beta2) * d^2;  t = t + 1;
///               lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t);
///               w = w - lr_t * m / (sqrt(v) + epsilon)          (state: m, v)
/// - rmsprop:    d = clip(g + wd * w);  n = rho * n + (1 - rho) * d^2;
///               w = w - lr * d / sqrt(n + epsilon)              (state: n)
/// epsilon is `epsilon_of(cfg)`: MXNet's default per optimizer unless set.
/// State layout: the k-th state vector of a slice occupies floats
/// [k*n, (k+1)*n) (adam: m then v). All arithmetic is float32.
namespace actorps::core {

/// Checks the name and every parameter of `cfg`; on failure the status has
/// code `errc::bad_optimizer` and names the offending parameter and value.
/// `learning_rate` is checked only for optimizers that use it (not "assign"
/// or "accumulate"), though NaN is rejected everywhere; every other parameter
/// is checked for every optimizer, so a bad unused value is still an error.
status validate(const optimizer_config& cfg);

/// Parses "name=adam,learning_rate=0.001,weight_decay=0.0001" (the fields of
/// optimizer_config; `ascent` takes 0/1/true/false) into `out`, starting from
/// the defaults, then validates the result. Errors are `bad_optimizer`
/// naming the offending item. Used by the apps' --optimizer flag and by
/// command 0 of send_command_to_servers.
status parse_optimizer(const std::string& text, optimizer_config& out);

/// Renders `cfg` in the syntax `parse_optimizer` reads.
std::string to_string(const optimizer_config& cfg);

/// True if the rule sets the weights to the merged push as it is ("assign"),
/// so a shard may take the push's buffer over instead of copying it.
bool replaces_value(const optimizer_config& cfg);

/// Whether `a` and `b` name the same rule with the same state layout
/// ("test" and "accumulate" do; sgd with and without momentum do not).
bool same_rule(const optimizer_config& a, const optimizer_config& b);

/// Number of state floats an optimizer keeps for `n` weights (0, n or 2n).
/// Precondition: `validate(cfg).ok()`.
std::size_t state_size(const optimizer_config& cfg, std::size_t n);

/// The learning rate of update number `step` (0 for the first) under
/// `cfg.lr_schedule` (see optimizer_config). Precondition:
/// `validate(cfg).ok()`. Computed in double, rounded to float.
float scheduled_learning_rate(const optimizer_config& cfg, uint64_t step);

/// The epsilon an optimizer uses: `cfg.epsilon` when > 0, else MXNet's
/// default for the optimizer (1e-7 for adagrad, 1e-8 for adam and rmsprop).
float epsilon_of(const optimizer_config& cfg);

/// Applies one update to `n` weights `w` with merged push `g` and state
/// `state` (`state_size(cfg, n)` floats). `step` is the number of updates
/// applied to this slice before this one (0 for the first); adam uses
/// t = step + 1. Precondition: `validate(cfg).ok()`. Element-wise work is
/// float32; adam's per-update scalar lr_t is computed in double and rounded
/// to float, because 1 - beta2^t loses most float digits for small t.
void apply_update(const optimizer_config& cfg, float* w, const float* g,
                  float* state, std::size_t n, uint64_t step);

/// The lazy update of row tables (MXNet's lazy_update): applies `cfg` to the
/// rows `local` of a shard's table (`table`: all its rows back to back;
/// `state`: `state_size(cfg, dim)` floats per row; `steps`: one counter per
/// row, incremented), `grads` holding one row per entry of `local`. The same
/// as `apply_update` row by row, with the rule parsed once; rows not named
/// keep their values, state and steps.
void apply_rows(const optimizer_config& cfg, float* table, float* state,
                uint64_t* steps, std::size_t dim,
                const std::vector<uint64_t>& local, const float* grads);

/// Adds `n` floats of `src` into `dst` (the aggregation of a round).
void accumulate_into(float* dst, const float* src, std::size_t n);

/// Writes `a + b` (`n` floats each) into `out`, which may be either.
void sum_into(float* out, const float* a, const float* b, std::size_t n);

} // namespace actorps::core
