// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/ucx/plane.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

namespace actorps::ucx {

namespace {

// Active message ids.
constexpr unsigned hello_am = 1;
constexpr unsigned data_am = 2;

constexpr char hello_magic[4] = {'A', 'P', 'S', 'H'};
constexpr std::size_t nonce_size = 16;
constexpr std::size_t mac_size = 32;
constexpr std::size_t hello_header_size = sizeof(hello_magic) + nonce_size
                                          + mac_size;
// A UCX worker address is a few hundred bytes; bound what a hello may claim.
constexpr std::size_t max_address = 16 << 10;

// HMAC-SHA256 under `secret` of the nonce, the sender's and the receiver's
// address: a hello is good for one receiver, and its nonce only once.
std::vector<unsigned char>
hello_mac(const std::string& secret, const unsigned char* nonce,
          const std::vector<char>& from, const std::vector<char>& to) {
  std::vector<unsigned char> msg;
  msg.reserve(nonce_size + from.size() + to.size() + 16);
  auto put_size = [&](std::size_t n) {
    for (int i = 0; i < 8; ++i)
      msg.push_back(static_cast<unsigned char>(n >> (8 * i)));
  };
  msg.insert(msg.end(), nonce, nonce + nonce_size);
  put_size(from.size());
  msg.insert(msg.end(), from.begin(), from.end());
  put_size(to.size());
  msg.insert(msg.end(), to.begin(), to.end());
  std::vector<unsigned char> mac(mac_size);
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(),
       msg.size(), mac.data(), &len);
  mac.resize(len);
  return mac;
}

std::string reason(ucs_status_t status) {
  return ucs_status_string(status);
}

// A plane's address: magic, the length of the host's identity (one byte),
// the identity, then UCX's worker address.
constexpr char address_magic[4] = {'A', 'P', 'S', 'A'};

// This host and boot: peers with the same identity share its memory.
std::string host_identity() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::string id = name;
  if (auto* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char boot[64] = {};
    if (std::fgets(boot, sizeof(boot), f) != nullptr)
      id += std::string{"/"} + boot;
    std::fclose(f);
  }
  if (id.size() > 255)
    id.resize(255);
  return id;
}

std::vector<char> make_address(const std::string& host, const char* ucp,
                               std::size_t ucp_size) {
  std::vector<char> out(address_magic, address_magic + sizeof(address_magic));
  out.push_back(static_cast<char>(host.size()));
  out.insert(out.end(), host.begin(), host.end());
  out.insert(out.end(), ucp, ucp + ucp_size);
  return out;
}

// The host identity and UCX's address in `addr`; false if it is no plane's
// address.
bool split_address(const std::vector<char>& addr, std::string& host,
                   std::vector<char>& ucp) {
  constexpr auto head = sizeof(address_magic) + 1;
  if (addr.size() <= head
      || std::memcmp(addr.data(), address_magic, sizeof(address_magic)) != 0)
    return false;
  auto len = static_cast<unsigned char>(addr[sizeof(address_magic)]);
  if (addr.size() <= head + len)
    return false;
  host.assign(addr.data() + head, len);
  ucp.assign(addr.begin() + static_cast<std::ptrdiff_t>(head + len),
             addr.end());
  return true;
}

} // namespace

std::string data_secret(const std::string& token) {
  static constexpr char label[] = "actorps ucx data secret v1";
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(label), sizeof(label) - 1, mac,
       &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

struct plane::impl {
  struct send_state;
  struct fetch_state;

  struct peer {
    std::vector<char> address;
    ucp_ep_h out = nullptr;
    // Without UCX's failure detection (shared memory): such an endpoint is
    // never closed by force before the plane closes (UCX leaves that
    // undefined), and what is in flight on it is failed by us.
    bool unwatched = false;
    bool admitted = false;
    bool down = false;
    std::set<send_state*> sending;
    std::set<fetch_state*> fetching;
  };

  // A send in flight: owns what UCX reads until completion.
  struct send_state {
    impl* self = nullptr;
    peer_id to = 0;
    std::vector<char> header;
    payload body;
    std::vector<ucp_dt_iov_t> iov;
    std::function<void(const std::string&)> done;
    // Failed by `mark_down` while UCX still holds it: UCX's completion only
    // frees it.
    bool abandoned = false;
  };

  // A rendezvous message being received into `body`.
  struct fetch_state {
    impl* self;
    peer_id from;
    void* desc;
    std::vector<char> header;
    buffer body;
    bool started = false;
    bool abandoned = false;
  };

  plane_options opts;
  plane_handlers handlers;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::string host;
  std::vector<char> address;
  int wake_fd = -1;
  int epoll_fd = -1;
  std::thread thread;
  // Set (under ucx_mtx) before the progress thread arms the worker and
  // sleeps; whoever leaves work for it then wakes it.
  std::atomic<bool> sleeping{false};

  // Addresses and peer ids.
  std::mutex mtx;
  peer_id next_peer = 1;
  std::map<std::vector<char>, peer_id> by_address;

  // Every UCX call, and everything below, happens under `ucx_mtx`: callers
  // send on their own thread (a small message leaves at once, without
  // waking the progress thread), the progress thread receives and finishes
  // what is pending. Recursive: a handler may send.
  std::recursive_mutex ucx_mtx;
  bool stopping = false;
  bool closed = false;
  std::map<peer_id, peer> peers;
  std::unordered_map<ucp_ep_h, peer_id> by_out_ep;
  std::unordered_map<ucp_ep_h, peer_id> by_reply_ep;
  std::set<std::vector<unsigned char>> used_nonces;
  std::vector<fetch_state*> fetches;
  // Endpoints of dropped unwatched peers, closed with the plane.
  std::vector<ucp_ep_h> dropped_eps;
  // Sends and receives UCX still holds after their peer was dropped.
  std::set<send_state*> abandoned_sends;
  std::set<fetch_state*> abandoned_fetches;

  ~impl() {
    if (worker != nullptr)
      ucp_worker_destroy(worker);
    // UCX gave up on these with its worker.
    for (auto* x : abandoned_sends)
      delete x;
    for (auto* x : abandoned_fetches)
      delete x;
    if (context != nullptr)
      ucp_cleanup(context);
    if (wake_fd >= 0)
      ::close(wake_fd);
    if (epoll_fd >= 0)
      ::close(epoll_fd);
  }

  // Wakes the progress thread if it sleeps (or is about to).
  void wake() {
    if (sleeping.exchange(false)) {
      uint64_t one = 1;
      static_cast<void>(::write(wake_fd, &one, sizeof(one)));
    }
  }

  peer_id id_of(const std::vector<char>& addr) {
    std::lock_guard<std::mutex> guard{mtx};
    auto [i, added] = by_address.emplace(addr, next_peer);
    if (added)
      ++next_peer;
    return i->second;
  }

  // -- progress thread ----------------------------------------------------

  void run() {
    int efd = -1;
    ucp_worker_get_efd(worker, &efd);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = efd;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, efd, &ev);
    ev.data.fd = wake_fd;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev);
    for (;;) {
      {
        std::lock_guard<std::recursive_mutex> guard{ucx_mtx};
        if (stopping)
          break;
        while (ucp_worker_progress(worker) != 0) {
          // Progress until idle.
        }
        run_fetches();
        if (!fetches.empty())
          continue;
        sleeping.store(true);
        if (ucp_worker_arm(worker) == UCS_ERR_BUSY) {
          sleeping.store(false);
          continue;
        }
      }
      epoll_event events[2];
      auto n = epoll_wait(epoll_fd, events, 2, -1);
      sleeping.store(false);
      for (int i = 0; i < n; ++i)
        if (events[i].data.fd == wake_fd) {
          uint64_t count;
          static_cast<void>(::read(wake_fd, &count, sizeof(count)));
        }
    }
    std::lock_guard<std::recursive_mutex> guard{ucx_mtx};
    shut_down();
    closed = true;
  }

  void shut_down() {
    auto force_close = [this](ucp_ep_h ep) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      auto req = ucp_ep_close_nbx(ep, &param);
      if (UCS_PTR_IS_PTR(req)) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS)
          ucp_worker_progress(worker);
        ucp_request_free(req);
      }
    };
    for (auto& [id, p] : peers)
      if (p.out != nullptr) {
        force_close(p.out);
        p.out = nullptr;
      }
    for (auto ep : dropped_eps)
      force_close(ep);
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
      ucp_am_data_release(worker, f->desc);
      delete f;
    }
    fetches.clear();
  }

  void abandon(send_state* x, const std::string& why) {
    if (x->done)
      x->done(why);
    x->done = nullptr;
    x->abandoned = true;
    abandoned_sends.insert(x);
  }

  void abandon(fetch_state* f) {
    f->abandoned = true;
    abandoned_fetches.insert(f);
  }

  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* self = static_cast<impl*>(arg);
    auto i = self->by_out_ep.find(ep);
    if (i == self->by_out_ep.end())
      return;
    self->mark_down(i->second, "UCX: " + reason(status));
  }

  void mark_down(peer_id id, const std::string& why) {
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
        // Completes what is in flight with UCS_ERR_CANCELED.
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = UCP_EP_CLOSE_FLAG_FORCE;
        auto req = ucp_ep_close_nbx(p.out, &param);
        if (UCS_PTR_IS_PTR(req))
          ucp_request_free(req);
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
    if (handlers.on_peer_down)
      handlers.on_peer_down(id, why);
  }

  // Opens the endpoint to peer `id` and says hello first.
  void open(peer_id id, const std::vector<char>& addr) {
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
    // hello: magic, nonce, HMAC; body: our address.
    auto state = new send_state;
    state->self = this;
    state->to = id;
    state->header.resize(hello_header_size);
    std::memcpy(state->header.data(), hello_magic, sizeof(hello_magic));
    auto* nonce = reinterpret_cast<unsigned char*>(state->header.data()
                                                   + sizeof(hello_magic));
    RAND_bytes(nonce, nonce_size);
    auto mac = hello_mac(opts.secret, nonce, address, addr);
    std::memcpy(state->header.data() + sizeof(hello_magic) + nonce_size,
                mac.data(), mac.size());
    state->body = payload{address.data(), address.size()};
    submit(ep, hello_am, state);
  }

  static void on_sent(void* request, ucs_status_t status, void* user_data) {
    auto* state = static_cast<send_state*>(user_data);
    ucp_request_free(request);
    state->self->finish(state, status);
  }

  // True if UCX holds the send pending.
  bool submit(ucp_ep_h ep, unsigned am, send_state* state) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK
                         | UCP_OP_ATTR_FIELD_USER_DATA
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
      // Gathered by UCX straight from the pieces.
      for (const auto& x : pieces)
        state->iov.push_back(ucp_dt_iov_t{const_cast<void*>(x.data), x.size});
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
      param.datatype = ucp_dt_make_iov();
      buf = state->iov.data();
      count = state->iov.size();
    }
    auto req = ucp_am_send_nbx(ep, am, state->header.data(),
                               state->header.size(), buf, count, &param);
    if (UCS_PTR_IS_PTR(req)) {
      peers[state->to].sending.insert(state);
      return true;
    }
    finish(state, UCS_PTR_STATUS(req));
    return false;
  }

  // A send of ours completed (or failed) with `status`.
  void finish(send_state* state, ucs_status_t status) {
    if (state->abandoned) {
      abandoned_sends.erase(state);
    } else {
      if (auto i = peers.find(state->to); i != peers.end())
        i->second.sending.erase(state);
      if (state->done)
        state->done(status == UCS_OK ? std::string{}
                                     : "UCX: " + reason(status));
    }
    delete state;
  }

  // Sends `state` to `to`: true if UCX holds it pending (the progress
  // thread must go on with it).
  bool send_now(peer_id to, send_state* state) {
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

  static ucs_status_t on_hello(void* arg, const void* header,
                               size_t header_length, void* data, size_t length,
                               const ucp_am_recv_param_t* param) {
    auto* self = static_cast<impl*>(arg);
    // A hello arrives whole (it is small); anything else is no hello.
    if (header_length != hello_header_size || length == 0
        || length > max_address
        || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0
        || (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0
        || std::memcmp(header, hello_magic, sizeof(hello_magic)) != 0)
      return UCS_OK;
    auto* bytes = static_cast<const unsigned char*>(header);
    auto* nonce = bytes + sizeof(hello_magic);
    auto* mac = nonce + nonce_size;
    std::vector<char> from(static_cast<const char*>(data),
                           static_cast<const char*>(data) + length);
    auto expected = hello_mac(self->opts.secret, nonce, from, self->address);
    if (expected.size() != mac_size
        || CRYPTO_memcmp(expected.data(), mac, mac_size) != 0)
      return UCS_OK;
    std::vector<unsigned char> key(nonce, nonce + nonce_size);
    if (!self->used_nonces.insert(key).second)
      return UCS_OK; // A replayed hello.
    auto id = self->id_of(from);
    self->by_reply_ep[param->reply_ep] = id;
    auto& p = self->peers[id];
    if (p.down)
      return UCS_OK;
    if (p.out == nullptr)
      self->open(id, from); // Our own connection back, with our hello.
    if (!p.admitted) {
      p.admitted = true;
      if (self->handlers.on_peer_up)
        self->handlers.on_peer_up(id, from);
    }
    return UCS_OK;
  }

  static ucs_status_t on_data(void* arg, const void* header,
                              size_t header_length, void* data, size_t length,
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
      auto* f = new fetch_state{self,           id,    data, std::move(head),
                                buffer{length}, false, false};
      self->fetches.push_back(f);
      return UCS_INPROGRESS;
    }
    if (self->handlers.on_message)
      self->handlers.on_message(id, std::move(head), buffer{data, length});
    return UCS_OK;
  }

  static void on_fetched(void* request, ucs_status_t status, size_t,
                         void* user_data) {
    auto* f = static_cast<fetch_state*>(user_data);
    f->self->fetched(f, status);
    ucp_request_free(request);
  }

  void fetched(fetch_state* f, ucs_status_t status) {
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

  void run_fetches() {
    auto todo = std::move(fetches);
    fetches.clear();
    for (auto* f : todo) {
      auto p = peers.find(f->from);
      if (p == peers.end() || p->second.down) {
        ucp_am_data_release(worker, f->desc);
        delete f;
        continue;
      }
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK
                           | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.recv_am = &impl::on_fetched;
      param.user_data = f;
      auto req = ucp_am_recv_data_nbx(worker, f->desc, f->body.data(),
                                      f->body.size(), &param);
      f->started = true;
      if (UCS_PTR_IS_PTR(req)) {
        p->second.fetching.insert(f);
        continue;
      }
      fetched(f, UCS_PTR_STATUS(req));
    }
  }
};

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

plane::plane(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

plane::~plane() {
  close();
}

std::unique_ptr<plane> plane::start(plane_options opts, plane_handlers handlers,
                                    std::string& error) {
  auto d = std::make_unique<impl>();
  d->opts = std::move(opts);
  d->handlers = std::move(handlers);
  ucp_config_t* config = nullptr;
  if (auto status = ucp_config_read(nullptr, nullptr, &config);
      status != UCS_OK) {
    error = "UCX: cannot read its configuration (" + reason(status)
            + "; check the UCX_* environment variables)";
    return nullptr;
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
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
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
                        std::pair{data_am, &impl::on_data}}) {
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
  if (d->wake_fd < 0 || d->epoll_fd < 0) {
    error = "UCX: no eventfd or epoll for the progress thread";
    return nullptr;
  }
  auto* raw = d.get();
  d->thread = std::thread{[raw] { raw->run(); }};
  return std::unique_ptr<plane>{new plane(std::move(d))};
}

const std::vector<char>& plane::address() const {
  return impl_->address;
}

peer_id plane::connect(const std::vector<char>& address) {
  auto* d = impl_.get();
  auto id = d->id_of(address);
  {
    std::lock_guard<std::recursive_mutex> guard{d->ucx_mtx};
    if (d->stopping || d->closed)
      return id;
    auto i = d->peers.find(id);
    if (i == d->peers.end() || i->second.out == nullptr)
      d->open(id, address);
  }
  // Connecting goes on with the progress thread.
  d->wake();
  return id;
}

void plane::send(peer_id to, std::vector<char> header, payload body,
                 std::function<void(const std::string&)> done) {
  auto* d = impl_.get();
  auto* state = new impl::send_state;
  state->header = std::move(header);
  state->body = std::move(body);
  state->done = std::move(done);
  bool pending = false;
  {
    std::lock_guard<std::recursive_mutex> guard{d->ucx_mtx};
    pending = d->send_now(to, state);
  }
  if (pending)
    d->wake();
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
  impl_->thread.join();
}

} // namespace actorps::ucx
