// SPDX-License-Identifier: BSD-3-Clause
#include "messages/types.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "caf/binary_deserializer.hpp"
#include "caf/deserializer.hpp"
#include "caf/error.hpp"
#include "caf/sec.hpp"
#include "caf/serializer.hpp"

namespace actorps {

namespace {

// Writes `n` floats from `data` as one length and one byte run.
caf::error save_raw(caf::serializer& f, const float* data, size_t n) {
  if (auto err = f.begin_sequence(n))
    return err;
  if (n > 0)
    if (auto err = f.apply_raw(n * sizeof(float), const_cast<float*>(data)))
      return err;
  return f.end_sequence();
}

// Reads the length of a float sequence into `n`.
caf::error begin_floats(caf::deserializer& f, size_t& n) {
  if (auto err = f.begin_sequence(n))
    return err;
  // The length comes from the peer: never trust it beyond what BASP can carry.
  if (n > (size_t{1} << 30))
    return caf::make_error(caf::sec::invalid_argument,
                           "floats: sequence length exceeds 4 GiB");
  return caf::none;
}

// An error if `f` reads from a byte buffer (BASP does) that holds fewer than
// `bytes` more bytes: then a length the peer declared cannot size an
// allocation beyond the message it sent.
caf::error check_remaining(caf::deserializer& f, size_t bytes) {
  auto* bin = dynamic_cast<caf::binary_deserializer*>(&f);
  if (bin != nullptr && bin->remaining() < bytes)
    return caf::make_error(caf::sec::end_of_stream,
                           "floats: the message ends "
                             + std::to_string(bytes - bin->remaining())
                             + " bytes before the values it declares");
  return caf::none;
}

// Reads what save_raw wrote into `out`.
caf::error load_raw(caf::deserializer& f, std::vector<float>& out) {
  size_t n = 0;
  if (auto err = begin_floats(f, n))
    return err;
  out.clear();
  if (n == 0)
    return f.end_sequence();
  auto bytes = n * sizeof(float);
  if (auto err = check_remaining(f, bytes))
    return err;
  // BASP reads from a byte buffer: copy the floats straight out of it, in one
  // pass (resize would zero-fill the vector first, a second pass over memory
  // that is often freshly mapped).
  if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&f);
      bin != nullptr && bin->remaining() >= bytes) {
    auto src = reinterpret_cast<const char*>(bin->remainder().data());
    out.reserve(n);
    if (reinterpret_cast<std::uintptr_t>(src) % alignof(float) == 0) {
      auto first = reinterpret_cast<const float*>(src);
      out.insert(out.end(), first, first + n);
    } else {
      // Unaligned: through a small buffer that stays in the L1 cache.
      constexpr size_t chunk = 1024;
      float tmp[chunk];
      for (size_t i = 0; i < n; i += chunk) {
        auto k = std::min(chunk, n - i);
        std::memcpy(tmp, src + i * sizeof(float), k * sizeof(float));
        out.insert(out.end(), tmp, tmp + k);
      }
    }
    bin->skip(bytes);
    return f.end_sequence();
  }
  out.resize(n);
  if (auto err = f.apply_raw(bytes, out.data()))
    return err;
  return f.end_sequence();
}

// Floats per chunk of an encoded payload: a multiple of 16, so that 2-bit
// chunks end on the codec's block boundaries.
constexpr size_t codec_chunk = 4096;

// Writes `n` floats from `data` packed by `c`: one length, then the bytes
// of `encode`, written a chunk at a time.
caf::error save_encoded(caf::serializer& f, const float* data, size_t n,
                        const compression& c) {
  if (auto err = f.begin_sequence(n))
    return err;
  uint8_t buf[codec_chunk * sizeof(float)];
  for (size_t i = 0; i < n; i += codec_chunk) {
    auto k = std::min(codec_chunk, n - i);
    encode(c, data + i, k, buf);
    if (auto err = f.apply_raw(encoded_size(c, k), buf))
      return err;
  }
  return f.end_sequence();
}

// Reads what save_encoded wrote into `out`.
caf::error load_encoded(caf::deserializer& f, std::vector<float>& out,
                        const compression& c) {
  size_t n = 0;
  if (auto err = begin_floats(f, n))
    return err;
  if (auto err = check_remaining(f, encoded_size(c, n)))
    return err;
  out.clear();
  out.reserve(n);
  uint8_t buf[codec_chunk * sizeof(float)];
  float tmp[codec_chunk];
  for (size_t i = 0; i < n; i += codec_chunk) {
    auto k = std::min(codec_chunk, n - i);
    if (auto err = f.apply_raw(encoded_size(c, k), buf))
      return err;
    decode(c, buf, k, tmp);
    out.insert(out.end(), tmp, tmp + k);
  }
  return f.end_sequence();
}

} // namespace

caf::error inspect(caf::serializer& f, floats& x) {
  auto kind = static_cast<uint8_t>(x.encoding.kind);
  if (auto err = f(kind))
    return err;
  if (x.encoding.kind == codec::none)
    return save_raw(f, x.data.data(), x.data.size());
  if (x.encoding.kind == codec::two_bit)
    if (auto err = f(x.encoding.threshold))
      return err;
  return save_encoded(f, x.data.data(), x.data.size(), x.encoding);
}

caf::error inspect(caf::deserializer& f, floats& x) {
  uint8_t kind = 0;
  if (auto err = f(kind))
    return err;
  if (kind > static_cast<uint8_t>(codec::two_bit))
    return caf::make_error(caf::sec::invalid_argument,
                           "floats: unknown codec " + std::to_string(kind));
  compression c{static_cast<codec>(kind), 0.5f};
  if (c.kind == codec::two_bit) {
    if (auto err = f(c.threshold))
      return err;
    if (auto why = check(c); !why.empty())
      return caf::make_error(caf::sec::invalid_argument, "floats: " + why);
  }
  x.encoding = c;
  if (c.kind == codec::none)
    return load_raw(f, x.data);
  return load_encoded(f, x.data, c);
}

// -- shared_floats ------------------------------------------------------------

caf::error inspect(caf::serializer& f, shared_floats& x) {
  return save_raw(f, x.data(), x.size());
}

caf::error inspect(caf::deserializer& f, shared_floats& x) {
  std::vector<float> tmp;
  if (auto err = load_raw(f, tmp))
    return err;
  x = shared_floats{std::move(tmp)};
  return caf::none;
}

// -- float_parts --------------------------------------------------------------

caf::error inspect(caf::serializer& f, float_parts& x) {
  if (!x.valid(false))
    return caf::make_error(caf::sec::invalid_argument,
                           "float_parts: a piece lies outside its buffer");
  // The pieces in the order of the value: when they tile it, each is written
  // straight from its buffer, and together they form one byte run.
  std::vector<const float_piece*> order;
  order.reserve(x.pieces.size());
  for (auto& p : x.pieces)
    order.push_back(&p);
  std::sort(order.begin(), order.end(),
            [](const float_piece* a, const float_piece* b) {
              return a->at < b->at;
            });
  uint64_t next = 0;
  bool tiles = true;
  for (auto* p : order) {
    if (p->at != next) {
      tiles = false;
      break;
    }
    next += p->length;
  }
  if (!tiles || next != x.size) {
    // Gaps or overlaps: write the value as the pieces make it.
    auto flat = x.flatten();
    return save_raw(f, flat.data(), flat.size());
  }
  if (auto err = f.begin_sequence(x.size))
    return err;
  for (auto* p : order)
    if (p->length > 0)
      if (auto err = f.apply_raw(
            p->length * sizeof(float),
            const_cast<float*>(x.buffers[p->buffer].data() + p->from)))
        return err;
  return f.end_sequence();
}

caf::error inspect(caf::deserializer& f, float_parts& x) {
  std::vector<float> tmp;
  if (auto err = load_raw(f, tmp))
    return err;
  x = float_parts{std::move(tmp)};
  return caf::none;
}

} // namespace actorps
