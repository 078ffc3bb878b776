// SPDX-License-Identifier: BSD-3-Clause
#include "core/link_proof.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

namespace actorps::core {

namespace {

constexpr unsigned char magic[4] = {'A', 'P', 'L', '1'};
constexpr char proof_label[] = "actorps link proof v1";
constexpr unsigned char identity_magic[4] = {'A', 'I', 'D', '1'};
constexpr char identity_label[] = "actorps worker identity v1";

std::array<unsigned char, 32> fresh_nonce(const char* what) {
  std::array<unsigned char, 32> nonce{};
  if (!fill_random(nonce.data(), nonce.size()))
    throw std::runtime_error(std::string{what}
                             + ": no random bytes for a nonce");
  return nonce;
}

void put_u32(unsigned char* at, uint32_t x) {
  for (int i = 0; i < 4; ++i)
    at[i] = static_cast<unsigned char>(x >> (8 * i));
}

uint32_t get_u32(const unsigned char* at) {
  uint32_t x = 0;
  for (int i = 0; i < 4; ++i)
    x |= static_cast<uint32_t>(at[i]) << (8 * i);
  return x;
}

} // namespace

namespace detail {

void exchange::sent(std::size_t n) {
  out_.erase(out_.begin(),
             out_.begin()
               + static_cast<std::ptrdiff_t>(std::min(n, out_.size())));
}

void exchange::fail(std::string why) {
  if (failure_.empty())
    failure_ = std::move(why);
  out_.clear();
}

std::array<unsigned char, 32>
hmac_sha256(std::string_view key, const unsigned char* msg, std::size_t size) {
  std::array<unsigned char, 32> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg, size,
       out.data(), &len);
  return out;
}

} // namespace detail

std::string derive_secret(std::string_view token, std::string_view label) {
  if (token.empty())
    return {};
  auto mac = detail::hmac_sha256(
    token, reinterpret_cast<const unsigned char*>(label.data()), label.size());
  return std::string(reinterpret_cast<const char*>(mac.data()), mac.size());
}

std::string worker_secret(std::string_view rank_key, uint32_t rank) {
  return derive_secret(rank_key,
                       "actorps ucx worker " + std::to_string(rank) + " v1");
}

bool fill_random(void* out, std::size_t n) {
  auto* at = static_cast<unsigned char*>(out);
  while (n > 0) {
    auto got = ::getrandom(at, n, 0);
    if (got < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    at += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

std::string random_bytes(std::size_t n) {
  std::string out(n, '\0');
  if (!fill_random(out.data(), n))
    return {};
  return out;
}

std::string link_secret(std::string_view token) {
  return derive_secret(token, "actorps link secret v1");
}

std::string join_proof(std::string_view token) {
  return derive_secret(token, "actorps join proof v1");
}

std::string server_join_proof(std::string_view server_token) {
  return derive_secret(server_token, "actorps server join proof v1");
}

link_proof::link_proof(std::string secret, bool client)
  : link_proof(std::move(secret), client, fresh_nonce("link proof")) {
  // nop
}

link_proof::link_proof(std::string secret, bool client,
                       const std::array<unsigned char, 32>& nonce)
  : secret_(std::move(secret)), client_(client), nonce_(nonce) {
  out_.resize(hello_size);
  std::memcpy(out_.data(), magic, sizeof(magic));
  std::memcpy(out_.data() + sizeof(magic), nonce_.data(), nonce_.size());
  in_.reserve(hello_size + proof_size);
}

std::size_t link_proof::wanted() const noexcept {
  if (!failure_.empty() || peer_proved_)
    return 0;
  return hello_size + proof_size - in_.size();
}

void link_proof::received(const unsigned char* data, std::size_t n) {
  if (n > wanted()) {
    fail("more handshake bytes than asked for");
    return;
  }
  auto before = in_.size();
  in_.insert(in_.end(), data, data + n);
  // The magic is checked as soon as it could be: a stranger is cut off
  // without waiting for a whole hello it may never send.
  auto seen = std::min(in_.size(), sizeof(magic));
  if (before < sizeof(magic) && std::memcmp(in_.data(), magic, seen) != 0) {
    fail("the peer does not open with an actorps link hello (another "
         "program, or a node of a job without a token or with TLS)");
    return;
  }
  if (before < hello_size && in_.size() >= hello_size) {
    // Our proof: our role, the peer's nonce, then ours.
    auto ours = mac(client_, in_.data() + sizeof(magic), nonce_.data());
    out_.insert(out_.end(), ours.begin(), ours.end());
  }
  if (in_.size() == hello_size + proof_size) {
    auto theirs = mac(!client_, nonce_.data(), in_.data() + sizeof(magic));
    if (CRYPTO_memcmp(theirs.data(), in_.data() + hello_size, proof_size)
        != 0) {
      fail("the peer does not hold this job's token");
      wrong_proof_ = true;
      return;
    }
    peer_proved_ = true;
  }
}

link_proof::state link_proof::status() const noexcept {
  if (!failure_.empty())
    return state::failed;
  return peer_proved_ && out_.empty() ? state::done : state::running;
}

std::array<unsigned char, 32>
link_proof::mac(bool client_side, const unsigned char* first_nonce,
                const unsigned char* second_nonce) const {
  constexpr auto label_size = sizeof(proof_label) - 1;
  std::array<unsigned char, label_size + 1 + 64> msg{};
  std::memcpy(msg.data(), proof_label, label_size);
  msg[label_size] = client_side ? 'c' : 's';
  std::memcpy(msg.data() + label_size + 1, first_nonce, 32);
  std::memcpy(msg.data() + label_size + 33, second_nonce, 32);
  return detail::hmac_sha256(secret_, msg.data(), msg.size());
}

identity_proof identity_proof::claimant(uint32_t rank, std::string secret) {
  identity_proof x;
  x.client_ = true;
  x.rank_ = secret.empty() ? no_rank : rank;
  x.secret_ = std::move(secret);
  x.in_.reserve(challenge_size);
  return x;
}

identity_proof identity_proof::verifier(secret_fn secret_of) {
  return verifier(std::move(secret_of), fresh_nonce("identity proof"));
}

identity_proof
identity_proof::verifier(secret_fn secret_of,
                         const std::array<unsigned char, 32>& nonce) {
  identity_proof x;
  x.secret_of_ = std::move(secret_of);
  x.nonce_ = nonce;
  x.out_.resize(challenge_size);
  std::memcpy(x.out_.data(), identity_magic, sizeof(identity_magic));
  std::memcpy(x.out_.data() + sizeof(identity_magic), nonce.data(),
              nonce.size());
  x.in_.reserve(claim_size);
  return x;
}

std::size_t identity_proof::wanted() const noexcept {
  if (!failure_.empty() || done_)
    return 0;
  return (client_ ? challenge_size : claim_size) - in_.size();
}

void identity_proof::received(const unsigned char* data, std::size_t n) {
  if (n > wanted()) {
    fail("more identity bytes than asked for");
    return;
  }
  auto before = in_.size();
  in_.insert(in_.end(), data, data + n);
  if (client_) {
    auto seen = std::min(in_.size(), sizeof(identity_magic));
    if (before < sizeof(identity_magic)
        && std::memcmp(in_.data(), identity_magic, seen) != 0) {
      fail("the peer does not open with an actorps identity challenge");
      return;
    }
    if (in_.size() < challenge_size)
      return;
    // Our claim: the rank, then the MAC of the peer's nonce (zeros for
    // none).
    std::array<unsigned char, claim_size> claim{};
    put_u32(claim.data(), rank_);
    if (rank_ != no_rank) {
      auto mac = claim_mac(secret_, in_.data() + sizeof(identity_magic), rank_);
      std::memcpy(claim.data() + 4, mac.data(), mac.size());
    }
    out_.assign(claim.begin(), claim.end());
    done_ = true;
    return;
  }
  if (in_.size() < claim_size)
    return;
  done_ = true;
  auto rank = get_u32(in_.data());
  if (rank == no_rank || !secret_of_)
    return;
  auto secret = secret_of_(rank);
  if (secret.empty())
    return; // This side checks no claims: none proven.
  auto mac = claim_mac(secret, nonce_.data(), rank);
  if (CRYPTO_memcmp(mac.data(), in_.data() + 4, mac.size()) != 0) {
    fail("the peer claims to be worker " + std::to_string(rank)
         + " without that worker's secret");
    return;
  }
  proven_ = rank;
}

identity_proof::state identity_proof::status() const noexcept {
  if (!failure_.empty())
    return state::failed;
  return done_ && out_.empty() ? state::done : state::running;
}

std::array<unsigned char, 32>
identity_proof::claim_mac(const std::string& secret, const unsigned char* nonce,
                          uint32_t rank) {
  constexpr auto label_size = sizeof(identity_label) - 1;
  std::array<unsigned char, label_size + 32 + 4> msg{};
  std::memcpy(msg.data(), identity_label, label_size);
  std::memcpy(msg.data() + label_size, nonce, 32);
  put_u32(msg.data() + label_size + 32, rank);
  return detail::hmac_sha256(secret, msg.data(), msg.size());
}

} // namespace actorps::core
