// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Mutual TLS under CAF's network layer: a connection (scribe) that speaks
// TLS through OpenSSL, for the BASP broker as CAF's own scribes speak TCP.
// Internal: used by runtime/guard.cpp.
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
#include <vector>

#include "caf/expected.hpp"
#include "caf/io/network/native_socket.hpp"
#include "caf/io/scribe.hpp"

struct ssl_ctx_st;
struct ssl_st;

namespace caf::io::network {
class default_multiplexer;
} // namespace caf::io::network

namespace actorps {

struct tls_files;

/// The TLS settings of one actor system's connections: its certificate and
/// key, the CA whose certificates it accepts (and requires) of every peer.
using tls_context = std::shared_ptr<ssl_ctx_st>;

/// Loads `files` into a context (TLS 1.2 or later, a peer certificate
/// required and checked against the CA): a `bad_config` error naming the
/// file that does not load.
caf::expected<tls_context> make_tls_context(const tls_files& files);

class tls_stream;

/// A connection whose bytes travel through TLS. It shakes hands as soon as
/// it exists (as the client or the accepting side); what the broker writes
/// meanwhile waits until the peer proved its certificate. A failed handshake
/// closes the connection as a failed read would.
class tls_scribe : public caf::io::scribe {
public:
  tls_scribe(caf::io::network::default_multiplexer& mx,
             caf::io::network::native_socket fd, const tls_context& ctx,
             bool client);

  ~tls_scribe() override;

  void configure_read(caf::io::receive_policy::config config) override;
  void ack_writes(bool enable) override;
  std::vector<char>& wr_buf() override;
  std::vector<char>& rd_buf() override;
  void graceful_shutdown() override;
  void flush() override;
  std::string addr() const override;
  uint16_t port() const override;
  void add_to_loop() override;
  void remove_from_loop() override;

private:
  friend class tls_stream;

  // Called by the stream once the handshake succeeded.
  void established();

  bool launched_ = false;
  bool flush_pending_ = false;
  std::unique_ptr<tls_stream> stream_;
};

} // namespace actorps
