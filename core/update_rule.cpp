// SPDX-License-Identifier: BSD-3-Clause
#include "core/update_rule.hpp"

#include <utility>

namespace actorps::core {

void local_hooks::name_key(uint32_t id, const std::string& name) {
  std::lock_guard<std::mutex> guard{mtx_};
  names_[id] = name;
}

void local_hooks::set_rule(update_rule rule) {
  std::shared_ptr<const update_rule> next;
  if (rule)
    next = std::make_shared<const update_rule>(std::move(rule));
  std::shared_ptr<const update_rule> old;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    old = std::move(rule_);
    rule_ = next;
    has_rule_.store(next != nullptr, std::memory_order_release);
  }
  // `old` goes here, outside the lock (its captures may take other locks).
}

std::shared_ptr<const update_rule> local_hooks::rule() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return rule_;
}

std::string local_hooks::key_name(uint32_t id) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = names_.find(id);
  return i != names_.end() ? i->second : std::to_string(id);
}

} // namespace actorps::core
