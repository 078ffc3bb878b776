// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// The yardstick roles that run inside CAF: the BASP echo (a float payload
// each way between two actor systems, CAF's network layer alone) and the
// broker round's client (bench/broker_round.hpp). The harness starts them
// as child processes (bench/dist.hpp, run_yardstick).

#include <chrono>
#include <string>

#include "bench/cases.hpp"
#include "runtime/system_options.hpp"

namespace actorps::bench {

/// Publishes an echo actor on a free loopback port, prints "port N", and
/// runs until its client is gone (or silent for `idle`).
int role_basp_echo(system_options sys, std::chrono::milliseconds idle);

/// Sends one `floats` of each size in `sizes_text` (bytes, comma-separated)
/// to the echo at `address` and waits for it to come back, warm-up rounds
/// first; prints "basp BYTES MEDIAN_US" per size.
int role_basp_client(const std::string& address, const std::string& sizes_text,
                     const round_plan& plan, system_options sys,
                     std::chrono::milliseconds timeout);

/// The broker round's client role: parses its address and sizes, then runs
/// the rounds (bench/broker_round.hpp).
int run_broker_client(const std::string& address, const std::string& sizes_text,
                      const round_plan& plan, const system_options& sys,
                      std::chrono::milliseconds timeout);

} // namespace actorps::bench
