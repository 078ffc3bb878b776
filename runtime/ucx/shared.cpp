// SPDX-License-Identifier: BSD-3-Clause
// A plane's shared-memory lane to peers on its host (runtime/ucx/segment.hpp):
// offering its segment, a peer's answer, and messages whose bodies lie in a
// peer's segment. The connection stays UCX's (it watches the peer); only a
// large body's bytes go around it.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "runtime/ucx/hello.hpp"
#include "runtime/ucx/plane_impl.hpp"
#include "runtime/ucx/testing.hpp"

namespace actorps::ucx {

void plane::impl::offer_segment(peer_id id, ucp_ep_h ep) {
  auto& p = peers[id];
  if (opts.shared_segment == 0 || p.unwatched || p.out_seg)
    return;
  std::string error;
  auto seg = out_segment::create(opts.shared_segment, error);
  if (!seg)
    return; // Every message goes through UCX.
  auto* state = new send_state;
  state->self = this;
  state->to = id;
  state->header = encode(seg->info());
  p.out_seg = std::move(seg);
  submit(ep, segment_am, state);
}

const std::shared_ptr<out_segment>* plane::impl::ready_segment(peer_id to) {
  auto i = peers.find(to);
  if (i == peers.end() || i->second.down || !i->second.out_seg_ready || stopping
      || closed)
    return nullptr;
  return &i->second.out_seg;
}

std::optional<segment_slot>
plane::impl::reserve_shared(peer_id to, std::size_t size,
                            std::shared_ptr<out_segment>& seg) {
  auto* ready = ready_segment(to);
  if (ready == nullptr)
    return std::nullopt;
  auto slot = (*ready)->reserve(size);
  if (slot)
    seg = *ready;
  return slot;
}

bool plane::impl::send_shared(peer_id to, send_state* state,
                              const std::shared_ptr<out_segment>& seg,
                              const segment_slot& slot) {
  auto i = peers.find(to);
  if (stopping || closed || i == peers.end() || i->second.down
      || i->second.out == nullptr || i->second.out_seg != seg) {
    seg->cancel(slot);
    if (state->done)
      state->done(stopping || closed ? "UCX: the data plane is closed"
                                     : "UCX: the peer is down");
    delete state;
    return false;
  }
  state->self = this;
  state->to = to;
  state->seg = seg;
  state->slot = slot;
  ++shared_sends;
  // The copy into the segment comes before the peer learns of it.
  __atomic_thread_fence(__ATOMIC_RELEASE);
  return submit(i->second.out, shared_am, state);
}

// -- bodies staged ahead of their send --------------------------------------

namespace {

// A message in a segment: its header leads with the body's place.
void lead_with(std::vector<char>& header, const segment_slot& slot) {
  header.insert(header.begin(), segment_slot_size, 0);
  encode(slot, header.data());
}

// Lent room (plane::lease): pinned in its segment while this lives.
struct lent_room {
  std::shared_ptr<out_segment> seg;
  segment_slot slot;

  ~lent_room() {
    if (seg)
      seg->unpin(slot);
  }
};

} // namespace

// (A moved-from shared_ptr is null: the other gives nothing back.)
staged_body::staged_body(staged_body&& other) noexcept
  : body_(std::move(other.body_)),
    seg_(std::move(other.seg_)),
    slot_(other.slot_) {
  // nop
}

staged_body& staged_body::operator=(staged_body&& other) noexcept {
  if (this != &other) {
    if (seg_)
      seg_->cancel(slot_);
    body_ = std::move(other.body_);
    seg_ = std::move(other.seg_);
    slot_ = other.slot_;
  }
  return *this;
}

staged_body::~staged_body() {
  // (Giving a slot back is one atomic store: no lock needed.)
  if (seg_)
    seg_->cancel(slot_);
}

body_lease plane::lease(peer_id to, std::size_t size) {
  auto* d = impl_.get();
  body_lease out;
  if (d->opts.shared_segment == 0 || size < d->opts.shared_min)
    return out;
  auto room = std::make_shared<lent_room>();
  std::lock_guard<std::recursive_mutex> guard{d->ucx_mtx};
  auto* ready = d->ready_segment(to);
  if (ready == nullptr)
    return out;
  // At most a quarter of the segment lent at once: the rest serves bodies
  // as they leave (so that a large value's many slices do not take every
  // page of it at once, each counted in the reader's memory as it reads).
  auto slot = (*ready)->reserve_pinned(size, d->opts.shared_segment / 4);
  if (!slot)
    return out;
  room->seg = *ready;
  room->slot = *slot;
  out.data = room->seg->data(*slot);
  out.keep = std::move(room);
  return out;
}

std::optional<segment_slot>
plane::impl::take_lent(peer_id to, const payload& body,
                       std::shared_ptr<out_segment>& seg) {
  auto* ready = ready_segment(to);
  if (body.pieces.empty() || ready == nullptr)
    return std::nullopt;
  auto slot = (*ready)->take_pinned(
    static_cast<const char*>(body.pieces.front().data), body.size());
  if (slot)
    seg = *ready;
  return slot;
}

staged_body plane::stage(peer_id to, payload body) {
  auto* d = impl_.get();
  staged_body out;
  auto size = body.size();
  std::optional<segment_slot> slot;
  bool in_place = false;
  if (d->opts.shared_segment > 0 && size >= d->opts.shared_min) {
    std::lock_guard<std::recursive_mutex> guard{d->ucx_mtx};
    slot = d->take_lent(to, body, out.seg_);
    in_place = slot.has_value();
    if (!slot)
      slot = d->reserve_shared(to, size, out.seg_);
  }
  if (!slot) {
    out.body_ = std::move(body);
    return out;
  }
  // Copied outside the lock: the progress thread and other senders go on.
  auto* at = out.seg_->data(*slot);
  if (in_place) {
    // The first piece lies there already: only the rest follows it.
    ++d->in_place_sends;
    at += body.pieces.front().size;
    body.pieces.erase(body.pieces.begin());
  }
  body.copy_to(at);
  out.slot_ = *slot;
  return out;
}

void plane::send_staged(peer_id to, std::vector<char> header, staged_body body,
                        std::function<void(const std::string&)> done) {
  auto* d = impl_.get();
  auto* state = new impl::send_state;
  state->header = std::move(header);
  state->done = std::move(done);
  bool pending = false;
  if (!body.seg_) {
    state->body = std::move(body.body_);
    std::lock_guard<std::recursive_mutex> guard{d->ucx_mtx};
    pending = d->send_now(to, state);
  } else {
    // The slot goes with the send (given back by it if it fails).
    lead_with(state->header, body.slot_);
    auto seg = std::move(body.seg_);
    std::lock_guard<std::recursive_mutex> guard{d->ucx_mtx};
    pending = d->send_shared(to, state, seg, body.slot_);
  }
  if (pending)
    d->wake();
}

void plane::send_offloaded(peer_id to, std::vector<char> header, payload body,
                           std::function<void(const std::string&)> done) {
  auto* d = impl_.get();
  auto size = body.size();
  if (d->opts.shared_segment > 0 && size >= d->opts.shared_min) {
    auto state = std::make_unique<impl::send_state>();
    std::unique_lock<std::recursive_mutex> guard{d->ucx_mtx};
    // (Room first: once a slot is reserved nothing may throw.)
    d->copies.reserve(d->copies.size() + 1);
    if (auto slot = d->reserve_shared(to, size, state->seg)) {
      state->to = to;
      state->header = std::move(header);
      state->body = std::move(body);
      state->done = std::move(done);
      state->slot = *slot;
      d->copies.push_back(state.release());
      guard.unlock();
      d->wake();
      return;
    }
  }
  send(to, std::move(header), std::move(body), std::move(done));
}

void plane::impl::run_copies() {
  std::vector<send_state*> todo;
  {
    std::lock_guard<std::recursive_mutex> guard{ucx_mtx};
    todo.swap(copies);
  }
  for (auto* state : todo) {
    auto seg = std::move(state->seg);
    {
      // Nothing to copy for a send that fails (plane closed, peer gone):
      // send_shared fails it, giving the slot back.
      std::lock_guard<std::recursive_mutex> guard{ucx_mtx};
      auto i = peers.find(state->to);
      if (stopping || closed || i == peers.end() || i->second.down) {
        send_shared(state->to, state, seg, state->slot);
        continue;
      }
    }
    state->body.copy_to(seg->data(state->slot));
    state->body = payload{};
    lead_with(state->header, state->slot);
    // (send_shared takes the segment and slot over again, or gives the slot
    // back and fails the send.)
    std::lock_guard<std::recursive_mutex> guard{ucx_mtx};
    send_shared(state->to, state, seg, state->slot);
  }
}

peer_id plane::impl::admitted_sender(const ucp_am_recv_param_t* param) {
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0)
    return 0;
  auto i = by_reply_ep.find(param->reply_ep);
  if (i == by_reply_ep.end())
    return 0;
  auto& p = peers[i->second];
  return p.down || !p.admitted ? 0 : i->second;
}

ucs_status_t plane::impl::on_segment(void* arg, const void* header,
                                     size_t header_length, void*, size_t length,
                                     const ucp_am_recv_param_t* param) {
  auto* self = static_cast<impl*>(arg);
  auto id = self->admitted_sender(param);
  if (id == 0 || length != 0)
    return UCS_OK;
  auto& p = self->peers[id];
  if (p.seg_answered || p.out == nullptr)
    return UCS_OK; // One offer per peer, answered once.
  p.seg_answered = true;
  std::string peer_host;
  std::vector<char> ucp_address;
  segment_info info;
  bool ok = false;
  // Only a peer of this host, whose connection UCX watches, and only a
  // sealed segment of the size it names.
  if (!p.unwatched && split_address(p.address, peer_host, ucp_address)
      && peer_host == self->host && decode(header, header_length, info)) {
    std::string error;
    p.in_seg = in_segment::open(info, self->opts.max_body, error);
    // A segment another peer offered too is no one's (a peer of this host
    // could name another's segment to have its messages read as its own).
    if (p.in_seg && !self->mapped_segments.insert(p.in_seg->file()).second)
      p.in_seg.reset();
    ok = p.in_seg != nullptr;
  }
  // The answer names the segment it answers by its tag.
  auto* state = new send_state;
  state->self = self;
  state->to = id;
  state->header.assign(1, ok ? 1 : 0);
  state->header.insert(state->header.end(), info.tag,
                       info.tag + segment_tag_size);
  self->submit(p.out, segment_ack_am, state);
  return UCS_OK;
}

ucs_status_t plane::impl::on_segment_ack(void* arg, const void* header,
                                         size_t header_length, void*,
                                         size_t length,
                                         const ucp_am_recv_param_t* param) {
  auto* self = static_cast<impl*>(arg);
  auto id = self->admitted_sender(param);
  if (id == 0 || length != 0 || header_length != 1 + segment_tag_size)
    return UCS_OK;
  auto& p = self->peers[id];
  auto* bytes = static_cast<const char*>(header);
  if (!p.out_seg || p.out_seg_ready
      || std::memcmp(bytes + 1, p.out_seg->info().tag, segment_tag_size) != 0)
    return UCS_OK;
  if (bytes[0] == 1) {
    p.out_seg_ready = true;
    // Mapped by its reader: the file is no one else's to open.
    p.out_seg->close_file();
  } else {
    p.out_seg.reset();
  }
  return UCS_OK;
}

ucs_status_t plane::impl::on_shared(void* arg, const void* header,
                                    size_t header_length, void*, size_t length,
                                    const ucp_am_recv_param_t* param) {
  auto* self = static_cast<impl*>(arg);
  auto id = self->admitted_sender(param);
  if (id == 0) {
    // Not admitted: never read, never allocated for.
    std::lock_guard<std::mutex> guard{self->unheard_mtx};
    ++self->unheard;
    self->unheard_cv.notify_all();
    return UCS_OK;
  }
  auto& p = self->peers[id];
  segment_slot slot;
  bool ok = length == 0 && header_length >= segment_slot_size
            && header_length - segment_slot_size <= self->opts.max_header
            && p.in_seg != nullptr;
  if (ok) {
    slot = decode_slot(static_cast<const char*>(header));
    ok = p.in_seg->valid(slot) && slot.length <= self->opts.max_body;
  }
  if (!ok) {
    self->mark_down(id, "UCX: the peer named a message outside its shared "
                        "segment");
    return UCS_OK;
  }
  auto* bytes = static_cast<const char*>(header);
  std::vector<char> head(bytes + segment_slot_size, bytes + header_length);
  auto* f = new fetch_state{
    self, id, nullptr, std::move(head), slot.length, 0, {}, false, true, slot};
  if (self->opts.priority_of)
    f->priority = self->opts.priority_of(f->header);
  self->enqueue(f);
  return UCS_OK;
}

bool plane_testing::wait_unheard(const plane& self, std::size_t n,
                                 std::chrono::milliseconds limit) {
  auto* d = self.impl_.get();
  std::unique_lock<std::mutex> lock{d->unheard_mtx};
  d->unheard_cv.wait_for(lock, limit, [&] { return d->unheard >= n; });
  return d->unheard == n;
}

void plane_testing::send_shared(plane& self, peer_id to, uint64_t offset,
                                uint64_t length, uint32_t index,
                                std::vector<char> header) {
  auto* d = self.impl_.get();
  auto* state = new plane::impl::send_state;
  state->header.resize(segment_slot_size);
  encode(segment_slot{offset, length, index}, state->header.data());
  state->header.insert(state->header.end(), header.begin(), header.end());
  std::lock_guard<std::recursive_mutex> guard{d->ucx_mtx};
  auto i = d->peers.find(to);
  if (i == d->peers.end() || i->second.out == nullptr) {
    delete state;
    return;
  }
  state->self = d;
  state->to = to;
  if (d->submit(i->second.out, shared_am, state))
    d->wake();
}

} // namespace actorps::ucx
