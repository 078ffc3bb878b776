// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/payload.hpp"

#include <algorithm>
#include <cstring>

namespace actorps::payload {

// Packs one value per key.
float_parts pack(const resolved_keys& infos, const core::batching& batching,
                 const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values,
                 const lender& lend) {
  return pack(
    infos, batching,
    [&](size_t i, uint64_t from, uint64_t n, auto& out) {
      append(out, values[i].data() + from, n);
    },
    lend);
}

// One output per key, the keys back to back (outputs checked).
target_list targets(const resolved_keys& infos,
                    std::vector<Eigen::Ref<Eigen::VectorXf>>& outs) {
  target_list out;
  out.reserve(outs.size());
  uint64_t at = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    out.push_back(target{at, infos[i].size, outs[i].data()});
    at += infos[i].size;
  }
  return out;
}

// Copies every piece of `x` into the outputs whose range holds it (on two
// threads when large enough, see core::split_in_two).
void copy_out(const float_parts& x, const target_list& dst) {
  // The first output that ends after `at`. Pieces mostly come in the order
  // of their place (a shard's reply at a time, its keys in call order): the
  // search starts from the output the last piece went to, and steps a few
  // outputs before it halves the rest (10000 one-float keys took 14 steps
  // of a binary search each, apart in memory).
  auto first_after = [&](uint64_t at, target_list::const_iterator from) {
    auto ends_before = [at](const target& y) { return y.at + y.n <= at; };
    if (from != dst.begin() && !ends_before(*std::prev(from)))
      return std::partition_point(dst.begin(), from, ends_before);
    for (int step = 0; step < 8 && from != dst.end(); ++step, ++from)
      if (!ends_before(*from))
        return from;
    return std::partition_point(from, dst.end(), ends_before);
  };
  // Calls `f(to, from, n)` for every copy to make: a piece goes to every
  // output it overlaps (one output, or several that coincide, for a piece
  // of one slice; every key's for a pull of many short keys gathered into
  // one buffer, see the worker's gather::flat).
  auto each_copy = [&](auto&& f) {
    auto last = dst.begin();
    for (auto& p : x.pieces) {
      auto src = x.buffers[p.buffer].data() + p.from;
      auto end = p.at + p.length;
      auto t = first_after(p.at, last);
      last = t;
      for (; t != dst.end() && t->at < end; ++t) {
        auto lo = std::max(p.at, t->at);
        auto hi = std::min(end, t->at + t->n);
        if (lo < hi)
          f(t->dst + (lo - t->at), src + (lo - p.at), hi - lo);
      }
    }
  };
  // (Short runs in a loop: a call to memcpy per key of one float cost more
  // than the copy.)
  auto copy_now = [](float* to, const float* from, uint64_t n) {
    if (n <= 16) {
      for (uint64_t j = 0; j < n; ++j)
        to[j] = from[j];
      return;
    }
    std::memcpy(to, from, n * sizeof(float));
  };
  // Small pulls (every small round) copy at once, without collecting.
  if (x.size < core::parallel_min_floats) {
    each_copy(copy_now);
    return;
  }
  struct copy {
    float* to;
    const float* from;
    uint64_t n;
  };
  std::vector<copy> copies;
  std::vector<uint64_t> weights;
  each_copy([&](float* to, const float* from, uint64_t n) {
    copies.push_back(copy{to, from, n});
    weights.push_back(n);
  });
  core::split_in_two(weights, core::parallel_min_floats, [&](size_t i) {
    copy_now(copies[i].to, copies[i].from, copies[i].n);
  });
}

} // namespace actorps::payload
