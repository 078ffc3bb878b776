// SPDX-License-Identifier: BSD-3-Clause
#include "core/parts.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace actorps::core {

// -- parts_reader -------------------------------------------------------------

parts_reader::parts_reader(float_parts& src) : src_(src) {
  uses_.assign(src_.buffers.size(), 0);
  for (auto& p : src_.pieces)
    ++uses_[p.buffer];
}

std::vector<float> parts_reader::take(uint64_t n) {
  skip_empty();
  if (pos_ == 0 && i_ < src_.pieces.size()) {
    auto& p = src_.pieces[i_];
    auto& buf = src_.buffers[p.buffer];
    if (p.from == 0 && p.length == n && buf.size() == n
        && uses_[p.buffer] == 1) {
      ++i_;
      return buf.take();
    }
  }
  std::vector<float> out;
  out.reserve(n);
  append(out, n);
  return out;
}

void parts_reader::share(float_parts& out, uint64_t n) {
  while (n > 0) {
    skip_empty();
    auto& p = src_.pieces[i_];
    auto k = std::min(n, p.length - pos_);
    auto& buf = src_.buffers[p.buffer];
    auto from = p.from + pos_;
    auto done = pos_ + k == p.length;
    auto last_use = done && --uses_[p.buffer] == 0;
    auto last = out.pieces.empty() ? nullptr : &out.pieces.back();
    if (last != nullptr && out.buffers[last->buffer].data() == buf.data()) {
      if (last->from + last->length == from)
        last->length += k;
      else
        out.pieces.push_back(float_piece{last->buffer, from, out.size, k});
      if (last_use)
        buf = shared_floats{};
    } else {
      out.pieces.push_back(float_piece{
        static_cast<uint32_t>(out.buffers.size()), from, out.size, k});
      out.buffers.push_back(last_use ? std::move(buf) : buf);
    }
    out.size += k;
    pos_ += k;
    n -= k;
    if (done) {
      ++i_;
      pos_ = 0;
    }
  }
}

void parts_reader::append(std::vector<float>& out, uint64_t n) {
  while (n > 0) {
    skip_empty();
    auto& p = src_.pieces[i_];
    auto k = std::min(n, p.length - pos_);
    auto first = src_.buffers[p.buffer].data() + p.from + pos_;
    out.insert(out.end(), first, first + k);
    pos_ += k;
    n -= k;
    if (pos_ == p.length) {
      ++i_;
      pos_ = 0;
    }
  }
}

bool parts_reader::next_is_view(uint64_t n) {
  skip_empty();
  if (pos_ != 0 || i_ == src_.pieces.size())
    return false;
  auto& p = src_.pieces[i_];
  auto& buf = src_.buffers[p.buffer];
  return p.from == 0 && p.length == n && buf.size() == n && buf.is_view();
}

void parts_reader::skip_empty() {
  while (i_ < src_.pieces.size() && src_.pieces[i_].length == 0)
    ++i_;
}

// -- parts_cursor -------------------------------------------------------------

const float* parts_cursor::read(uint64_t at, uint64_t n) {
  auto& ps = src_.pieces;
  while (i_ < ps.size() && ps[i_].at + ps[i_].length <= at)
    ++i_;
  if (i_ == ps.size())
    return nullptr;
  auto& p = ps[i_];
  auto* first = src_.buffers[p.buffer].data() + p.from + (at - p.at);
  if (at + n <= p.at + p.length)
    return first;
  scratch_.clear();
  scratch_.reserve(n);
  for (auto j = i_; j < ps.size() && scratch_.size() < n; ++j) {
    auto& q = ps[j];
    auto skip = j == i_ ? at - q.at : 0;
    auto k = std::min<uint64_t>(q.length - skip, n - scratch_.size());
    auto* from = src_.buffers[q.buffer].data() + q.from + skip;
    scratch_.insert(scratch_.end(), from, from + k);
  }
  return scratch_.data();
}

// -- whole values and placement -----------------------------------------------

std::vector<float> take_all(float_parts& x) {
  if (x.pieces.size() == 1) {
    auto& p = x.pieces[0];
    auto& buf = x.buffers[p.buffer];
    if (p.from == 0 && p.length == buf.size() && buf.unique())
      return buf.take();
  }
  return x.flatten();
}

namespace {

status check_returned(uint64_t got, uint64_t expected) {
  if (got == expected)
    return {};
  return {errc::shape_mismatch, "a shard returned " + std::to_string(got)
                                  + " floats where " + std::to_string(expected)
                                  + " were expected"};
}

// A batch reply of `expected` floats whose pieces lie in their buffers.
status check_batch_reply(const float_parts& x, uint64_t expected) {
  if (auto st = check_returned(x.size, expected); !st.ok())
    return st;
  if (!x.valid(false))
    return {errc::shape_mismatch,
            "a shard returned a batch reply with pieces outside their "
            "buffers"};
  return {};
}

} // namespace

status place(float_parts& out, uint64_t at, uint64_t expected,
             shared_floats& x) {
  if (auto st = check_returned(x.size(), expected); !st.ok())
    return st;
  out.pieces.push_back(
    float_piece{static_cast<uint32_t>(out.buffers.size()), 0, at, expected});
  out.buffers.push_back(std::move(x));
  return {};
}

status place(float_parts& out, const std::vector<piece>& pieces,
             uint64_t expected, float_parts& x) {
  if (auto st = check_batch_reply(x, expected); !st.ok())
    return st;
  auto base = static_cast<uint32_t>(out.buffers.size());
  for (auto& b : x.buffers)
    out.buffers.push_back(std::move(b));
  // Where each slice starts in the reply.
  std::vector<uint64_t> starts;
  starts.reserve(pieces.size());
  uint64_t from = 0;
  for (auto& p : pieces) {
    starts.push_back(from);
    from += p.length;
  }
  for (auto& xp : x.pieces) {
    // The slice that holds the piece's first float, then on while the piece
    // lasts.
    auto i = static_cast<std::size_t>(
      std::upper_bound(starts.begin(), starts.end(), xp.at) - starts.begin()
      - 1);
    uint64_t done = 0;
    while (done < xp.length && i < pieces.size()) {
      auto at = xp.at + done;
      auto in_slice = at - starts[i];
      auto n = std::min(xp.length - done, pieces[i].length - in_slice);
      out.pieces.push_back(float_piece{base + xp.buffer, xp.from + done,
                                       pieces[i].offset + in_slice, n});
      done += n;
      ++i;
    }
  }
  return {};
}

namespace {

// Copies `n` floats: short runs in a loop (a call to memcpy per slice of one
// float cost more than the copy).
inline void copy_floats(float* to, const float* from, uint64_t n) {
  if (n <= 16) {
    for (uint64_t j = 0; j < n; ++j)
      to[j] = from[j];
    return;
  }
  std::memcpy(to, from, n * sizeof(float));
}

status outside(uint64_t at, uint64_t n, uint64_t out_size) {
  return {errc::shape_mismatch,
          "a reply's slice at " + std::to_string(at) + " of "
            + std::to_string(n) + " floats lies outside the "
            + std::to_string(out_size) + " floats of the output"};
}

} // namespace

status place_flat(float* out, uint64_t out_size, uint64_t at, uint64_t expected,
                  const shared_floats& x) {
  if (auto st = check_returned(x.size(), expected); !st.ok())
    return st;
  if (at > out_size || expected > out_size - at)
    return outside(at, expected, out_size);
  copy_floats(out + at, x.data(), expected);
  return {};
}

status place_flat(float* out, uint64_t out_size,
                  const std::vector<piece>& pieces, uint64_t expected,
                  const float_parts& x) {
  if (auto st = check_batch_reply(x, expected); !st.ok())
    return st;
  uint64_t sum = 0;
  for (auto& p : pieces) {
    if (p.offset > out_size || p.length > out_size - p.offset)
      return outside(p.offset, p.length, out_size);
    sum += p.length;
  }
  if (auto st = check_returned(sum, expected); !st.ok())
    return st;
  // (A reply in order is read where it lies; another is put in order
  // first.)
  float_parts whole;
  const float_parts* src = &x;
  if (!x.valid(true)) {
    whole = float_parts{x.flatten()};
    src = &whole;
  }
  uint64_t from = 0;
  if (src->pieces.size() == 1) {
    // (A remote shard's reply: one buffer, read without a cursor.)
    auto& only = src->pieces.front();
    const float* all = src->buffers[only.buffer].data() + only.from;
    for (auto& p : pieces) {
      copy_floats(out + p.offset, all + from, p.length);
      from += p.length;
    }
    return {};
  }
  parts_cursor in{*src};
  for (auto& p : pieces) {
    copy_floats(out + p.offset, in.read(from, p.length), p.length);
    from += p.length;
  }
  return {};
}

} // namespace actorps::core
