// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/ucx/replicas.hpp"

#include <cstring>
#include <utility>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"
#include "caf/message.hpp"
#include "caf/send.hpp"

#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace actorps::ucx {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "replicate frames carry the values and the length as they lie "
              "in memory");

// A forward's answer for `primary` (on the plane's thread or the caller's).
void answer(const caf::actor& primary, uint64_t to, uint64_t number,
            caf::error err) {
  replica_ack a;
  a.peer = to;
  a.number = number;
  a.err = std::move(err);
  caf::anon_send(primary, replicate_atom::value, std::move(a));
}

} // namespace

plane_link::plane_link(caf::actor_system& sys) : sys_(sys) {
  // nop
}

void plane_link::attach(std::weak_ptr<plane> p) {
  std::lock_guard<std::mutex> guard{mtx_};
  plane_ = std::move(p);
}

std::shared_ptr<plane> plane_link::current() {
  std::lock_guard<std::mutex> guard{mtx_};
  return plane_.lock();
}

uint64_t plane_link::open(const std::string& address) {
  auto p = current();
  if (!p || address.empty())
    return 0;
  return p->connect(std::vector<char>(address.begin(), address.end()),
                    server_identity);
}

uint64_t plane_link::source(const std::string& address) {
  auto p = current();
  if (!p || address.empty())
    return 0;
  auto id = p->find(std::vector<char>(address.begin(), address.end()),
                    server_identity);
  // (As the ingress names the connections forwards come over.)
  return id == 0 ? 0 : reply_peer(id, server_identity);
}

void plane_link::post(uint64_t to, uint32_t index, uint64_t number,
                      frame_kind kind, payload body,
                      const caf::actor& primary) {
  std::shared_ptr<plane> p;
  uint64_t request = 0;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    p = plane_.lock();
    if (p) {
      request = next_++;
      waiting_.emplace(request, waiting{to, index, number, primary});
    }
  }
  if (!p) {
    answer(primary, to, number,
           make_error(errc::dead_node, "replicate: the data plane is closed"));
    return;
  }
  frame_header h;
  h.kind = kind;
  h.request = request;
  h.shard = index;
  p->send_offloaded(
    to, encode(h, number), std::move(body),
    [weak = weak_from_this(), request](const std::string& why) {
      auto self = weak.lock();
      if (why.empty() || !self)
        return;
      waiting w;
      {
        std::lock_guard<std::mutex> guard{self->mtx_};
        auto i = self->waiting_.find(request);
        if (i == self->waiting_.end())
          return;
        w = std::move(i->second);
        self->waiting_.erase(i);
      }
      answer(w.primary, w.to, w.number,
             make_error(errc::dead_node,
                        "replicate: the backup's server is unreachable (" + why
                          + ")"));
    });
}

void plane_link::send(uint64_t to, uint32_t index, uint64_t number,
                      replica_batch&& ops, const caf::actor& primary) {
  // The values travel where they lie, the operations without them behind.
  struct held {
    replica_batch batch;
    std::vector<std::vector<float>> values;
    std::vector<char> meta;
  };
  auto keep = std::make_shared<held>();
  keep->batch = std::move(ops);
  std::vector<uint64_t> counts;
  counts.reserve(keep->batch.ops.size());
  keep->values.reserve(keep->batch.ops.size());
  std::vector<payload::piece> pieces;
  for (auto& op : keep->batch.ops) {
    if (!op.shared.empty()) {
      // The slice's own buffer (kept with the batch): read, never copied.
      counts.push_back(op.shared.size());
      pieces.push_back(
        payload::piece{op.shared.data(), op.shared.size() * sizeof(float)});
      keep->values.emplace_back();
      continue;
    }
    counts.push_back(op.values.data.size());
    keep->values.emplace_back(std::move(op.values.data));
    op.values.data.clear();
    auto& v = keep->values.back();
    if (!v.empty())
      pieces.push_back(payload::piece{v.data(), v.size() * sizeof(float)});
  }
  caf::binary_serializer sink{sys_, keep->meta};
  if (auto err = sink(keep->batch, counts)) {
    answer(primary, to, number, err);
    return;
  }
  uint64_t length = keep->meta.size();
  keep->meta.resize((length + 3) / 4 * 4, 0);
  keep->meta.resize(keep->meta.size() + sizeof(length));
  std::memcpy(keep->meta.data() + keep->meta.size() - sizeof(length), &length,
              sizeof(length));
  pieces.push_back(payload::piece{keep->meta.data(), keep->meta.size()});
  post(to, index, number, frame_kind::replicate,
       payload{std::move(pieces), keep}, primary);
}

void plane_link::send(uint64_t to, uint32_t index, uint64_t number,
                      const caf::message& change, const caf::actor& primary) {
  auto buf = std::make_shared<std::vector<char>>();
  caf::binary_serializer sink{sys_, *buf};
  auto copy = change;
  if (auto err = sink(copy)) {
    answer(primary, to, number, err);
    return;
  }
  post(to, index, number, frame_kind::replicate_change,
       payload{buf->data(), buf->size(), buf}, primary);
}

void plane_link::forget(uint64_t to, uint32_t index) {
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto i = waiting_.begin(); i != waiting_.end();) {
    if (i->second.to == to && i->second.index == index)
      i = waiting_.erase(i);
    else
      ++i;
  }
}

void plane_link::on_reply(frame& x, const frame_header& h) {
  waiting w;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = waiting_.find(h.request);
    if (i == waiting_.end() || i->second.to != x.from)
      return;
    w = std::move(i->second);
    waiting_.erase(i);
  }
  caf::error err;
  if (h.kind == frame_kind::failure) {
    caf::binary_deserializer source{sys_, x.body.data(), x.body.size()};
    if (source(err) || !err)
      err = make_error(errc::bad_config,
                       "replicate: the backup's failure holds no error");
  } else if (x.body.size() != 0) {
    err = make_error(errc::bad_config,
                     "replicate: the backup answered with values");
  }
  answer(w.primary, w.to, w.number, std::move(err));
}

bool deliver_forward(caf::actor_system& sys, frame& x, const frame_header& h,
                     const shard_actor& shard, plane_reply reply) {
  auto number = decode_number(x.header);
  if (!number)
    return false;
  auto& body = x.body;
  if (h.kind == frame_kind::replicate_change) {
    caf::message m;
    caf::binary_deserializer source{sys, body.data(), body.size()};
    if (source(m) || m.empty())
      return false;
    caf::anon_send(shard, replicate_atom::value, *number, std::move(m),
                   std::move(reply));
    return true;
  }
  // Values, the operations (padded to 4 bytes), their length.
  uint64_t length = 0;
  if (body.size() < sizeof(length))
    return false;
  std::memcpy(&length, body.data() + body.size() - sizeof(length),
              sizeof(length));
  auto rest = body.size() - sizeof(length);
  if (length > rest)
    return false;
  auto padded = (length + 3) / 4 * 4;
  if (padded > rest)
    return false;
  auto values = rest - padded;
  replica_batch b;
  std::vector<uint64_t> counts;
  // A body in the primary's segment (which it may still write) is read
  // once: the operations from a copy, the values where they lie.
  std::vector<char> ops;
  const char* ops_at = body.data() + values;
  if (body.is_view()) {
    ops.assign(ops_at, ops_at + length);
    ops_at = ops.data();
  }
  caf::binary_deserializer source{sys, ops_at,
                                  static_cast<std::size_t>(length)};
  if (source(b, counts) || counts.size() != b.ops.size())
    return false;
  // Values travel only behind the operations, never inside them.
  for (const auto& op : b.ops)
    if (!op.values.data.empty())
      return false;
  uint64_t total = 0;
  std::size_t carriers = 0;
  for (auto c : counts) {
    if (c > max_frame_floats)
      return false;
    total += c;
    carriers += c > 0 ? 1 : 0;
  }
  if (total * sizeof(float) != values)
    return false;
  auto in_place = carriers == 1 ? body.floats_in_place(total) : shared_floats{};
  if (!in_place.empty()) {
    // One operation's values, at the front of the primary's segment: the
    // backup reads them there (shared_floats::vec copies them if it must).
    for (std::size_t i = 0; i < counts.size(); ++i)
      if (counts[i] > 0)
        b.ops[i].shared = std::move(in_place);
  } else if (carriers == 1) {
    // One operation's values, at the front: taken over without a copy.
    std::vector<float> all;
    if (!body.take_floats(all))
      return false;
    for (std::size_t i = 0; i < counts.size(); ++i)
      if (counts[i] > 0) {
        all.resize(counts[i]);
        b.ops[i].values.data = std::move(all);
      }
  } else {
    const char* at = body.data();
    for (std::size_t i = 0; i < counts.size(); ++i) {
      auto& v = b.ops[i].values.data;
      v.resize(counts[i]);
      if (counts[i] > 0)
        std::memcpy(v.data(), at, counts[i] * sizeof(float));
      at += counts[i] * sizeof(float);
    }
  }
  caf::anon_send(shard, replicate_atom::value, *number, std::move(b),
                 std::move(reply));
  return true;
}

} // namespace actorps::ucx
