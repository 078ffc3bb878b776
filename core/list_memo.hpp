// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

/// What the last lists of key names resolved to. A training loop names the
/// same keys in every step (a push and a pull of one list, or two lists that
/// alternate), and finding a list again by comparing its names in order
/// reads them sequentially, where looking each name up in a hash table
/// misses the cache once per key on large models (10000 keys). Free of CAF.
namespace actorps::core {

template <class T>
class list_memo {
public:
  /// Shorter lists are neither kept nor looked for: hashing a few names
  /// costs less than keeping a copy of them.
  static constexpr std::size_t min_size = 16;

  /// What `names` resolved to when it was kept, if it is one of the last
  /// two lists kept (null otherwise).
  const std::vector<T>* find(const std::vector<std::string>& names) const {
    if (names.size() < min_size)
      return nullptr;
    for (auto& e : entries_)
      if (e.names == names)
        return &e.values;
    return nullptr;
  }

  /// Keeps `values` for `names` in place of the older of the two lists.
  void keep(const std::vector<std::string>& names,
            const std::vector<T>& values) {
    if (names.size() < min_size)
      return;
    auto& e = entries_[next_];
    next_ = 1 - next_;
    e.names = names;
    e.values = values;
  }

  /// Forgets every list.
  void clear() {
    for (auto& e : entries_) {
      e.names.clear();
      e.values.clear();
    }
  }

private:
  struct entry {
    std::vector<std::string> names;
    std::vector<T> values;
  };

  std::array<entry, 2> entries_;
  std::size_t next_ = 0;
};

} // namespace actorps::core
