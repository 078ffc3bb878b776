// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "runtime/kvstore.hpp"

namespace actorps::apps {

/// The synthetic job: every worker pushes (rank + 1) into every element of
/// every key once per round, with the accumulate rule, so after r rounds
/// every element holds exactly r * W * (W + 1) / 2.
struct synthetic_options {
  uint32_t keys = 4;
  uint64_t size = 100000;
  uint32_t rounds = 50;
  /// Sync stores: check the exact value after every round too.
  bool check_rounds = true;
  /// Do not check values (some workers may die on purpose).
  bool tolerate_deaths = false;
  /// Check the keys' values (off when pushes are lossy: 2-bit compression).
  /// The barrier's arrival count is always checked, uncompressed.
  bool check_values = true;
  /// Print "rank R round r" after each round.
  bool progress = false;
  /// Least time between the starts of two rounds, in ms (0: none): a steady
  /// load, e.g. while servers are killed on purpose.
  uint32_t round_ms = 0;
  /// After this many rounds (0: never), say so ("rank R holds after N of M
  /// rounds") and wait for a line on standard input, or its end, before
  /// going on: a test's way to keep a worker mid-job as long as it needs.
  uint32_t hold_after = 0;
};

/// Runs the job on one worker handle; returns an empty string on success or
/// what went wrong. Collective: every worker of the store must run it.
std::string run_synthetic(kvstore& kv, const synthetic_options& opts,
                          std::ostream& out);

} // namespace actorps::apps
