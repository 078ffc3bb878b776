// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: the compression decoders and the codec parser. Byte 0
// picks the codec, byte 1 the threshold; the rest is an encoded payload,
// decoded as many values as it holds, then encoded again.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/compression.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace actorps;
  if (size < 2)
    return 0;
  // The parser sees the whole input as text.
  static_cast<void>(
    parse_compression(std::string(reinterpret_cast<const char*>(data), size)));
  compression c;
  switch (data[0] % 3) {
    case 0:
      c.kind = codec::none;
      break;
    case 1:
      c.kind = codec::fp16;
      break;
    default:
      c.kind = codec::two_bit;
      break;
  }
  c.threshold = 0.25f * static_cast<float>(data[1] % 16 + 1);
  auto in = data + 2;
  auto bytes = size - 2;
  // The most values these bytes can hold under c.
  size_t n = 0;
  if (c.kind == codec::none)
    n = bytes / 4;
  else if (c.kind == codec::fp16)
    n = bytes / 2;
  else
    n = bytes / 4 * 16;
  if (encoded_size(c, n) > bytes)
    __builtin_trap();
  std::vector<float> out(n);
  decode(c, in, n, out.data());
  std::vector<uint8_t> again(encoded_size(c, n));
  encode(c, out.data(), n, again.data());
  return 0;
}
