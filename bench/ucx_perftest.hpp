// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// The UCX yardstick: Debian's ucx_perftest (ucx-utils) between two
// processes on loopback, as the UCX data plane's ceiling on this machine.
// Free of CAF.

#include <chrono>
#include <string>
#include <vector>

#include "bench/limits.hpp"

namespace actorps::bench {

/// Runs ucx_perftest, when it is on the PATH, over TCP (UCX_TLS=tcp) and
/// over shared memory (UCX_TLS=posix,sysv,cma): one-way `tag_bw` at each of
/// `sizes` (bytes) and `tag_lat` at 4 KB, each a server and a client
/// process on a free loopback port. Adds the figures to `out`; a run that
/// fails is reported on stderr and leaves a gap. Returns an error text, or
/// an empty string (also when ucx_perftest, env or stdbuf is missing: no
/// figures, and the report shows none).
std::string measure_ucx_perftest(const std::vector<size_t>& sizes, bool quick,
                                 machine_limits& out,
                                 std::chrono::seconds timeout);

} // namespace actorps::bench
