// SPDX-License-Identifier: BSD-3-Clause
#include "actors/run_here.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "caf/abstract_actor.hpp"
#include "caf/actor_cast.hpp"
#include "caf/actor_system.hpp"
#include "caf/execution_unit.hpp"
#include "caf/mailbox_element.hpp"
#include "caf/policy/work_sharing.hpp"
#include "caf/resumable.hpp"
#include "caf/scheduler/abstract_coordinator.hpp"
#include "caf/scheduler/coordinator.hpp"

namespace actorps::detail {

namespace {

// The execution unit of a thread that runs an actor it woke. The first
// actor the enqueue wakes is kept to run here; everything else (what the
// actor wakes while it runs, or a call from another thread that found this
// unit as an actor's last context) goes to that actor's scheduler.
class here_unit : public caf::execution_unit {
public:
  here_unit() : owner_(std::this_thread::get_id()) {
    // nop
  }

  void exec_later(caf::resumable* job) override {
    // (Only the owner ever sets `catching_`: other threads stop at the
    // first test.)
    if (owner_ == std::this_thread::get_id() && catching_ && job_ == nullptr) {
      job_ = job;
      return;
    }
    home_of(job).scheduler().enqueue(job);
  }

  // True if this thread ran `dest`.
  bool run(caf::abstract_actor* dest, caf::mailbox_element_ptr what) {
    if (running_) {
      // (Called while this thread runs an actor: no nesting.)
      dest->enqueue(std::move(what), nullptr);
      return false;
    }
    system_ = &dest->home_system();
    {
      flag on{catching_};
      dest->enqueue(std::move(what), this);
    }
    auto* job = std::exchange(job_, nullptr);
    if (job == nullptr)
      return false;
    caf::resumable::resume_result result;
    {
      flag on{running_};
      // (A few messages at most: the thread has work of its own.)
      result = job->resume(
        this, std::min<std::size_t>(system().scheduler().max_throughput(), 8));
    }
    if (result == caf::resumable::resume_later)
      // (The reference taken when it was woken goes with it.)
      home_of(job).scheduler().enqueue(job);
    else
      caf::intrusive_ptr_release(job);
    return true;
  }

private:
  // Sets a flag for a scope.
  struct flag {
    bool& x;
    explicit flag(bool& ref) : x(ref) {
      x = true;
    }
    ~flag() {
      x = false;
    }
  };

  // The system that schedules `job`: an actor's own, else the one this
  // thread last ran an actor of.
  caf::actor_system& home_of(caf::resumable* job) {
    if (auto* actor = dynamic_cast<caf::abstract_actor*>(job))
      return actor->home_system();
    return system();
  }

  const std::thread::id owner_;
  bool catching_ = false;
  bool running_ = false;
  caf::resumable* job_ = nullptr;
};

// This thread's unit. Units live as long as the process: an actor keeps the
// unit it last ran on as its context until it runs again, maybe after the
// thread is gone (one small object per thread that ever ran an actor here).
here_unit& this_threads_unit() {
  thread_local here_unit* unit = nullptr;
  if (unit == nullptr) {
    static std::mutex mtx;
    static auto* all = new std::vector<std::unique_ptr<here_unit>>;
    auto fresh = std::make_unique<here_unit>();
    unit = fresh.get();
    std::lock_guard<std::mutex> guard{mtx};
    all->push_back(std::move(fresh));
  }
  return *unit;
}

} // namespace

bool can_run_here(caf::actor_system& sys) {
  using sharing = caf::scheduler::coordinator<caf::policy::work_sharing>;
  return dynamic_cast<sharing*>(&sys.scheduler()) != nullptr;
}

bool send_and_run(const caf::strong_actor_ptr& sender, caf::message_id mid,
                  const caf::actor& dest, caf::message msg) {
  if (!dest)
    return false;
  if (!can_run_here(dest->home_system())) {
    caf::actor_cast<caf::abstract_actor*>(dest)->enqueue(
      caf::make_mailbox_element(sender, mid, {}, std::move(msg)), nullptr);
    return false;
  }
  return this_threads_unit().run(caf::actor_cast<caf::abstract_actor*>(dest),
                                 caf::make_mailbox_element(sender, mid, {},
                                                           std::move(msg)));
}

} // namespace actorps::detail
