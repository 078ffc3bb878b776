// SPDX-License-Identifier: BSD-3-Clause
#include "core/secret.hpp"

#include <algorithm>

namespace actorps::core {

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  // volatile: the compiler may not stop at the first difference.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  const auto n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    auto x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    auto y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

} // namespace actorps::core
