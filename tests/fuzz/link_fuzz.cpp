// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: the link handshake (core/link_proof.hpp) fed what a
// stranger sends. Byte 0 picks the side and how many bytes arrive per read;
// the rest is what the peer sent. A handshake must never finish for a peer
// that does not hold the secret, and must never read past what it asked.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/link_proof.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using actorps::core::link_proof;
  if (size < 1)
    return 0;
  std::array<unsigned char, 32> nonce{};
  link_proof side{actorps::core::link_secret("fuzz"), (data[0] & 1) != 0,
                  nonce};
  std::size_t step = 1 + (data[0] >> 1);
  ++data;
  --size;
  while (size > 0 && side.wanted() > 0) {
    auto n = std::min({step, size, side.wanted()});
    side.received(data, n);
    data += n;
    size -= n;
  }
  // Without the secret's proof no stranger gets through.
  if (side.status() == link_proof::state::done)
    std::abort();
  return 0;
}
