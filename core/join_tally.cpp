// SPDX-License-Identifier: BSD-3-Clause
#include "core/join_tally.hpp"

#include "core/node_ids.hpp"

namespace actorps::core {

namespace {

std::string waiting_for(const std::set<uint32_t>& joined, uint32_t expected,
                        const char* what) {
  std::string ranks;
  for (auto r : joined)
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return std::to_string(expected - joined.size()) + " of "
         + std::to_string(expected) + " " + what
         + " (joined: " + (ranks.empty() ? "none" : ranks) + ")";
}

} // namespace

bool join_tally::add(uint8_t role, uint32_t rank) {
  auto before = complete();
  if (role == role::worker && rank < workers_)
    worker_ranks_.insert(rank);
  else if (role == role::server && rank < servers_)
    server_ranks_.insert(rank);
  return !before && complete();
}

std::string join_tally::describe() const {
  if (complete())
    return "all " + std::to_string(workers_) + " workers and "
           + std::to_string(servers_) + " servers joined";
  std::string out = "waiting for ";
  bool workers_missing = worker_ranks_.size() < workers_;
  if (workers_missing)
    out += waiting_for(worker_ranks_, workers_, "workers");
  if (server_ranks_.size() < servers_)
    out += (workers_missing ? " and " : "")
           + waiting_for(server_ranks_, servers_, "servers");
  return out;
}

} // namespace actorps::core
