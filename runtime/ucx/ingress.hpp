// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Where the UCX plane meets the actors. Internal to runtime/.
//
// The plane's progress thread never blocks on an actor: it hands what
// arrives to a `frame_queue`, which either wakes one actor with
// `(ucx_atom)` when it stops being empty (the actor takes the whole queue),
// or serves each frame at once with a handler that only sends messages.
//
// On a worker, the data channel (actors/worker/channel.hpp) sends request
// frames and hands the worker the reply frames.
//
// On a server, the ingress turns request frames, on the plane's thread,
// into the shards' typed messages with a `plane_reply` (shard.hpp), and the
// shards send each reply back as a frame themselves, on their own thread:
// - `push` (`slice_push`) -> `(push_atom, slice_push, plane_reply)`,
//   replied with no values;
// - `pull` (`slice_pull`) -> `(pull_atom, slice_pull, plane_reply)`,
//   replied with the slice's floats;
// - `push_pull` (`slice_push`) -> `(push_pull_atom, slice_push,
//   plane_reply)`, replied with the floats;
// - `batch` -> `(batch_atom, slice_batch, plane_reply)`, replied with the
//   value's floats in order;
// - `rows_push` -> `(push_atom, rows_push, plane_reply)`, replied with no
//   values; `rows_pull` -> `(pull_atom, rows_pull, plane_reply)`, replied
//   with the rows' floats;
// priority > 0 is sent with CAF's high priority (the shard is local, so its
// urgent queue sees it). A request that does not decode (frames.hpp), or
// names a shard this server does not host, is answered with a `failure`
// frame (`bad_config`); a frame that is no request is dropped. Pushed
// values are taken over from the received buffer without a copy when
// uncompressed, and a push or push_pull whose raw values lie in the
// worker's shared-memory segment reaches the shard as a view of them
// (plane_reply::values); replies go out straight from the shards' buffers.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "caf/actor.hpp"
#include "caf/fwd.hpp"

#include "actors/shard/shard.hpp"
#include "actors/worker/channel.hpp"
#include "messages/control.hpp"
#include "runtime/metrics.hpp"
#include "runtime/ucx/plane.hpp"

namespace actorps::ucx {

class plane_link;

/// One message the plane received.
struct frame {
  peer_id from = 0;
  /// What the sender's hello proved (plane_options::identity).
  uint32_t identity = 0;
  std::vector<char> header;
  buffer body;
};

/// Frames waiting for an actor. Thread-safe.
class frame_queue {
public:
  /// The actor to wake; frames pushed before it is set wait.
  void set_target(caf::actor target);

  /// Serves every frame with `fn`, on the thread that pushes it (the
  /// plane's), instead of queueing it; frames queued before are served
  /// first, on the caller's thread. Set it before peers know the plane.
  void set_handler(std::function<void(frame&)> fn);

  /// Queues `x` and wakes the target if the queue was empty, or serves it.
  void push(frame x);

  /// As `push`, but a wake it owes waits for `flush`, which runs the
  /// target on the calling thread (detail::send_and_run): for the plane's
  /// progress thread, which pushes under its lock and flushes outside it.
  void push_later(frame x);

  /// Runs `fn` at the start of each `flush` (on the thread that flushes,
  /// outside the plane's lock): what a handler put off.
  void set_idle(std::function<void()> fn);

  /// Runs the idle function, then sends the wake `push_later` owes, if
  /// any, running the target here.
  void flush();

  /// Takes everything queued.
  std::vector<frame> take();

private:
  // Queues `x` (or serves it); the target to wake now, if the queue was
  // empty, or with `later` the wake owed to `flush`.
  caf::actor enqueue(frame& x, bool later);

  std::mutex mtx_;
  std::shared_ptr<std::function<void(frame&)>> handler_;
  std::shared_ptr<std::function<void()>> idle_;
  caf::actor target_;
  std::vector<frame> items_;
  bool wake_owed_ = false;
};

/// Whether a thread waiting for a worker's replies receives them itself
/// (data_channel::drive): ACTORPS_UCX_CALLER_PROGRESS, "1" (the default)
/// or "0". False, with why in `error`, for another value.
bool caller_progress_from_env(bool& on, std::string& error);

/// False, with why in `error`, if this process's environment holds a plane
/// setting that `start_plane` would refuse (ACTORPS_UCX_SEGMENT_MB,
/// ACTORPS_UCX_CALLER_PROGRESS). A
/// node checks it before it joins a job: one that joined and then failed
/// would count as a dead node to the job. (Checked whatever the job's
/// transport turns out to be: the setting is wrong either way.)
bool plane_settings_ok(std::string& error);

/// Starts the plane of a node that joined job `job` with `token` (its
/// secret is `data_secret(token, job.data_salt)`), every message of which
/// goes into `queue`, tagged with what its sender proved; null, with UCX's
/// reason in `error`, if UCX cannot start. A worker (job.rank_secret set)
/// proves worker job.rank's secret in its hellos; a server (job.rank_key
/// set) checks every worker's. A job whose coordinator listens on loopback
/// (job.loopback) keeps the plane on loopback too
/// (plane_options::loopback_only). A server passes `max_held_bytes`
/// (plane_options::max_held_bytes: its bound on workers' large messages
/// received and not yet handled by a shard). Large messages to peers on
/// this host go through a shared-memory segment of
/// `segment_size_from_env()` bytes; an unusable ACTORPS_UCX_SEGMENT_MB
/// fails the start with `error` naming it.
std::shared_ptr<plane>
start_plane(const std::string& token, const job_info& job,
            std::shared_ptr<frame_queue> queue, std::string& error,
            std::size_t max_held_bytes = 0);

/// How the ingress names the peer a request came from to the shards
/// (plane_reply::peer, opaque to them): peer `from` of the plane and, in
/// the upper half, the identity its connection proved, which the reply
/// names (frame_header). Peer ids stay far below 2^32.
uint64_t reply_peer(peer_id from, uint32_t identity);

/// Adds the counters of `plane` (while it lives) to a scrape of /metrics
/// (serve_metrics's `more`).
inline std::function<void(process_counters&)>
plane_metrics(std::weak_ptr<plane> plane) {
  return [plane](process_counters& c) {
    if (auto p = plane.lock())
      c.plane = process_counters::plane_counters{
        p->shared_sends(), p->in_place_sends(), p->waiting(),
        p->caller_receives(), p->thread_runs()};
  };
}

/// Where the ingress's shards send their outcomes: reply frames back over
/// `plane` to the peer `reply_peer` named (the ingress makes one; tests
/// drive one alone).
std::shared_ptr<reply_sink> make_plane_sink(caf::actor_system& sys,
                                            std::weak_ptr<plane> plane);

/// Spawns a server's ingress: it serves `queue` (filled by `plane`'s
/// `on_message`) for the shards of this server, by their index in the
/// job's routing table, as its handler. The actor it returns takes
/// `(node_down_atom, worker_rank)`, a worker's node went down: it drops the
/// peers that worker's requests came from, failing the replies in flight to
/// them (on one host UCX would not notice: see plane_options).
///
/// With `link` (a server of a job with replicas, see replicas.hpp), the
/// ingress also takes forwards from other servers (replicate frames, only
/// from peers that proved the servers' identity) to the backups among
/// `shards`, and hands the answers to this server's forwards to `link`.
///
/// With `run_shards` (shards on CAF's scheduler, not on threads of their
/// own; only under work sharing, see detail::can_run_here), the plane's
/// thread runs a shard for the requests of normal priority it receives:
/// they wait until the progress pass that received them ends (the handler
/// runs under the plane's lock); then those to the first one's shard wake
/// it on that thread (detail::send_and_run), one hand-off between threads
/// fewer per request, and those to other shards go to their mailboxes,
/// where scheduler threads run them side by side. High-priority requests
/// go to the shard's mailbox at once (as every request does otherwise), so
/// they still overtake queued ones; so do requests on large slices (a push
/// of 1 MB or more, and later requests on a slice such a push went to),
/// which a scheduler thread then applies or answers while the plane's
/// thread goes on receiving. (A shard orders each worker's requests on a
/// slice by their sequence numbers, whatever order they reach it in.)
/// The plane's `on_idle` must flush `queue` (start_plane's does): held
/// requests leave there.
caf::actor spawn_ingress(caf::actor_system& sys,
                         std::shared_ptr<frame_queue> queue,
                         std::shared_ptr<plane> plane,
                         std::map<uint32_t, shard_actor> shards,
                         std::shared_ptr<plane_link> link = nullptr,
                         bool run_shards = false);

/// A worker's data channel over `plane`: requests to the shards in
/// `shard_peers` go to those peers; reply and failure frames, which the
/// plane's `on_message` must push into `replies` (whose target is the
/// worker), come back through `take`. A request that cannot leave (peer
/// down, plane closed) comes back as a `dead_node` failure.
std::shared_ptr<data_channel>
make_worker_channel(caf::actor_system& sys, std::shared_ptr<plane> plane,
                    std::shared_ptr<frame_queue> replies,
                    std::map<uint32_t, peer_id> shard_peers);

} // namespace actorps::ucx
