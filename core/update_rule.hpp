// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

/// A local store's own update rule (MXNet's `_set_updater`): code of the
/// embedder's process that the shards run instead of the optimizer.
namespace actorps::core {

/// Updates `weight` (n floats) in place from the merged gradient `grad` of
/// key `key` (a sliced key: one slice at a time, a row table: row by row).
/// Runs on a shard's thread: it must not call the store.
using update_rule = std::function<void(
  const std::string& key, const float* grad, float* weight, std::size_t n)>;

/// Shared by a local store's coordinator (which names the keys it
/// declares), its shards (which run the rule) and its handles (which set
/// it). Thread-safe.
class local_hooks {
public:
  /// Key `id` is called `name` (the coordinator, at declaration).
  void name_key(uint32_t id, const std::string& name);

  /// The rule from now on; an empty one gives the optimizer back.
  void set_rule(update_rule rule);

  /// Whether a rule is set (a cheap check before `apply`).
  bool has_rule() const noexcept {
    return has_rule_.load(std::memory_order_acquire);
  }

  /// The rule now (null: none), kept alive while the caller holds it.
  std::shared_ptr<const update_rule> rule() const;

  /// The name of key `id` (its number if it was never named).
  std::string key_name(uint32_t id) const;

private:
  mutable std::mutex mtx_;
  std::unordered_map<uint32_t, std::string> names_;
  std::shared_ptr<const update_rule> rule_;
  std::atomic<bool> has_rule_{false};
};

} // namespace actorps::core
