// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// The cases a benchmark run measures: how the command line names them, how
// they travel to the worker processes, and the store settings and round
// plan every mode shares. CAF-free.

#include <cstdint>
#include <string>
#include <vector>

#include "core/compression.hpp"
#include "core/layout.hpp"
#include "runtime/kvstore.hpp"
#include "runtime/network.hpp"

namespace actorps::bench {

// One benchmark case: `keys` keys of `floats` floats each, pushed and pulled
// in every round.
struct bench_case {
  std::string name;
  uint32_t keys = 1;
  uint64_t floats = 0;
  // One push_pull request per round instead of a push and a pull.
  bool fused = false;
  // Priority cases (priority >= 0): each round pushes `backlog` floats at
  // priority 0, then pulls the one key of `floats` floats at `priority`; the
  // time is that pull's latency.
  int32_t priority = -1;
  uint64_t backlog = 0;
  // Compression of the case's pushes (set per key).
  compression comp{};
  // A row case (table_rows > 0): a row table of `table_rows` rows of
  // `floats` floats; each round push_rows then pull_rows of `keys` distinct
  // random rows (the same for every worker).
  uint64_t table_rows = 0;

  bool row_case() const {
    return table_rows > 0;
  }

  bool priority_case() const {
    return priority >= 0;
  }

  std::string round() const {
    if (row_case())
      return "rows";
    if (priority_case())
      return "prio" + std::to_string(priority);
    return fused ? "fused" : "split";
  }

  uint64_t payload_bytes() const {
    return uint64_t{keys} * floats * sizeof(float);
  }
};

// Store settings every mode uses.
struct tuning {
  uint64_t slice_floats = core::default_slice_floats;
  uint64_t max_inflight = store_options{}.max_bytes_in_flight;
  // Dist servers: each shard on a thread of its own.
  bool shard_threads = true;
  // Dist servers (ucx): server_options::inflight_bytes.
  uint64_t server_inflight = default_server_inflight_bytes;
};

struct round_plan {
  uint32_t warmup = 3;
  uint32_t rounds = 10;
  /// The cases of a run take turns round by round (--interleave) instead of
  /// running one after the other; no bytes on the wire nor server memory
  /// per case then.
  bool interleave = false;
};

// What --compression and --compressed-sizes ask for.
struct compressed_cases {
  std::string codecs;
  std::string sizes;
};

/// "4 KB", "64 MB": `bytes` in the largest unit that divides it.
std::string human_bytes(uint64_t bytes);

/// "4K", "256K", "4M", "64M", "100" (bytes): a positive multiple of 4 bytes.
bool parse_size(const std::string& text, uint64_t& bytes);

/// A whole number of at most 9 digits.
bool parse_count(const std::string& text, uint64_t& out);

/// The non-empty items of `text` between `sep`s.
std::vector<std::string> split(const std::string& text, char sep);

/// Builds the case list from --sizes ("4K,256K"), --many ("1000x1024",
/// keys x floats), --round, --backlog and the compressed cases; "none"
/// turns a list off. Returns an error text or an empty string.
std::string make_cases(const std::string& sizes, const std::string& many,
                       const std::string& rounds, const std::string& backlog,
                       const compressed_cases& compressed,
                       std::vector<bench_case>& out);

/// Adds the row cases of --rows ("10000000x16x1000": table rows x row size
/// x rows per round, comma-separated; "none": none). Returns an error text
/// or an empty string.
std::string add_row_cases(const std::string& rows,
                          std::vector<bench_case>& out);

/// Cases travel to the worker processes as
/// "keys:floats:fused:priority:backlog:codec:threshold:table_rows;...".
std::string encode_cases(const std::vector<bench_case>& cases);

/// The cases of `encode_cases`' text; malformed items are left out.
std::vector<bench_case> decode_cases(const std::string& text);

/// The weights `cases` leave on a server (every key and backlog), MB.
double weights_mb(const std::vector<bench_case>& cases);

} // namespace actorps::bench
