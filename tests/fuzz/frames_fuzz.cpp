// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: what an admitted UCX peer sends before any value is
// read: a frame's header (fixed part, slice, rows or batch fields), a
// batch's packed slice ids and sequence numbers, and a
// plane's address (as a hello carries it). Whatever decodes must encode back to
// the same bytes, and a request's body size must be computable for it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/batch_ids.hpp"
#include "runtime/ucx/frames.hpp"
#include "runtime/ucx/hello.hpp"

using namespace actorps;
using namespace actorps::ucx;

namespace {

bool same(const frame_header& x, const frame_header& y) {
  return x.kind == y.kind && x.request == y.request && x.shard == y.shard
         && x.priority == y.priority;
}

bool same(const slice_meta& x, const slice_meta& y) {
  return x.slice == y.slice && x.worker == y.worker && x.seq == y.seq
         && x.encoding.kind == y.encoding.kind
         && std::memcmp(&x.encoding.threshold, &y.encoding.threshold,
                        sizeof(float))
              == 0
         && x.count == y.count && x.rows == y.rows;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<char> bytes(reinterpret_cast<const char*>(data),
                          reinterpret_cast<const char*>(data) + size);
  if (auto h = decode(bytes)) {
    if (auto meta = decode_meta(bytes)) {
      auto again = encode(*h, *meta);
      auto h2 = decode(again);
      auto meta2 = decode_meta(again);
      if (!h2 || !meta2 || !same(*h, *h2) || !same(*meta, *meta2))
        __builtin_trap();
      // Bounded by the decoder before anything is sized by it.
      if (meta->count > max_frame_floats || meta->rows > max_frame_rows)
        __builtin_trap();
      static_cast<void>(encoded_size(meta->encoding, meta->count));
      static_cast<void>(rows_body_size(*meta));
    } else if (auto batch = decode_batch_meta(bytes)) {
      if (encode(*h, *batch) != bytes)
        __builtin_trap();
      // Bounded by the decoder: at least a byte a slice, no overflow.
      if (body_size(*batch) < uint64_t{batch->slices}
          || batch->ids_size > core::max_packed_ids(batch->slices))
        __builtin_trap();
    } else if (bytes.size() == encode(*h).size()) {
      if (encode(*h) != bytes)
        __builtin_trap();
    }
  }
  // The same bytes as packed ids of 1-4 slices (the first byte says how
  // many): what unpacks packs again to the same bytes (one form each).
  if (size > 0) {
    auto n = std::size_t{1} + data[0] % 4;
    uint64_t slices[4];
    uint64_t seqs[4];
    if (core::unpack_ids(data + 1, size - 1, n, slices, seqs)) {
      std::vector<uint8_t> again;
      core::pack_ids(slices, seqs, n, again);
      if (again.size() != size - 1
          || !std::equal(again.begin(), again.end(), data + 1))
        __builtin_trap();
    }
  }
  std::string host;
  std::vector<char> ucp;
  if (split_address(bytes, host, ucp)
      && make_address(host, ucp.data(), ucp.size()) != bytes)
    __builtin_trap();
  return 0;
}
