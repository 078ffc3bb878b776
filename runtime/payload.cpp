// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/payload.hpp"

#include <algorithm>
#include <cstring>

namespace actorps::payload {

// Packs one value per key.
float_parts pack(const std::vector<const key_info*>& infos,
                 const core::batching& batching,
                 const std::vector<Eigen::Ref<const Eigen::VectorXf>>& values) {
  return pack(infos, batching,
              [&](size_t i, uint64_t from, uint64_t n,
                  std::vector<float>& out) {
                auto first = values[i].data() + from;
                out.insert(out.end(), first, first + n);
              });
}

// One output per key, the keys back to back (outputs checked).
target_list targets(const std::vector<const key_info*>& infos,
                    std::vector<Eigen::Ref<Eigen::VectorXf>>& outs) {
  target_list out;
  uint64_t at = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    out.push_back(target{at, infos[i]->size, outs[i].data()});
    at += infos[i]->size;
  }
  return out;
}

// Copies every piece of `x` into the outputs whose range holds it (on two
// threads when large enough, see core::split_in_two).
void copy_out(const float_parts& x, const target_list& dst) {
  // Calls `f(to, from, n)` for every copy to make.
  auto each_copy = [&](auto&& f) {
    for (auto& p : x.pieces) {
      auto src = x.buffers[p.buffer].data() + p.from;
      // The first output that ends after the piece's start.
      auto t = std::partition_point(dst.begin(), dst.end(),
                                    [&](const target& y) {
                                      return y.at + y.n <= p.at;
                                    });
      for (; t != dst.end() && t->at <= p.at; ++t)
        if (p.at + p.length <= t->at + t->n)
          f(t->dst + (p.at - t->at), src, p.length);
    }
  };
  auto copy_now = [](float* to, const float* from, uint64_t n) {
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
