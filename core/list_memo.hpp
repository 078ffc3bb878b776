// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

/// What the last lists of key names resolved to. A training loop names the
/// same keys in every step (a push and a pull of one list, or two lists that
/// alternate), and finding a list again by comparing its names in order
/// reads them sequentially, where looking each name up in a hash table
/// misses the cache once per key on large models (10000 keys). Free of CAF.
namespace actorps::core {

namespace detail {

template <class U>
inline U load(const char* p) noexcept {
  U x;
  std::memcpy(&x, p, sizeof(U));
  return x;
}

// Whether `a` and `b` (`n` bytes each) are equal: names of up to 16 bytes
// compared in two overlapping words, without a call to memcmp (which took
// twice as long as this on lists of 10000 short names).
inline bool same_bytes(const char* a, const char* b, std::size_t n) noexcept {
  if (n > 16)
    return std::memcmp(a, b, n) == 0;
  if (n >= 8)
    return ((load<uint64_t>(a) ^ load<uint64_t>(b))
            | (load<uint64_t>(a + n - 8) ^ load<uint64_t>(b + n - 8)))
           == 0;
  if (n >= 4)
    return ((load<uint32_t>(a) ^ load<uint32_t>(b))
            | (load<uint32_t>(a + n - 4) ^ load<uint32_t>(b + n - 4)))
           == 0;
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i])
      return false;
  return true;
}

} // namespace detail

/// Whether two lists hold the same names in the same order.
inline bool same_names(const std::vector<std::string>& a,
                       const std::vector<std::string>& b) noexcept {
  if (a.size() != b.size())
    return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size()
        || !detail::same_bytes(a[i].data(), b[i].data(), a[i].size()))
      return false;
  return true;
}

/// A list of names shared by whoever holds it, never changed once made: a
/// store handle passes the list it resolved to its worker without a copy,
/// and the worker finds it again by its address.
using shared_names_ptr = std::shared_ptr<const std::vector<std::string>>;

/// `names` as a shared list.
inline shared_names_ptr share_names(std::vector<std::string> names) {
  return std::make_shared<const std::vector<std::string>>(std::move(names));
}

/// `V`: what a list resolved to (kept as it is).
template <class V>
class list_memo {
public:
  /// Shorter lists are neither kept nor looked for: hashing a few names
  /// costs less than keeping a copy of them.
  static constexpr std::size_t min_size = 16;

  /// What `names` resolved to when it was kept, if it is one of the last
  /// two lists kept (null otherwise).
  const V* find(const std::vector<std::string>& names) const {
    if (const auto* e = entry_of(names))
      return &e->values;
    return nullptr;
  }

  /// As `find`; a list kept as `names` itself is found without reading it.
  const V* find(const shared_names_ptr& names) const {
    if (!names || names->size() < min_size)
      return nullptr;
    for (auto& e : entries_)
      if (e.names == names)
        return &e.values;
    return find(*names);
  }

  /// As `find` of a shared list; one found by its names becomes the list
  /// kept for them (the same names), so that the next call naming it is
  /// found by its address. (A caller that dropped its list and made the
  /// same names again would otherwise have them compared on every call.)
  V* find_adopting(const shared_names_ptr& names) {
    if (!names || names->size() < min_size)
      return nullptr;
    for (auto& e : entries_)
      if (e.names == names)
        return &e.values;
    for (auto& e : entries_)
      if (e.names && same_names(*e.names, *names)) {
        e.names = names;
        return &e.values;
      }
    return nullptr;
  }

  /// The names kept with `values` (what `find` returned): their shared copy.
  shared_names_ptr names_of(const V* values) const {
    for (auto& e : entries_)
      if (&e.values == values)
        return e.names;
    return nullptr;
  }

  /// Keeps `values` for a copy of `names` in place of the older of the two
  /// lists; returns the copy (null for a short list, not kept).
  shared_names_ptr keep(const std::vector<std::string>& names, V values) {
    if (names.size() < min_size)
      return nullptr;
    auto copy = share_names(names);
    keep(copy, std::move(values));
    return copy;
  }

  /// Keeps `values` for `names` itself (shared, not copied); returns them
  /// as kept (null for a short list, not kept).
  V* keep(shared_names_ptr names, V values) {
    if (!names || names->size() < min_size)
      return nullptr;
    auto& e = entries_[next_];
    next_ = 1 - next_;
    e.names = std::move(names);
    e.values = std::move(values);
    return &e.values;
  }

  /// Forgets every list.
  void clear() {
    for (auto& e : entries_) {
      e.names = nullptr;
      e.values = V{};
    }
  }

private:
  struct entry {
    shared_names_ptr names;
    V values;
  };

  const entry* entry_of(const std::vector<std::string>& names) const {
    if (names.size() < min_size)
      return nullptr;
    for (auto& e : entries_)
      if (e.names && same_names(*e.names, names))
        return &e;
    return nullptr;
  }

  std::array<entry, 2> entries_;
  std::size_t next_ = 0;
};

} // namespace actorps::core
