// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/ucx/frames.hpp"

#include <cstddef>

#include "actors/worker/channel.hpp"

namespace actorps::ucx {

// A worker's data_kind is the frame's kind.
static_assert(static_cast<uint8_t>(frame_kind::push)
                == static_cast<uint8_t>(data_kind::push)
              && static_cast<uint8_t>(frame_kind::pull)
                   == static_cast<uint8_t>(data_kind::pull)
              && static_cast<uint8_t>(frame_kind::push_pull)
                   == static_cast<uint8_t>(data_kind::push_pull)
              && static_cast<uint8_t>(frame_kind::batch)
                   == static_cast<uint8_t>(data_kind::batch));

namespace {

constexpr std::size_t header_size = 1 + 8 + 4 + 4;

template <class T>
void put(std::vector<char>& out, T x) {
  auto u = static_cast<uint64_t>(x);
  for (std::size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
}

template <class T>
T get(const std::vector<char>& in, std::size_t at) {
  uint64_t u = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    u |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + i]))
         << (8 * i);
  return static_cast<T>(u);
}

bool known(uint8_t kind) {
  switch (static_cast<frame_kind>(kind)) {
    case frame_kind::push:
    case frame_kind::pull:
    case frame_kind::push_pull:
    case frame_kind::batch:
    case frame_kind::reply:
    case frame_kind::failure:
      return true;
  }
  return false;
}

} // namespace

std::vector<char> encode(const frame_header& x) {
  std::vector<char> out;
  out.reserve(header_size);
  put(out, static_cast<uint8_t>(x.kind));
  put(out, x.request);
  put(out, x.shard);
  put(out, static_cast<uint32_t>(x.priority));
  return out;
}

std::optional<frame_header> decode(const std::vector<char>& bytes) {
  if (bytes.size() != header_size)
    return std::nullopt;
  auto kind = get<uint8_t>(bytes, 0);
  if (!known(kind))
    return std::nullopt;
  frame_header x;
  x.kind = static_cast<frame_kind>(kind);
  x.request = get<uint64_t>(bytes, 1);
  x.shard = get<uint32_t>(bytes, 9);
  x.priority = static_cast<int32_t>(get<uint32_t>(bytes, 13));
  return x;
}

} // namespace actorps::ucx
