// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <set>
#include <string>

/// Who of a job's expected nodes has joined, for the line a coordinator
/// prints while it waits ("waiting for 1 of 2 workers (joined: 0) and ...").
namespace actorps::core {

class join_tally {
public:
  join_tally(uint32_t workers, uint32_t servers)
    : workers_(workers), servers_(servers) {
  }

  /// Records that the node of `role` (role::worker or role::server) and
  /// `rank` joined; true when that completed the job's set of nodes.
  bool add(uint8_t role, uint32_t rank);

  bool complete() const {
    return worker_ranks_.size() >= workers_ && server_ranks_.size() >= servers_;
  }

  /// "waiting for 1 of 2 workers (joined: 0) and 1 of 1 servers (joined:
  /// none)", leaving out a role that is complete; "all 2 workers and 1
  /// servers joined" once complete.
  std::string describe() const;

private:
  uint32_t workers_;
  uint32_t servers_;
  std::set<uint32_t> worker_ranks_;
  std::set<uint32_t> server_ranks_;
};

} // namespace actorps::core
