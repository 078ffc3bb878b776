// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// A connection (scribe) that shakes hands before CAF's BASP broker reads or
// writes a byte of it: mutual TLS (runtime/tls.hpp) or, on plain TCP in a
// job with a token, the proof of the token (runtime/proof.hpp). What the
// broker writes meanwhile waits; a failed handshake closes the connection
// as a failed read would, and an accepted one is logged on stderr (at most
// once a second).
// Internal: used by runtime/guard.cpp.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "caf/io/network/native_socket.hpp"
#include "caf/io/network/rw_state.hpp"
#include "caf/io/scribe.hpp"

namespace caf::io::network {
class default_multiplexer;
} // namespace caf::io::network

namespace actorps {

/// What a connection speaks under BASP: a handshake, then how its bytes
/// move. One per connection; every call comes from the network thread.
class link_session {
public:
  /// Where a handshake stands after a step.
  enum class step { done, want_read, want_write, failed };

  virtual ~link_session();

  /// Advances the handshake on the non-blocking socket `fd`.
  virtual step shake(caf::io::network::native_socket fd) = 0;

  /// Why the handshake failed.
  virtual std::string failure() const = 0;

  /// Reads up to `len` bytes (after the handshake).
  virtual caf::io::network::rw_state
  read_some(std::size_t& result, caf::io::network::native_socket fd, void* buf,
            std::size_t len)
    = 0;

  /// Writes up to `len` bytes (after the handshake).
  virtual caf::io::network::rw_state
  write_some(std::size_t& result, caf::io::network::native_socket fd,
             const void* buf, std::size_t len)
    = 0;

  /// True if the session holds read bytes that epoll cannot see.
  virtual bool buffered() const;

  /// After a failed handshake: true if the peer refused this side's proof
  /// or gave a wrong one (a job with another token), not merely went away.
  virtual bool refused() const;

  /// Accepting side, after the handshake: the worker rank the peer proved
  /// (core::identity_proof), or core::identity_proof::no_rank.
  virtual uint32_t proven_rank() const;
};

class link_stream;

/// A connection whose bytes travel through `session`, opened by this side
/// (`client`) or accepted. It shakes hands as soon as it exists; what the
/// broker writes meanwhile waits until the peer passed the handshake. An
/// accepted connection whose peer fails the handshake is logged.
class link_scribe : public caf::io::scribe {
public:
  link_scribe(caf::io::network::default_multiplexer& mx,
              caf::io::network::native_socket fd,
              std::unique_ptr<link_session> session, bool client);

  ~link_scribe() override;

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

  /// True while the handshake neither succeeded nor failed.
  bool shaking() const;

  /// The worker rank the peer proved in the handshake (accepting side;
  /// link_session::proven_rank).
  uint32_t proven_rank() const;

  /// Gives up on a handshake still going on: the connection closes as if
  /// it had failed.
  void expire();

  /// Runs `f` once, in the network thread, when the handshake succeeded or
  /// failed.
  void when_handshake_ends(std::function<void()> f);

  /// Sets `*flag` when a connecting side's handshake fails because the
  /// peer refused its proof or gave a wrong one (link_session::refused).
  void report_refusal_to(std::shared_ptr<std::atomic<bool>> flag);

private:
  friend class link_stream;

  // Called by the stream once the handshake succeeded.
  void established();

  // Called by the stream once the handshake succeeded or failed.
  void handshake_ended();

  // Called by a connecting side's stream when the peer refused it.
  void refused();

  bool launched_ = false;
  bool flush_pending_ = false;
  std::function<void()> on_end_;
  std::shared_ptr<std::atomic<bool>> refusal_;
  std::unique_ptr<link_stream> stream_;
};

} // namespace actorps
