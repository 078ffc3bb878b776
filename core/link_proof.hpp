// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// The handshake that opens every plain TCP connection of a job that has a
// token, before CAF's BASP sees a byte: each side proves it holds the job's
// link secret (derived from the token) to the other, by an HMAC over both
// sides' fresh nonces. A peer that cannot prove it never reaches BASP: it
// cannot claim a node id, address an actor, send an exit message or make
// the process allocate what a header declares. Nothing secret travels: an
// eavesdropper sees nonces and MACs that are of no use on another
// connection. No CAF here: runtime/proof.cpp drives it on a socket.
//
// On the wire, each side sends at once its hello (4 bytes "APL1" and a
// 32-byte nonce); on the peer's hello it sends its proof, HMAC-SHA256 under
// the link secret of a label, its role (client or server: a proof cannot be
// reflected back) and the two nonces, the peer's first. Exactly 68 bytes
// each way; every read is of a size fixed here, never one a peer named.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace actorps::core {

/// HMAC-SHA256 of `label` under `token`: a secret for one use (the link
/// handshake, the UCX data plane, a join) that only holders of the token
/// can compute, and from which the token cannot be recovered. Empty for an
/// empty token (a job without a token has no secrets).
std::string derive_secret(std::string_view token, std::string_view label);

/// Worker `rank`'s own secret on the UCX data plane: derived from the
/// job's rank key, which only the coordinator and the servers hold, so a
/// worker cannot compute another rank's (see job_info::rank_secret).
std::string worker_secret(std::string_view rank_key, uint32_t rank);

/// `n` bytes from OpenSSL's random generator (empty if it fails).
std::string random_bytes(std::size_t n);

/// The link secret of a job whose token is `token` ("" for none).
std::string link_secret(std::string_view token);

/// What a node presents at join instead of the token itself ("" for none),
/// so that the token never travels, even inside TLS.
std::string join_proof(std::string_view token);

/// One side of the handshake on one connection.
class link_proof {
public:
  /// Bytes of a hello: magic and nonce.
  static constexpr std::size_t hello_size = 36;
  /// Bytes of a proof.
  static constexpr std::size_t proof_size = 32;

  enum class state { running, done, failed };

  /// Starts a handshake under `secret` (not empty), as the connecting side
  /// (`client`) or the accepting one, with a fresh random nonce; its hello
  /// is pending at once.
  link_proof(std::string secret, bool client);

  /// Starts with the given nonce (tests, fuzzing).
  link_proof(std::string secret, bool client,
             const std::array<unsigned char, 32>& nonce);

  /// Bytes to send now, in order.
  const std::vector<unsigned char>& pending() const noexcept {
    return out_;
  }

  /// The first `n` pending bytes left.
  void sent(std::size_t n);

  /// How many bytes to read next: never more than the handshake has left
  /// to read, so that what the peer sends after it stays in the socket for
  /// BASP (0 once the peer's proof arrived or the handshake failed).
  std::size_t wanted() const noexcept;

  /// Takes `n` bytes read (at most `wanted()`; more are a failure).
  void received(const unsigned char* data, std::size_t n);

  /// Done once the peer proved the secret and our proof left; failed for
  /// good on a foreign hello or a wrong proof.
  state status() const noexcept;

  /// True once the peer's hello arrived and our proof left: a peer that
  /// closes the connection now refused the proof.
  bool answered() const noexcept {
    return failure_.empty() && in_.size() >= hello_size && out_.empty();
  }

  /// True if it failed on the peer's proof (a wrong one: another token).
  bool wrong_proof() const noexcept {
    return wrong_proof_;
  }

  /// Why it failed ("" unless failed).
  const std::string& failure() const noexcept {
    return failure_;
  }

private:
  std::array<unsigned char, 32> mac(bool client_side,
                                    const unsigned char* first_nonce,
                                    const unsigned char* second_nonce) const;

  void fail(std::string why);

  std::string secret_;
  bool client_;
  std::array<unsigned char, 32> nonce_{};
  std::vector<unsigned char> out_;
  std::vector<unsigned char> in_;
  bool peer_proved_ = false;
  bool wrong_proof_ = false;
  std::string failure_;
};

} // namespace actorps::core
