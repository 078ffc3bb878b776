// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/observe.hpp"

#include <cstdlib>

#include "caf/actor_cast.hpp"
#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include "actors/coordinator/coordinator.hpp"
#include "actors/gate.hpp"
#include "actors/shard/shard.hpp"
#include "actors/worker/worker.hpp"
#include "core/link_proof.hpp"
#include "messages/errors.hpp"
#include "runtime/blocking.hpp"
#include "runtime/network.hpp"
#include "runtime/system.hpp"

namespace actorps {

caf::expected<endpoint> parse_endpoint(const std::string& text) {
  auto colon = text.rfind(':');
  auto bad = [&] {
    return make_error(errc::bad_config,
                      "coordinator address: expected host:port, got '" + text
                        + "'");
  };
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return bad();
  auto digits = text.substr(colon + 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos
      || digits.size() > 5)
    return bad();
  auto port = std::strtoul(digits.c_str(), nullptr, 10);
  if (port == 0 || port > 65535)
    return bad();
  return endpoint{text.substr(0, colon), static_cast<uint16_t>(port)};
}

std::string describe_node(uint32_t node_id, uint8_t role_id) {
  if (role_id == role::coordinator)
    return "the coordinator";
  auto rank = (node_id - 8) / 2;
  return std::string{role_name(role_id)} + " " + std::to_string(rank)
         + " (node " + std::to_string(node_id) + ")";
}

namespace {

// Asks `whom` (`Handle` cast) for `Reply` with `xs...`; `on_reply` gets it.
template <class Handle, class Reply, class OnReply, class... Ts>
void ask(caf::scoped_actor& self, const caf::actor& whom, OnReply on_reply,
         std::chrono::seconds wait, Ts... xs) {
  if (!whom)
    return;
  self->request(caf::actor_cast<Handle>(whom), wait, xs...)
    .receive([&](Reply& x) { on_reply(x); }, [](caf::error&) {});
}

} // namespace

std::unique_ptr<metrics_server>
serve_metrics(caf::actor_system& sys, metrics_options opts,
              const std::string& token, std::vector<caf::actor> workers,
              std::vector<caf::actor> shards, std::string& why,
              std::function<void(process_counters&)> more) {
  opts.token = token;
  return metrics_server::start(
    opts,
    [&sys, workers, shards, more] {
      process_counters pc;
      if (!workers.empty())
        gather_workers(sys, workers, pc);
      if (!shards.empty())
        gather_shards(sys, shards, pc);
      if (more)
        more(pc);
      return pc;
    },
    why);
}

void gather_shards(caf::actor_system& sys,
                   const std::vector<caf::actor>& shards, process_counters& c) {
  caf::scoped_actor self{sys};
  server_status sum;
  sum.answered = true;
  for (auto& x : shards)
    ask<shard_actor, shard_stats>(
      self, x,
      [&](shard_stats& s) {
        add_shard(sum, s);
        for (auto& w : s.by_worker)
          c.shard_traffic += w;
      },
      observe_wait, stats_atom::value);
  sum.answered = sum.shards == shards.size();
  c.shards = sum;
}

void gather_workers(caf::actor_system& sys,
                    const std::vector<caf::actor>& workers,
                    process_counters& c) {
  caf::scoped_actor self{sys};
  for (auto& x : workers)
    ask<worker_actor, worker_stats>(
      self, x, [&](worker_stats& s) { c.workers.push_back(std::move(s)); },
      observe_wait, stats_atom::value);
}

void gather_job(caf::actor_system& sys, const caf::actor& coordinator,
                process_counters& c) {
  caf::scoped_actor self{sys};
  // The coordinator itself waits observe_wait for its shards: wait longer,
  // so that a slow shard leaves the job's section partial, not missing.
  ask<coordinator_actor, job_status>(
    self, coordinator, [&](job_status& s) { c.job = std::move(s); },
    std::chrono::seconds{5}, status_atom::value);
}

caf::expected<job_status> query_status(const status_options& opts) {
  if (auto err = check_tls(opts.system.tls))
    return make_error(errc::bad_config, "status: " + context_of(err));
  auto sopts = opts.system;
  sopts.network = true;
  sopts.token = opts.token;
  system_config cfg{sopts};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto gate = connect_coordinator(sys, opts.coordinator, opts.timeout);
  if (!gate)
    return std::move(gate.error());
  job_info job;
  auto err = detail::ask(
    self.ptr(), caf::actor_cast<gate_actor>(*gate), opts.timeout,
    [&](job_info& x) { job = std::move(x); }, join_atom::value, role::observer,
    core::join_proof(opts.token), caf::actor{}, join_mode::any, wire_version);
  if (err)
    return err;
  job_status result;
  err = detail::ask(
    self.ptr(), caf::actor_cast<coordinator_actor>(job.coordinator),
    opts.timeout, [&](job_status& x) { result = std::move(x); },
    status_atom::value);
  if (err)
    return err;
  return result;
}

} // namespace actorps
