// SPDX-License-Identifier: BSD-3-Clause
#include "actors/run_here.hpp"

#include <algorithm>
#include <cstddef>
#include <thread>

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
// unit as an actor's last context) goes to the scheduler. One per thread,
// so that an actor's last context stays valid after the pass.
class here_unit : public caf::execution_unit {
public:
  void exec_later(caf::resumable* job) override {
    if (catching_ && owner_ == std::this_thread::get_id() && job_ == nullptr) {
      job_ = job;
      return;
    }
    system().scheduler().enqueue(job);
  }

  void run(caf::abstract_actor* dest, caf::mailbox_element_ptr what) {
    if (running_) {
      // (Called while this thread runs an actor: no nesting.)
      dest->enqueue(std::move(what), nullptr);
      return;
    }
    system_ = &dest->home_system();
    owner_ = std::this_thread::get_id();
    catching_ = true;
    dest->enqueue(std::move(what), this);
    catching_ = false;
    auto* job = job_;
    job_ = nullptr;
    if (job == nullptr)
      return;
    running_ = true;
    // (A few messages at most: the thread has work of its own.)
    auto result = job->resume(
      this, std::min<std::size_t>(system().scheduler().max_throughput(), 8));
    running_ = false;
    switch (result) {
      case caf::resumable::resume_later:
        // (The reference taken when it was woken goes with it.)
        system().scheduler().enqueue(job);
        break;
      default:
        caf::intrusive_ptr_release(job);
        break;
    }
  }

private:
  std::thread::id owner_;
  bool catching_ = false;
  bool running_ = false;
  caf::resumable* job_ = nullptr;
};

} // namespace

bool can_run_here(caf::actor_system& sys) {
  using sharing = caf::scheduler::coordinator<caf::policy::work_sharing>;
  return dynamic_cast<sharing*>(&sys.scheduler()) != nullptr;
}

void send_and_run(const caf::strong_actor_ptr& sender, caf::message_id mid,
                  const caf::actor& dest, caf::message msg) {
  if (!dest)
    return;
  if (!can_run_here(dest->home_system())) {
    caf::actor_cast<caf::abstract_actor*>(dest)->enqueue(
      caf::make_mailbox_element(sender, mid, {}, std::move(msg)), nullptr);
    return;
  }
  thread_local here_unit unit;
  unit.run(caf::actor_cast<caf::abstract_actor*>(dest),
           caf::make_mailbox_element(sender, mid, {}, std::move(msg)));
}

} // namespace actorps::detail
