// SPDX-License-Identifier: BSD-3-Clause
// An optimizer's text form: parse_optimizer ("name=adam,lr=0.01") and
// to_string, its inverse.
#include "core/optimizer.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace actorps::core {

namespace {

// The float parameters by name (MXNet's short names too).
constexpr std::pair<const char*, float optimizer_config::*> float_params[] = {
  {"learning_rate", &optimizer_config::learning_rate},
  {"lr", &optimizer_config::learning_rate},
  {"momentum", &optimizer_config::momentum},
  {"weight_decay", &optimizer_config::weight_decay},
  {"wd", &optimizer_config::weight_decay},
  {"rescale_grad", &optimizer_config::rescale_grad},
  {"clip_gradient", &optimizer_config::clip_gradient},
  {"beta1", &optimizer_config::beta1},
  {"beta2", &optimizer_config::beta2},
  {"epsilon", &optimizer_config::epsilon},
  {"rho", &optimizer_config::rho},
  {"lr_factor", &optimizer_config::lr_factor},
  {"lr_final", &optimizer_config::lr_final},
};

// Splits "a=1,b=2" into items, trimming blanks around names and values.
std::vector<std::pair<std::string, std::string>>
split_items(const std::string& text, std::string& bad) {
  std::vector<std::pair<std::string, std::string>> items;
  auto trim = [](std::string x) {
    auto first = x.find_first_not_of(" \t");
    auto last = x.find_last_not_of(" \t");
    return first == std::string::npos ? std::string{}
                                      : x.substr(first, last - first + 1);
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    auto end = text.find(',', pos);
    if (end == std::string::npos)
      end = text.size();
    auto item = trim(text.substr(pos, end - pos));
    pos = end + 1;
    if (item.empty())
      continue;
    auto eq = item.find('=');
    if (eq == std::string::npos) {
      bad = item;
      return {};
    }
    items.emplace_back(trim(item.substr(0, eq)), trim(item.substr(eq + 1)));
  }
  return items;
}

bool parse_count(const std::string& text, uint64_t& out) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  errno = 0;
  char* end = nullptr;
  auto x = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE || end != text.c_str() + text.size())
    return false;
  out = x;
  return true;
}

bool parse_float(const std::string& text, float& out) {
  if (text.empty())
    return false;
  char* end = nullptr;
  auto x = std::strtof(text.c_str(), &end);
  if (end != text.c_str() + text.size())
    return false;
  out = x;
  return true;
}

} // namespace

status parse_optimizer(const std::string& text, optimizer_config& out) {
  auto fail = [](const std::string& what, const char* why) {
    return status{errc::bad_optimizer, "optimizer '" + what + "': " + why};
  };
  std::string bad;
  auto items = split_items(text, bad);
  if (!bad.empty())
    return fail(bad, "expected name=value");
  optimizer_config cfg;
  for (auto& [name, value] : items) {
    if (name == "name") {
      cfg.name = value;
      continue;
    }
    if (name == "lr_schedule") {
      cfg.lr_schedule = value;
      continue;
    }
    if (name == "lr_updates") {
      if (!parse_count(value, cfg.lr_updates))
        return fail("lr_updates=" + value, "expected a whole number");
      continue;
    }
    if (name == "ascent") {
      if (value == "1" || value == "true")
        cfg.ascent = true;
      else if (value == "0" || value == "false")
        cfg.ascent = false;
      else
        return fail("ascent=" + value, "expected 0, 1, true or false");
      continue;
    }
    float* field = nullptr;
    for (auto& [known, member] : float_params)
      if (name == known)
        field = &(cfg.*member);
    if (field == nullptr)
      return fail(name, "unknown parameter");
    if (!parse_float(value, *field))
      return fail(name + "=" + value, "not a number");
  }
  if (auto st = validate(cfg); !st.ok())
    return st;
  out = std::move(cfg);
  return {};
}

std::string to_string(const optimizer_config& cfg) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                ",learning_rate=%g,momentum=%g,weight_decay=%g,"
                "rescale_grad=%g,clip_gradient=%g,beta1=%g,beta2=%g,"
                "epsilon=%g,rho=%g,ascent=%d,lr_updates=%llu,lr_factor=%g,"
                "lr_final=%g",
                double(cfg.learning_rate), double(cfg.momentum),
                double(cfg.weight_decay), double(cfg.rescale_grad),
                double(cfg.clip_gradient), double(cfg.beta1), double(cfg.beta2),
                double(cfg.epsilon), double(cfg.rho), cfg.ascent ? 1 : 0,
                static_cast<unsigned long long>(cfg.lr_updates),
                double(cfg.lr_factor), double(cfg.lr_final));
  // Names are arbitrary text (and may be long or invalid): not via the
  // fixed buffer.
  return "name=" + cfg.name + buf + ",lr_schedule=" + cfg.lr_schedule;
}

} // namespace actorps::core
