// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <string_view>

/// Handling of the job token.
namespace actorps::core {

/// True if `a` equals `b`, taking the same time wherever they differ (the
/// time depends only on the longer length), so a peer cannot find the
/// token byte by byte by timing refusals.
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

} // namespace actorps::core
