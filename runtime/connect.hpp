// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Publishing and connecting over plain TCP or, when the actor system has TLS
// files (system_options::tls), over mutual TLS (runtime/tls.hpp), or with a
// token (system_options::token), with the proof of it (runtime/proof.hpp).
// Internal: the callers are the runners and the facade, which include CAF's
// network layer anyway.

#include <cstdint>
#include <string>

#include "caf/actor_system.hpp"
#include "caf/expected.hpp"
#include "caf/io/middleman.hpp"

#include "runtime/guard.hpp"

namespace actorps {

/// Publishes `whom` on `port` (0: a free one) at `host` ("": every
/// interface; the address may be reused at once) and returns the port. On
/// plain TCP, a connection whose node was not admitted cannot announce a
/// message over `unadmitted_message_cap` (runtime/guard.hpp); over TLS, a
/// peer without a certificate of the job's CA never gets past the
/// handshake, nor, on plain TCP in a system with a token, a peer that
/// cannot prove it.
template <class Handle>
caf::expected<uint16_t> publish_actor(caf::actor_system& sys,
                                      const Handle& whom, uint16_t port,
                                      const std::string& host) {
  caf::detail::type_list<Handle> tk;
  return publish_guarded(sys, caf::actor_cast<caf::strong_actor_ptr>(whom),
                         sys.message_types(tk), port, host);
}

/// Connects to the `Handle` published at `host`:`port`.
template <class Handle>
caf::expected<Handle>
connect_actor(caf::actor_system& sys, const std::string& host, uint16_t port) {
  caf::detail::type_list<Handle> tk;
  auto ptr = connect_linked(sys, host, port, sys.message_types(tk));
  if (!ptr)
    return std::move(ptr.error());
  return caf::actor_cast<Handle>(std::move(*ptr));
}

} // namespace actorps
