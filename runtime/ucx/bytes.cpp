// SPDX-License-Identifier: BSD-3-Clause
// The plane's byte types: what a send reads (payload) and what a receive
// fills (buffer).
#include <cstdint>
#include <cstring>
#include <utility>

#include "runtime/ucx/plane.hpp"

#include "core/float_pool.hpp"

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

void payload::copy_to(char* out) const {
  for (const auto& x : pieces) {
    if (x.size == 0)
      continue;
    std::memcpy(out, x.data, x.size);
    out += x.size;
  }
}

buffer::buffer(std::size_t size)
  : words_(core::take_floats((size + sizeof(float) - 1) / sizeof(float))),
    size_(size) {
  // nop
}

buffer::~buffer() {
  core::give_floats(words_);
}

buffer::buffer(const void* data, std::size_t size) : size_(size) {
  if (size == 0)
    return;
  auto whole = size / sizeof(float);
  if (whole * sizeof(float) == size) {
    // One pass, not zeroed first (a large message copied out of a peer's
    // segment, runtime/ucx/receive.cpp), in a pooled block when one fits.
    words_ = core::copy_float_bytes(data, whole);
    return;
  }
  // A tail of bytes (no body of floats): zeroed, then copied.
  words_.resize(whole + 1);
  std::memcpy(words_.data(), data, size);
}

buffer::buffer(buffer&& other) noexcept
  : words_(std::move(other.words_)),
    size_(std::exchange(other.size_, 0)),
    hold_(std::move(other.hold_)),
    view_(std::exchange(other.view_, nullptr)),
    keep_(std::move(other.keep_)) {
}

buffer& buffer::operator=(buffer&& other) noexcept {
  if (this != &other) {
    core::give_floats(words_);
    words_ = std::move(other.words_);
    size_ = std::exchange(other.size_, 0);
    hold_ = std::move(other.hold_);
    view_ = std::exchange(other.view_, nullptr);
    keep_ = std::move(other.keep_);
  }
  return *this;
}

buffer buffer::view(const char* data, std::size_t size,
                    std::shared_ptr<const void> keep) {
  buffer out;
  if (size == 0 || data == nullptr)
    return out;
  out.view_ = data;
  out.size_ = size;
  out.keep_ = std::move(keep);
  return out;
}

void buffer::own() {
  if (view_ == nullptr)
    return;
  auto copy = buffer{view_, size_};
  words_ = std::move(copy.words_);
  view_ = nullptr;
  keep_.reset();
}

shared_floats buffer::floats_in_place() const {
  if (size_ % sizeof(float) != 0)
    return {};
  return floats_in_place(size_ / sizeof(float));
}

shared_floats buffer::floats_in_place(std::size_t count) const {
  if (view_ == nullptr || count == 0 || count > size_ / sizeof(float)
      || reinterpret_cast<std::uintptr_t>(view_) % alignof(float) != 0)
    return {};
  return shared_floats{keep_, reinterpret_cast<const float*>(view_), count};
}

bool buffer::take_floats(std::vector<float>& out) {
  if (size_ % sizeof(float) != 0)
    return false;
  if (view_ != nullptr) {
    auto n = size_ / sizeof(float);
    if (reinterpret_cast<std::uintptr_t>(view_) % alignof(float) == 0) {
      // One pass: no zeroing first.
      auto* first = reinterpret_cast<const float*>(view_);
      out.assign(first, first + n);
    } else {
      out.resize(n);
      std::memcpy(out.data(), view_, size_);
    }
    view_ = nullptr;
    keep_.reset();
  } else {
    out = std::move(words_);
    words_.clear();
  }
  size_ = 0;
  return true;
}

std::vector<char> buffer::bytes() const {
  return {data(), data() + size_};
}

} // namespace actorps::ucx
