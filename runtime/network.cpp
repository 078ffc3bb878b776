// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/network.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>
#include <vector>

#include "caf/actor_cast.hpp"
#include "caf/actor_system.hpp"
#include "caf/exit_reason.hpp"
#include "caf/io/middleman.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/send.hpp"

#include "actors/coordinator/coordinator.hpp"
#include "actors/gate.hpp"
#include "actors/node.hpp"
#include "core/checkpoint_dir.hpp"
#include "core/checkpoint_stream.hpp"
#include "core/hosts.hpp"
#include "core/join_tally.hpp"
#include "core/layout.hpp"
#include "core/link_proof.hpp"
#include "core/load_pieces.hpp"
#include "messages/errors.hpp"
#include "runtime/blocking.hpp"
#include "runtime/connect.hpp"
#include "runtime/guard.hpp"
#include "runtime/observe.hpp"
#ifdef ACTORPS_HAVE_UCX
#  include "runtime/ucx/plane.hpp"
#endif
#include "runtime/system.hpp"

namespace actorps {

caf::expected<caf::actor>
connect_coordinator(caf::actor_system& sys, const endpoint& where,
                    std::chrono::milliseconds retry_for) {
  auto deadline = std::chrono::steady_clock::now() + retry_for;
  for (;;) {
    auto coord = connect_actor<gate_actor>(sys, where.host, where.port);
    if (coord)
      return caf::actor_cast<caf::actor>(*coord);
    // A wrong token stays wrong: no retry.
    if (coord.error() == errc::unauthorized)
      return make_error(errc::unauthorized, "the coordinator at " + where.host
                                              + ":" + std::to_string(where.port)
                                              + " refused this node ("
                                              + render(coord.error()) + ")");
    if (std::chrono::steady_clock::now() >= deadline)
      return make_error(errc::dead_node, "cannot reach the coordinator at "
                                           + where.host + ":"
                                           + std::to_string(where.port) + " ("
                                           + render(coord.error()) + ")");
    // Startup order is free: wait a little for the coordinator to listen.
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }
}

void leave_ucx_to_exit() {
#ifdef ACTORPS_HAVE_UCX
  ucx::keep_ucx_at_close(true);
#endif
}

bool built_with_ucx() {
#ifdef ACTORPS_HAVE_UCX
  return true;
#else
  return false;
#endif
}

uint8_t default_transport(bool tls) {
  return built_with_ucx() && !tls ? transport::ucx : transport::caf;
}

caf::error run_coordinator(const coordinator_options& opts,
                           std::function<void(uint16_t)> on_listening) {
  if (opts.num_workers == 0 || opts.num_servers == 0)
    return make_error(errc::bad_config,
                      "coordinator: a job needs at least one worker and one "
                      "server");
  if (opts.bigarray_bound == 0 || opts.slice_floats == 0
      || opts.slice_floats > core::max_slice_floats)
    return make_error(errc::bad_config,
                      "coordinator: bigarray_bound must be > 0 and "
                      "slice_floats 1.."
                        + std::to_string(core::max_slice_floats) + " (got "
                        + std::to_string(opts.bigarray_bound) + " and "
                        + std::to_string(opts.slice_floats) + ")");
  if (auto err = check_tls(opts.system.tls))
    return make_error(errc::bad_config, "coordinator: " + context_of(err));
  if (opts.replicas < 1 || opts.replicas > 3)
    return make_error(errc::bad_config,
                      "coordinator: replicas must be 1, 2 or 3 (got "
                        + std::to_string(opts.replicas) + ")");
  if (opts.replicas > 1 && opts.num_servers < opts.replicas)
    return make_error(errc::bad_config,
                      "coordinator: " + std::to_string(opts.replicas)
                        + " replicas need at least as many servers (each "
                          "copy of a shard lives on a server of its own)");
  if (opts.recovery_timeout.count() > 0 && opts.checkpoint_dir.empty())
    return make_error(errc::bad_config,
                      "coordinator: a recovery timeout needs a checkpoint "
                      "folder (a replacement server is restored from its "
                      "newest checkpoint)");
  if (opts.transport != transport::caf && opts.transport != transport::ucx)
    return make_error(errc::bad_config, "coordinator: unknown transport "
                                          + std::to_string(opts.transport));
#ifndef ACTORPS_HAVE_UCX
  if (opts.transport == transport::ucx)
    return make_error(errc::bad_config,
                      "coordinator: transport ucx needs a build with UCX "
                      "(Debian: libucx-dev); use transport caf");
#endif
  auto sopts = opts.system;
  sopts.network = true;
  sopts.token = opts.token;
  system_config cfg{sopts};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  coordinator_config cc;
  cc.num_workers = opts.num_workers;
  cc.num_servers = opts.num_servers;
  // Nodes present a proof derived from the token, never the token.
  cc.token = core::join_proof(opts.token);
  if (!opts.server_token.empty())
    cc.server_token = core::server_join_proof(opts.server_token);
  cc.sync = opts.sync;
  cc.staleness = opts.sync ? -1 : opts.staleness;
  cc.bigarray_bound = opts.bigarray_bound;
  cc.slice_floats = opts.slice_floats;
  set_message_cap(core::message_cap(opts.bigarray_bound, opts.slice_floats));
  cc.loopback = core::is_loopback(opts.host);
  cc.timeout = opts.timeout;
  cc.heartbeat = sopts.heartbeat.count() > 0 ? sopts.heartbeat
                                             : std::chrono::milliseconds{1000};
  cc.transport = opts.transport;
  cc.on_done = caf::actor_cast<caf::actor>(self);
  cc.address_of = peer_address;
  if (!opts.checkpoint_dir.empty())
    cc.checkpoint_every = std::max(opts.checkpoint_every,
                                   std::chrono::milliseconds{0});
  cc.recovery_timeout = std::max(opts.recovery_timeout,
                                 std::chrono::milliseconds{0});
  cc.replicas = opts.replicas;
  auto coord = spawn_coordinator(sys, cc);
  // Only the gate listens: a peer reaches the coordinator itself once it
  // proved the token (see actors/gate.hpp).
  auto gate = spawn_gate(sys, coord);
  auto port = publish_actor(sys, gate, opts.port, opts.host);
  if (!port) {
    caf::anon_send_exit(coord, caf::exit_reason::kill);
    return make_error(errc::bad_config,
                      "coordinator: cannot listen on "
                        + (opts.host.empty() ? std::string{"*"} : opts.host)
                        + ":" + std::to_string(opts.port) + " ("
                        + render(port.error()) + ")");
  }
  std::unique_ptr<metrics_server> metrics;
  if (opts.metrics.enabled()) {
    auto mo = opts.metrics;
    mo.token = opts.token;
    std::string why;
    metrics = metrics_server::start(
      mo,
      [&sys, c = caf::actor_cast<caf::actor>(coord)] {
        process_counters pc;
        gather_job(sys, c, pc);
        return pc;
      },
      why);
    if (!metrics) {
      caf::anon_send_exit(coord, caf::exit_reason::kill);
      static_cast<void>(sys.middleman().unpublish(gate, *port));
      return make_error(errc::bad_config, "coordinator: " + why);
    }
  }
  // Checkpoints of this job come after those already in the folder (an
  // earlier run of the job, resumed from them), so that pruning keeps ours.
  auto checkpoint_base
    = opts.checkpoint_dir.empty()
        ? uint64_t{0}
        : core::highest_checkpoint_number(opts.checkpoint_dir);
  on_listening(*port);
  if (metrics && opts.on_metrics)
    opts.on_metrics(metrics->port());
  core::join_tally tally{opts.num_workers, opts.num_servers};
  auto status = [&] {
    if (opts.on_status)
      opts.on_status(tally.describe());
  };
  // While nodes are missing, a line whenever `status_interval` passed
  // without a message; no timeout at all when that is off.
  auto idle = opts.on_status && opts.status_interval.count() > 0
                ? caf::duration{opts.status_interval}
                : caf::duration{caf::infinite};
  bool running = true;
  // Worker ranks that went down before they finished and were not
  // replaced.
  std::set<uint32_t> lost_ranks;
  uint32_t lost_servers = 0;
  uint32_t failed_workers = 0;
  // The periodic checkpoint being written (its barrier number; 0: none).
  core::checkpoint_writer writer;
  uint64_t writing = 0;
  uint64_t given_up = 0;
  std::string written;
  actorps::status failed;
  // The checkpoints replacement servers are restored from, being read (by
  // restore id: one per replacement).
  core::restore_reads restoring{opts.checkpoint_dir, opts.num_servers,
                                save_piece_bytes, max_piece_records};
  self->receive_while(running)(
    [&](shutdown_atom) { running = false; },
    [&](node_down_atom, uint32_t node_id, uint8_t role_id, bool lost) {
      if (lost && role_id == role::worker)
        lost_ranks.insert((node_id - worker_node_id(0)) / 2);
      else if (lost)
        ++lost_servers;
      if (opts.on_event)
        opts.on_event(describe_node(node_id, role_id) + " is down"
                      + (lost ? " (lost: it had not finished)" : ""));
    },
    [&](leave_atom, uint32_t, uint32_t rank, const std::string& why) {
      ++failed_workers;
      if (opts.on_event)
        opts.on_event("worker " + std::to_string(rank) + " failed: " + why);
    },
    [&](join_atom, uint32_t, uint8_t role_id, uint32_t rank) {
      // A worker that takes a dead rank's place makes up for its loss.
      if (role_id == role::worker && lost_ranks.erase(rank) > 0
          && opts.on_event)
        opts.on_event("worker " + std::to_string(rank)
                      + " was replaced by a new process");
      if (tally.add(role_id, rank))
        status();
    },
    [&](save_atom, uint64_t number,
        save_piece& piece) -> caf::result<caf::ok_atom> {
      // Pieces in order, each asked for once the one before is written: the
      // coordinator's process holds one piece of the model at a time.
      // A checkpoint that failed here stays failed: none of its later
      // pieces starts a file of its own.
      if (number == given_up)
        return make_error(errc::checkpoint_io, "checkpoint "
                                                 + std::to_string(number)
                                                 + " was given up");
      if (number != writing) {
        writer.abort();
        writing = number;
        failed = core::numbered_checkpoint_path(
          opts.checkpoint_dir, checkpoint_base + number, written);
        if (failed.ok())
          failed = writer.open(written, piece.optimizer);
      }
      for (auto& rec : piece.records)
        if (failed.ok())
          failed = writer.add(rec);
      if (!failed.ok() && !piece.done) {
        // Said here, once; the coordinator stops sending this checkpoint.
        writer.abort();
        writing = 0;
        given_up = number;
        if (opts.on_checkpoint)
          opts.on_checkpoint(failed.message, false);
        return make_error(errc::checkpoint_io, failed.message);
      }
      if (!piece.done)
        return caf::ok_atom::value;
      auto records = writer.records();
      if (failed.ok())
        failed = writer.finish();
      else
        writer.abort();
      if (failed.ok())
        core::prune_checkpoints(opts.checkpoint_dir, opts.checkpoint_keep);
      writing = 0;
      if (opts.on_checkpoint)
        opts.on_checkpoint(failed.ok()
                             ? "checkpoint at barrier " + std::to_string(number)
                                 + ": " + written + " ("
                                 + std::to_string(records) + " records)"
                             : failed.message,
                           failed.ok());
      return caf::ok_atom::value;
    },
    [&](load_atom, uint64_t restore,
        uint64_t index) -> caf::result<load_piece> {
      // The coordinator restores a replacement server: the newest
      // checkpoint that reads back whole, piece by piece.
      load_piece piece;
      bool done = false;
      if (auto st = restoring.next(restore, index, piece.optimizer,
                                   piece.records, done);
          !st.ok())
        return to_error(st);
      piece.end = done ? load_piece::commit : load_piece::more;
      return piece;
    },
    [&](recover_atom, uint32_t rank, uint8_t kind, const std::string& what) {
      auto server = "server " + std::to_string(rank);
      if (kind == recovery_event::replaced) {
        // A replacement makes up for the server's loss.
        if (lost_servers > 0)
          --lost_servers;
        if (opts.on_recovery)
          opts.on_recovery(server
                             + " was replaced by a new process, "
                               "restored from "
                             + restoring.last_path() + " (" + what + ")",
                           true);
      } else if (kind == recovery_event::promoted) {
        if (lost_servers > 0)
          --lost_servers;
        if (opts.on_recovery)
          opts.on_recovery(server + " is down: its backups on " + what
                             + " took over its shards; nothing they "
                               "acknowledged was lost",
                           true);
      } else if (kind == recovery_event::rebuilt) {
        if (opts.on_recovery)
          opts.on_recovery(server + " rejoined: it holds copies of " + what
                             + " that went without one",
                           true);
      } else if (kind == recovery_event::unpaired) {
        if (opts.on_recovery)
          opts.on_recovery(server + "'s shards have no backups: " + what,
                           false);
      } else if (opts.on_recovery) {
        opts.on_recovery(kind == recovery_event::waiting
                           ? server + " is down: waiting up to " + what
                               + " for a replacement (start an "
                                 "actorps-server for this job)"
                           : server + " was not replaced: " + what,
                         kind == recovery_event::waiting);
      }
    },
    [&](save_atom, uint64_t number, caf::error& err) {
      if (number == writing) {
        writer.abort();
        writing = 0;
      }
      if (opts.on_checkpoint)
        opts.on_checkpoint("checkpoint at barrier " + std::to_string(number)
                             + " failed: " + render(err),
                           false);
    },
    caf::after(idle) >>
      [&] {
        if (!tally.complete())
          status();
      });
  auto lost_workers = static_cast<uint32_t>(lost_ranks.size());
  metrics.reset();
  static_cast<void>(sys.middleman().unpublish(gate, *port));
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
  if (lost_workers + lost_servers + failed_workers == 0)
    return caf::none;
  return make_error(
    errc::dead_node,
    "coordinator: the job failed: " + std::to_string(failed_workers) + " of "
      + std::to_string(opts.num_workers) + " workers failed, "
      + std::to_string(lost_workers) + " went down before they finished, "
      + std::to_string(lost_servers) + " of " + std::to_string(opts.num_servers)
      + " servers went down before the end");
}

} // namespace actorps
