// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Publishing and connecting over plain TCP or, when the actor system loaded
// CAF's OpenSSL module (system_options::tls), over mutual TLS. Internal: the
// callers are the runners and the facade, which include CAF's network layer
// anyway.

#include <cstdint>
#include <string>

#include "caf/actor_system.hpp"
#include "caf/expected.hpp"
#include "caf/io/middleman.hpp"
#include "caf/openssl/publish.hpp"
#include "caf/openssl/remote_actor.hpp"

#include "runtime/guard.hpp"

namespace actorps {

/// Publishes `whom` on `port` (0: a free one) at `host` ("": every
/// interface; the address may be reused at once) and returns the port. On
/// plain TCP, a connection whose node was not admitted cannot announce a
/// message over `unadmitted_message_cap` (runtime/guard.hpp); over TLS,
/// such a peer never gets past the handshake.
template <class Handle>
caf::expected<uint16_t> publish_actor(caf::actor_system& sys,
                                      const Handle& whom, uint16_t port,
                                      const std::string& host) {
  if (sys.has_openssl_manager())
    return caf::openssl::publish(whom, port,
                                 host.empty() ? nullptr : host.c_str(), true);
  caf::detail::type_list<Handle> tk;
  return publish_guarded(sys, caf::actor_cast<caf::strong_actor_ptr>(whom),
                         sys.message_types(tk), port, host);
}

/// Connects to the `Handle` published at `host`:`port`.
template <class Handle>
caf::expected<Handle>
connect_actor(caf::actor_system& sys, const std::string& host, uint16_t port) {
  if (sys.has_openssl_manager())
    return caf::openssl::remote_actor<Handle>(sys, host, port);
  return sys.middleman().remote_actor<Handle>(host, port);
}

} // namespace actorps
