// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <string>

/// Host names and addresses, free of CAF.
namespace actorps::core {

/// True for a name or address of this host's loopback interface
/// ("localhost", 127.x.y.z, "::1"): a job whose coordinator is there has
/// every node on this host.
inline bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

} // namespace actorps::core
