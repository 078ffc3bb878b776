// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Listening on plain TCP without letting a peer that was not admitted make
// this process allocate what a message header declares. Internal: used by
// runtime/connect.hpp.

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

/// Publishes `whom` (implementing `sigs`) on `port` at `host` ("": every
/// interface) over plain TCP, like CAF's publish with reuse_addr, except
/// that each connection it accepts is closed when a message header announces
/// more than `unadmitted_message_cap` bytes while the connection's node (the
/// one its BASP handshake named) is not admitted in this process: before
/// CAF allocates the payload.
caf::expected<uint16_t> publish_guarded(caf::actor_system& sys,
                                        caf::strong_actor_ptr whom,
                                        std::set<std::string> sigs,
                                        uint16_t port, const std::string& host);

} // namespace actorps
