// SPDX-License-Identifier: BSD-3-Clause
#include "core/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

using actorps::errc;
using actorps::optimizer_config;
namespace core = actorps::core;

namespace {

// Float32 results are compared with a double-precision evaluation of the
// documented formulas: relative 1e-5 (a few dozen float ulps after three
// steps), plus an absolute 1e-6 for values that cancel to almost zero.
constexpr double rel_tol = 1e-5;
constexpr double abs_tol = 1e-6;

constexpr std::size_t n = 5;
constexpr uint64_t steps = 3;

const std::vector<float> initial_weights = {0.5f, -1.25f, 2.0f, 0.0f, -0.75f};

// Gradients vary in size and sign from step to step; with the scales used
// below, some elements exceed every clip bound and some stay inside.
std::vector<float> gradient(uint64_t step) {
  static const float base[n] = {0.3f, -0.8f, 1.5f, -0.05f, 0.6f};
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) {
    float sign = (step + i) % 2 == 0 ? 1.0f : -1.0f;
    g[i] = base[i] * (1.0f + 0.5f * static_cast<float>(step)) * sign;
  }
  return g;
}

struct outcome {
  std::vector<double> weights;
  std::vector<double> state;
};

// Runs `steps` updates through the library, in float32.
outcome run_library(const optimizer_config& cfg) {
  std::vector<float> w = initial_weights;
  std::vector<float> state(core::state_size(cfg, n), 0.0f);
  for (uint64_t t = 0; t < steps; ++t) {
    auto g = gradient(t);
    core::apply_update(cfg, w.data(), g.data(), state.data(), n, t);
  }
  return {{w.begin(), w.end()}, {state.begin(), state.end()}};
}

// Evaluates the formulas of optimizer.hpp in double precision, element by
// element, independently of the library.
outcome run_reference(const optimizer_config& cfg) {
  const double lr = cfg.learning_rate;
  const double mu = cfg.momentum;
  const double wd = cfg.weight_decay;
  const double b1 = cfg.beta1;
  const double b2 = cfg.beta2;
  // MXNet's defaults when unset.
  const double eps = cfg.epsilon > 0 ? cfg.epsilon
                                     : (cfg.name == "adagrad" ? 1e-7 : 1e-8);
  const double rho = cfg.rho;
  const double clip = cfg.clip_gradient;
  std::vector<double> w(initial_weights.begin(), initial_weights.end());
  std::vector<double> s1(n, 0.0);
  std::vector<double> s2(n, 0.0);
  for (uint64_t step = 0; step < steps; ++step) {
    auto raw = gradient(step);
    for (std::size_t i = 0; i < n; ++i) {
      if (cfg.name == "assign") {
        w[i] = raw[i];
        continue;
      }
      if (cfg.name == "accumulate" || cfg.name == "test") {
        // Rescaled and clipped, never negated (MXNet's Test optimizer).
        double x = cfg.rescale_grad * static_cast<double>(raw[i]);
        if (clip > 0)
          x = std::min(std::max(x, -clip), clip);
        w[i] += x;
        continue;
      }
      double g = cfg.rescale_grad * static_cast<double>(raw[i]);
      if (cfg.ascent)
        g = -g;
      auto clipped = [&](double x) {
        return clip > 0 ? std::min(std::max(x, -clip), clip) : x;
      };
      // MXNet clips after weight decay for adam and rmsprop only.
      if (cfg.name != "adam" && cfg.name != "rmsprop")
        g = clipped(g);
      if (cfg.name == "sgd" && mu == 0) {
        w[i] = w[i] - lr * (g + wd * w[i]);
      } else if (cfg.name == "sgd") {
        s1[i] = mu * s1[i] - lr * (g + wd * w[i]);
        w[i] = w[i] + s1[i];
      } else if (cfg.name == "nesterov") {
        double d = g + wd * w[i];
        s1[i] = mu * s1[i] + d;
        w[i] = w[i] - lr * (d + mu * s1[i]);
      } else if (cfg.name == "adagrad") {
        s1[i] = s1[i] + g * g;
        w[i] = w[i] - lr * (g / std::sqrt(s1[i] + eps) + wd * w[i]);
      } else if (cfg.name == "adam") {
        double d = clipped(g + wd * w[i]);
        s1[i] = b1 * s1[i] + (1 - b1) * d;
        s2[i] = b2 * s2[i] + (1 - b2) * d * d;
        double t = static_cast<double>(step + 1);
        double lr_t = lr * std::sqrt(1 - std::pow(b2, t))
                      / (1 - std::pow(b1, t));
        w[i] = w[i] - lr_t * s1[i] / (std::sqrt(s2[i]) + eps);
      } else if (cfg.name == "rmsprop") {
        double d = clipped(g + wd * w[i]);
        s1[i] = rho * s1[i] + (1 - rho) * d * d;
        w[i] = w[i] - lr * d / std::sqrt(s1[i] + eps);
      } else {
        FAIL("no reference for optimizer " << cfg.name);
      }
    }
  }
  outcome result{w, {}};
  bool sgd_with_momentum = cfg.name == "sgd" && mu > 0;
  if (sgd_with_momentum || cfg.name == "nesterov" || cfg.name == "adagrad"
      || cfg.name == "rmsprop")
    result.state = s1;
  if (cfg.name == "adam") {
    result.state = s1;
    result.state.insert(result.state.end(), s2.begin(), s2.end());
  }
  return result;
}

void check_close(const std::vector<double>& actual,
                 const std::vector<double>& expected, const char* what) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    INFO(what << "[" << i << "]");
    CHECK(actual[i] == Approx(expected[i]).epsilon(rel_tol).margin(abs_tol));
  }
}

struct formula_case {
  const char* label;
  std::function<void(optimizer_config&)> setup;
};

optimizer_config make_config(const std::string& name) {
  optimizer_config cfg;
  cfg.name = name;
  return cfg;
}

} // namespace

TEST_CASE("optimizer: updates follow the documented formulas", "[core]") {
  // Between them, the cases exercise weight decay, rescaling and clipping
  // for every optimizer that has them, both in descent and in ascent.
  const std::vector<formula_case> cases = {
    {"assign (ignores rescale and clip)",
     [](optimizer_config& c) {
       c.name = "assign";
       c.rescale_grad = 2.0f;
       c.clip_gradient = 0.1f;
     }},
    {"accumulate (rescales and clips)",
     [](optimizer_config& c) {
       c.name = "accumulate";
       c.rescale_grad = 0.5f;
       c.clip_gradient = 0.1f;
     }},
    {"accumulate (rescales)",
     [](optimizer_config& c) {
       c.name = "accumulate";
       c.rescale_grad = 2.0f;
     }},
    {"test (MXNet's Test optimizer: rescales)",
     [](optimizer_config& c) {
       c.name = "test";
       c.rescale_grad = 2.0f;
     }},
    {"sgd",
     [](optimizer_config& c) {
       c.name = "sgd";
       c.learning_rate = 0.1f;
     }},
    {"sgd with weight decay, rescale and clip",
     [](optimizer_config& c) {
       c.name = "sgd";
       c.learning_rate = 0.1f;
       c.weight_decay = 0.05f;
       c.rescale_grad = 0.5f;
       c.clip_gradient = 0.4f;
     }},
    {"sgd with momentum",
     [](optimizer_config& c) {
       c.name = "sgd";
       c.learning_rate = 0.1f;
       c.momentum = 0.9f;
       c.weight_decay = 0.01f;
       c.rescale_grad = 2.0f;
     }},
    {"nesterov",
     [](optimizer_config& c) {
       c.name = "nesterov";
       c.learning_rate = 0.05f;
       c.momentum = 0.9f;
       c.weight_decay = 0.1f;
       c.clip_gradient = 0.5f;
     }},
    {"nesterov without momentum",
     [](optimizer_config& c) {
       c.name = "nesterov";
       c.learning_rate = 0.05f;
       c.momentum = 0.0f;
     }},
    {"adagrad",
     [](optimizer_config& c) {
       c.name = "adagrad";
       c.learning_rate = 0.1f;
       c.epsilon = 1e-6f;
       c.weight_decay = 0.01f;
       c.rescale_grad = 2.0f;
       c.clip_gradient = 1.0f;
     }},
    {"adam",
     [](optimizer_config& c) {
       c.name = "adam";
       c.learning_rate = 0.01f;
       c.weight_decay = 0.001f;
       c.clip_gradient = 0.7f;
     }},
    {"adam with small betas and rescale",
     [](optimizer_config& c) {
       c.name = "adam";
       c.learning_rate = 0.02f;
       c.beta1 = 0.5f;
       c.beta2 = 0.75f;
       c.epsilon = 1e-4f;
       c.rescale_grad = 0.25f;
     }},
    {"rmsprop",
     [](optimizer_config& c) {
       c.name = "rmsprop";
       c.learning_rate = 0.01f;
       c.rho = 0.9f;
       c.weight_decay = 0.02f;
       c.rescale_grad = 0.25f;
       c.clip_gradient = 0.3f;
     }},
    // Weight decay large enough that clipping before or after it differs.
    {"rmsprop clipping after weight decay, default epsilon",
     [](optimizer_config& c) {
       c.name = "rmsprop";
       c.learning_rate = 0.01f;
       c.weight_decay = 1.0f;
       c.clip_gradient = 0.5f;
     }},
    {"adam clipping after weight decay",
     [](optimizer_config& c) {
       c.name = "adam";
       c.learning_rate = 0.01f;
       c.weight_decay = 1.0f;
       c.clip_gradient = 0.5f;
     }},
    {"adagrad with MXNet's default epsilon",
     [](optimizer_config& c) {
       c.name = "adagrad";
       c.learning_rate = 0.1f;
     }},
  };
  for (const auto& c : cases) {
    for (bool ascent : {false, true}) {
      DYNAMIC_SECTION(c.label << (ascent ? ", ascent" : ", descent")) {
        optimizer_config cfg;
        c.setup(cfg);
        cfg.ascent = ascent;
        REQUIRE(core::validate(cfg).ok());
        auto actual = run_library(cfg);
        auto expected = run_reference(cfg);
        check_close(actual.weights, expected.weights, "weights");
        check_close(actual.state, expected.state, "state");
      }
    }
  }
}

TEST_CASE("optimizer: gradient preprocessing", "[core]") {
  auto cfg = make_config("sgd");
  cfg.learning_rate = 1.0f;
  std::vector<float> g = {10.0f, -10.0f, 0.25f};
  std::vector<float> w(3, 0.0f);
  SECTION("clipping bounds each element") {
    cfg.clip_gradient = 0.5f;
    core::apply_update(cfg, w.data(), g.data(), nullptr, 3, 0);
    CHECK(w == std::vector<float>{-0.5f, 0.5f, -0.25f});
  }
  SECTION("ascent flips the sign before clipping") {
    cfg.clip_gradient = 0.5f;
    cfg.ascent = true;
    core::apply_update(cfg, w.data(), g.data(), nullptr, 3, 0);
    CHECK(w == std::vector<float>{0.5f, -0.5f, 0.25f});
  }
  SECTION("rescaling comes before clipping") {
    cfg.clip_gradient = 0.5f;
    cfg.rescale_grad = 0.01f;
    core::apply_update(cfg, w.data(), g.data(), nullptr, 3, 0);
    CHECK(w[0] == Approx(-0.1f));
    CHECK(w[1] == Approx(0.1f));
    CHECK(w[2] == Approx(-0.0025f));
  }
  SECTION("clip_gradient <= 0 disables clipping") {
    cfg.clip_gradient = 0.0f;
    core::apply_update(cfg, w.data(), g.data(), nullptr, 3, 0);
    CHECK(w == std::vector<float>{-10.0f, 10.0f, -0.25f});
  }
}

TEST_CASE("optimizer: adam uses step + 1 for bias correction", "[core]") {
  auto cfg = make_config("adam");
  cfg.learning_rate = 0.1f;
  std::vector<float> w = {1.0f, -2.0f};
  std::vector<float> g = {0.5f, 0.25f};
  std::vector<float> state(core::state_size(cfg, 2), 0.0f);
  const uint64_t step = 10;
  core::apply_update(cfg, w.data(), g.data(), state.data(), 2, step);
  const double b1 = cfg.beta1;
  const double b2 = cfg.beta2;
  const double t = step + 1;
  const double lr_t = double{cfg.learning_rate} * std::sqrt(1 - std::pow(b2, t))
                      / (1 - std::pow(b1, t));
  const double w0[] = {1.0, -2.0};
  for (std::size_t i = 0; i < 2; ++i) {
    double gi = g[i];
    double m = (1 - b1) * gi;
    double v = (1 - b2) * gi * gi;
    double expected = w0[i] - lr_t * m / (std::sqrt(v) + core::epsilon_of(cfg));
    CHECK(w[i] == Approx(expected).epsilon(rel_tol));
    CHECK(state[i] == Approx(m).epsilon(rel_tol));
    CHECK(state[2 + i] == Approx(v).epsilon(rel_tol));
  }
}

TEST_CASE("optimizer: empty slices are a no-op", "[core]") {
  for (auto name : {"assign", "accumulate", "sgd", "nesterov", "adagrad",
                    "adam", "rmsprop"}) {
    auto cfg = make_config(name);
    core::apply_update(cfg, nullptr, nullptr, nullptr, 0, 0);
    CHECK(core::state_size(cfg, 0) == 0);
  }
}

TEST_CASE("optimizer: accumulate_into adds element-wise", "[core]") {
  std::vector<float> dst = {1.0f, -2.0f, 0.5f, 0.0f};
  std::vector<float> src = {0.25f, 2.0f, -1.5f, 3.0f};
  SECTION("all elements") {
    core::accumulate_into(dst.data(), src.data(), dst.size());
    CHECK(dst == std::vector<float>{1.25f, 0.0f, -1.0f, 3.0f});
  }
  SECTION("a prefix only") {
    core::accumulate_into(dst.data(), src.data(), 2);
    CHECK(dst == std::vector<float>{1.25f, 0.0f, 0.5f, 0.0f});
  }
  SECTION("nothing") {
    core::accumulate_into(dst.data(), src.data(), 0);
    CHECK(dst == std::vector<float>{1.0f, -2.0f, 0.5f, 0.0f});
  }
}

TEST_CASE("optimizer: state_size per optimizer", "[core]") {
  const std::size_t k = 7;
  CHECK(core::state_size(make_config("assign"), k) == 0);
  CHECK(core::state_size(make_config("accumulate"), k) == 0);
  CHECK(core::state_size(make_config("sgd"), k) == 0);
  auto heavy_ball = make_config("sgd");
  heavy_ball.momentum = 0.9f;
  CHECK(core::state_size(heavy_ball, k) == k);
  CHECK(core::state_size(make_config("nesterov"), k) == k);
  auto nesterov_no_momentum = make_config("nesterov");
  nesterov_no_momentum.momentum = 0.0f;
  CHECK(core::state_size(nesterov_no_momentum, k) == k);
  CHECK(core::state_size(make_config("adagrad"), k) == k);
  CHECK(core::state_size(make_config("adam"), k) == 2 * k);
  CHECK(core::state_size(make_config("rmsprop"), k) == k);
}

TEST_CASE("optimizer: epsilon defaults are MXNet's", "[core]") {
  optimizer_config cfg;
  cfg.name = "adagrad";
  CHECK(core::epsilon_of(cfg) == 1e-7f);
  cfg.name = "adam";
  CHECK(core::epsilon_of(cfg) == 1e-8f);
  cfg.name = "rmsprop";
  CHECK(core::epsilon_of(cfg) == 1e-8f);
  cfg.epsilon = 1e-3f;
  CHECK(core::epsilon_of(cfg) == 1e-3f);
  CHECK(core::validate(cfg).ok());
  cfg.epsilon = -1.0f;
  CHECK(core::validate(cfg).ok());
}

TEST_CASE("optimizer: validate accepts good configurations", "[core]") {
  SECTION("defaults of every optimizer") {
    for (auto name : {"assign", "accumulate", "sgd", "nesterov", "adagrad",
                      "adam", "rmsprop"}) {
      INFO(name);
      CHECK(core::validate(make_config(name)).ok());
    }
  }
  SECTION("boundary values") {
    auto cfg = make_config("adam");
    cfg.momentum = 0.0f;
    cfg.weight_decay = 0.0f;
    cfg.beta1 = 0.0f;
    cfg.beta2 = 0.0f;
    cfg.rho = 0.0f;
    cfg.clip_gradient = 0.0f;
    CHECK(core::validate(cfg).ok());
    cfg.clip_gradient = -5.0f;
    CHECK(core::validate(cfg).ok());
    cfg.momentum = 0.999f;
    cfg.learning_rate = std::numeric_limits<float>::denorm_min();
    CHECK(core::validate(cfg).ok());
  }
  SECTION("nesterov without momentum") {
    auto cfg = make_config("nesterov");
    cfg.momentum = 0.0f;
    CHECK(core::validate(cfg).ok());
  }
  SECTION("assign and accumulate ignore the learning rate, if finite") {
    for (auto name : {"assign", "accumulate"}) {
      auto cfg = make_config(name);
      cfg.learning_rate = -1.0f;
      CHECK(core::validate(cfg).ok());
      // CAF 0.17's float encoder never returns on an infinity, so no
      // configuration may hold one (found by fuzzing).
      cfg.learning_rate = std::numeric_limits<float>::infinity();
      CHECK(core::validate(cfg).code == errc::bad_optimizer);
    }
  }
}

TEST_CASE("optimizer: validate rejects bad configurations", "[core]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  SECTION("unknown names") {
    for (auto name : {"foo", "", "SGD", "adam "}) {
      auto st = core::validate(make_config(name));
      CHECK(st.code == errc::bad_optimizer);
      CHECK_THAT(st.message, Catch::Contains(std::string{"'"} + name + "'"));
      CHECK_THAT(st.message,
                 Catch::Contains("expected one of assign, accumulate, sgd, "
                                 "nesterov, adagrad, adam, rmsprop"));
    }
  }
  SECTION("the message names parameter and value") {
    auto cfg = make_config("sgd");
    cfg.learning_rate = -1.0f;
    auto st = core::validate(cfg);
    CHECK(st.code == errc::bad_optimizer);
    CHECK(st.message
          == "set_optimizer: learning_rate must be finite and > 0, got -1");
  }
  SECTION("each bad parameter") {
    struct bad_value {
      const char* param;
      float optimizer_config::*field;
      std::vector<float> values;
    };
    const std::vector<bad_value> table = {
      {"learning_rate",
       &optimizer_config::learning_rate,
       {0.0f, -1.0f, inf, -inf, nan}},
      {"momentum", &optimizer_config::momentum, {-0.1f, 1.0f, 1.5f, inf, nan}},
      {"weight_decay", &optimizer_config::weight_decay, {-0.01f, inf, nan}},
      {"rescale_grad",
       &optimizer_config::rescale_grad,
       {0.0f, -1.0f, inf, nan}},
      {"clip_gradient", &optimizer_config::clip_gradient, {inf, -inf, nan}},
      {"beta1", &optimizer_config::beta1, {-0.1f, 1.0f, nan}},
      {"beta2", &optimizer_config::beta2, {-0.1f, 1.0f, nan}},
      {"epsilon", &optimizer_config::epsilon, {0.0f, inf, -inf, nan}},
      {"rho", &optimizer_config::rho, {-0.1f, 1.0f, nan}},
    };
    for (const auto& entry : table) {
      for (float value : entry.values) {
        for (auto name : {"sgd", "nesterov", "adagrad", "adam", "rmsprop"}) {
          auto cfg = make_config(name);
          cfg.*entry.field = value;
          INFO(name << " with " << entry.param << " = " << value);
          auto st = core::validate(cfg);
          CHECK(st.code == errc::bad_optimizer);
          CHECK_THAT(st.message, Catch::StartsWith("set_optimizer: ")
                                   && Catch::Contains(entry.param));
        }
      }
    }
  }
  SECTION("NaN is rejected even where the parameter is unused") {
    for (auto name : {"assign", "accumulate"}) {
      auto cfg = make_config(name);
      cfg.learning_rate = nan;
      auto st = core::validate(cfg);
      CHECK(st.code == errc::bad_optimizer);
      CHECK_THAT(st.message, Catch::Contains("learning_rate"));
      cfg = make_config(name);
      cfg.rho = nan;
      st = core::validate(cfg);
      CHECK(st.code == errc::bad_optimizer);
      CHECK_THAT(st.message, Catch::Contains("rho"));
    }
  }
}

TEST_CASE("optimizer: parse_optimizer reads what to_string writes", "[core]") {
  optimizer_config cfg;
  SECTION("a full round trip") {
    optimizer_config a;
    a.name = "adam";
    a.learning_rate = 0.001f;
    a.weight_decay = 0.25f;
    a.clip_gradient = 5.0f;
    a.ascent = true;
    a.lr_schedule = "factor";
    a.lr_updates = 12345678901ull;
    a.lr_factor = 0.5f;
    a.lr_final = 0.0001f;
    a.momentum = 0.75f;
    a.rescale_grad = 0.125f;
    a.beta1 = 0.8f;
    a.beta2 = 0.95f;
    a.epsilon = 1e-6f;
    a.rho = 0.85f;
    REQUIRE(core::parse_optimizer(core::to_string(a), cfg).ok());
    CHECK(cfg.momentum == 0.75f);
    CHECK(cfg.rescale_grad == 0.125f);
    CHECK(cfg.beta1 == 0.8f);
    CHECK(cfg.beta2 == 0.95f);
    CHECK(cfg.epsilon == 1e-6f);
    CHECK(cfg.rho == 0.85f);
    CHECK(cfg.name == "adam");
    CHECK(cfg.learning_rate == 0.001f);
    CHECK(cfg.weight_decay == 0.25f);
    CHECK(cfg.clip_gradient == 5.0f);
    CHECK(cfg.ascent);
    CHECK(cfg.lr_schedule == "factor");
    CHECK(cfg.lr_updates == 12345678901ull);
    CHECK(cfg.lr_factor == 0.5f);
    CHECK(cfg.lr_final == 0.0001f);
  }
  SECTION("short names, blanks and defaults") {
    REQUIRE(
      core::parse_optimizer(" name = sgd , lr=0.5, momentum=0.9, wd=0.25 ", cfg)
        .ok());
    CHECK(cfg.name == "sgd");
    CHECK(cfg.learning_rate == 0.5f);
    CHECK(cfg.weight_decay == 0.25f);
    CHECK(cfg.momentum == 0.9f);
    CHECK(cfg.beta1 == optimizer_config{}.beta1);
  }
  SECTION("errors name the item and leave the output alone") {
    cfg.name = "untouched";
    auto st = core::parse_optimizer("name=sgd,speed=3", cfg);
    CHECK(st.code == errc::bad_optimizer);
    CHECK(st.message == "optimizer 'speed': unknown parameter");
    st = core::parse_optimizer("name=sgd,lr=fast", cfg);
    CHECK(st.message == "optimizer 'lr=fast': not a number");
    st = core::parse_optimizer("name=sgd,lr", cfg);
    CHECK(st.code == errc::bad_optimizer);
    st = core::parse_optimizer("name=sgd,lr=-1", cfg);
    CHECK(st.message.find("learning_rate") != std::string::npos);
    st = core::parse_optimizer("name=sgd,ascent=maybe", cfg);
    CHECK(st.code == errc::bad_optimizer);
    for (auto bad : {"-5", "1.5", "", "99999999999999999999999"}) {
      st = core::parse_optimizer(
        std::string{"name=sgd,lr_schedule=cosine,lr_updates="} + bad, cfg);
      CHECK(st.code == errc::bad_optimizer);
      CHECK_THAT(st.message, Catch::Contains("lr_updates"));
    }
    st = core::parse_optimizer("name=sgd,lr_schedule=linear,lr_updates=5", cfg);
    CHECK_THAT(st.message, Catch::Contains("linear"));
    CHECK(cfg.name == "untouched");
  }
}

TEST_CASE("optimizer: learning-rate schedules", "[core]") {
  optimizer_config cfg;
  cfg.name = "sgd";
  cfg.learning_rate = 0.8f;
  SECTION("constant: learning_rate at every update") {
    for (uint64_t t : {0ull, 1ull, 1000000ull})
      CHECK(core::scheduled_learning_rate(cfg, t) == 0.8f);
  }
  SECTION("factor: one decay every lr_updates updates, not below lr_final") {
    cfg.lr_schedule = "factor";
    cfg.lr_updates = 3;
    cfg.lr_factor = 0.5f;
    cfg.lr_final = 0.15f;
    REQUIRE(core::validate(cfg).ok());
    const float expected[] = {0.8f, 0.8f, 0.8f, 0.4f,  0.4f, 0.4f,
                              0.2f, 0.2f, 0.2f, 0.15f, 0.15f};
    for (uint64_t t = 0; t < std::size(expected); ++t) {
      INFO("update " << t);
      CHECK(core::scheduled_learning_rate(cfg, t) == Approx(expected[t]));
    }
  }
  SECTION("cosine: half a cosine from learning_rate to lr_final") {
    cfg.lr_schedule = "cosine";
    cfg.lr_updates = 8;
    cfg.lr_final = 0.2f;
    REQUIRE(core::validate(cfg).ok());
    const double pi = std::acos(-1.0);
    for (uint64_t step = 0; step <= 10; ++step) {
      // MXNet's CosineScheduler sees num_update = step + 1.
      auto t = step + 1;
      INFO("update " << step);
      double expected = t >= 8 ? 0.2
                               : 0.2 + 0.3 * (1 + std::cos(pi * double(t) / 8));
      CHECK(core::scheduled_learning_rate(cfg, step)
            == Approx(expected).epsilon(1e-6));
    }
  }
  SECTION("apply_update uses the scheduled rate of its step") {
    cfg.lr_schedule = "factor";
    cfg.lr_updates = 1;
    cfg.lr_factor = 0.25f;
    float w = 1.0f;
    const float g = 2.0f;
    core::apply_update(cfg, &w, &g, nullptr, 1, 0); // lr 0.8
    CHECK(w == Approx(1.0f - 1.6f));
    core::apply_update(cfg, &w, &g, nullptr, 1, 2); // lr 0.05
    CHECK(w == Approx(1.0f - 1.6f - 0.1f));
  }
  SECTION("validate names the offending schedule parameter") {
    struct bad_case {
      const char* param;
      std::function<void(optimizer_config&)> set;
    };
    const bad_case cases[] = {
      {"lr_schedule", [](auto& c) { c.lr_schedule = "step"; }},
      {"lr_updates", [](auto& c) { c.lr_schedule = "cosine"; }},
      {"lr_updates", [](auto& c) { c.lr_schedule = "factor"; }},
      {"lr_factor", [](auto& c) { c.lr_factor = 0.0f; }},
      {"lr_factor", [](auto& c) { c.lr_factor = 1.5f; }},
      {"lr_factor",
       [](auto& c) { c.lr_factor = std::numeric_limits<float>::quiet_NaN(); }},
      {"lr_final", [](auto& c) { c.lr_final = -0.1f; }},
      {"lr_final",
       [](auto& c) {
         c.lr_schedule = "cosine";
         c.lr_updates = 10;
         c.lr_final = 1.0f; // above learning_rate
       }},
    };
    for (const auto& entry : cases) {
      auto bad = cfg;
      entry.set(bad);
      auto st = core::validate(bad);
      INFO(entry.param);
      CHECK(st.code == errc::bad_optimizer);
      CHECK_THAT(st.message, Catch::Contains(entry.param));
    }
  }
}

TEST_CASE("optimizer: a slice longer than one part updates as its pieces "
          "would alone",
          "[core]") {
  // Updates run in parts of 2048 floats; a rule's second state block
  // (Adam's) lies a whole slice after the first, in every part. Pieces of
  // 1000 floats, each with state of its own, take the same vectorized
  // arithmetic: the same bits.
  const std::size_t n = 5000;
  const std::size_t dim = 3000;
  for (std::string name : {"sgd", "nesterov", "adagrad", "adam", "rmsprop"}) {
    DYNAMIC_SECTION(name) {
      optimizer_config cfg;
      cfg.name = name;
      cfg.momentum = name == "sgd" || name == "nesterov" ? 0.9f : 0.0f;
      cfg.weight_decay = 0.01f;
      auto blocks = core::state_size(cfg, 1);
      std::vector<float> w(n);
      std::vector<float> g(n);
      for (std::size_t i = 0; i < n; ++i) {
        w[i] = 0.001f * static_cast<float>(i % 97) - 0.05f;
        g[i] = 0.01f * static_cast<float>(i % 31) - 0.15f;
      }
      auto alone = w;
      const std::size_t piece = 1000;
      std::vector<float> state(core::state_size(cfg, n), 0.0f);
      std::vector<float> own(n * blocks, 0.0f);
      for (uint64_t step = 0; step < 3; ++step) {
        core::apply_update(cfg, w.data(), g.data(), state.data(), n, step);
        for (std::size_t at = 0; at < n; at += piece)
          core::apply_update(cfg, alone.data() + at, g.data() + at,
                             own.data() + at * blocks, piece, step);
      }
      for (std::size_t i = 0; i < n; ++i) {
        INFO("float " << i);
        REQUIRE(w[i] == alone[i]);
        auto at = i / piece * piece;
        for (std::size_t b = 0; b < blocks; ++b)
          REQUIRE(state[b * n + i] == own[at * blocks + b * piece + (i - at)]);
      }
      // A table's rows longer than a part: each row's state lies with it.
      std::vector<float> table(2 * dim);
      for (std::size_t i = 0; i < table.size(); ++i)
        table[i] = 0.002f * static_cast<float>(i % 53) - 0.05f;
      auto rows_alone = table;
      std::vector<float> row_state(2 * core::state_size(cfg, dim), 0.0f);
      std::vector<uint64_t> steps(2, 0);
      std::vector<float> grads(2 * dim);
      for (std::size_t i = 0; i < grads.size(); ++i)
        grads[i] = 0.01f * static_cast<float>(i % 29) - 0.14f;
      core::apply_rows(cfg, table.data(), row_state.data(), steps.data(), dim,
                       {1, 0}, grads.data());
      std::vector<float> one_state(core::state_size(cfg, dim), 0.0f);
      // Row 1 got the first dim gradients.
      core::apply_update(cfg, rows_alone.data() + dim, grads.data(),
                         one_state.data(), dim, 0);
      for (std::size_t i = 0; i < dim; ++i)
        REQUIRE(table[dim + i] == rows_alone[dim + i]);
      for (std::size_t i = 0; i < one_state.size(); ++i)
        REQUIRE(row_state[one_state.size() + i] == one_state[i]);
    }
  }
}
