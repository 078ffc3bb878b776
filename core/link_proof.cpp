// SPDX-License-Identifier: BSD-3-Clause
#include "core/link_proof.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace actorps::core {

namespace {

constexpr unsigned char magic[4] = {'A', 'P', 'L', '1'};
constexpr char proof_label[] = "actorps link proof v1";

} // namespace

std::string derive_secret(std::string_view token, std::string_view label) {
  if (token.empty())
    return {};
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(label.data()), label.size(), mac,
       &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

std::string worker_secret(std::string_view rank_key, uint32_t rank) {
  return derive_secret(rank_key,
                       "actorps ucx worker " + std::to_string(rank) + " v1");
}

std::string random_bytes(std::size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()),
                 static_cast<int>(n))
      != 1)
    return {};
  return out;
}

std::string link_secret(std::string_view token) {
  return derive_secret(token, "actorps link secret v1");
}

std::string join_proof(std::string_view token) {
  return derive_secret(token, "actorps join proof v1");
}

link_proof::link_proof(std::string secret, bool client)
  : link_proof(std::move(secret), client, [] {
      std::array<unsigned char, 32> nonce{};
      if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1)
        throw std::runtime_error("link proof: no random bytes for a nonce");
      return nonce;
    }()) {
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

void link_proof::sent(std::size_t n) {
  out_.erase(out_.begin(),
             out_.begin()
               + static_cast<std::ptrdiff_t>(std::min(n, out_.size())));
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
  std::array<unsigned char, 32> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       msg.data(), msg.size(), out.data(), &len);
  return out;
}

void link_proof::fail(std::string why) {
  if (failure_.empty())
    failure_ = std::move(why);
  out_.clear();
}

} // namespace actorps::core
