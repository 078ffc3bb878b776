// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Mutual TLS under CAF's network layer: the session of a connection
// (runtime/link.hpp) that speaks TLS through OpenSSL, for the BASP broker as
// CAF's own scribes speak TCP. Internal: used by runtime/guard.cpp.
//
// Why not CAF 0.17's OpenSSL module: it asks SSL_get_error without clearing
// the thread's OpenSSL error queue first, and reports errors only to a log
// that Debian's build compiles out, so the error one connection left (a
// peer that went away without closing TLS, a peer that failed the
// handshake) closes the next connection that merely has nothing to read
// (measured: ~15% of 4-node jobs lost a connection when a worker exited).
// It also spins while a handshake waits for the peer, and loads the
// certificate files again for every connection.

#include <cstdint>
#include <memory>
#include <string>

#include "caf/expected.hpp"

struct ssl_ctx_st;

namespace actorps {

struct tls_files;

/// The TLS settings of one actor system's connections: its certificate and
/// key, the CA whose certificates it accepts (and requires) of every peer.
using tls_context = std::shared_ptr<ssl_ctx_st>;

/// Loads `files` into a context (TLS 1.2 or later, a peer certificate
/// required and checked against the CA): a `bad_config` error naming the
/// file that does not load.
caf::expected<tls_context> make_tls_context(const tls_files& files);

class link_session;

/// The TLS side of one connection under `ctx`, as the connecting side
/// (`client`) or the accepting one, for a `link_scribe` (runtime/link.hpp):
/// its handshake requires the peer's certificate, signed by the CA.
std::unique_ptr<link_session> make_tls_session(const tls_context& ctx,
                                               bool client);

} // namespace actorps
