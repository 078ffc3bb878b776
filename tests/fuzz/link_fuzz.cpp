// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: the link handshake and the worker identity exchange
// (core/link_proof.hpp) fed what a stranger sends. Byte 0 picks the
// exchange (bit 7: identity), the side (bit 0) and how many bytes arrive per
// read (bits 1-6); the rest is what the peer sent. A handshake must never
// finish for a peer that does not hold the secret, an identity must never
// be proven without the worker's secret, and neither may read past what it
// asked.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/link_proof.hpp"

namespace {

template <class Proof>
void feed(Proof& side, const uint8_t* data, size_t size, std::size_t step) {
  while (size > 0 && side.wanted() > 0) {
    auto n = std::min({step, size, side.wanted()});
    side.received(data, n);
    data += n;
    size -= n;
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using actorps::core::identity_proof;
  using actorps::core::link_proof;
  if (size < 1)
    return 0;
  std::array<unsigned char, 32> nonce{};
  bool client = (data[0] & 1) != 0;
  bool identity = (data[0] & 0x80) != 0;
  std::size_t step = 1 + ((data[0] >> 1) & 0x3f);
  ++data;
  --size;
  if (!identity) {
    link_proof side{actorps::core::link_secret("fuzz"), client, nonce};
    feed(side, data, size, step);
    // Without the secret's proof no stranger gets through.
    if (side.status() == link_proof::state::done)
      std::abort();
    return 0;
  }
  if (client) {
    auto side = identity_proof::claimant(
      0, actorps::core::worker_secret("fuzz key", 0));
    feed(side, data, size, step);
    return 0;
  }
  auto side = identity_proof::verifier(
    [](uint32_t rank) {
      return actorps::core::worker_secret("fuzz key", rank);
    },
    nonce);
  feed(side, data, size, step);
  // Without a worker's secret no stranger proves a rank.
  if (side.proven_rank() != identity_proof::no_rank)
    std::abort();
  return 0;
}
