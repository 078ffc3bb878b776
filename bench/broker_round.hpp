// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/system.hpp"

/// The broker round: the least work a summing push+pull round can do through
/// CAF 0.17's network layer (io::middleman), with no actor in between. Two
/// io brokers in two processes exchange raw bytes over one connection; no
/// BASP, no serialization, no scheduler hop. Per round, the client copies its
/// payload into the connection's write buffer; the server receives it in
/// place (into a buffer of the right size swapped in, so nothing is zeroed
/// first), adds it into its weights and sends the weights back (copied into
/// the write buffer, as it keeps them); the client receives them in place
/// and copies them out. That is one copy into CAF's write buffer per
/// direction (CAF 0.17 sends only from a std::vector<char> it owns), the
/// kernel's two copies, the sum and the copy out: a ceiling for any design
/// that moves tensors through CAF 0.17's network layer.
namespace actorps::bench {

/// Serves broker rounds on a free loopback port: prints "port N", then runs
/// until the client closes its connection (or is silent for `idle`).
int role_broker_server(system_options sys, std::chrono::milliseconds idle);

/// Connects to the server at `host`:`port` and runs `warmup` + `rounds`
/// rounds of each of `sizes` (bytes, multiples of 4 from 4); prints
/// "broker BYTES MEDIAN_US" per size, or "error TEXT".
int role_broker_client(const std::string& host, uint16_t port,
                       const std::vector<uint64_t>& sizes, uint32_t warmup,
                       uint32_t rounds, system_options sys,
                       std::chrono::milliseconds timeout);

} // namespace actorps::bench
