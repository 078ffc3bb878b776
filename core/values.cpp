// SPDX-License-Identifier: BSD-3-Clause
#include "core/values.hpp"

#include <atomic>
#include <cstring>
#include <utility>

#include "core/float_pool.hpp"
#include "core/huge_pages.hpp"

namespace actorps {

namespace {

const std::vector<float> no_floats;

// Holds `x`; a large block goes back to the pool (core/float_pool.hpp) when
// its last holder lets go of it, whichever thread that is.
std::shared_ptr<std::vector<float>> hold(std::vector<float> x) {
  if (x.capacity() * sizeof(float) < core::pooled_min_bytes)
    return std::make_shared<std::vector<float>>(std::move(x));
  return std::shared_ptr<std::vector<float>>(
    new std::vector<float>(std::move(x)), [](std::vector<float>* v) {
      core::give_floats(*v);
      delete v;
    });
}

} // namespace

// -- shared_floats ------------------------------------------------------------

shared_floats::shared_floats(std::vector<float> x) : buf_(hold(std::move(x))) {
}

shared_floats::shared_floats(std::shared_ptr<const void> keep,
                             const float* data, std::size_t n) {
  if (n == 0 || data == nullptr)
    return;
  keep_ = std::move(keep);
  view_ = data;
  view_size_ = n;
}

shared_floats::shared_floats(shared_floats&& other) noexcept
  : buf_(std::move(other.buf_)),
    keep_(std::move(other.keep_)),
    view_(std::exchange(other.view_, nullptr)),
    view_size_(std::exchange(other.view_size_, 0)) {
}

shared_floats& shared_floats::operator=(shared_floats&& other) noexcept {
  if (this != &other) {
    buf_ = std::move(other.buf_);
    keep_ = std::move(other.keep_);
    view_ = std::exchange(other.view_, nullptr);
    view_size_ = std::exchange(other.view_size_, 0);
  }
  return *this;
}

void shared_floats::own() const {
  buf_ = hold(core::copy_floats(view_, view_size_));
  keep_.reset();
  view_ = nullptr;
  view_size_ = 0;
}

const std::vector<float>& shared_floats::vec() const {
  if (view_ != nullptr)
    own();
  return buf_ ? *buf_ : no_floats;
}

bool shared_floats::unique() const noexcept {
  if (!buf_ || buf_.use_count() != 1)
    return false;
  // use_count reads the count without ordering: make every access of the
  // holder that let go of the buffer happen before what follows.
  std::atomic_thread_fence(std::memory_order_acquire);
  return true;
}

std::vector<float>& shared_floats::mutate() {
  if (view_ != nullptr)
    own();
  if (!buf_)
    buf_ = std::make_shared<std::vector<float>>();
  else if (!unique())
    buf_ = hold(core::copy_floats(buf_->data(), buf_->size()));
  return *buf_;
}

std::vector<float> shared_floats::take() {
  std::vector<float> out;
  if (view_ != nullptr) {
    out = core::copy_floats(view_, view_size_);
    keep_.reset();
    view_ = nullptr;
    view_size_ = 0;
    return out;
  }
  if (unique())
    out = std::move(*buf_);
  else if (buf_)
    out = core::copy_floats(buf_->data(), buf_->size());
  buf_.reset();
  return out;
}

// -- float_parts --------------------------------------------------------------

float_parts::float_parts(std::vector<float> x) {
  append(shared_floats{std::move(x)});
}

void float_parts::append(shared_floats buf) {
  auto n = static_cast<uint64_t>(buf.size());
  if (n == 0)
    return;
  pieces.push_back(
    float_piece{static_cast<uint32_t>(buffers.size()), 0, size, n});
  buffers.push_back(std::move(buf));
  size += n;
}

bool float_parts::valid(bool contiguous) const {
  uint64_t next = 0;
  for (auto& p : pieces) {
    if (p.buffer >= buffers.size())
      return false;
    auto have = static_cast<uint64_t>(buffers[p.buffer].size());
    if (p.from > have || p.length > have - p.from)
      return false;
    if (p.at > size || p.length > size - p.at)
      return false;
    if (contiguous && p.at != next)
      return false;
    next = p.at + p.length;
  }
  return !contiguous || next == size;
}

void float_parts::copy_to(float* dst) const {
  for (auto& p : pieces)
    std::memcpy(dst + p.at, buffers[p.buffer].data() + p.from,
                p.length * sizeof(float));
}

std::vector<float> float_parts::flatten() const {
  std::vector<float> out(size);
  copy_to(out.data());
  return out;
}

} // namespace actorps
