// SPDX-License-Identifier: BSD-3-Clause
#include "bench/yardsticks.hpp"

#include <algorithm>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/io/middleman.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/stateful_actor.hpp"

#include "bench/broker_round.hpp"
#include "messages/errors.hpp"
#include "runtime/network.hpp"
#include "runtime/system.hpp"

namespace actorps::bench {

namespace {

using clock_type = std::chrono::steady_clock;

// State of the echo actor: whether it watches its client yet.
struct echo_state {
  bool watching = false;
};

// Answers every `floats` with itself (moved: no copy in the process). Quits
// when its client's node goes away, or after `idle` without a message (a
// harness that died never sends one).
caf::behavior echo_actor(caf::stateful_actor<echo_state>* self,
                         std::chrono::milliseconds idle) {
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  return {
    [self](floats& x) -> floats {
      if (!self->state.watching) {
        self->state.watching = true;
        self->monitor(self->current_sender());
      }
      return std::move(x);
    },
    caf::after(idle) >> [self] { self->quit(); },
  };
}

// The address and sizes of a yardstick client role: "host:port" and bytes,
// comma-separated. Prints "error TEXT" and returns nothing if either is bad.
std::optional<std::pair<endpoint, std::vector<uint64_t>>>
parse_client_args(const std::string& address, const std::string& sizes_text) {
  auto where = parse_endpoint(address);
  if (!where) {
    std::cout << "error " << render(where.error()) << std::endl;
    return std::nullopt;
  }
  std::vector<uint64_t> sizes;
  for (const auto& text : split(sizes_text, ',')) {
    uint64_t bytes = 0;
    if (!parse_size(text, bytes)) {
      std::cout << "error bad size '" << text << "'" << std::endl;
      return std::nullopt;
    }
    sizes.push_back(bytes);
  }
  return std::make_pair(std::move(*where), std::move(sizes));
}

} // namespace

// Publishes an echo actor on a free loopback port, prints "port N", and runs
// until its client is gone (or silent for `idle`).
int role_basp_echo(system_options sys, std::chrono::milliseconds idle) {
  sys.network = true;
  system_config cfg{sys};
  caf::actor_system system{cfg};
  auto echo = system.spawn(echo_actor, idle);
  auto port = system.middleman().publish(echo, 0, "127.0.0.1");
  if (!port) {
    caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
    std::cout << "error " << render(port.error()) << std::endl;
    return 1;
  }
  std::cout << "port " << *port << std::endl;
  return 0; // the system's destructor waits for the echo actor
}

// Sends one `floats` of each size in `sizes_text` (bytes, comma-separated)
// to the echo at `address` and waits for it to come back, warm-up rounds
// first; prints "basp BYTES MEDIAN_US" per size.
int role_basp_client(const std::string& address, const std::string& sizes_text,
                     const round_plan& plan, system_options sys,
                     std::chrono::milliseconds timeout) {
  auto args = parse_client_args(address, sizes_text);
  if (!args)
    return 2;
  auto& [where, sizes] = *args;
  sys.network = true;
  system_config cfg{sys};
  caf::actor_system system{cfg};
  auto echo = system.middleman().remote_actor(where.host, where.port);
  if (!echo) {
    std::cout << "error " << render(echo.error()) << std::endl;
    return 1;
  }
  caf::scoped_actor self{system};
  for (auto bytes : sizes) {
    // One message, sent again every round: serialized each time, never
    // copied in this process.
    auto n = bytes / sizeof(float);
    auto msg = caf::make_message(floats{std::vector<float>(n, 1.0f), {}});
    std::vector<double> times;
    for (uint32_t r = 0; r < plan.warmup + plan.rounds; ++r) {
      auto start = clock_type::now();
      // An infinite request and a bounded wait: a timed request would leave
      // its timeout message in a blocking actor's mailbox.
      auto h = self->request(*echo, caf::infinite, msg);
      std::string err;
      caf::blocking_actor::accept_one_cond rc;
      self->varargs_receive(
        rc, h.id(),
        [&](const floats& x) {
          if (x.data.size() != n)
            err = "echoed " + std::to_string(x.data.size()) + " of "
                  + std::to_string(n) + " floats";
        },
        [&](caf::error& e) { err = render(e); },
        caf::after(timeout) >> [&] { err = "no echo in time"; });
      if (!err.empty()) {
        std::cout << "error " << err << std::endl;
        return 1;
      }
      if (r >= plan.warmup)
        times.push_back(
          std::chrono::duration<double>(clock_type::now() - start).count());
    }
    if (times.empty()) {
      std::cout << "error no measured rounds (--rounds 0)" << std::endl;
      return 2;
    }
    std::sort(times.begin(), times.end());
    std::cout << "basp " << bytes << ' ' << times[(times.size() - 1) / 2] * 1e6
              << std::endl;
  }
  return 0;
}

// The broker round's client role: parses its address and sizes, then runs
// the rounds (bench/broker_round.hpp).
int run_broker_client(const std::string& address, const std::string& sizes_text,
                      const round_plan& plan, const system_options& sys,
                      std::chrono::milliseconds timeout) {
  auto args = parse_client_args(address, sizes_text);
  if (!args)
    return 2;
  const auto& [where, sizes] = *args;
  return role_broker_client(where.host, where.port, sizes, plan.warmup,
                            plan.rounds, sys, timeout);
}

} // namespace actorps::bench
