// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include <Eigen/Core>

#include "actors/worker/channel.hpp"
#include "core/batching.hpp"
#include "core/parallel.hpp"
#include "core/values.hpp"

/// How the client facade lays the caller's values out for its worker actor
/// and copies pulled values back, free of CAF: where a pushed tensor's bytes
/// enter actorps and a pulled one's leave it. Slices that travel alone
/// (core/batching.hpp) get buffers of their own, so they reach their shard
/// without another copy.
namespace actorps::payload {

/// Room that a slice sent alone may be written to in place, lent by the
/// worker's data channel: null data for none.
using lent = data_channel::lent_room;

/// Lends room for `n` floats of a slice to shard `shard` (empty: none).
using lender = std::function<lent(uint32_t shard, uint64_t n)>;

/// Where `fill` writes a slice that lies in lent room.
struct run_in_place {
  float* first = nullptr;
  std::size_t size = 0;
};

/// Appends the `n` floats at `from` to `out`; returns where they went.
inline float* append(std::vector<float>& out, const float* from,
                     std::size_t n) {
  out.insert(out.end(), from, from + n);
  return out.data() + out.size() - n;
}

inline float* append(run_in_place& out, const float* from, std::size_t n) {
  auto* at = out.first + out.size;
  std::memcpy(at, from, n * sizeof(float));
  out.size += n;
  return at;
}

/// One key of a call as the facade resolved it: its routing entry, and what
/// a call reads of every key, held in the call's list itself (a call naming
/// 10000 keys missed the cache on each key's entry, once per pass).
struct resolved_key {
  const key_info* info = nullptr;
  /// Floats of the key (`info->size`).
  uint64_t size = 0;
  /// The key is one slice that travels in a batch (core::batching::alone
  /// is false for it).
  bool one_small_slice = false;
};

using resolved_keys = std::vector<resolved_key>;

/// `info` as a call on it reads it under `batching`.
inline resolved_key resolve(const key_info& info,
                            const core::batching& batching) {
  return resolved_key{&info, info.size,
                      info.slices.size() == 1
                        && !batching.alone(info.slices.front().length)};
}

/// Lays out a pushed value of the keys `infos`, back to back: each slice
// that the worker sends alone gets a buffer of its own, which then travels
// to its shard without another copy (room that `lend` gives, when it does,
// which the slice leaves from); the other slices are packed together.
// `fill(i, from, n, out)` appends the floats [from, from + n) of key i to
// `out` with `append` (a vector, or a run in lent room: not resized and
// overwritten, one pass over the memory). Slices of their own are filled on
// two threads when large enough (see core::split_in_two), so `fill` must be
// safe to call concurrently for distinct outputs.
template <class Fill>
float_parts pack(const resolved_keys& infos, const core::batching& batching,
                 Fill fill, const lender& lend = {}) {
  // Every key one slice sent in a batch (10000 small keys): one run, its
  // size known from the list.
  if (std::all_of(infos.begin(), infos.end(),
                  [](const resolved_key& k) { return k.one_small_slice; })) {
    uint64_t total = 0;
    for (auto& k : infos)
      total += k.size;
    std::vector<float> run;
    run.reserve(total);
    for (size_t i = 0; i < infos.size(); ++i)
      fill(i, 0, infos[i].size, run);
    float_parts out;
    if (!run.empty())
      out.append(shared_floats{std::move(run)});
    return out;
  }
  uint64_t small = 0;
  struct own_slice {
    size_t key;
    const slice_range* slice;
  };
  std::vector<own_slice> alone;
  for (size_t i = 0; i < infos.size(); ++i)
    for (auto& s : infos[i].info->slices) {
      if (!batching.alone(s.length))
        small += s.length;
      else
        alone.push_back(own_slice{i, &s});
    }
  // Allocated (or lent) here, so that the helper thread only copies.
  std::vector<std::vector<float>> owns(alone.size());
  std::vector<lent> rooms(alone.size());
  std::vector<uint64_t> weights(alone.size());
  for (size_t j = 0; j < alone.size(); ++j) {
    auto n = alone[j].slice->length;
    if (lend)
      rooms[j] = lend(alone[j].slice->shard, n);
    if (rooms[j].data == nullptr)
      owns[j].reserve(n);
    weights[j] = n;
  }
  core::split_in_two(weights, core::parallel_min_floats, [&](size_t j) {
    auto& s = *alone[j].slice;
    if (rooms[j].data != nullptr) {
      run_in_place run{rooms[j].data};
      fill(alone[j].key, s.offset, s.length, run);
    } else {
      fill(alone[j].key, s.offset, s.length, owns[j]);
    }
  });
  float_parts out;
  std::vector<float> run;
  run.reserve(small);
  auto end_run = [&] {
    if (!run.empty())
      out.append(shared_floats{std::move(run)});
    run = std::vector<float>{};
  };
  size_t next_own = 0;
  for (size_t i = 0; i < infos.size(); ++i) {
    for (auto& s : infos[i].info->slices) {
      if (!batching.alone(s.length)) {
        fill(i, s.offset, s.length, run);
        continue;
      }
      end_run();
      auto j = next_own++;
      if (rooms[j].data != nullptr)
        out.append(
          shared_floats{std::move(rooms[j].keep), rooms[j].data, s.length});
      else
        out.append(shared_floats{std::move(owns[j])});
    }
  }
  end_run();
  return out;
}

// Packs one value per key (see the template above).
float_parts pack(const resolved_keys& infos, const core::batching& batching,
                 const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values,
                 const lender& lend = {});

// Where pulled floats go: `n` floats of the value, from `at`, to `dst`.
struct target {
  uint64_t at = 0;
  uint64_t n = 0;
  float* dst = nullptr;
};

// Sorted by `at`; ranges may coincide (one key pulled into several
// outputs) but not overlap partly.
using target_list = std::vector<target>;

// One output per key, the keys back to back (outputs checked).
target_list targets(const resolved_keys& infos,
                    std::vector<Eigen::Ref<Eigen::VectorXf>>& outs);

// Copies every piece of `x` into the outputs whose range holds it (on two
// threads when large enough, see core::split_in_two).
void copy_out(const float_parts& x, const target_list& dst);

} // namespace actorps::payload
