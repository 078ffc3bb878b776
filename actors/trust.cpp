// SPDX-License-Identifier: BSD-3-Clause
#include "actors/trust.hpp"

#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "caf/actor_addr.hpp"
#include "caf/actor_cast.hpp"
#include "caf/actor_control_block.hpp"
#include "caf/exit_reason.hpp"
#include "caf/local_actor.hpp"
#include "caf/scheduled_actor.hpp"
#include "caf/system_messages.hpp"

#include "core/link_proof.hpp"
#include "messages/errors.hpp"

namespace actorps {

namespace {

std::mutex admitted_mtx;
std::set<caf::node_id> admitted; // guarded by admitted_mtx
std::set<caf::node_id> routers;  // guarded by admitted_mtx
// (receiver, node): guarded by admitted_mtx.
std::set<std::pair<caf::node_id, caf::node_id>> outbound;

// Worker identities (guarded by admitted_mtx).
constexpr uint32_t no_rank = core::identity_proof::no_rank;
std::map<caf::node_id, std::pair<uint32_t, std::string>> identities;
std::map<caf::node_id, std::string> rank_keys;
std::set<caf::node_id> identity_links;
struct proven_entry {
  uint32_t rank;
  const void* owner;
};
// (receiver, peer): what the connection that speaks for peer proved.
std::map<std::pair<caf::node_id, caf::node_id>, proven_entry> proven;
// receiver: workers[r] as its actors were told.
std::map<caf::node_id, std::vector<caf::node_id>> bound;

bool checked_locked(const caf::node_id& node) {
  return rank_keys.count(node) > 0 && identity_links.count(node) > 0;
}

} // namespace

void set_worker_identity(const caf::node_id& node, uint32_t rank,
                         std::string secret) {
  std::lock_guard<std::mutex> guard{admitted_mtx};
  identities[node] = {rank, std::move(secret)};
}

std::pair<uint32_t, std::string> worker_identity(const caf::node_id& node) {
  std::lock_guard<std::mutex> guard{admitted_mtx};
  auto i = identities.find(node);
  if (i == identities.end())
    return {no_rank, std::string{}};
  return i->second;
}

void set_rank_key(const caf::node_id& node, std::string key) {
  if (key.empty())
    return;
  std::lock_guard<std::mutex> guard{admitted_mtx};
  rank_keys[node] = std::move(key);
}

std::string rank_key_of(const caf::node_id& node) {
  std::lock_guard<std::mutex> guard{admitted_mtx};
  auto i = rank_keys.find(node);
  return i == rank_keys.end() ? std::string{} : i->second;
}

void links_carry_identity(const caf::node_id& node) {
  std::lock_guard<std::mutex> guard{admitted_mtx};
  identity_links.insert(node);
}

bool identities_checked(const caf::node_id& node) {
  std::lock_guard<std::mutex> guard{admitted_mtx};
  return checked_locked(node);
}

void record_proven(const caf::node_id& to, const caf::node_id& peer,
                   uint32_t rank, const void* owner) {
  std::lock_guard<std::mutex> guard{admitted_mtx};
  proven[{to, peer}] = proven_entry{rank, owner};
}

void forget_proven(const caf::node_id& to, const caf::node_id& peer,
                   const void* owner) {
  std::lock_guard<std::mutex> guard{admitted_mtx};
  auto i = proven.find({to, peer});
  if (i != proven.end() && i->second.owner == owner)
    proven.erase(i);
}

bool proven_worker(const caf::node_id& to, const caf::node_id& peer,
                   uint32_t rank) {
  std::lock_guard<std::mutex> guard{admitted_mtx};
  if (!checked_locked(to))
    return true;
  auto i = proven.find({to, peer});
  return i != proven.end() && i->second.rank == rank;
}

uint32_t bound_worker(const caf::node_id& to, const caf::node_id& peer) {
  std::lock_guard<std::mutex> guard{admitted_mtx};
  auto i = bound.find(to);
  if (i == bound.end() || !peer)
    return no_rank;
  auto& workers = i->second;
  for (size_t r = 0; r < workers.size(); ++r)
    if (workers[r] == peer)
      return static_cast<uint32_t>(r);
  return no_rank;
}

bool sent_by_source(const caf::strong_actor_ptr& sender,
                    const caf::actor_addr& source) {
  return sender != nullptr
         && caf::actor_cast<caf::actor_addr>(sender) == source;
}

bool admitted_in_process(const caf::node_id& node) {
  std::lock_guard<std::mutex> guard{admitted_mtx};
  return admitted.count(node) > 0;
}

void trust_routes_of(const caf::node_id& node) {
  if (!node)
    return;
  std::lock_guard<std::mutex> guard{admitted_mtx};
  routers.insert(node);
}

bool routes_trusted(const caf::node_id& node) {
  std::lock_guard<std::mutex> guard{admitted_mtx};
  return routers.count(node) > 0;
}

void never_connects_in(const caf::node_id& to, const caf::node_id& node) {
  if (!node || node == to)
    return;
  std::lock_guard<std::mutex> guard{admitted_mtx};
  outbound.emplace(to, node);
}

bool may_connect_in(const caf::node_id& to, const caf::node_id& node) {
  std::lock_guard<std::mutex> guard{admitted_mtx};
  return routers.count(node) == 0 && outbound.count({to, node}) == 0;
}

void trusted_nodes::add(const caf::node_id& node) {
  if (!node)
    return;
  nodes_.insert(node);
  std::lock_guard<std::mutex> guard{admitted_mtx};
  admitted.insert(node);
}

void trusted_nodes::add(const std::vector<caf::node_id>& nodes) {
  for (auto& x : nodes)
    add(x);
}

void trusted_nodes::add_admitters(const std::vector<caf::node_id>& nodes) {
  add(nodes);
  admitters_.insert(nodes.begin(), nodes.end());
  for (auto& x : nodes)
    trust_routes_of(x);
}

caf::error trusted_nodes::check_admitter(caf::local_actor* self,
                                         const char* op) const {
  if (auto err = check(self, op))
    return err;
  auto from = self->current_sender()->node();
  if (from == self->node() || admitters_.count(from) > 0)
    return caf::none;
  return make_error(errc::unauthorized,
                    std::string{op} + ": refused, node " + to_string(from)
                      + " is admitted to the job but may not admit others");
}

bool trusted_nodes::contains(const caf::node_id& node) const {
  return nodes_.count(node) > 0;
}

std::vector<caf::node_id> trusted_nodes::list() const {
  return {nodes_.begin(), nodes_.end()};
}

void trusted_nodes::bind_workers(const caf::node_id& at,
                                 std::vector<caf::node_id> workers) {
  {
    std::lock_guard<std::mutex> guard{admitted_mtx};
    bound[at] = workers;
  }
  workers_ = std::move(workers);
}

caf::error trusted_nodes::check_rank(caf::local_actor* self, const char* op,
                                     uint32_t worker) const {
  auto sender = self->current_sender();
  if (sender == nullptr || sender->node() == self->node() || workers_.empty())
    return caf::none;
  if (worker < workers_.size() && workers_[worker] == sender->node()) {
    if (proven_worker(self->node(), sender->node(), worker))
      return caf::none;
    return make_error(errc::unauthorized,
                      std::string{op} + ": node " + to_string(sender->node())
                        + " joined as worker " + std::to_string(worker)
                        + ", but its connection did not prove that worker's "
                          "identity");
  }
  return make_error(errc::unauthorized,
                    std::string{op} + ": node " + to_string(sender->node())
                      + " did not join as worker " + std::to_string(worker));
}

caf::error trusted_nodes::check(caf::local_actor* self, const char* op,
                                uint32_t worker) const {
  if (auto err = check(self, op))
    return err;
  return check_rank(self, op, worker);
}

caf::error trusted_nodes::check(caf::local_actor* self, const char* op) const {
  auto& sender = self->current_sender();
  caf::node_id from;
  if (sender) {
    from = sender->node();
    if (from == self->node() || contains(from))
      return caf::none;
  }
  auto who = from ? "node " + to_string(from)
                  : std::string{"an anonymous sender"};
  // One line per foreign node, so that a flood of messages cannot flood the
  // log; the count of nodes is bounded too.
  if (!reported_all_ && reported_.count(from) == 0) {
    if (reported_.size() < max_reported) {
      reported_.insert(from);
      std::fprintf(stderr,
                   "actorps: %s refused '%s' from %s: not admitted to the "
                   "job (further refusals of this node are not logged)\n",
                   self->name(), op, who.c_str());
    } else {
      reported_all_ = true;
      std::fprintf(stderr,
                   "actorps: %s refused messages from %zu foreign nodes; "
                   "further refusals are not logged\n",
                   self->name(), reported_.size());
    }
  }
  return make_error(errc::unauthorized, std::string{op}
                                          + ": refused, the sender (" + who
                                          + ") was not admitted to the job");
}

void ignore_strays(caf::scheduled_actor* self, const trusted_nodes& trusted) {
  self->set_error_handler([](caf::scheduled_actor*, caf::error&) {});
  self->set_exit_handler(
    [&trusted](caf::scheduled_actor* ptr, caf::exit_msg& msg) {
      // An anonymous exit is what local code sends (anon_send_exit); a
      // foreign peer could as well send exit_reason::kill, which CAF applies
      // before this handler, so refusing it would protect nothing.
      if (ptr->current_sender() && trusted.check(ptr, "exit"))
        return;
      if (msg.reason)
        ptr->quit(std::move(msg.reason));
    });
}

} // namespace actorps
