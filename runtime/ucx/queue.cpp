// SPDX-License-Identifier: BSD-3-Clause
// A process's data plane as actorps starts it (its settings from the job
// and the environment), and the queue its frames go into on their way to
// an actor (runtime/ucx/ingress.hpp).
#include "runtime/ucx/ingress.hpp"
#include "runtime/ucx/segment.hpp"

#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "caf/send.hpp"

#include "actors/run_here.hpp"
#include "core/link_proof.hpp"
#include "runtime/ucx/frames.hpp"

namespace actorps::ucx {

// -- frame_queue --------------------------------------------------------------

void frame_queue::set_target(caf::actor target) {
  bool wake;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    target_ = std::move(target);
    wake = !items_.empty();
  }
  if (wake)
    caf::anon_send(target_, ucx_atom::value);
}

void frame_queue::set_handler(std::function<void(frame&)> fn) {
  std::vector<frame> early;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    handler_ = std::make_shared<std::function<void(frame&)>>(std::move(fn));
    early = std::exchange(items_, {});
  }
  for (auto& x : early)
    (*handler_)(x);
}

caf::actor frame_queue::enqueue(frame& x, bool later) {
  caf::actor wake;
  std::shared_ptr<std::function<void(frame&)>> handler;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    handler = handler_;
    if (!handler) {
      if (items_.empty()) {
        if (!later)
          wake = target_;
        else if (target_)
          wake_owed_ = true;
      }
      items_.push_back(std::move(x));
    }
  }
  if (handler)
    (*handler)(x);
  return wake;
}

void frame_queue::push(frame x) {
  if (auto wake = enqueue(x, false))
    caf::anon_send(wake, ucx_atom::value);
}

void frame_queue::push_later(frame x) {
  enqueue(x, true);
}

void frame_queue::set_idle(std::function<void()> fn) {
  std::lock_guard<std::mutex> guard{mtx_};
  idle_ = std::make_shared<std::function<void()>>(std::move(fn));
}

void frame_queue::flush() {
  std::shared_ptr<std::function<void()>> idle;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    idle = idle_;
  }
  if (idle)
    (*idle)();
  caf::actor wake;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!wake_owed_)
      return;
    wake_owed_ = false;
    wake = target_;
  }
  // The worker takes its replies on this thread: no scheduler thread
  // needs waking between a reply and its caller.
  detail::send_and_run(nullptr, caf::make_message_id(), wake,
                       caf::make_message(ucx_atom::value));
}

std::vector<frame> frame_queue::take() {
  std::lock_guard<std::mutex> guard{mtx_};
  return std::exchange(items_, {});
}

bool caller_progress_from_env(bool& on, std::string& error) {
  on = true;
  auto* text = std::getenv("ACTORPS_UCX_CALLER_PROGRESS");
  if (text == nullptr)
    return true;
  std::string s{text};
  if (s != "0" && s != "1") {
    error = "ACTORPS_UCX_CALLER_PROGRESS: expected 1 (a waiting caller "
            "receives its replies itself, the default) or 0 (the data "
            "plane's thread does), got '"
            + s + "'";
    return false;
  }
  on = s == "1";
  return true;
}

bool plane_settings_ok(std::string& error) {
  std::size_t bytes = 0;
  bool on = true;
  return segment_size_from_env(bytes, error)
         && caller_progress_from_env(on, error);
}

std::shared_ptr<plane>
start_plane(const std::string& token, const job_info& job,
            std::shared_ptr<frame_queue> queue, std::string& error,
            std::size_t max_held_bytes) {
  // Both handlers run under the plane's lock (on its progress thread or a
  // thread that drives it): the map needs no lock of its own.
  auto identities = std::make_shared<std::map<peer_id, uint32_t>>();
  plane_handlers handlers;
  handlers.on_peer_up = [identities](peer_id id, const std::vector<char>&,
                                     uint32_t identity) {
    (*identities)[id] = identity;
  };
  handlers.on_message
    = [queue, identities](peer_id from, std::vector<char> header, buffer body) {
        auto i = identities->find(from);
        queue->push_later(frame{from, i != identities->end() ? i->second : 0,
                                std::move(header), std::move(body)});
      };
  handlers.on_idle = [queue] { queue->flush(); };
  plane_options opts;
  opts.secret = data_secret(token, job.data_salt);
  opts.loopback_only = job.loopback;
  // Cross-memory attach between processes of one host only when asked:
  // UCX 1.13 aborts a process whose peer dies in the middle of such a
  // transfer (cma_ep.c: "process_vm_readv ... No such process"), so one
  // killed server would take its workers down, or a killed worker its
  // server. Without it, peers on one host talk over loopback TCP, which
  // UCX watches (docs/benchmarks.md has what that costs).
  auto* shm = std::getenv("ACTORPS_UCX_SHARED_MEMORY");
  opts.shared_memory = shm != nullptr && std::string{shm} == "1";
  // Without it, large messages to peers on this host go through a
  // shared-memory segment of ours (runtime/ucx/segment.hpp), which a dead
  // peer cannot take this process down with.
  if (!segment_size_from_env(opts.shared_segment, error))
    return nullptr;
  if (!job.rank_secret.empty()) {
    opts.identity = job.rank + 1;
    opts.identity_secret = job.rank_secret;
  }
  if (!job.rank_key.empty()) {
    // (Also the servers' identity: a worker's rank is never 2^32 - 2.)
    opts.secret_of = [key = job.rank_key](uint32_t identity) {
      return core::worker_secret(key, identity - 1);
    };
    opts.server_secret = core::worker_secret(job.rank_key, server_identity - 1);
    // A forward from another server holds up to one worker frame's values
    // and rows plus its own metadata (actors/shard/forward.cpp).
    opts.max_body += std::size_t{16} << 20;
  }
  opts.max_held_bytes = max_held_bytes;
  // Held-back requests go by their priority, as the shards' mailboxes do.
  opts.priority_of = [](const std::vector<char>& header) {
    auto h = decode(header);
    return h ? h->priority : 0;
  };
  return plane::start(std::move(opts), std::move(handlers), error);
}

} // namespace actorps::ucx
