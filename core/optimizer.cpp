// SPDX-License-Identifier: BSD-3-Clause
#include "core/optimizer.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "core/prefetch.hpp"

namespace actorps::core {

namespace {

using array_map = Eigen::Map<Eigen::ArrayXf>;
using const_array_map = Eigen::Map<const Eigen::ArrayXf>;

enum class kind { assign, accumulate, sgd, nesterov, adagrad, adam, rmsprop };

// Returns false for unknown names; `out` is untouched then.
bool parse_kind(const std::string& name, kind& out) {
  struct entry {
    const char* name;
    kind value;
  };
  static constexpr entry entries[] = {
    {"assign", kind::assign},
    {"accumulate", kind::accumulate},
    {"sgd", kind::sgd},
    {"nesterov", kind::nesterov},
    {"adagrad", kind::adagrad},
    {"adam", kind::adam},
    {"rmsprop", kind::rmsprop},
    // MXNet's Test optimizer: weight += rescale_grad * grad.
    {"test", kind::accumulate},
  };
  for (const auto& e : entries) {
    if (name == e.name) {
      out = e.value;
      return true;
    }
  }
  return false;
}

// "%g" keeps messages short ("-1", "0.5", "nan", "inf") while still showing
// the offending value.
std::string render_float(float x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(x));
  return buf;
}

status bad_param(const char* param, const char* rule, float value) {
  std::string msg = "set_optimizer: ";
  msg += param;
  msg += " must be ";
  msg += rule;
  msg += ", got ";
  msg += render_float(value);
  return status{errc::bad_optimizer, std::move(msg)};
}

// Each predicate is written so that NaN fails it.
bool finite_positive(float x) {
  return std::isfinite(x) && x > 0.0f;
}

bool finite_non_negative(float x) {
  return std::isfinite(x) && x >= 0.0f;
}

bool unit_interval(float x) {
  return x >= 0.0f && x < 1.0f;
}

// The optimizers proper, after gradient preprocessing. `G` is an Eigen array
// expression for the preprocessed gradient; passing an expression rather than
// a materialized array avoids a temporary as large as the slice (up to
// max_slice_floats). Statements that reuse `d` re-evaluate the same
// expression, which yields bit-identical values.
// `state` holds this part's first state block; further blocks (Adam's second
// moment) lie `stride` floats after it. `lr` is the update's step size
// (step_size: for Adam, bias-corrected), `eps` the rule's epsilon_of (found
// once per update: a table's update calls this once per row).
template <class G>
void apply_rule(kind k, const optimizer_config& cfg, array_map w, const G& g,
                float* state, std::size_t stride, float lr, float eps) {
  const auto size = w.size();
  const float wd = cfg.weight_decay;
  const float mu = cfg.momentum;
  // Adam and RMSProp clip here, after weight decay (see apply_update).
  const float clip = cfg.clip_gradient > 0.0f
                       ? cfg.clip_gradient
                       : std::numeric_limits<float>::infinity();
  switch (k) {
    case kind::assign:
    case kind::accumulate:
      // Handled by the caller: these rules use the raw push.
      break;
    case kind::sgd:
      if (mu > 0.0f) {
        array_map m{state, size};
        m = mu * m - lr * (g + wd * w);
        w += m;
      } else {
        w -= lr * (g + wd * w);
      }
      break;
    case kind::nesterov: {
      array_map m{state, size};
      m = mu * m + (g + wd * w);
      w -= lr * ((g + wd * w) + mu * m);
      break;
    }
    case kind::adagrad: {
      array_map h{state, size};
      h += g.square();
      w -= lr * (g / (h + eps).sqrt() + wd * w);
      break;
    }
    case kind::adam: {
      array_map m{state, size};
      array_map v{state + stride, size};
      const float b1 = cfg.beta1;
      const float b2 = cfg.beta2;
      // As MXNet: weight decay joins the gradient before clipping.
      m = b1 * m + (1.0f - b1) * (g + wd * w).max(-clip).min(clip);
      v = b2 * v + (1.0f - b2) * (g + wd * w).max(-clip).min(clip).square();
      w -= lr * m / (v.sqrt() + eps);
      break;
    }
    case kind::rmsprop: {
      array_map r{state, size};
      const float rho = cfg.rho;
      // As MXNet: weight decay joins the gradient before clipping, and
      // epsilon sits inside the square root.
      r = rho * r + (1.0f - rho) * (g + wd * w).max(-clip).min(clip).square();
      w -= lr * (g + wd * w).max(-clip).min(clip) / (r + eps).sqrt();
      break;
    }
  }
}

enum class schedule { constant, factor, cosine };

bool parse_schedule(const std::string& name, schedule& out) {
  if (name == "constant")
    out = schedule::constant;
  else if (name == "factor")
    out = schedule::factor;
  else if (name == "cosine")
    out = schedule::cosine;
  else
    return false;
  return true;
}

status validate_schedule(const optimizer_config& cfg) {
  schedule s;
  if (!parse_schedule(cfg.lr_schedule, s))
    return status{errc::bad_optimizer,
                  "set_optimizer: unknown lr_schedule '" + cfg.lr_schedule
                    + "' (expected one of constant, factor, cosine)"};
  if (s != schedule::constant && cfg.lr_updates == 0)
    return status{errc::bad_optimizer, "set_optimizer: lr_updates must be > 0 "
                                       "for lr_schedule "
                                         + cfg.lr_schedule + ", got 0"};
  if (!(cfg.lr_factor > 0.0f && cfg.lr_factor <= 1.0f))
    return bad_param("lr_factor", "in (0, 1]", cfg.lr_factor);
  if (!finite_non_negative(cfg.lr_final))
    return bad_param("lr_final", "finite and >= 0", cfg.lr_final);
  if (s != schedule::constant && cfg.lr_final > cfg.learning_rate)
    return bad_param("lr_final", "<= learning_rate", cfg.lr_final);
  return status{};
}

} // namespace

float scheduled_learning_rate(const optimizer_config& cfg, uint64_t step) {
  schedule s = schedule::constant;
  parse_schedule(cfg.lr_schedule, s);
  const double lr = cfg.learning_rate;
  const double last = cfg.lr_final;
  switch (s) {
    case schedule::constant:
      break;
    case schedule::factor: {
      auto decays = static_cast<double>(step / cfg.lr_updates);
      return static_cast<float>(std::max(
        last, lr * std::pow(static_cast<double>(cfg.lr_factor), decays)));
    }
    case schedule::cosine: {
      // MXNet's CosineScheduler counts updates from 1.
      auto t = step + 1;
      if (t >= cfg.lr_updates)
        return cfg.lr_final;
      constexpr double pi = 3.14159265358979323846;
      auto phase = static_cast<double>(t) / static_cast<double>(cfg.lr_updates);
      return static_cast<float>(
        last + (lr - last) * 0.5 * (1.0 + std::cos(pi * phase)));
    }
  }
  return cfg.learning_rate;
}

status validate(const optimizer_config& cfg) {
  kind k;
  if (!parse_kind(cfg.name, k))
    return status{errc::bad_optimizer,
                  "set_optimizer: unknown optimizer '" + cfg.name
                    + "' (expected one of assign, accumulate, sgd, nesterov, "
                      "adagrad, adam, rmsprop, test)"};
  // assign and accumulate ignore the learning rate, so any finite number is
  // fine there; NaN and infinities are never deliberate settings (and CAF
  // 0.17 cannot send an infinity: its float encoder never returns).
  bool uses_lr = k != kind::assign && k != kind::accumulate;
  if (uses_lr ? !finite_positive(cfg.learning_rate)
              : !std::isfinite(cfg.learning_rate))
    return bad_param("learning_rate", uses_lr ? "finite and > 0" : "finite",
                     cfg.learning_rate);
  // The remaining parameters are checked for every optimizer: their defaults
  // are valid, so a bad value is a mistake even where it is unused.
  if (!unit_interval(cfg.momentum))
    return bad_param("momentum", "in [0, 1)", cfg.momentum);
  if (!finite_non_negative(cfg.weight_decay))
    return bad_param("weight_decay", "finite and >= 0", cfg.weight_decay);
  if (!finite_positive(cfg.rescale_grad))
    return bad_param("rescale_grad", "finite and > 0", cfg.rescale_grad);
  if (!std::isfinite(cfg.clip_gradient))
    return bad_param("clip_gradient", "finite (<= 0 disables clipping)",
                     cfg.clip_gradient);
  if (!unit_interval(cfg.beta1))
    return bad_param("beta1", "in [0, 1)", cfg.beta1);
  if (!unit_interval(cfg.beta2))
    return bad_param("beta2", "in [0, 1)", cfg.beta2);
  if (!std::isfinite(cfg.epsilon) || cfg.epsilon == 0.0f)
    return bad_param("epsilon", "finite and > 0 (< 0: the optimizer's default)",
                     cfg.epsilon);
  if (!unit_interval(cfg.rho))
    return bad_param("rho", "in [0, 1)", cfg.rho);
  return validate_schedule(cfg);
}

bool replaces_value(const optimizer_config& cfg) {
  kind k = kind::assign;
  return parse_kind(cfg.name, k) && k == kind::assign;
}

std::size_t state_size(const optimizer_config& cfg, std::size_t n) {
  kind k = kind::assign;
  parse_kind(cfg.name, k);
  switch (k) {
    case kind::assign:
    case kind::accumulate:
      return 0;
    case kind::sgd:
      return cfg.momentum > 0.0f ? n : 0;
    case kind::nesterov:
    case kind::adagrad:
    case kind::rmsprop:
      return n;
    case kind::adam:
      return 2 * n;
  }
  return 0;
}

bool same_rule(const optimizer_config& a, const optimizer_config& b) {
  kind x;
  kind y;
  return parse_kind(a.name, x) && parse_kind(b.name, y) && x == y
         && state_size(a, 1) == state_size(b, 1);
}

float epsilon_of(const optimizer_config& cfg) {
  if (cfg.epsilon > 0.0f)
    return cfg.epsilon;
  return cfg.name == "adagrad" ? 1e-7f : 1e-8f;
}

namespace {

// The scalar step size of one update: the scheduled learning rate, and for
// Adam its bias correction (once per update, not per part). Computing the
// correction in double keeps 1 - beta^t accurate for large t at no
// measurable cost; the element-wise work stays float32.
float step_size(kind k, const optimizer_config& cfg, uint64_t step) {
  const float lr = scheduled_learning_rate(cfg, step);
  if (k != kind::adam)
    return lr;
  const double t = static_cast<double>(step) + 1.0;
  const double c1 = 1.0 - std::pow(static_cast<double>(cfg.beta1), t);
  const double c2 = 1.0 - std::pow(static_cast<double>(cfg.beta2), t);
  return static_cast<float>(static_cast<double>(lr) * std::sqrt(c2) / c1);
}

// Whether rule `k` reads its step size (the others add or assign).
bool uses_step_size(kind k) {
  return k != kind::assign && k != kind::accumulate;
}

// Rule `k`'s epsilon, for the rules that have one (finding it compares
// the optimizer's name: not per update of a small key for the others).
float epsilon_for(kind k, const optimizer_config& cfg) {
  return k == kind::adagrad || k == kind::adam || k == kind::rmsprop
           ? epsilon_of(cfg)
           : 0.0f;
}

// The step sizes of one update of a table's rows, by step count. Rows
// pushed together often share their count (a table's rows start at 0), and
// one costs the schedule's arithmetic and, for Adam, two pow calls: each is
// computed once per call here. An entry holds what step_size returns, so
// the weights stay the same bit for bit.
class step_sizes {
public:
  step_sizes(kind k, const optimizer_config& cfg) : k_(k), cfg_(cfg) {
  }

  float operator()(uint64_t step) {
    auto& e = entries_[step % entries_.size()];
    if (e.step != step) {
      e.step = step;
      e.size = step_size(k_, cfg_, step);
    }
    return e.size;
  }

private:
  struct entry {
    uint64_t step = ~uint64_t{0};
    float size = 0.0f;
  };
  kind k_;
  const optimizer_config& cfg_;
  std::array<entry, 64> entries_{};
};

// Applies one update of rule `k` with step size `lr` (step_size's) and
// epsilon `eps` (epsilon_of's).
void apply_kind(kind k, const optimizer_config& cfg, float* w, const float* g,
                float* state, std::size_t n, float lr, float eps) {
  const auto size = static_cast<Eigen::Index>(n);
  array_map wm{w, size};
  const_array_map gm{g, size};
  if (k == kind::assign) {
    wm = gm;
    return;
  }
  if (k == kind::accumulate) {
    // Gradients are rescaled (and clipped) before anything else, here too.
    const float clip = cfg.clip_gradient;
    if (clip > 0.0f)
      wm += (cfg.rescale_grad * gm).max(-clip).min(clip);
    else
      wm += cfg.rescale_grad * gm;
    return;
  }
  // Negating the scale flips the sign exactly, so this equals rescaling and
  // then negating, as documented.
  const float scale = cfg.ascent ? -cfg.rescale_grad : cfg.rescale_grad;
  const float clip = cfg.clip_gradient;
  // MXNet clips `rescale * g + wd * w` for Adam and RMSProp, and
  // `rescale * g` alone for the others.
  const bool clips_with_decay = k == kind::adam || k == kind::rmsprop;
  // Part by part, each small enough to stay in the first-level cache: the
  // rules that pass over their arrays twice (the state, then the weights)
  // then read memory once. Every element's arithmetic is the same.
  constexpr std::size_t part = 2048;
  for (std::size_t at = 0; at < n; at += part) {
    const auto len = static_cast<Eigen::Index>(std::min(part, n - at));
    array_map wp{w + at, len};
    const_array_map gp{g + at, len};
    float* sp = state != nullptr ? state + at : nullptr;
    if (clip > 0.0f && !clips_with_decay)
      apply_rule(k, cfg, wp, (scale * gp).max(-clip).min(clip), sp, n, lr, eps);
    else
      apply_rule(k, cfg, wp, scale * gp, sp, n, lr, eps);
  }
}

// Fetches the lines of row `r` of a table, its state and its step ahead
// of their update. (Always inlined: see prefetch_lines.)
[[gnu::always_inline]] inline void
fetch_row(const float* table, const float* state, const uint64_t* steps,
          std::size_t dim, std::size_t per_row, uint64_t r) {
  prefetch_lines<true>(table + r * dim, dim * sizeof(float));
  __builtin_prefetch(steps + r, 1);
  if (per_row > 0)
    prefetch_lines<true>(state + r * per_row, per_row * sizeof(float));
}

} // namespace

void apply_update(const optimizer_config& cfg, float* w, const float* g,
                  float* state, std::size_t n, uint64_t step) {
  kind k = kind::assign;
  parse_kind(cfg.name, k);
  apply_kind(k, cfg, w, g, state, n,
             uses_step_size(k) ? step_size(k, cfg, step) : 0.0f,
             epsilon_for(k, cfg));
}

void apply_rows(const optimizer_config& cfg, float* table, float* state,
                uint64_t* steps, std::size_t dim,
                const std::vector<uint64_t>& rows, const float* grads) {
  const auto count = rows.size();
  kind k = kind::assign;
  parse_kind(cfg.name, k);
  const auto per_row = state_size(cfg, dim);
  // Rows lie far apart in a large table: fetch a few ahead, every line of
  // them (docs/benchmarks.md, "Every line of a row fetched ahead").
  constexpr std::size_t ahead = 8;
  if (k == kind::assign
      || (k == kind::accumulate && cfg.rescale_grad == 1.0f
          && !(cfg.clip_gradient > 0.0f))) {
    // No state, no step size, no arithmetic that rounds (w = g, w + g):
    // plain loops, the same values as apply_kind's with no call and no
    // Eigen map per row of a few floats.
    const bool adds = k == kind::accumulate;
    for (std::size_t i = 0; i < count; ++i) {
      if (i + ahead < count)
        fetch_row(table, state, steps, dim, per_row, rows[i + ahead]);
      float* w = table + rows[i] * dim;
      const float* g = grads + i * dim;
      if (adds)
        for (std::size_t j = 0; j < dim; ++j)
          w[j] += g[j];
      else
        for (std::size_t j = 0; j < dim; ++j)
          w[j] = g[j];
      ++steps[rows[i]];
    }
    return;
  }
  const bool sized = uses_step_size(k);
  step_sizes sizes{k, cfg};
  const float eps = epsilon_for(k, cfg);
  for (std::size_t i = 0; i < count; ++i) {
    if (i + ahead < count)
      fetch_row(table, state, steps, dim, per_row, rows[i + ahead]);
    auto r = rows[i];
    apply_kind(k, cfg, table + r * dim, grads + i * dim, state + r * per_row,
               dim, sized ? sizes(steps[r]) : 0.0f, eps);
    ++steps[r];
  }
}

void accumulate_into(float* dst, const float* src, std::size_t n) {
  const auto size = static_cast<Eigen::Index>(n);
  array_map{dst, size} += const_array_map{src, size};
}

void sum_into(float* out, const float* a, const float* b, std::size_t n) {
  const auto size = static_cast<Eigen::Index>(n);
  array_map{out, size} = const_array_map{a, size} + const_array_map{b, size};
}

} // namespace actorps::core
