// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/ucx/frames.hpp"

#include <cstddef>
#include <cstring>

#include "actors/worker/channel.hpp"
#include "core/batch_ids.hpp"
#include "core/values.hpp"

namespace actorps::ucx {

// A worker's data_kind is the frame's kind.
static_assert(static_cast<uint8_t>(frame_kind::push)
                == static_cast<uint8_t>(data_kind::push)
              && static_cast<uint8_t>(frame_kind::pull)
                   == static_cast<uint8_t>(data_kind::pull)
              && static_cast<uint8_t>(frame_kind::push_pull)
                   == static_cast<uint8_t>(data_kind::push_pull)
              && static_cast<uint8_t>(frame_kind::batch)
                   == static_cast<uint8_t>(data_kind::batch)
              && static_cast<uint8_t>(frame_kind::rows_push)
                   == static_cast<uint8_t>(data_kind::rows_push)
              && static_cast<uint8_t>(frame_kind::rows_pull)
                   == static_cast<uint8_t>(data_kind::rows_pull));

namespace {

constexpr std::size_t header_size = 1 + 8 + 4 + 4;
constexpr std::size_t pull_meta_size = 8 + 4 + 8;
constexpr std::size_t push_meta_size = pull_meta_size + 1 + 4 + 8;
constexpr std::size_t batch_meta_size = 4 + 1 + 4 + 4 + 1 + 4 + 8;
constexpr std::size_t rows_meta_size = push_meta_size + 8;

bool pushes(frame_kind k) {
  return k == frame_kind::push || k == frame_kind::push_pull;
}

bool on_rows(frame_kind k) {
  return k == frame_kind::rows_push || k == frame_kind::rows_pull;
}

// Bytes the header of a frame of kind `k` has.
std::size_t size_of(frame_kind k) {
  if (pushes(k))
    return header_size + push_meta_size;
  if (k == frame_kind::pull)
    return header_size + pull_meta_size;
  if (k == frame_kind::batch)
    return header_size + batch_meta_size;
  if (on_rows(k))
    return header_size + rows_meta_size;
  if (k == frame_kind::replicate || k == frame_kind::replicate_change)
    return header_size + 8;
  return header_size;
}

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

void put_encoding(std::vector<char>& out, const compression& c) {
  put(out, static_cast<uint8_t>(c.kind));
  uint32_t bits = 0;
  std::memcpy(&bits, &c.threshold, sizeof(bits));
  put(out, bits);
}

// The codec at `at` (5 bytes), or none if it is unknown or ill-formed.
std::optional<compression> get_encoding(const std::vector<char>& bytes,
                                        std::size_t at) {
  auto kind = get<uint8_t>(bytes, at);
  if (kind > static_cast<uint8_t>(codec::two_bit))
    return std::nullopt;
  compression c;
  c.kind = static_cast<codec>(kind);
  auto bits = get<uint32_t>(bytes, at + 1);
  std::memcpy(&c.threshold, &bits, sizeof(bits));
  if (!check(c).empty())
    return std::nullopt;
  return c;
}

bool known(uint8_t kind) {
  switch (static_cast<frame_kind>(kind)) {
    case frame_kind::push:
    case frame_kind::pull:
    case frame_kind::push_pull:
    case frame_kind::batch:
    case frame_kind::rows_push:
    case frame_kind::rows_pull:
    case frame_kind::replicate:
    case frame_kind::replicate_change:
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

std::vector<char> encode(const frame_header& x, const slice_meta& meta) {
  auto out = encode(x);
  out.reserve(size_of(x.kind));
  put(out, meta.slice);
  put(out, meta.worker);
  put(out, meta.seq);
  if (pushes(x.kind) || on_rows(x.kind)) {
    put_encoding(out, meta.encoding);
    put(out, meta.count);
  }
  if (on_rows(x.kind))
    put(out, meta.rows);
  return out;
}

uint64_t rows_body_size(const slice_meta& meta) {
  return encoded_size(meta.encoding, meta.count) + meta.rows * sizeof(uint64_t);
}

uint64_t body_size(const batch_meta& meta) {
  return encoded_size(meta.encoding, meta.count)
         + core::padded_ids(meta.ids_size);
}

std::vector<char> encode(const frame_header& x, const batch_meta& meta) {
  auto out = encode(x);
  out.reserve(header_size + batch_meta_size);
  put(out, meta.worker);
  put(out, meta.op);
  put(out, meta.slices);
  put(out, meta.ids_size);
  put_encoding(out, meta.encoding);
  put(out, meta.count);
  return out;
}

std::optional<frame_header> decode(const std::vector<char>& bytes) {
  if (bytes.size() < header_size)
    return std::nullopt;
  auto kind = get<uint8_t>(bytes, 0);
  if (!known(kind) || bytes.size() != size_of(static_cast<frame_kind>(kind)))
    return std::nullopt;
  frame_header x;
  x.kind = static_cast<frame_kind>(kind);
  x.request = get<uint64_t>(bytes, 1);
  x.shard = get<uint32_t>(bytes, 9);
  x.priority = static_cast<int32_t>(get<uint32_t>(bytes, 13));
  return x;
}

std::optional<slice_meta> decode_meta(const std::vector<char>& bytes) {
  auto h = decode(bytes);
  if (!h
      || (!pushes(h->kind) && h->kind != frame_kind::pull && !on_rows(h->kind)))
    return std::nullopt;
  slice_meta m;
  std::size_t at = header_size;
  m.slice = get<uint64_t>(bytes, at);
  m.worker = get<uint32_t>(bytes, at + 8);
  m.seq = get<uint64_t>(bytes, at + 12);
  if (h->kind == frame_kind::pull)
    return m;
  at += pull_meta_size;
  auto c = get_encoding(bytes, at);
  if (!c)
    return std::nullopt;
  m.encoding = *c;
  m.count = get<uint64_t>(bytes, at + 5);
  if (m.count > max_frame_floats)
    return std::nullopt;
  if (on_rows(h->kind)) {
    m.rows = get<uint64_t>(bytes, at + 13);
    if (m.rows > max_frame_rows
        || (h->kind == frame_kind::rows_pull && m.count != 0))
      return std::nullopt;
  }
  return m;
}

std::optional<batch_meta> decode_batch_meta(const std::vector<char>& bytes) {
  auto h = decode(bytes);
  if (!h || h->kind != frame_kind::batch)
    return std::nullopt;
  batch_meta m;
  std::size_t at = header_size;
  m.worker = get<uint32_t>(bytes, at);
  m.op = get<uint8_t>(bytes, at + 4);
  m.slices = get<uint32_t>(bytes, at + 5);
  m.ids_size = get<uint32_t>(bytes, at + 9);
  auto c = get_encoding(bytes, at + 13);
  if (!c)
    return std::nullopt;
  m.encoding = *c;
  m.count = get<uint64_t>(bytes, at + 18);
  if (m.op > static_cast<uint8_t>(op_kind::push_pull) || m.slices == 0
      || m.slices > (uint32_t{1} << 24) || m.count > max_frame_floats
      || m.ids_size < uint64_t{m.slices} + 2
      || m.ids_size > core::max_packed_ids(m.slices))
    return std::nullopt;
  return m;
}

std::vector<char> encode(const frame_header& x, uint64_t number) {
  auto out = encode(x);
  put(out, number);
  return out;
}

std::optional<uint64_t> decode_number(const std::vector<char>& bytes) {
  auto h = decode(bytes);
  if (!h
      || (h->kind != frame_kind::replicate
          && h->kind != frame_kind::replicate_change))
    return std::nullopt;
  return get<uint64_t>(bytes, header_size);
}

} // namespace actorps::ucx
