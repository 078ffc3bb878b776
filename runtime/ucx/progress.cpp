// SPDX-License-Identifier: BSD-3-Clause
// Who progresses a plane's UCX worker: the plane's own thread, or a caller
// that waits for a reply and drives the worker itself (plane::drive), one at
// a time, while the thread stands aside.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>

#include <sys/epoll.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "runtime/ucx/plane.hpp"
#include "runtime/ucx/plane_impl.hpp"

namespace actorps::ucx {

namespace {

// Empties the eventfd `fd` if it is among the `n` events.
void drain(const epoll_event* events, int n, int fd) {
  for (int i = 0; i < n; ++i)
    if (events[i].data.fd == fd) {
      uint64_t count;
      static_cast<void>(::read(fd, &count, sizeof(count)));
    }
}

} // namespace

void plane::impl::progress_all() {
  while (ucp_worker_progress(worker) != 0) {
    // Progress until idle.
  }
  run_fetches();
}

bool plane::impl::arm_busy() {
  std::lock_guard<std::recursive_mutex> guard{ucx_mtx};
  return !stopping && !closed && ucp_worker_arm(worker) == UCS_ERR_BUSY;
}

void plane::impl::wake() {
  if (sleeping.exchange(false)) {
    uint64_t one = 1;
    static_cast<void>(::write(wake_fd, &one, sizeof(one)));
  }
}

void plane::impl::wake_driver() {
  if (driver_sleeping.exchange(false)) {
    uint64_t one = 1;
    static_cast<void>(::write(driver_wake_fd, &one, sizeof(one)));
  }
}

bool plane::impl::watch_worker_fd() {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = worker_fd;
  return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, worker_fd, &ev) == 0
         || errno == EEXIST;
}

void plane::impl::idle() {
  if (handlers.on_idle)
    handlers.on_idle();
  wake_driver();
}

void plane::impl::run() {
  for (;;) {
    run_copies();
    idle();
    {
      std::lock_guard<std::recursive_mutex> guard{ucx_mtx};
      if (stopping)
        break;
      progress_all();
      if (work_ready())
        continue;
      sleeping.store(true);
      // (A hold let go of between the two checks finds `sleeping` set and
      // wakes this thread.)
      if (work_ready() || ucp_worker_arm(worker) == UCS_ERR_BUSY) {
        sleeping.store(false);
        continue;
      }
    }
    // (What it does may wake this thread again: the wake finds `sleeping`
    // set and the wait returns at once.)
    idle();
    // (A driver that could not give UCX's fd back leaves this thread to
    // look for its events every millisecond until it can: see drive.)
    if (fd_lost.load() && watch_worker_fd())
      fd_lost = false;
    epoll_event events[2];
    auto n = epoll_wait(epoll_fd, events, 2, fd_lost.load() ? 1 : -1);
    sleeping.store(false);
    drain(events, n, wake_fd);
  }
  {
    std::lock_guard<std::recursive_mutex> guard{ucx_mtx};
    shut_down();
    closed = true;
  }
  run_copies(); // (Fails those left: the plane is closed.)
  // What the last progress delivered may owe a wake too.
  idle();
}

bool plane::drive(const std::function<bool()>& done,
                  std::chrono::steady_clock::time_point until) {
  auto* d = impl_.get();
  std::unique_lock<std::mutex> one{d->driver_mtx, std::try_to_lock};
  if (!one.owns_lock() || d->fd_lost.load())
    return false;
  // UCX's events wake this thread alone from here on.
  if (epoll_ctl(d->epoll_fd, EPOLL_CTL_DEL, d->worker_fd, nullptr) != 0)
    return false;
  bool result = false;
  for (;;) {
    {
      std::lock_guard<std::recursive_mutex> guard{d->ucx_mtx};
      if (d->stopping || d->closed)
        break;
      d->progress_all();
    }
    if (d->handlers.on_idle)
      d->handlers.on_idle();
    if (done()) {
      result = true;
      break;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= until)
      break;
    d->driver_sleeping.store(true);
    bool busy = d->arm_busy();
    // (What the progress thread delivers from here on wakes this thread:
    // it finds `driver_sleeping` set.)
    if (busy || done()) {
      d->driver_sleeping.store(false);
      continue;
    }
    // In slices of at most `driver_slice`: what reaches the caller by a
    // way that wakes no driver (a worker run by CAF's threads) is seen
    // within one.
    auto left
      = std::min(std::chrono::ceil<std::chrono::milliseconds>(until - now),
                 impl::driver_slice);
    epoll_event events[2];
    auto n = epoll_wait(d->driver_epoll, events, 2,
                        static_cast<int>(left.count()));
    d->driver_sleeping.store(false);
    drain(events, n, d->driver_wake_fd);
  }
  // The progress thread watches UCX's events again, the worker armed (or
  // woken to progress what arrived since).
  bool busy = d->arm_busy();
  if (!d->watch_worker_fd()) {
    // (The progress thread tries again, and polls meanwhile.)
    d->fd_lost = true;
    busy = true;
  }
  if (busy) {
    d->sleeping = true; // (Wakes it even if it is on its way to sleep.)
    d->wake();
  }
  if (result)
    d->caller_receives.fetch_add(1);
  return result;
}

void plane::wake_driver() {
  impl_->wake_driver();
}

} // namespace actorps::ucx
