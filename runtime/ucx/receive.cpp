// SPDX-License-Identifier: BSD-3-Clause
// A plane's receiving side: the hello that admits a peer, data from
// admitted peers, and rendezvous messages fetched into buffers of ours.
#include <algorithm>
#include <cstring>

#include <openssl/crypto.h>

#include "runtime/ucx/hello.hpp"
#include "runtime/ucx/plane_impl.hpp"

namespace actorps::ucx {

ucs_status_t plane::impl::on_hello(void* arg, const void* header,
                                   size_t header_length, void* data,
                                   size_t length,
                                   const ucp_am_recv_param_t* param) {
  auto* self = static_cast<impl*>(arg);
  // A hello arrives whole (it is small); anything else is no hello.
  if (header_length != hello_header_size || length == 0 || length > max_address
      || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0
      || (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0
      || std::memcmp(header, hello_magic, sizeof(hello_magic)) != 0)
    return UCS_OK;
  auto* bytes = static_cast<const unsigned char*>(header);
  uint32_t identity = 0;
  for (std::size_t i = 0; i < identity_size; ++i)
    identity |= uint32_t{bytes[sizeof(hello_magic) + i]} << (8 * i);
  auto* nonce = bytes + sizeof(hello_magic) + identity_size;
  auto* mac = nonce + nonce_size;
  // A claimed identity must be proven with its own secret as well.
  std::string identity_secret;
  if (identity != 0 && self->opts.secret_of)
    identity_secret = self->opts.secret_of(identity);
  auto mac_key = hello_key(self->opts.secret, identity, identity_secret);
  if (identity != 0 && mac_key.empty())
    return UCS_OK;
  std::vector<char> from(static_cast<const char*>(data),
                         static_cast<const char*>(data) + length);
  auto expected = hello_mac(mac_key, identity, nonce, from, self->address);
  if (expected.size() != mac_size
      || CRYPTO_memcmp(expected.data(), mac, mac_size) != 0)
    return UCS_OK;
  std::vector<unsigned char> key(nonce, nonce + nonce_size);
  if (!self->used_nonces.insert(key).second)
    return UCS_OK; // A replayed hello.
  auto id = self->id_of(from, identity);
  self->by_reply_ep[param->reply_ep] = id;
  auto& p = self->peers[id];
  if (p.down)
    return UCS_OK;
  if (p.out == nullptr)
    self->open(id, from, identity); // Our own connection back, with our hello.
  if (!p.admitted) {
    p.admitted = true;
    if (self->handlers.on_peer_up)
      self->handlers.on_peer_up(id, from, identity);
  }
  return UCS_OK;
}

ucs_status_t plane::impl::on_data(void* arg, const void* header,
                                  size_t header_length, void* data,
                                  size_t length,
                                  const ucp_am_recv_param_t* param) {
  auto* self = static_cast<impl*>(arg);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0)
    return UCS_OK;
  auto i = self->by_reply_ep.find(param->reply_ep);
  if (i == self->by_reply_ep.end())
    return UCS_OK; // Not admitted: never read, never allocated for.
  auto id = i->second;
  auto& p = self->peers[id];
  if (p.down || !p.admitted)
    return UCS_OK;
  if (header_length > self->opts.max_header || length > self->opts.max_body) {
    self->mark_down(id, "UCX: the peer sent a message over the bound ("
                          + std::to_string(header_length) + " + "
                          + std::to_string(length) + " bytes)");
    return UCS_OK;
  }
  std::vector<char> head(static_cast<const char*>(header),
                         static_cast<const char*>(header) + header_length);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    auto* f = new fetch_state{self, id, data,  std::move(head), length,
                              0,    {}, false, false,           {}};
    if (self->opts.priority_of)
      f->priority = self->opts.priority_of(f->header);
    self->enqueue(f);
    return UCS_INPROGRESS;
  }
  if (self->handlers.on_message)
    self->handlers.on_message(id, std::move(head), buffer{data, length});
  return UCS_OK;
}

void plane::impl::enqueue(fetch_state* f) {
  // After every waiting one of at least its priority.
  auto at = std::find_if(fetches.begin(), fetches.end(),
                         [f](const fetch_state* x) {
                           return x->priority < f->priority;
                         });
  fetches.insert(at, f);
}

void plane::impl::on_fetched(void* request, ucs_status_t status, size_t,
                             void* user_data) {
  auto* f = static_cast<fetch_state*>(user_data);
  f->self->fetched(f, status);
  ucp_request_free(request);
}

void plane::impl::fetched(fetch_state* f, ucs_status_t status) {
  if (f->in_call) {
    // Completed within ucp_am_recv_data_nbx: run_fetches goes on with it.
    f->done_in_call = true;
    f->call_status = status;
    return;
  }
  if (f->abandoned) {
    abandoned_fetches.erase(f);
  } else {
    auto p = peers.find(f->from);
    if (p != peers.end())
      p->second.fetching.erase(f);
    if (status == UCS_OK && p != peers.end() && !p->second.down
        && handlers.on_message)
      handlers.on_message(f->from, std::move(f->header), std::move(f->body));
  }
  delete f;
}

std::shared_ptr<void>
plane::impl::held_bytes::make(std::shared_ptr<held_bytes> self, std::size_t n) {
  self->bytes += n;
  auto* raw = self.get();
  return std::shared_ptr<void>(raw, [self = std::move(self), n](void*) {
    self->bytes -= n;
    std::lock_guard<std::mutex> guard{self->mtx};
    if (self->owner != nullptr)
      self->owner->wake();
  });
}

bool plane::impl::may_fetch(std::size_t size) const {
  if (opts.max_held_bytes == 0)
    return true;
  auto now = held->bytes.load();
  return now == 0 || now + size <= opts.max_held_bytes;
}

bool plane::impl::fetch_ready() const {
  return !fetches.empty() && may_fetch(fetches.front()->length);
}

void plane::impl::run_fetches() {
  auto todo = std::move(fetches);
  fetches.clear();
  for (std::size_t k = 0; k < todo.size(); ++k) {
    auto* f = todo[k];
    auto p = peers.find(f->from);
    if (p == peers.end() || p->second.down) {
      if (!f->shared)
        ucp_am_data_release(worker, f->desc);
      delete f;
      continue;
    }
    if (!may_fetch(f->length)) {
      // It and those after it wait (in order) until held bytes are let go.
      fetches.insert(fetches.begin(),
                     todo.begin() + static_cast<std::ptrdiff_t>(k), todo.end());
      return;
    }
    if (f->shared) {
      auto seg = p->second.in_seg;
      if (!seg) {
        delete f;
        continue;
      }
      auto slot = f->slot;
      if (seg->viewed.load() + slot.length <= seg->size() / view_share) {
        // Read where it lies in the peer's segment (no copy here): its slot
        // is free for the peer again once the last copy of the view is let
        // go of, which the mapping outlives.
        seg->viewed += slot.length;
        std::shared_ptr<const void> keep{seg.get(), [seg, slot](const void*) {
                                           seg->viewed -= slot.length;
                                           seg->release(slot);
                                         }};
        f->body = buffer::view(seg->at(slot), slot.length, std::move(keep));
      } else {
        // Views kept hold much of the segment already (a large pull in
        // pieces): copied out, the slot is free at once, and the pages of
        // the peer's segment in use stay few.
        f->body = buffer{seg->at(slot), slot.length};
        seg->release(slot);
      }
      if (opts.max_held_bytes > 0)
        f->body.set_hold(held_bytes::make(held, f->length));
      fetched(f, UCS_OK);
      continue;
    }
    f->body = buffer{f->length};
    if (opts.max_held_bytes > 0)
      f->body.set_hold(held_bytes::make(held, f->length));
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK
                         | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv_am = &impl::on_fetched;
    param.user_data = f;
    f->in_call = true;
    auto req = ucp_am_recv_data_nbx(worker, f->desc, f->body.data(),
                                    f->body.size(), &param);
    f->in_call = false;
    if (f->done_in_call) {
      // UCX ran the callback (and freed the request) before it returned.
      fetched(f, f->call_status);
      continue;
    }
    if (UCS_PTR_IS_PTR(req)) {
      p->second.fetching.insert(f);
      continue;
    }
    fetched(f, UCS_PTR_STATUS(req));
  }
}

} // namespace actorps::ucx
