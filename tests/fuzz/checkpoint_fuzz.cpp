// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: the checkpoint reader (core::checkpoint_reader, which
// decode_checkpoint runs over the bytes) on any bytes a file may hold. A
// checkpoint it accepts must encode and decode to the same records.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<char> bytes(reinterpret_cast<const char*>(data),
                          reinterpret_cast<const char*>(data) + size);
  actorps::state_snapshot snap;
  if (!actorps::core::decode_checkpoint(bytes, snap).ok())
    return 0;
  actorps::state_snapshot again;
  if (!actorps::core::decode_checkpoint(actorps::core::encode_checkpoint(snap),
                                        again)
         .ok()
      || again.slices.size() != snap.slices.size())
    __builtin_trap();
  return 0;
}
