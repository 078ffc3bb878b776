// SPDX-License-Identifier: BSD-3-Clause
#include "actors/worker.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "caf/actor_system.hpp"
#include "caf/duration.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/message_priority.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/system_messages.hpp"
#include "caf/typed_event_based_actor.hpp"
#include "caf/typed_response_promise.hpp"

#include "actors/fan_in.hpp"
#include "messages/errors.hpp"
#include "core/layout.hpp"

namespace actorps {

namespace {

// Routing entry of one key plus this worker's next sequence number per part.
struct route {
  key_info info;
  std::vector<uint64_t> seq;
  // The key's compression and, for 2-bit, each part's residual (allocated
  // at the part's first push).
  compression comp;
  std::vector<std::vector<float>> residual;
};

// One request to a shard waiting in that shard's outbox.
struct outgoing {
  int32_t priority = 0;
  // Issue order: among equal priorities, earlier requests go first.
  uint64_t order = 0;
  // Bytes it holds of the shard's bound while in flight (0: none).
  uint64_t bytes = 0;
  // Bytes of a sync push-pull: counted while in flight, but never keeping
  // another request back (see fits).
  uint64_t soft = 0;
  // Bytes of a sync pull: held of the shard's bound on pulls while in
  // flight. Its reply waits for its round, so it never keeps a push or
  // push-pull back: one on its slices sends it first, over the bound.
  uint64_t pull_bytes = 0;
  // The slices it acts on: a request never overtakes an earlier one
  // on the same slice, so the shard never waits for a request still here.
  std::vector<slice_id> slices;
  // Sends the request; its reply (or error) must call `release`.
  std::function<void()> send;
};

// Requests to one shard not sent yet, highest priority first, and the bytes
// of the requests sent and not answered yet.
struct outbox {
  std::map<std::pair<int64_t, uint64_t>, outgoing> queue;
  uint64_t in_flight = 0;
  uint64_t soft = 0;
  // Bytes of sync pulls sent and not answered yet (their own bound).
  uint64_t pulls_in_flight = 0;
  // Set while pump runs: a send that fails at once re-enters release.
  bool pumping = false;
};

} // namespace

struct worker_state {
  static inline const char* name = "actorps.worker";

  worker_config cfg;
  std::unordered_map<std::string, route> routes;
  // Keys with a compression setting of their own (see compress_atom).
  std::unordered_map<std::string, compression> key_compression;
  // While a lookup is in flight, every later operation waits here, so that
  // operations take effect in issue order (lookups happen once per key).
  bool stalled = false;
  std::deque<std::function<void()>> backlog;
  // Per shard: dead or not, and the failure handlers of requests in flight,
  // so that a shard going down fails them at once (CAF 0.17 fails requests
  // to a dead remote peer only when they time out).
  std::vector<bool> dead;
  std::vector<std::unordered_map<uint64_t, std::function<void(caf::error&)>>>
    in_flight;
  uint64_t next_request = 0;
  // Per shard: requests waiting for room under cfg.max_bytes_in_flight.
  std::vector<outbox> outboxes;
  uint64_t next_order = 0;

  caf::duration timeout() const {
    return caf::duration{cfg.timeout};
  }
};

namespace {

using self_ptr = worker_actor::stateful_pointer<worker_state>;

std::string quoted(const std::string& key) {
  return "'" + key + "'";
}

// Records the route of `key`; a known route keeps its sequence numbers.
void add_route(self_ptr self, key_info info) {
  auto& routes = self->state.routes;
  auto i = routes.find(info.name);
  if (i != routes.end()) {
    i->second.info = std::move(info);
    return;
  }
  auto name = info.name;
  route r;
  r.seq.assign(info.slices.size(), 0);
  auto c = self->state.key_compression.find(name);
  r.comp = c != self->state.key_compression.end() ? c->second
                                                  : self->state.cfg.compression;
  r.info = std::move(info);
  routes.emplace(std::move(name), std::move(r));
}

// Runs the operations that waited behind a lookup, until one stalls again.
void drain_backlog(self_ptr self) {
  auto& st = self->state;
  while (!st.stalled && !st.backlog.empty()) {
    auto f = std::move(st.backlog.front());
    st.backlog.pop_front();
    f();
  }
}

// Runs `f` once every key of `keys` has a route, fetching missing ones from
// the coordinator first; operations issued meanwhile wait behind it.
void with_routes(self_ptr self, const std::vector<std::string>& keys,
                 std::function<void()> f,
                 std::function<void(const caf::error&)> on_error) {
  auto& st = self->state;
  if (st.stalled) {
    // Rare (a lookup is in flight): the keys are copied only here.
    st.backlog.emplace_back(
      [self, keys, f = std::move(f), on_error = std::move(on_error)]() mutable {
        with_routes(self, keys, std::move(f), std::move(on_error));
      });
    return;
  }
  std::vector<std::string> missing;
  for (auto& k : keys)
    if (st.routes.count(k) == 0
        && std::find(missing.begin(), missing.end(), k) == missing.end())
      missing.push_back(k);
  if (missing.empty()) {
    f();
    return;
  }
  struct lookups {
    std::size_t remaining = 0;
    caf::error err;
    std::function<void()> f;
    std::function<void(const caf::error&)> on_error;
  };
  auto pending = std::make_shared<lookups>();
  pending->remaining = missing.size();
  pending->f = std::move(f);
  pending->on_error = std::move(on_error);
  auto arrive = [self, pending] {
    if (--pending->remaining > 0)
      return;
    if (pending->err)
      pending->on_error(pending->err);
    else
      pending->f();
    self->state.stalled = false;
    drain_backlog(self);
  };
  st.stalled = true;
  for (auto& k : missing)
    self->request(st.cfg.coordinator, st.timeout(), lookup_atom::value, k)
      .then(
        [self, arrive](key_info& info) {
          add_route(self, std::move(info));
          arrive();
        },
        [self, k, pending, arrive](caf::error& err) {
          // An init may have made the route known meanwhile: keep it.
          if (self->state.routes.count(k) == 0 && !pending->err)
            pending->err = std::move(err);
          arrive();
        });
}

caf::error dead_shard(uint32_t index) {
  return make_error(errc::dead_node, "shard " + std::to_string(index)
                                       + " is down (its server died or "
                                         "its connection was lost)");
}

// Sends one request to shard `index` and tracks it until it completes.
// Priority > 0 goes through the shard's relay when the shard is remote (CAF
// drops priorities over the network), else with CAF's high priority.
template <class Reply, class OnOk, class... Ts>
void to_shard(self_ptr self, uint32_t index, int32_t priority, OnOk on_ok,
              std::function<void(caf::error&)> on_err, Ts&&... xs) {
  auto& st = self->state;
  if (st.dead[index]) {
    auto err = dead_shard(index);
    on_err(err);
    return;
  }
  auto id = st.next_request++;
  st.in_flight[index].emplace(id, std::move(on_err));
  auto ok = [self, index, id, on_ok](Reply& x) mutable {
    if (self->state.in_flight[index].erase(id) > 0)
      on_ok(x);
  };
  auto fail = [self, index, id](caf::error& err) {
    auto& pending = self->state.in_flight[index];
    auto i = pending.find(id);
    if (i == pending.end())
      return;
    auto f = std::move(i->second);
    pending.erase(i);
    f(err);
  };
  if (priority > 0 && !st.cfg.relays.empty())
    self->request(st.cfg.relays[index], st.timeout(), std::forward<Ts>(xs)...)
      .then(ok, fail);
  else if (priority > 0)
    self
      ->request<caf::message_priority::high>(st.cfg.shards[index], st.timeout(),
                                             std::forward<Ts>(xs)...)
      .then(ok, fail);
  else
    self->request(st.cfg.shards[index], st.timeout(), std::forward<Ts>(xs)...)
      .then(ok, fail);
}

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

// Sends the requests at the head of shard `index`'s outbox while they fit
// under the bound on bytes in flight (one always may go if none is in
// flight, however large). Sync pulls have a bound of their own, so that a
// burst of pulls never makes a server serialize all their replies at once:
// one that must wait holds the later sync pulls back, but no other request;
// a request on one of its slices sends it first (over the bound), so
// requests on a slice keep their order.
void pump(self_ptr self, uint32_t index) {
  auto& box = self->state.outboxes[index];
  if (box.pumping)
    return;
  box.pumping = true;
  auto bound = self->state.cfg.max_bytes_in_flight;
  auto go = [&](std::map<std::pair<int64_t, uint64_t>, outgoing>::iterator i) {
    box.in_flight += i->second.bytes;
    box.soft += i->second.soft;
    box.pulls_in_flight += i->second.pull_bytes;
    auto send = std::move(i->second.send);
    box.queue.erase(i);
    send();
  };
  // Sync pulls waiting for room, in queue order. Kept as keys: sending may
  // change the queue.
  std::vector<std::pair<int64_t, uint64_t>> held;
  auto i = box.queue.begin();
  while (i != box.queue.end()) {
    auto key = i->first;
    const auto& x = i->second;
    if (x.pull_bytes > 0) {
      if (!held.empty()
          || (box.pulls_in_flight > 0
              && box.pulls_in_flight + x.pull_bytes > bound)) {
        held.push_back(key);
        ++i;
        continue;
      }
    } else {
      if (x.bytes > 0 && box.in_flight > 0 && box.in_flight + x.bytes > bound)
        break;
      // Copied: sending a held pull may change the queue.
      auto slices = held.empty() ? std::vector<slice_id>{} : x.slices;
      for (auto h = held.begin(); h != held.end();) {
        auto j = box.queue.find(*h);
        if (j == box.queue.end()) {
          h = held.erase(h);
        } else if (share_slice(j->second.slices, slices)) {
          go(j);
          h = held.erase(h);
        } else {
          ++h;
        }
      }
    }
    if (auto j = box.queue.find(key); j != box.queue.end())
      go(j);
    i = box.queue.upper_bound(key);
  }
  box.pumping = false;
}

// A request to shard `index` was answered (or failed): it no longer holds
// `bytes`, `soft` and `pull_bytes`.
void release(self_ptr self, uint32_t index, uint64_t bytes, uint64_t soft,
             uint64_t pull_bytes) {
  auto& box = self->state.outboxes[index];
  box.in_flight -= bytes;
  box.soft -= soft;
  box.pulls_in_flight -= pull_bytes;
  pump(self, index);
}

// Queues a request to shard `index` behind those of higher priority (and
// earlier ones of equal priority), then sends what fits. Queued requests of
// lower priority on the same slices are raised to `x.priority` first
// (priority inheritance), so the new one never overtakes them.
void enqueue(self_ptr self, uint32_t index, outgoing x) {
  auto& st = self->state;
  auto& box = st.outboxes[index];
  x.order = st.next_order++;
  // Raising one request may require raising its own predecessors: repeat
  // until nothing changes (queues are short; equal priorities skip this).
  std::vector<const std::vector<slice_id>*> raised{&x.slices};
  while (!raised.empty()) {
    auto of = raised.back();
    raised.pop_back();
    std::vector<outgoing> lifted;
    for (auto i = box.queue.begin(); i != box.queue.end();) {
      if (i->second.priority < x.priority
          && share_slice(i->second.slices, *of)) {
        lifted.push_back(std::move(i->second));
        i = box.queue.erase(i);
      } else {
        ++i;
      }
    }
    for (auto& y : lifted) {
      y.priority = x.priority;
      auto key = std::make_pair(-static_cast<int64_t>(y.priority), y.order);
      auto& placed = box.queue.emplace(key, std::move(y)).first->second;
      raised.push_back(&placed.slices);
    }
  }
  auto key = std::make_pair(-static_cast<int64_t>(x.priority), x.order);
  box.queue.emplace(key, std::move(x));
  pump(self, index);
}

// A shard (or its relay) went down: fail everything in flight to it.
void on_down(self_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (uint32_t i = 0; i < st.cfg.shards.size(); ++i) {
    bool hit = st.cfg.shards[i].address() == dm.source
               || (i < st.cfg.relays.size()
                   && st.cfg.relays[i].address() == dm.source);
    if (!hit || st.dead[i])
      continue;
    st.dead[i] = true;
    auto pending = std::move(st.in_flight[i]);
    st.in_flight[i].clear();
    for (auto& kvp : pending) {
      auto err = dead_shard(i);
      kvp.second(err);
    }
    // Queued requests fail as they are sent (the shard is marked dead).
    pump(self, i);
  }
}

const char* op_name(op_kind kind) {
  switch (kind) {
    case op_kind::push:
      return "push";
    case op_kind::pull:
      return "pull";
    default:
      return "push_pull";
  }
}

// `length` floats of a reply that belong at `offset` of the output.
struct piece {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// One push, pull or push_pull on one or more keys, in flight: counts the
// shards' replies and collects the pulled slices as pieces of one output,
// without copying them (see float_parts).
struct gather {
  std::size_t remaining = 0;
  bool sealed = false;
  bool failed = false;
  float_parts out;
  std::function<void(float_parts)> finish;
  std::function<void(caf::error)> on_error;

  void fail(caf::error err) {
    if (failed)
      return;
    failed = true;
    on_error(std::move(err));
  }

  void arrive() {
    if (!failed && --remaining == 0 && sealed)
      finish(std::move(out));
  }

  bool check(uint64_t got, uint64_t expected) {
    if (got == expected)
      return true;
    fail(make_error(errc::shape_mismatch,
                    "a shard returned " + std::to_string(got) + " floats where "
                      + std::to_string(expected) + " were expected"));
    return false;
  }

  // One slice's value, which belongs at `at` of the output: shared as it is.
  void put(uint64_t at, uint64_t expected, shared_floats& x) {
    if (failed || !check(x.size(), expected))
      return;
    out.pieces.push_back(
      float_piece{static_cast<uint32_t>(out.buffers.size()), 0, at, expected});
    out.buffers.push_back(std::move(x));
    arrive();
  }

  // A batch reply: the slices of `pieces` back to back, as pieces of any
  // number of buffers (one per slice from a local shard, one in all from a
  // remote one). Each piece of the reply is cut where the slices meet and
  // placed, still shared, where its slice belongs in the output.
  void put(const std::vector<piece>& pieces, uint64_t expected,
           float_parts& x) {
    if (failed || !check(x.size, expected))
      return;
    if (!x.valid(false)) {
      fail(make_error(errc::shape_mismatch,
                      "a shard returned a batch reply with pieces outside "
                      "their buffers"));
      return;
    }
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
      // The slice that holds the piece's first float, then on while the
      // piece lasts.
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
    arrive();
  }
};

using gather_ptr = std::shared_ptr<gather>;

// Reads a pushed value (contiguous pieces, checked) front to back, slice by
// slice.
class parts_reader {
public:
  explicit parts_reader(float_parts& src) : src_(src) {
    uses_.assign(src_.buffers.size(), 0);
    for (auto& p : src_.pieces)
      ++uses_[p.buffer];
  }

  // The next `n` floats as a buffer of their own: a buffer that holds
  // exactly them (and nothing else refers to) is taken over, else they are
  // copied.
  std::vector<float> take(uint64_t n) {
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

  // Appends the next `n` floats to `out` as pieces of the buffers that hold
  // them, shared, not copied (a piece that continues the last one of `out`
  // in the same buffer lengthens it). A buffer whose last piece this reads
  // moves to `out`, so that `out` may become its only holder.
  void share(float_parts& out, uint64_t n) {
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

  // Appends the next `n` floats to `out`.
  void append(std::vector<float>& out, uint64_t n) {
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

private:
  void skip_empty() {
    while (i_ < src_.pieces.size() && src_.pieces[i_].length == 0)
      ++i_;
  }

  float_parts& src_;
  std::vector<uint32_t> uses_;
  std::size_t i_ = 0;
  uint64_t pos_ = 0;
};

// Sets the compression of `r`; a new codec starts from zero residuals.
void set_compression(route& r, const compression& c) {
  if (r.comp == c)
    return;
  r.comp = c;
  r.residual.clear();
}

// Runs the compression filter of `r` over the `n` floats of part `part`
// about to be pushed (in place; 2-bit updates the part's residual). With
// `packed` (the slice goes to a remote shard in a message of its own, so it
// crosses packed by its key's codec), fp16 is left to the serializer:
// packing truncates just as quantizing would, so the shard gets the same
// values one pass sooner. A batch may mix codecs and cross unpacked: its
// slices are always quantized here.
void quantize_part(route& r, uint32_t part, float* x, uint64_t n, bool packed) {
  if (r.comp.kind == codec::none || (packed && r.comp.kind == codec::fp16))
    return;
  float* residual = nullptr;
  if (r.comp.kind == codec::two_bit) {
    if (r.residual.size() < r.info.slices.size())
      r.residual.resize(r.info.slices.size());
    auto& res = r.residual[part];
    if (res.size() != n)
      res.assign(n, 0.0f);
    residual = res.data();
  }
  quantize(r.comp, x, residual, n);
}

// The encoding of a payload that holds slices of several keys: theirs if
// they all share it, else none (the values are quantized all the same, so
// they only cross the network unpacked).
void merge_encoding(floats& payload, bool first, const compression& c) {
  if (first)
    payload.encoding = c;
  else if (payload.encoding != c)
    payload.encoding = compression{};
}

// The floats of `x` as one vector: its one buffer, taken over when nothing
// else refers to it and it holds exactly them, else a copy.
std::vector<float> take_all(float_parts& x) {
  if (x.pieces.size() == 1) {
    auto& p = x.pieces[0];
    auto& buf = x.buffers[p.buffer];
    if (p.from == 0 && p.length == buf.size() && buf.unique())
      return buf.take();
  }
  return x.flatten();
}

// A batch being filled for one shard.
struct batch_builder {
  slice_batch msg;
  std::vector<piece> pieces;
  uint64_t floats = 0;
};

// Bytes a request holds of its shard's bound while in flight: what it
// carries there and back. Requests whose reply may wait for other workers
// (pulls and push-pulls in sync mode wait for their round) hold none, so
// that they never keep this worker's pushes, which those rounds need, from
// being sent (sync pulls are bounded on their own instead: see pump).
uint64_t bytes_held(const worker_config& cfg, op_kind kind, uint64_t floats) {
  auto bytes = floats * sizeof(float);
  switch (kind) {
    case op_kind::push:
      return bytes;
    case op_kind::pull:
      return cfg.sync ? 0 : bytes;
    default:
      return cfg.sync ? 0 : 2 * bytes;
  }
}

// True if a request of `bytes` to `shard` would be sent at once, with
// nothing queued before it (sync push-pulls in flight count here).
bool fits(self_ptr self, uint32_t shard, uint64_t bytes) {
  auto& box = self->state.outboxes[shard];
  auto busy = box.in_flight + box.soft;
  return box.queue.empty()
         && (busy == 0 || busy + bytes <= self->state.cfg.max_bytes_in_flight);
}

// Queues the request `(atom, msg)` for `shard` (see enqueue); its reply or
// error releases its bytes, then goes to `on_ok` or `on_err`.
template <class Reply, class OnOk, class Atom, class Msg>
void submit(self_ptr self, uint32_t shard, int32_t priority, op_kind kind,
            uint64_t floats, OnOk on_ok,
            std::function<void(caf::error&)> on_err, Atom atom, Msg msg) {
  auto bytes = bytes_held(self->state.cfg, kind, floats);
  auto sync = self->state.cfg.sync;
  auto soft = sync && kind == op_kind::push_pull ? 2 * floats * sizeof(float)
                                                 : 0;
  auto pull_bytes = sync && kind == op_kind::pull ? floats * sizeof(float) : 0;
  outgoing x;
  x.priority = priority;
  x.bytes = bytes;
  x.soft = soft;
  x.pull_bytes = pull_bytes;
  if constexpr (std::is_same_v<Msg, slice_batch>)
    x.slices = msg.slices;
  else
    x.slices = {msg.slice};
  x.send = [self, shard, priority, bytes, soft, pull_bytes,
            on_ok = std::move(on_ok), on_err = std::move(on_err), atom,
            msg = std::move(msg)]() mutable {
    to_shard<Reply>(
      self, shard, priority,
      [self, shard, bytes, soft, pull_bytes, on_ok](Reply& r) mutable {
        release(self, shard, bytes, soft, pull_bytes);
        on_ok(r);
      },
      [self, shard, bytes, soft, pull_bytes, on_err](caf::error& err) {
        release(self, shard, bytes, soft, pull_bytes);
        on_err(err);
      },
      atom, std::move(msg));
  };
  enqueue(self, shard, std::move(x));
}

// Sends a batch, or its only operation as a plain push, pull or push_pull,
// through the shard's outbox.
void flush(self_ptr self, uint32_t shard, int32_t priority, op_kind kind,
           batch_builder& b, const gather_ptr& g) {
  if (b.pieces.empty())
    return;
  ++g->remaining;
  std::function<void(caf::error&)> fail = [g](caf::error& err) {
    g->fail(std::move(err));
  };
  auto msg = std::move(b.msg);
  auto pieces = std::move(b.pieces);
  auto expected = b.floats;
  b.msg = slice_batch{msg.worker, msg.kind, {}, {}, {}, {}};
  b.pieces.clear();
  b.floats = 0;
  if (msg.slices.size() == 1) {
    auto at = pieces[0].offset;
    auto on_value = [g, at, expected](shared_floats& x) {
      g->put(at, expected, x);
    };
    if (msg.parts.size > 0)
      msg.data.data = take_all(msg.parts);
    auto one = slice_push{msg.slices[0], msg.worker, msg.seqs[0],
                          std::move(msg.data)};
    switch (kind) {
      case op_kind::push:
        submit<caf::ok_atom>(
          self, shard, priority, kind, expected,
          [g](caf::ok_atom) { g->arrive(); }, fail, push_atom::value,
          std::move(one));
        return;
      case op_kind::pull:
        submit<shared_floats>(self, shard, priority, kind, expected, on_value,
                              fail, pull_atom::value,
                              slice_pull{one.slice, one.worker, one.seq});
        return;
      case op_kind::push_pull:
        submit<shared_floats>(self, shard, priority, kind, expected, on_value,
                              fail, push_pull_atom::value, std::move(one));
        return;
    }
  }
  // A push batch answers with no floats: nothing to place.
  auto sent = expected;
  if (kind == op_kind::push) {
    pieces.clear();
    expected = 0;
  }
  submit<float_parts>(
    self, shard, priority, kind, sent,
    [g, pieces = std::move(pieces), expected](float_parts& x) {
      g->put(pieces, expected, x);
    },
    fail, batch_atom::value, std::move(msg));
}

// Starts `kind` on `keys` (whose routes are known): checks the payload,
// numbers each slice's operation, and sends each large slice on its own (its
// buffer moved along when the caller gave it one of its own) and the small
// slices of each shard as batches. `finish` gets the pulled values of all
// keys back to back (empty for pushes) once every shard answered;
// `on_error` gets the first error instead.
void start_ops(self_ptr self, op_kind kind,
               const std::vector<std::string>& keys, int32_t priority,
               float_parts data, std::function<void(float_parts)> finish,
               std::function<void(caf::error)> on_error) {
  auto& st = self->state;
  auto op = op_name(kind);
  auto pushes = kind != op_kind::pull;
  auto bound = st.cfg.batch_floats;
  std::vector<route*> rs;
  uint64_t total = 0;
  // Batched slices of uncompressed keys refer to the caller's buffers
  // instead of being copied into the batch, unless they are too short to be
  // worth a piece each (compressed ones are quantized into a copy).
  auto uncompressed = true;
  uint64_t batched = 0;
  uint64_t batched_floats = 0;
  for (auto& k : keys) {
    auto* r = &st.routes.at(k);
    rs.push_back(r);
    total += r->info.size;
    uncompressed = uncompressed && r->comp.kind == codec::none;
    for (auto& s : r->info.slices)
      if (s.length <= bound) {
        ++batched;
        batched_floats += s.length;
      }
  }
  auto share = pushes && uncompressed
               && batched_floats >= batched * min_shared_floats;
  if (pushes && data.size != total) {
    if (keys.size() == 1)
      on_error(to_error(core::check_size(op, rs[0]->info, data.size, "push")));
    else
      on_error(make_error(errc::shape_mismatch,
                          std::string{op} + ": " + std::to_string(keys.size())
                            + " keys hold " + std::to_string(total)
                            + " floats but the push has "
                            + std::to_string(data.size)));
    return;
  }
  if (pushes && !data.valid(true)) {
    on_error(make_error(errc::shape_mismatch,
                        std::string{op}
                          + ": the pieces of the pushed value do not cover it "
                            "in order"));
    return;
  }
  auto g = std::make_shared<gather>();
  g->finish = std::move(finish);
  g->on_error = std::move(on_error);
  if (kind != op_kind::push)
    g->out.size = total;
  parts_reader in{data};
  auto rank = st.cfg.rank;
  auto num_shards = static_cast<uint32_t>(st.cfg.shards.size());
  std::vector<batch_builder> open(num_shards);
  for (auto& b : open)
    b.msg = slice_batch{rank, static_cast<uint8_t>(kind), {}, {}, {}, {}};
  auto cap = std::max(bound, max_batch_floats);
  auto remote = !st.cfg.relays.empty();
  uint64_t key_offset = 0;
  for (auto* r : rs) {
    const auto& info = r->info;
    for (auto& s : info.slices) {
      auto id = make_slice_id(info.id, s.part);
      auto seq = r->seq[s.part]++;
      auto at = key_offset + s.offset;
      auto& b = open[s.shard];
      auto alone = s.length > bound;
      if (alone || b.floats + s.length > cap)
        flush(self, s.shard, priority, kind, b, g);
      // In sync mode, a large push-pull that has to wait goes as a push
      // (which holds room until the shard took it, never longer) and a pull
      // (which holds none while it waits for its round): a fused one could
      // hold room while its round waits for this worker's queued pushes.
      if (alone && kind == op_kind::push_pull && st.cfg.sync
          && !fits(self, s.shard, 2 * s.length * sizeof(float))) {
        auto part = [&](op_kind k, uint64_t part_seq, floats data) {
          batch_builder one;
          one.msg = slice_batch{rank,       static_cast<uint8_t>(k), {id},
                                {part_seq}, std::move(data),         {}};
          one.pieces.push_back(piece{at, s.length});
          one.floats = s.length;
          flush(self, s.shard, priority, k, one, g);
        };
        auto pushed = in.take(s.length);
        quantize_part(*r, s.part, pushed.data(), s.length, remote);
        part(op_kind::push, seq, floats{std::move(pushed), r->comp});
        part(op_kind::pull, r->seq[s.part]++, floats{});
        continue;
      }
      b.msg.slices.push_back(id);
      b.msg.seqs.push_back(seq);
      b.pieces.push_back(piece{at, s.length});
      b.floats += s.length;
      if (pushes && share && !alone) {
        in.share(b.msg.parts, s.length);
      } else if (pushes) {
        auto& dst = b.msg.data;
        auto first = b.msg.slices.size() == 1;
        if (alone)
          dst.data = in.take(s.length);
        else
          in.append(dst.data, s.length);
        quantize_part(*r, s.part, dst.data.data() + dst.data.size() - s.length,
                      s.length, remote && alone);
        merge_encoding(dst, first, r->comp);
      }
      // A large slice travels alone, so big tensors stream over all shards.
      if (alone)
        flush(self, s.shard, priority, kind, b, g);
    }
    key_offset += info.size;
  }
  for (uint32_t i = 0; i < num_shards; ++i)
    flush(self, i, priority, kind, open[i], g);
  g->sealed = true;
  if (!g->failed && g->remaining == 0)
    g->finish(std::move(g->out));
}

// Runs `kind` on `keys` once their routes are known; delivers to `rp`.
template <class Promise>
void data_op(self_ptr self, op_kind kind, std::vector<std::string> keys,
             int32_t priority, float_parts data, Promise rp) {
  if (keys.empty()) {
    rp.deliver(make_error(errc::bad_config,
                          std::string{op_name(kind)} + ": no keys given"));
    return;
  }
  auto fail = [rp](const caf::error& err) mutable { rp.deliver(err); };
  // Shared by the operation and the route check: the key list (10000 keys in
  // a large call) is not copied.
  auto ks = std::make_shared<const std::vector<std::string>>(std::move(keys));
  auto run = [self, kind, ks, priority, rp, fail,
              data = std::move(data)]() mutable {
    start_ops(
      self, kind, *ks, priority, std::move(data),
      [rp](float_parts out) mutable {
        if constexpr (std::is_same_v<Promise,
                                     caf::typed_response_promise<float_parts>>)
          rp.deliver(std::move(out));
        else
          rp.deliver(caf::ok_atom::value);
      },
      fail);
  };
  with_routes(self, *ks, std::move(run), fail);
}

// Rank 0 writes the value to every shard, then tells the coordinator. If a
// shard fails, the coordinator hears of it too, so the waiting ranks fail
// instead of waiting and rank 0 may try again.
void write_init(self_ptr self, key_info info, floats value,
                caf::typed_response_promise<caf::ok_atom> rp) {
  detail::fan_in<decltype(rp)> fan{rp, info.slices.size()};
  auto report = [self, id = info.id](bool ok) {
    return self->request(self->state.cfg.coordinator, self->state.timeout(),
                         init_done_atom::value, id, ok);
  };
  auto done = [self, fan, info, report]() mutable {
    report(true).then(
      [self, fan, info](caf::ok_atom) mutable {
        add_route(self, info);
        fan.promise().deliver(caf::ok_atom::value);
      },
      [fan](caf::error& err) { fan.fail(std::move(err)); });
  };
  auto on_error = [fan, report](caf::error& err) {
    if (fan.failed())
      return;
    fan.fail(std::move(err));
    report(false).then([](caf::ok_atom) {}, [](caf::error&) {});
  };
  for (auto& s : info.slices) {
    slice_init msg{make_slice_id(info.id, s.part), {}};
    if (info.slices.size() == 1) {
      msg.value = std::move(value);
    } else {
      auto first = value.data.begin() + static_cast<std::ptrdiff_t>(s.offset);
      msg.value.data.assign(first,
                            first + static_cast<std::ptrdiff_t>(s.length));
    }
    to_shard<caf::ok_atom>(
      self, s.shard, 0,
      [fan, done](caf::ok_atom) mutable {
        if (fan.arrive())
          done();
      },
      on_error, init_atom::value, std::move(msg));
  }
}

worker_actor::behavior_type worker_impl(self_ptr self, worker_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.dead.assign(st.cfg.shards.size(), false);
  st.in_flight.resize(st.cfg.shards.size());
  st.outboxes.resize(st.cfg.shards.size());
  for (auto& x : st.cfg.shards)
    self->monitor(x);
  for (auto& x : st.cfg.relays)
    self->monitor(x);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  return {
    [self](init_atom, const std::string& key,
           const std::vector<uint64_t>& shape,
           floats& value) -> caf::result<caf::ok_atom> {
      auto size = core::shape_size(shape);
      if (shape.empty() || size != value.data.size())
        return make_error(errc::shape_mismatch,
                          "init: key " + quoted(key) + " with shape "
                            + core::shape_string(shape) + " needs "
                            + std::to_string(size) + " floats but got "
                            + std::to_string(value.data.size()));
      auto rp = self->make_response_promise<caf::ok_atom>();
      auto rank = self->state.cfg.rank;
      self
        ->request(self->state.cfg.coordinator, self->state.timeout(),
                  declare_atom::value, key, shape, rank)
        .then(
          [self, rp, rank, value = std::move(value)](key_info& info) mutable {
            if (rank == 0) {
              write_init(self, std::move(info), std::move(value), rp);
              return;
            }
            add_route(self, std::move(info));
            rp.deliver(caf::ok_atom::value);
          },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [self](push_atom, std::string& key, int32_t priority,
           float_parts& grad) -> caf::result<caf::ok_atom> {
      auto rp = self->make_response_promise<caf::ok_atom>();
      data_op(self, op_kind::push, {std::move(key)}, priority, std::move(grad),
              rp);
      return rp;
    },
    [self](push_atom, std::vector<std::string>& keys, int32_t priority,
           float_parts& grads) -> caf::result<caf::ok_atom> {
      auto rp = self->make_response_promise<caf::ok_atom>();
      data_op(self, op_kind::push, std::move(keys), priority, std::move(grads),
              rp);
      return rp;
    },
    [self](pull_atom, std::string& key,
           int32_t priority) -> caf::result<float_parts> {
      auto rp = self->make_response_promise<float_parts>();
      data_op(self, op_kind::pull, {std::move(key)}, priority, float_parts{},
              rp);
      return rp;
    },
    [self](pull_atom, std::vector<std::string>& keys,
           int32_t priority) -> caf::result<float_parts> {
      auto rp = self->make_response_promise<float_parts>();
      data_op(self, op_kind::pull, std::move(keys), priority, float_parts{},
              rp);
      return rp;
    },
    [self](push_pull_atom, std::string& key, int32_t priority,
           float_parts& grad) -> caf::result<float_parts> {
      auto rp = self->make_response_promise<float_parts>();
      data_op(self, op_kind::push_pull, {std::move(key)}, priority,
              std::move(grad), rp);
      return rp;
    },
    [self](push_pull_atom, std::vector<std::string>& keys, int32_t priority,
           float_parts& grads) -> caf::result<float_parts> {
      auto rp = self->make_response_promise<float_parts>();
      data_op(self, op_kind::push_pull, std::move(keys), priority,
              std::move(grads), rp);
      return rp;
    },
    [self](compress_atom, std::string& key,
           compression c) -> caf::result<caf::ok_atom> {
      if (auto why = check(c); !why.empty())
        return make_error(errc::bad_config, "set_gradient_compression: " + why);
      auto rp = self->make_response_promise<caf::ok_atom>();
      // Through with_routes (with no keys): behind every operation that
      // waits for a lookup, so it takes effect in issue order.
      auto apply = [self, key = std::move(key), c, rp]() mutable {
        auto& st = self->state;
        if (key.empty()) {
          st.cfg.compression = c;
          for (auto& kvp : st.routes)
            if (st.key_compression.count(kvp.first) == 0)
              set_compression(kvp.second, c);
        } else {
          st.key_compression[key] = c;
          if (auto i = st.routes.find(key); i != st.routes.end())
            set_compression(i->second, c);
        }
        rp.deliver(caf::ok_atom::value);
      };
      with_routes(self, {}, std::move(apply),
                  [rp](const caf::error& err) mutable { rp.deliver(err); });
      return rp;
    },
    [self](lookup_atom, const std::string& key) -> caf::result<key_info> {
      auto rp = self->make_response_promise<key_info>();
      with_routes(
        self, {key},
        [self, key, rp]() mutable {
          rp.deliver(self->state.routes.at(key).info);
        },
        [rp](const caf::error& err) mutable { rp.deliver(err); });
      return rp;
    },
    [self](barrier_atom) -> caf::result<caf::ok_atom> {
      auto rp = self->make_response_promise<caf::ok_atom>();
      self
        ->request(self->state.cfg.coordinator,
                  caf::duration{self->state.cfg.barrier_timeout},
                  barrier_atom::value, self->state.cfg.rank)
        .then([rp](caf::ok_atom) mutable { rp.deliver(caf::ok_atom::value); },
              [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [self](dead_atom, int32_t node_or_group, int32_t timeout_s) {
      return self->delegate(self->state.cfg.coordinator, dead_atom::value,
                            node_or_group, timeout_s);
    },
    [self](command_atom, int32_t head, const std::string& body) {
      return self->delegate(self->state.cfg.coordinator, command_atom::value,
                            head, body);
    },
    [self](leave_atom) {
      return self->delegate(self->state.cfg.coordinator, leave_atom::value,
                            self->state.cfg.rank);
    },
    [self](set_opt_atom, const optimizer_config& opt) {
      return self->delegate(self->state.cfg.coordinator, set_opt_atom::value,
                            opt);
    },
    [self](save_atom) {
      return self->delegate(self->state.cfg.coordinator, save_atom::value);
    },
    [self](load_atom, const state_snapshot& snap) {
      return self->delegate(self->state.cfg.coordinator, load_atom::value,
                            snap);
    },
  };
}

} // namespace

worker_actor spawn_worker(caf::actor_system& sys, worker_config cfg) {
  return sys.spawn(worker_impl, std::move(cfg));
}

} // namespace actorps
