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
#include <cstdint>
#include <functional>
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

/// Fills `n` bytes at `out` from the kernel's generator (getrandom(2));
/// false if it fails. Unlike OpenSSL's RAND_bytes it keeps no state per
/// thread, which a thread nobody joins (a shard's own thread) could still
/// hold when the process ends (LeakSanitizer reported it).
bool fill_random(void* out, std::size_t n);

/// `n` random bytes (fill_random; empty if it fails).
std::string random_bytes(std::size_t n);

/// The link secret of a job whose token is `token` ("" for none).
std::string link_secret(std::string_view token);

/// What a node presents at join instead of the token itself ("" for none),
/// so that the token never travels, even inside TLS.
std::string join_proof(std::string_view token);

/// What a server presents at join in a job whose servers hold a token of
/// their own (--server-token-file): the role is then told apart, and a
/// holder of the job token alone cannot join as a server.
std::string server_join_proof(std::string_view server_token);

namespace detail {

/// What both exchanges below keep: the bytes to send, those read, and why
/// the exchange failed.
class exchange {
public:
  /// Bytes to send now, in order.
  const std::vector<unsigned char>& pending() const noexcept {
    return out_;
  }

  /// The first `n` pending bytes left.
  void sent(std::size_t n);

  /// Why it failed ("" unless failed).
  const std::string& failure() const noexcept {
    return failure_;
  }

protected:
  /// Fails for good (the first reason stays); nothing more goes out.
  void fail(std::string why);

  std::vector<unsigned char> out_;
  std::vector<unsigned char> in_;
  std::string failure_;
};

/// HMAC-SHA256 of the `size` bytes at `msg` under `key`.
std::array<unsigned char, 32>
hmac_sha256(std::string_view key, const unsigned char* msg, std::size_t size);

} // namespace detail

/// One side of the handshake on one connection.
class link_proof : public detail::exchange {
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

private:
  std::array<unsigned char, 32> mac(bool client_side,
                                    const unsigned char* first_nonce,
                                    const unsigned char* second_nonce) const;

  std::string secret_;
  bool client_;
  std::array<unsigned char, 32> nonce_{};
  bool peer_proved_ = false;
  bool wrong_proof_ = false;
};

/// After a connection's handshake (the proof of the token, or TLS), which
/// worker rank the connecting side speaks for: the accepting side sends a
/// challenge ("AID1" and a fresh 32-byte nonce), the connecting side
/// answers with a claim: its rank (4 bytes, little endian; `no_rank` for
/// none) and HMAC-SHA256 under that rank's worker secret
/// (core::worker_secret) of a label, the nonce and the rank (zeros for
/// none). Only the coordinator and the servers hold the rank key from
/// which every rank's secret derives, and a worker is handed its own
/// rank's only, so a token holder cannot speak for another worker. A claim
/// answers one nonce: it is of no use on another connection. Fixed sizes
/// each way, as link_proof's.
class identity_proof : public detail::exchange {
public:
  /// Bytes of the accepting side's challenge: magic and nonce.
  static constexpr std::size_t challenge_size = 36;
  /// Bytes of the connecting side's claim: rank and MAC.
  static constexpr std::size_t claim_size = 36;
  /// The rank of a side that speaks for no worker.
  static constexpr uint32_t no_rank = 0xffffffffu;

  /// Worker r's secret, or "" where this side cannot check claims.
  using secret_fn = std::function<std::string(uint32_t)>;

  using state = link_proof::state;

  /// The connecting side, speaking for worker `rank` whose secret is
  /// `secret` (no_rank and "": for none).
  static identity_proof claimant(uint32_t rank, std::string secret);

  /// The accepting side: `secret_of` checks claims (a claim it has no
  /// secret for counts as none); its challenge is pending at once.
  static identity_proof verifier(secret_fn secret_of);

  /// The same with the given nonce (tests, fuzzing).
  static identity_proof verifier(secret_fn secret_of,
                                 const std::array<unsigned char, 32>& nonce);

  /// How many bytes to read next: never more than the exchange has left.
  std::size_t wanted() const noexcept;

  /// Takes `n` bytes read (at most `wanted()`; more are a failure).
  void received(const unsigned char* data, std::size_t n);

  /// Done once the claim arrived and checked (accepting side) or left
  /// (connecting side); failed for good on a foreign challenge or a claim
  /// whose MAC is wrong.
  state status() const noexcept;

  /// Accepting side, once done: the rank the peer proved, or no_rank.
  uint32_t proven_rank() const noexcept {
    return proven_;
  }

  /// The MAC of a claim for `rank` under `secret` answering `nonce`.
  static std::array<unsigned char, 32> claim_mac(const std::string& secret,
                                                 const unsigned char* nonce,
                                                 uint32_t rank);

private:
  identity_proof() = default;

  bool client_ = false;
  uint32_t rank_ = no_rank;
  std::string secret_;
  secret_fn secret_of_;
  std::array<unsigned char, 32> nonce_{};
  bool done_ = false;
  uint32_t proven_ = no_rank;
};

} // namespace actorps::core
