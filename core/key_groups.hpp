// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <actorps/core/errc.hpp>
#include <actorps/core/values.hpp>

/// Repeated keys in one call, as MXNet groups them (`GroupKVPairsPush`,
/// `GroupKVPairsPull`): the values pushed for one key are summed into one
/// push, and a key pulled into several outputs is pulled once and every
/// output gets its value. Free of CAF.
namespace actorps::core {

/// The keys of one call, each once.
struct key_groups {
  /// Every key once, in the order of its first appearance.
  std::vector<std::string> unique;
  /// For each position of the call, the index of its key in `unique`.
  std::vector<uint32_t> index;

  /// True if some key appears more than once.
  bool repeated() const noexcept {
    return unique.size() != index.size();
  }
};

/// Groups `keys`.
key_groups group_keys(const std::vector<std::string>& keys);

/// Sums a pushed value: `data` holds the values of every position back to
/// back (position i has `sizes[g.index[i]]` floats; pieces in order and
/// contiguous); the result holds one value per unique key, back to back, the
/// values of a repeated key summed in the order they were given. Fails with
/// `shape_mismatch` when `data` does not hold exactly that many floats.
status sum_groups(const key_groups& g, const std::vector<uint64_t>& sizes,
                  const float_parts& data, float_parts& out);

/// The reverse for a pulled value: `x` holds one value per unique key back to
/// back (`sizes` as above; every piece inside one key's range); the result
/// holds the value of every position back to back, sharing `x`'s buffers
/// (nothing is copied).
float_parts expand_groups(const key_groups& g,
                          const std::vector<uint64_t>& sizes, float_parts x);

} // namespace actorps::core
