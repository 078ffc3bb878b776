// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Listening without letting a peer that was not admitted make this process
// allocate what a message header declares, and connecting over TLS or with
// the proof of the job's token.
// Internal: used by runtime/connect.hpp.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "caf/actor_control_block.hpp"
#include "caf/expected.hpp"
#include "caf/fwd.hpp"

namespace actorps {

/// The largest message (BASP payload) a connection may announce before its
/// peer's node is admitted to the job (actors/trust.hpp): a join, a
/// handshake and a refusal fit many times over.
constexpr std::size_t unadmitted_message_cap = std::size_t{64} << 10;

/// The largest message any guarded connection of this process accepts,
/// admitted peer or not (core::message_cap of the job; until a process
/// knows its job, core::min_message_cap plus headers). A connection whose
/// peer announces more is closed before CAF allocates it. Thread-safe.
void set_message_cap(uint64_t bytes);
uint64_t message_cap_in_process();

/// True if `sys` was made by a `system_config` with TLS files: its
/// connections then speak mutual TLS (runtime/tls.hpp).
bool tls_enabled(const caf::actor_system& sys);

/// How long connecting over TLS may take (TCP, handshakes, BASP).
constexpr auto connect_timeout = std::chrono::seconds{30};

/// Publishes `whom` (implementing `sigs`) on `port` at `host` ("": every
/// interface) over TCP, or TLS when `tls_enabled(sys)`, like CAF's publish
/// with reuse_addr, except
/// that each connection it accepts is closed when a message header announces
/// more than `unadmitted_message_cap` bytes while the connection's node (the
/// one its BASP handshake named) is not admitted in this process: before
/// CAF allocates the payload.
caf::expected<uint16_t> publish_guarded(caf::actor_system& sys,
                                        caf::strong_actor_ptr whom,
                                        std::set<std::string> sigs,
                                        uint16_t port, const std::string& host);

/// "host:port" of the latest connection whose BASP handshake named `node`
/// (a guarded connection of this process, accepted or opened); "" if none.
/// Thread-safe.
std::string peer_address(const caf::node_id& node);

/// Connects over TLS, with the proof of the token, or (a system with
/// neither) over plain TCP to the actor published at `host`:`port`, which
/// must implement `sigs` (a handle type's message types). A peer that
/// closes the connection during the proof gives `unauthorized`. Unlike
/// CAF's remote_actor, the connection is given the whole connection timeout
/// for its handshake (see guard.cpp).
caf::expected<caf::strong_actor_ptr>
connect_linked(caf::actor_system& sys, const std::string& host, uint16_t port,
               const std::set<std::string>& sigs);

} // namespace actorps
