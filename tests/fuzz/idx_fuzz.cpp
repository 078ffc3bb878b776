// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: the idx reader of the training job's data files. The
// first 4 bytes split the rest into an image file and a label file.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "apps/common/mnist.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4)
    return 0;
  uint32_t split = 0;
  std::memcpy(&split, data, 4);
  auto rest = size - 4;
  auto cut = rest == 0 ? 0 : split % (rest + 1);
  std::vector<uint8_t> img(data + 4, data + 4 + cut);
  std::vector<uint8_t> lab(data + 4 + cut, data + size);
  actorps::apps::dataset out;
  auto st = actorps::apps::parse_split(img, lab, "images", "labels", out);
  if (st.ok() && static_cast<size_t>(out.size()) != out.labels.size())
    __builtin_trap();
  return 0;
}
