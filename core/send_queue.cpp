// SPDX-License-Identifier: BSD-3-Clause
#include "core/send_queue.hpp"

#include <algorithm>
#include <unordered_set>

namespace actorps::core {

namespace {

// Only asked when priorities differ or sync pulls wait for room (both
// rare), so the lists stay unsorted.
bool share_slice(const std::vector<slice_id>& a,
                 const std::vector<slice_id>& b) {
  const auto& small = a.size() < b.size() ? a : b;
  const auto& large = a.size() < b.size() ? b : a;
  std::unordered_set<slice_id> seen(small.begin(), small.end());
  return std::any_of(large.begin(), large.end(),
                     [&](slice_id x) { return seen.count(x) > 0; });
}

} // namespace

request_cost cost_of(op_kind kind, uint64_t floats, bool sync) noexcept {
  auto bytes = floats * sizeof(float);
  request_cost c;
  switch (kind) {
    case op_kind::push:
      c.bytes = bytes;
      break;
    case op_kind::pull:
      c.bytes = sync ? 0 : bytes;
      c.pull_bytes = sync ? bytes : 0;
      break;
    default:
      c.bytes = sync ? 0 : 2 * bytes;
      c.soft = sync ? 2 * bytes : 0;
      break;
  }
  return c;
}

void send_queue::send(map::iterator i) {
  auto& c = i->second.x.cost;
  in_flight_ += c.bytes;
  soft_ += c.soft;
  pulls_in_flight_ += c.pull_bytes;
  auto f = std::move(i->second.x.send);
  queue_.erase(i);
  f();
}

void send_queue::pump() {
  if (pumping_)
    return;
  pumping_ = true;
  // Sync pulls waiting for room, in queue order. Kept as keys: sending may
  // change the queue.
  std::vector<key> held;
  auto i = queue_.begin();
  while (i != queue_.end()) {
    auto k = i->first;
    const auto& x = i->second.x;
    if (x.cost.pull_bytes > 0) {
      if (!held.empty()
          || (pulls_in_flight_ > 0
              && pulls_in_flight_ + x.cost.pull_bytes > bound_)) {
        held.push_back(k);
        ++i;
        continue;
      }
    } else {
      if (x.cost.bytes > 0 && in_flight_ > 0
          && in_flight_ + x.cost.bytes > bound_)
        break;
      // Copied: sending a held pull may change the queue.
      auto slices = held.empty() ? std::vector<slice_id>{} : x.slices;
      for (auto h = held.begin(); h != held.end();) {
        auto j = queue_.find(*h);
        if (j == queue_.end()) {
          h = held.erase(h);
        } else if (share_slice(j->second.x.slices, slices)) {
          send(j);
          h = held.erase(h);
        } else {
          ++h;
        }
      }
    }
    if (auto j = queue_.find(k); j != queue_.end())
      send(j);
    i = queue_.upper_bound(k);
  }
  pumping_ = false;
}

void send_queue::release(const request_cost& c) {
  in_flight_ -= c.bytes;
  soft_ -= c.soft;
  pulls_in_flight_ -= c.pull_bytes;
  pump();
}

void send_queue::enqueue(outgoing x) {
  auto order = next_order_++;
  auto priority = x.priority;
  // Raising one request may require raising its own predecessors: repeat
  // until nothing changes (queues are short; equal priorities skip this).
  std::vector<const std::vector<slice_id>*> raised{&x.slices};
  while (!raised.empty()) {
    auto of = raised.back();
    raised.pop_back();
    std::vector<entry> lifted;
    for (auto i = queue_.begin(); i != queue_.end();) {
      if (i->second.x.priority < priority
          && share_slice(i->second.x.slices, *of)) {
        lifted.push_back(std::move(i->second));
        i = queue_.erase(i);
      } else {
        ++i;
      }
    }
    for (auto& y : lifted) {
      y.x.priority = priority;
      auto k = std::make_pair(-static_cast<int64_t>(priority), y.order);
      auto& placed = queue_.emplace(k, std::move(y)).first->second;
      raised.push_back(&placed.x.slices);
    }
  }
  auto k = std::make_pair(-static_cast<int64_t>(priority), order);
  queue_.emplace(k, entry{std::move(x), order});
  pump();
}

bool send_queue::fits(uint64_t bytes) const noexcept {
  auto busy = in_flight_ + soft_;
  return queue_.empty() && (busy == 0 || busy + bytes <= bound_);
}

} // namespace actorps::core
