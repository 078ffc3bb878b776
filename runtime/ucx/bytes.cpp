// SPDX-License-Identifier: BSD-3-Clause
// The plane's byte types: what a send reads (payload) and what a receive
// fills (buffer).
#include <cstring>

#include "runtime/ucx/plane.hpp"

namespace actorps::ucx {

payload::payload(const void* data, std::size_t size,
                 std::shared_ptr<const void> keep)
  : keep(std::move(keep)) {
  if (size > 0)
    pieces.push_back(piece{data, size});
}

payload::payload(std::vector<piece> xs, std::shared_ptr<const void> keep)
  : keep(std::move(keep)) {
  for (const auto& x : xs)
    if (x.size > 0)
      pieces.push_back(x);
}

std::size_t payload::size() const {
  std::size_t n = 0;
  for (const auto& x : pieces)
    n += x.size;
  return n;
}

buffer::buffer(std::size_t size)
  : words_((size + sizeof(float) - 1) / sizeof(float)), size_(size) {
  // nop
}

buffer::buffer(const void* data, std::size_t size) : buffer(size) {
  if (size > 0)
    std::memcpy(words_.data(), data, size);
}

bool buffer::take_floats(std::vector<float>& out) {
  if (size_ % sizeof(float) != 0)
    return false;
  out = std::move(words_);
  words_.clear();
  size_ = 0;
  return true;
}

std::vector<char> buffer::bytes() const {
  return {data(), data() + size_};
}

} // namespace actorps::ucx
