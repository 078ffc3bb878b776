// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// A coordinator run as actorps-coordinator runs it, on a thread of its own.

#include <chrono>
#include <future>
#include <thread>

#include <catch2/catch.hpp>

#include "caf/error.hpp"

#include "runtime/network.hpp"

namespace actorps::test {

class coordinator_thread {
public:
  /// Starts `run_coordinator(opts)`; returns once it listens (REQUIREd
  /// within 10 s).
  explicit coordinator_thread(coordinator_options opts) {
    std::promise<uint16_t> listening;
    auto port = listening.get_future();
    thread_ = std::thread{[this, opts, &listening] {
      err_ = run_coordinator(opts, [&listening](uint16_t p) {
        listening.set_value(p);
      });
    }};
    REQUIRE(port.wait_for(std::chrono::seconds{10})
            == std::future_status::ready);
    port_ = port.get();
  }

  uint16_t port() const noexcept {
    return port_;
  }

  /// Waits for the job's end; what run_coordinator returned.
  caf::error join() {
    if (thread_.joinable())
      thread_.join();
    return err_;
  }

  ~coordinator_thread() {
    if (thread_.joinable())
      thread_.join();
  }

  coordinator_thread(const coordinator_thread&) = delete;
  coordinator_thread& operator=(const coordinator_thread&) = delete;

private:
  std::thread thread_;
  uint16_t port_ = 0;
  caf::error err_;
};

} // namespace actorps::test
