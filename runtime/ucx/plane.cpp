// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/ucx/plane.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "core/link_proof.hpp"
#include "runtime/ucx/hello.hpp"
#include "runtime/ucx/plane_impl.hpp"

namespace actorps::ucx {

namespace {

std::atomic<bool> keep_at_close{false};

} // namespace

void keep_ucx_at_close(bool keep) {
  keep_at_close = keep;
}

plane::impl::~impl() {
  {
    std::lock_guard<std::mutex> guard{held->mtx};
    held->owner = nullptr;
  }
  // With keep_at_close the process exits next and takes UCX's worker and
  // context with it (no UCX code runs after the progress thread stopped).
  if (worker != nullptr && !keep_at_close)
    ucp_worker_destroy(worker);
  // UCX gave up on these with its worker.
  for (auto* x : abandoned_sends)
    delete x;
  for (auto* x : abandoned_fetches)
    delete x;
  if (context != nullptr && !keep_at_close)
    ucp_cleanup(context);
  if (wake_fd >= 0)
    ::close(wake_fd);
  if (epoll_fd >= 0)
    ::close(epoll_fd);
  if (driver_wake_fd >= 0)
    ::close(driver_wake_fd);
  if (driver_epoll >= 0)
    ::close(driver_epoll);
}

peer_id plane::impl::id_of(const std::vector<char>& addr, uint32_t identity) {
  std::lock_guard<std::mutex> guard{mtx};
  auto [i, added] = by_address.emplace(std::make_pair(addr, identity),
                                       next_peer);
  if (added)
    ++next_peer;
  return i->second;
}

void plane::impl::force_close(ucp_ep_h ep, bool wait) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  auto req = ucp_ep_close_nbx(ep, &param);
  if (!UCS_PTR_IS_PTR(req))
    return;
  while (wait && ucp_request_check_status(req) == UCS_INPROGRESS)
    ucp_worker_progress(worker);
  ucp_request_free(req);
}

void plane::impl::shut_down() {
  for (auto& [id, p] : peers)
    if (p.out != nullptr) {
      force_close(p.out, true);
      p.out = nullptr;
    }
  for (auto ep : dropped_eps)
    force_close(ep, true);
  dropped_eps.clear();
  while (ucp_worker_progress(worker) != 0) {
    // Lets cancelled sends and receives complete.
  }
  // Sends still held fail as closed; UCX frees them with its worker.
  for (auto& [id, p] : peers) {
    for (auto* x : p.sending)
      abandon(x, "UCX: the data plane is closed");
    p.sending.clear();
    for (auto* f : p.fetching)
      abandon(f);
    p.fetching.clear();
  }
  for (auto* f : fetches) {
    if (!f->shared)
      ucp_am_data_release(worker, f->desc);
    delete f;
  }
  fetches.clear();
}

void plane::impl::abandon(send_state* x, const std::string& why) {
  if (x->done)
    x->done(why);
  x->done = nullptr;
  x->abandoned = true;
  abandoned_sends.insert(x);
}

void plane::impl::abandon(fetch_state* f) {
  f->abandoned = true;
  // Its peer is gone: the bytes no longer count against the bound (UCX may
  // still write into the buffer until it gives the receive back).
  static_cast<void>(f->body.take_hold());
  abandoned_fetches.insert(f);
}

void plane::impl::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<impl*>(arg);
  auto i = self->by_out_ep.find(ep);
  if (i == self->by_out_ep.end())
    return;
  self->mark_down(i->second, "UCX: " + reason(status));
}

void plane::impl::mark_down(peer_id id, const std::string& why) {
  auto i = peers.find(id);
  if (i == peers.end() || i->second.down)
    return;
  auto& p = i->second;
  p.down = true;
  if (p.out != nullptr) {
    by_out_ep.erase(p.out);
    if (p.unwatched) {
      dropped_eps.push_back(p.out);
    } else {
      force_close(p.out, false);
    }
    p.out = nullptr;
  }
  // Whatever UCX did not complete yet fails now.
  for (auto* x : p.sending)
    abandon(x, why);
  p.sending.clear();
  for (auto* f : p.fetching)
    abandon(f);
  p.fetching.clear();
  // Its messages waiting in `fetches` are dropped unread (run_fetches).
  p.out_seg.reset();
  p.out_seg_ready = false;
  if (p.in_seg)
    mapped_segments.erase(p.in_seg->file());
  p.in_seg.reset();
  if (handlers.on_peer_down)
    handlers.on_peer_down(id, why);
}

uint32_t plane::impl::claim_for(uint32_t peer_identity) const {
  return peer_identity == server_identity && !opts.server_secret.empty()
           ? server_identity
           : opts.identity;
}

void plane::impl::open(peer_id id, const std::vector<char>& addr,
                       uint32_t peer_identity) {
  auto& p = peers[id];
  if (p.out != nullptr || p.down)
    return;
  p.address = addr;
  std::string peer_host;
  std::vector<char> ucp_address;
  if (!split_address(addr, peer_host, ucp_address)) {
    mark_down(id, "UCX: not a data plane's address");
    return;
  }
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
                      | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(ucp_address.data());
  // UCX 1.13 offers no shared memory to an endpoint that asks for failure
  // detection: a peer on this host goes without, and its death comes
  // through `drop` (see plane_options::shared_memory).
  if (opts.shared_memory && peer_host == host) {
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    p.unwatched = true;
  } else {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &impl::on_ep_error;
    params.err_handler.arg = this;
  }
  ucp_ep_h ep = nullptr;
  if (auto status = ucp_ep_create(worker, &params, &ep); status != UCS_OK) {
    mark_down(id, "UCX: cannot connect (" + reason(status) + ")");
    return;
  }
  p.out = ep;
  by_out_ep[ep] = id;
  // hello: magic, identity, nonce, HMAC; body: our address.
  auto state = new send_state;
  state->self = this;
  state->to = id;
  state->header.resize(hello_header_size);
  auto* head = state->header.data();
  std::memcpy(head, hello_magic, sizeof(hello_magic));
  auto claim = claim_for(peer_identity);
  for (std::size_t i = 0; i < identity_size; ++i)
    head[sizeof(hello_magic) + i] = static_cast<char>(claim >> (8 * i));
  auto* nonce = reinterpret_cast<unsigned char*>(head + sizeof(hello_magic)
                                                 + identity_size);
  if (!core::fill_random(nonce, nonce_size)) {
    delete state;
    mark_down(id, "UCX: no random bytes for a hello");
    return;
  }
  auto key = hello_key(opts.secret, claim,
                       claim == opts.identity ? opts.identity_secret
                                              : opts.server_secret);
  auto mac = hello_mac(key, claim, nonce, address, addr);
  std::memcpy(head + sizeof(hello_magic) + identity_size + nonce_size,
              mac.data(), mac.size());
  state->body = payload{address.data(), address.size()};
  submit(ep, hello_am, state);
  if (peer_host == host)
    offer_segment(id, ep);
}

void plane::impl::on_sent(void* request, ucs_status_t status, void* user_data) {
  auto* state = static_cast<send_state*>(user_data);
  ucp_request_free(request);
  state->self->finish(state, status);
}

bool plane::impl::submit(ucp_ep_h ep, unsigned am, send_state* state) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA
                       | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &impl::on_sent;
  param.user_data = state;
  param.flags = UCP_AM_SEND_FLAG_REPLY;
  const void* buf = nullptr;
  std::size_t count = 0;
  const auto& pieces = state->body.pieces;
  if (pieces.size() == 1) {
    buf = pieces[0].data;
    count = pieces[0].size;
  } else if (pieces.size() > 1) {
    // Gathered into one buffer: UCX 1.13 sends an iov over TCP even where a
    // contiguous buffer goes by cross-memory attach (measured: a 1000-piece
    // 4 MB batch reply took 1.3x as long, see docs/benchmarks.md).
    state->gathered.resize(state->body.size());
    state->body.copy_to(state->gathered.data());
    buf = state->gathered.data();
    count = state->gathered.size();
    // What it was gathered from (views of a peer's segment, a shard's
    // buffers) is let go of now, not once UCX is done.
    state->body = payload{};
  }
  state->in_call = true;
  auto req = ucp_am_send_nbx(ep, am, state->header.data(), state->header.size(),
                             buf, count, &param);
  state->in_call = false;
  if (state->done_in_call) {
    // UCX ran the callback (and freed the request) before it returned.
    finish(state, state->call_status);
    return false;
  }
  if (UCS_PTR_IS_PTR(req)) {
    peers[state->to].sending.insert(state);
    return true;
  }
  finish(state, UCS_PTR_STATUS(req));
  return false;
}

void plane::impl::finish(send_state* state, ucs_status_t status) {
  if (state->in_call) {
    // Completed within ucp_am_send_nbx: submit goes on with it.
    state->done_in_call = true;
    state->call_status = status;
    return;
  }
  if (status != UCS_OK && state->seg)
    state->seg->cancel(state->slot); // Never announced: the slot is free.
  if (state->abandoned) {
    abandoned_sends.erase(state);
  } else {
    if (auto i = peers.find(state->to); i != peers.end())
      i->second.sending.erase(state);
    if (state->done)
      state->done(status == UCS_OK ? std::string{} : "UCX: " + reason(status));
  }
  delete state;
}

bool plane::impl::send_now(peer_id to, send_state* state) {
  auto i = peers.find(to);
  std::string why;
  if (stopping || closed)
    why = "UCX: the data plane is closed";
  else if (i != peers.end() && i->second.down)
    why = "UCX: the peer is down";
  else if (i == peers.end() || i->second.out == nullptr)
    why = "UCX: no connection to this peer";
  if (!why.empty()) {
    if (state->done)
      state->done(why);
    delete state;
    return false;
  }
  state->self = this;
  state->to = to;
  return submit(i->second.out, data_am, state);
}

plane::plane(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

plane::~plane() {
  close();
}

std::unique_ptr<plane> plane::start(plane_options opts, plane_handlers handlers,
                                    std::string& error) {
  auto d = std::make_unique<impl>();
  d->held->owner = d.get();
  d->opts = std::move(opts);
  d->handlers = std::move(handlers);
  ucp_config_t* config = nullptr;
  if (auto status = ucp_config_read(nullptr, nullptr, &config);
      status != UCS_OK) {
    error = "UCX: cannot read its configuration (" + reason(status)
            + "; check the UCX_* environment variables)";
    return nullptr;
  }
  // Our defaults for UCX's settings, each unless the user set its variable.
  struct setting {
    const char* name;
    const char* value;
    const char* what;
  };
  std::vector<setting> defaults{
    // No shared-memory FIFOs: a peer that dies while writing into one
    // blocks it for every peer (plane_options).
    {"TLS", "^mm", "leave out its shared-memory FIFOs"},
    // Messages up to 128 KB go eagerly: UCX 1.13's own choice sent 8-64 KB
    // by rendezvous, slower here than one eager send (docs/benchmarks.md).
    {"RNDV_THRESH", "128K", "set its rendezvous threshold"}};
  // A job on this host only: nothing of UCX listens beyond loopback.
  if (d->opts.loopback_only)
    defaults.push_back({"NET_DEVICES", "lo", "keep to the loopback interface"});
  for (auto& x : defaults) {
    auto var = std::string{"UCX_"} + x.name;
    if (std::getenv(var.c_str()) != nullptr)
      continue;
    if (auto status = ucp_config_modify(config, x.name, x.value);
        status != UCS_OK) {
      ucp_config_release(config);
      error = std::string{"UCX: cannot "} + x.what + " (" + reason(status)
              + "; set " + var + " to choose)";
      return nullptr;
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  auto status = ucp_init(&params, config, &d->context);
  ucp_config_release(config);
  if (status != UCS_OK) {
    d->context = nullptr;
    error = "UCX: cannot start (" + reason(status)
            + "; UCX_TLS and UCX_NET_DEVICES choose its transports, "
              "`ucx_info -d` lists them)";
    return nullptr;
  }
  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Every UCX call is made under ucx_mtx, from the progress thread, from
  // callers that send, and from a thread that drives the plane.
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  if (status = ucp_worker_create(d->context, &wparams, &d->worker);
      status != UCS_OK) {
    d->worker = nullptr;
    error = "UCX: cannot create a worker (" + reason(status)
            + "; UCX_TLS and UCX_NET_DEVICES choose its transports, "
              "`ucx_info -d` lists them)";
    return nullptr;
  }
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  if (status = ucp_worker_get_address(d->worker, &addr, &addr_len);
      status != UCS_OK) {
    error = "UCX: no worker address (" + reason(status) + ")";
    return nullptr;
  }
  d->host = host_identity();
  d->address = make_address(d->host, reinterpret_cast<const char*>(addr),
                            addr_len);
  ucp_worker_release_address(d->worker, addr);
  for (auto [id, cb] : {std::pair{hello_am, &impl::on_hello},
                        std::pair{data_am, &impl::on_data},
                        std::pair{segment_am, &impl::on_segment},
                        std::pair{segment_ack_am, &impl::on_segment_ack},
                        std::pair{shared_am, &impl::on_shared}}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID
                    | UCP_AM_HANDLER_PARAM_FIELD_CB
                    | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.cb = cb;
    hp.arg = d.get();
    if (status = ucp_worker_set_am_recv_handler(d->worker, &hp);
        status != UCS_OK) {
      error = "UCX: cannot receive (" + reason(status) + ")";
      return nullptr;
    }
  }
  d->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  d->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  d->driver_wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  d->driver_epoll = ::epoll_create1(EPOLL_CLOEXEC);
  if (d->wake_fd < 0 || d->epoll_fd < 0 || d->driver_wake_fd < 0
      || d->driver_epoll < 0) {
    error = "UCX: no eventfd or epoll for the progress thread";
    return nullptr;
  }
  if (status = ucp_worker_get_efd(d->worker, &d->worker_fd); status != UCS_OK) {
    error = "UCX: no event fd for its worker (" + reason(status) + ")";
    return nullptr;
  }
  for (auto [set, fd] : {std::pair{d->epoll_fd, d->worker_fd},
                         std::pair{d->epoll_fd, d->wake_fd},
                         std::pair{d->driver_epoll, d->worker_fd},
                         std::pair{d->driver_epoll, d->driver_wake_fd}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev) != 0) {
      error = "UCX: cannot watch its worker's events (epoll_ctl)";
      return nullptr;
    }
  }
  auto* raw = d.get();
  d->thread = std::thread{[raw] { raw->run(); }};
  return std::unique_ptr<plane>{new plane(std::move(d))};
}

const std::vector<char>& plane::address() const {
  return impl_->address;
}

uint32_t plane::identity() const {
  return impl_->opts.identity;
}

std::size_t plane::shared_sends() const {
  return impl_->shared_sends.load();
}

std::size_t plane::in_place_sends() const {
  return impl_->in_place_sends.load();
}

std::size_t plane::caller_receives() const {
  return impl_->caller_receives.load();
}

void plane::note_thread_run() {
  impl_->thread_runs.fetch_add(1, std::memory_order_relaxed);
}

std::size_t plane::thread_runs() const {
  return impl_->thread_runs.load();
}

std::size_t plane::waiting() const {
  std::lock_guard<std::recursive_mutex> guard{impl_->ucx_mtx};
  return impl_->fetches.size();
}

peer_id plane::connect(const std::vector<char>& address,
                       uint32_t peer_identity) {
  auto* d = impl_.get();
  auto id = d->id_of(address, peer_identity);
  {
    std::lock_guard<std::recursive_mutex> guard{d->ucx_mtx};
    if (d->stopping || d->closed)
      return id;
    auto i = d->peers.find(id);
    if (i == d->peers.end() || i->second.out == nullptr)
      d->open(id, address, peer_identity);
  }
  // Connecting goes on with the progress thread.
  d->wake();
  return id;
}

peer_id plane::find(const std::vector<char>& address, uint32_t identity) const {
  auto* d = impl_.get();
  std::lock_guard<std::mutex> guard{d->mtx};
  auto i = d->by_address.find(std::make_pair(address, identity));
  return i == d->by_address.end() ? 0 : i->second;
}

void plane::send(peer_id to, std::vector<char> header, payload body,
                 std::function<void(const std::string&)> done) {
  send_staged(to, std::move(header), stage(to, std::move(body)),
              std::move(done));
}

void plane::drop(peer_id to, const std::string& why) {
  auto* d = impl_.get();
  std::lock_guard<std::recursive_mutex> guard{d->ucx_mtx};
  if (d->peers.count(to) > 0)
    d->mark_down(to, why);
}

void plane::close() {
  if (!impl_ || !impl_->thread.joinable())
    return;
  {
    std::lock_guard<std::recursive_mutex> guard{impl_->ucx_mtx};
    impl_->stopping = true;
  }
  uint64_t one = 1;
  static_cast<void>(::write(impl_->wake_fd, &one, sizeof(one)));
  // (A driver stops at once.)
  impl_->wake_driver();
  impl_->thread.join();
}

} // namespace actorps::ucx
