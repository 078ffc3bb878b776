// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/guard.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/binary_deserializer.hpp"
#include "caf/function_view.hpp"
#include "caf/io/basp/header.hpp"
#include "caf/io/basp_broker.hpp"
#include "caf/io/middleman.hpp"
#include "caf/io/middleman_actor_impl.hpp"
#include "caf/io/network/default_multiplexer.hpp"
#include "caf/io/network/doorman_impl.hpp"
#include "caf/io/network/scribe_impl.hpp"
#include "caf/make_counted.hpp"

#include "actors/trust.hpp"
#include "core/layout.hpp"
#include "core/link_proof.hpp"
#include "messages/errors.hpp"
#include "runtime/link.hpp"
#include "runtime/proof.hpp"
#include "runtime/system.hpp"
#include "runtime/tls.hpp"

namespace actorps {

namespace {

std::atomic<uint64_t> process_message_cap{core::min_message_cap
                                          + (uint64_t{1} << 20)};

} // namespace

void set_message_cap(uint64_t bytes) {
  if (bytes > 0)
    process_message_cap = bytes;
}

uint64_t message_cap_in_process() {
  return process_message_cap.load();
}

namespace {

namespace net = caf::io::network;

// Where each peer node's connection comes from (peer_address); bounded, so
// that many handshakes cannot grow it without end.
struct address_book {
  std::mutex mtx;
  std::map<caf::node_id, std::string> by_node;
  // Nodes in the order they were first recorded: the oldest goes first.
  std::deque<caf::node_id> order;
};

address_book& addresses() {
  static address_book book;
  return book;
}

constexpr size_t max_addresses = 4096;

void remember_address(const caf::node_id& node, std::string where) {
  auto& book = addresses();
  std::lock_guard<std::mutex> guard{book.mtx};
  if (book.by_node.count(node) == 0) {
    if (book.by_node.size() >= max_addresses) {
      book.by_node.erase(book.order.front());
      book.order.pop_front();
    }
    book.order.push_back(node);
  }
  book.by_node[node] = std::move(where);
}

// A connection that refuses to read an oversized message from a node that
// was not admitted (accepted connections only: `capped`). CAF's BASP broker
// reads a header, then asks for exactly the payload length it declares
// (configure_read); CAF would resize its read buffer to that length at once.
//
// Every guarded connection also checks routed, monitor and down messages.
// Each names its source node in its payload and CAF 0.17 believes it: a
// routed message naming the receiving node makes the sender a local actor
// (looked up by id), one naming a third node a proxy of that node's actor,
// which would pass any trust check (actors/trust.hpp); a down message in
// another node's name kills the proxy of that node's actor (a server would
// think the coordinator died). So such a message is refused (and its
// connection closed) if it claims to come from this process, or from
// another node than the peer unless the peer is the coordinator
// (routes_trusted), through which CAF routes a worker's first messages to
// a server.
//
// `Base` is CAF's TCP scribe or ours (runtime/link.hpp) for TLS or the
// proof of the token.
template <class Base>
class guarded : public Base {
public:
  template <class... Ts>
  explicit guarded(bool capped, Ts&&... xs)
    : Base(std::forward<Ts>(xs)...), capped_(capped) {
    // nop
  }

  ~guarded() override {
    if (named_)
      forget_proven(local_, named_, this);
  }

  void configure_read(caf::io::receive_policy::config config) override {
    if (!capped_ && !clock_started_)
      start_clock();
    auto cap = message_cap_in_process();
    if (config.second > cap) {
      std::fprintf(stderr,
                   "actorps: closed a connection from %s:%u: it announced a "
                   "message of %zu bytes, the job's bound is %llu\n",
                   this->addr().c_str(), static_cast<unsigned>(this->port()),
                   config.second, static_cast<unsigned long long>(cap));
      refused_ = true;
      Base::configure_read(caf::io::receive_policy::at_most(1));
      return;
    }
    if (capped_ && config.second > unadmitted_message_cap && !peer_admitted()) {
      refused_ = true;
      Base::configure_read(caf::io::receive_policy::at_most(1));
      return;
    }
    Base::configure_read(config);
  }

  bool consume(caf::execution_unit* ctx, const void* buf,
               size_t size) override {
    if (!recorded_)
      record_peer();
    if (!refused_ && !honest(ctx, buf, size))
      refused_ = true;
    if (!refused_ && Base::consume(ctx, buf, size) && !refused_)
      return true;
    // Refused (now or by the header just consumed): close the connection
    // as a failed read would, so that BASP forgets it at once.
    if (!closed_) {
      closed_ = true;
      this->io_failure(ctx, net::operation::read);
    }
    return false;
  }

private:
  // CAF 0.17's BASP broker creates the state of a connection it opens
  // (connect_atom) with `last_seen` at the clock's epoch, so with a
  // heartbeat set the first tick before the peer's handshake arrives closes
  // the connection with connection_timeout (measured: after 100 ms with a
  // 100 ms heartbeat and a 3 s timeout; under load a connect then fails at
  // random). Its connect handler asks for the handshake's header right after
  // creating that state: the clock starts there, so a peer has the whole
  // connection timeout to answer and a hung one is still cut off. Once
  // found, BASP keeps that state's clock itself.
  void start_clock() {
    auto* broker = basp();
    if (broker == nullptr)
      return;
    auto i = broker->ctx.find(this->hdl());
    if (i == broker->ctx.end())
      return;
    clock_started_ = true;
    if (i->second.last_seen == caf::actor_clock::time_point{})
      i->second.last_seen = broker->system().clock().now();
  }

  // The BASP broker that owns this connection (null before it has one).
  caf::io::basp_broker* basp() {
    return dynamic_cast<caf::io::basp_broker*>(this->parent());
  }

  // The node at the other end, once its BASP handshake named it.
  caf::node_id peer_node() {
    auto* broker = basp();
    if (broker == nullptr)
      return {};
    return broker->instance.tbl().lookup_direct(this->hdl());
  }

  // Remembers where the peer's node connects from, once its handshake
  // named it.
  void record_peer() {
    if (auto node = peer_node()) {
      recorded_ = true;
      remember_address(node, this->addr() + ":" + std::to_string(this->port()));
    }
  }

  bool peer_admitted() {
    auto node = peer_node();
    return node && admitted_in_process(node);
  }

  // Follows BASP's framing (a header, then the payload it announces) and
  // says false for the payload of a routed message whose source node is
  // not the peer's.
  bool honest(caf::execution_unit* ctx, const void* buf, size_t size) {
    namespace basp = caf::io::basp;
    auto bytes = static_cast<const char*>(buf);
    if (expect_header_) {
      caf::io::basp::header hdr;
      caf::binary_deserializer source{ctx, bytes, size};
      if (size != basp::header_size || source(hdr))
        return true; // not a header: BASP itself refuses it
      // Each of these names its source node first in its payload, and
      // CAF believes it: a routed message's sender, a monitor's requester,
      // a down message's dead actor.
      routed_ = hdr.operation == basp::message_type::routed_message
                || hdr.operation == basp::message_type::monitor_message
                || hdr.operation == basp::message_type::down_message;
      // (So does the handshake of a connection this process accepted.)
      handshake_ = capped_
                   && hdr.operation == basp::message_type::client_handshake;
      expect_header_ = hdr.payload_len == 0;
      return true;
    }
    expect_header_ = true;
    if (!routed_ && !handshake_)
      return true;
    caf::node_id claimed;
    caf::binary_deserializer source{ctx, bytes, size};
    if (source(claimed))
      return false;
    if (handshake_)
      return handshake_allowed(claimed);
    auto peer = peer_node();
    if (peer && claimed != this->parent()->system().node()
        && (claimed == peer || routes_trusted(peer)))
      return true;
    std::fprintf(stderr,
                 "actorps: closed a connection from %s: it sent a message in "
                 "the name of node %s\n",
                 peer ? to_string(peer).c_str() : "an unknown node",
                 to_string(claimed).c_str());
    return false;
  }

  // An accepted connection whose handshake names a node that never
  // connects to this process (the coordinator, a server paired with one of
  // its copies) is closed before BASP takes the name: it would route that
  // node's traffic to the connection, and drop the real node's when closed.
  bool handshake_allowed(const caf::node_id& claimed) {
    auto local = this->parent()->system().node();
    if (!may_connect_in(local, claimed)) {
      std::fprintf(stderr,
                   "actorps: closed a connection from %s:%u: its handshake "
                   "named node %s, which never connects to this process\n",
                   this->addr().c_str(), static_cast<unsigned>(this->port()),
                   to_string(claimed).c_str());
      return false;
    }
    if constexpr (std::is_base_of_v<link_scribe, Base>) {
      // A worker's node over a connection that did not prove that worker.
      auto proven = this->proven_rank();
      auto bound = bound_worker(local, claimed);
      if (bound != core::identity_proof::no_rank && bound != proven
          && identities_checked(local)) {
        std::fprintf(stderr,
                     "actorps: closed a connection from %s:%u: its handshake "
                     "named node %s, which joined as worker %u, without "
                     "proving that worker's identity\n",
                     this->addr().c_str(), static_cast<unsigned>(this->port()),
                     to_string(claimed).c_str(), bound);
        return false;
      }
      // CAF takes the name unless a connection of that node is up (then it
      // ignores this handshake, and the guard refuses what comes on it).
      if (!taken(claimed)) {
        record_proven(local, claimed, proven, this);
        local_ = local;
        named_ = claimed;
      }
    }
    return true;
  }

  // True if BASP already routes `node` over a connection of its own.
  bool taken(const caf::node_id& node) {
    auto* broker = basp();
    return broker != nullptr
           && static_cast<bool>(broker->instance.tbl().lookup_direct(node));
  }

  const bool capped_;
  // The node this accepted connection speaks for, once recorded.
  caf::node_id local_;
  caf::node_id named_;
  bool expect_header_ = true;
  bool routed_ = false;
  bool handshake_ = false;
  bool refused_ = false;
  bool closed_ = false;
  bool recorded_ = false;
  bool clock_started_ = false;
};

// What a system's connections speak under BASP: TLS with a context, else
// the proof of the token with a secret, else plain TCP.
// Each such session then tells which worker the connecting side speaks for
// (core::identity_proof): the identity the node of this system joined with,
// checked against the rank key it holds (actors/trust.hpp).
struct link_config {
  tls_context tls;
  std::string secret;
  std::chrono::milliseconds handshake_timeout{10000};
  // Connecting: set when the peer refused this node's proof.
  std::shared_ptr<std::atomic<bool>> refused;
  // This system's node.
  caf::node_id self;

  // The session of a new connection; null for plain TCP.
  std::unique_ptr<link_session> session(bool client) const {
    std::unique_ptr<link_session> inner;
    if (tls)
      inner = make_tls_session(tls, client);
    else if (!secret.empty())
      inner = make_proof_session(secret, client);
    else
      return nullptr;
    if (client) {
      auto [rank, rank_secret] = worker_identity(self);
      return with_identity(std::move(inner), core::identity_proof::claimant(
                                               rank, std::move(rank_secret)));
    }
    // (The rank key comes with the join: looked up when a claim comes.)
    return with_identity(
      std::move(inner),
      core::identity_proof::verifier([node = self](uint32_t rank) {
        auto key = rank_key_of(node);
        return key.empty() ? std::string{} : core::worker_secret(key, rank);
      }));
  }
};

// Handshakes an accepting port lets go on at once.
constexpr std::size_t max_handshakes = 64;

// Accepts connections as guarded scribes.
class guarded_doorman : public net::doorman_impl {
public:
  guarded_doorman(net::default_multiplexer& mx, net::native_socket fd,
                  link_config links)
    : net::doorman_impl(mx, fd), links_(std::move(links)) {
    // nop
  }

  bool new_connection() override {
    if (detached())
      return false;
    auto& mx = acceptor_.backend();
    auto fd = acceptor_.accepted_socket();
    caf::io::scribe_ptr scribe;
    if (auto session = links_.session(false)) {
      auto now = std::chrono::steady_clock::now();
      expire_handshakes(now);
      auto linked = caf::make_counted<guarded<link_scribe>>(
        true, mx, fd, std::move(session), false);
      // Let go of it as soon as its handshake ends.
      auto list = shaking_;
      auto* raw = linked.get();
      linked->when_handshake_ends([list, raw] {
        auto i = std::find_if(list->begin(), list->end(), [raw](const auto& x) {
          return x.second.get() == raw;
        });
        if (i != list->end())
          list->erase(i);
      });
      shaking_->emplace_back(now, linked);
      scribe = std::move(linked);
    } else {
      scribe = caf::make_counted<guarded<net::scribe_impl>>(true, mx, fd);
    }
    auto hdl = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    return doorman::new_connection(&mx, hdl);
  }

private:
  // Each new connection closes those still in their handshake after the
  // deadline and, beyond `max_handshakes`, the oldest: strangers that
  // connect and say nothing hold a few sockets at most (never all the
  // process may open, which would stop it accepting anyone). Holding a
  // reference keeps each socket from being reused until it is let go.
  void expire_handshakes(std::chrono::steady_clock::time_point now) {
    std::vector<caf::intrusive_ptr<link_scribe>> victims;
    auto& list = *shaking_;
    auto over = list.size() >= max_handshakes ? list.size() + 1 - max_handshakes
                                              : 0;
    for (auto& [since, scribe] : list)
      if (over > 0 || now - since >= links_.handshake_timeout) {
        victims.push_back(scribe);
        if (over > 0)
          --over;
      }
    // Expiring ends the handshake, which takes it off the list.
    for (auto& x : victims)
      x->expire();
  }

  link_config links_;
  using entry = std::pair<std::chrono::steady_clock::time_point,
                          caf::intrusive_ptr<link_scribe>>;
  std::shared_ptr<std::vector<entry>> shaking_
    = std::make_shared<std::vector<entry>>();
};

// CAF's middleman actor, opening guarded doormen and connections that shake
// hands (TLS, or the proof of the token). One serves one publish or one
// connect: the doorman or connection then belongs to the BASP broker, and the
// actor ends when the last handle to it goes.
class guarded_middleman_actor : public caf::io::middleman_actor_impl {
public:
  guarded_middleman_actor(caf::actor_config& cfg, caf::actor broker,
                          link_config links)
    : caf::io::middleman_actor_impl(cfg, std::move(broker)),
      links_(std::move(links)) {
    // nop
  }

protected:
  net::default_multiplexer& multiplexer() {
    return dynamic_cast<net::default_multiplexer&>(
      system().middleman().backend());
  }

  caf::expected<caf::io::doorman_ptr> open(uint16_t port, const char* addr,
                                           bool reuse) override {
    auto fd = net::new_tcp_acceptor_impl(port, addr, reuse);
    if (!fd)
      return std::move(fd.error());
    return caf::make_counted<guarded_doorman>(multiplexer(), *fd, links_);
  }

  caf::expected<caf::io::scribe_ptr> connect(const std::string& host,
                                             uint16_t port) override {
    auto fd = net::new_tcp_connection(host, port);
    if (!fd)
      return std::move(fd.error());
    // The node this one connects to was chosen by it (no size cap), but its
    // routed messages are checked as on accepted connections.
    if (!links_.tls && links_.secret.empty())
      return caf::make_counted<guarded<net::scribe_impl>>(false, multiplexer(),
                                                          *fd);
    auto scribe = caf::make_counted<guarded<link_scribe>>(
      false, multiplexer(), *fd, links_.session(true), true);
    scribe->report_refusal_to(links_.refused);
    return scribe;
  }

private:
  link_config links_;
};

caf::io::middleman_actor spawn_middleman_actor(caf::actor_system& sys,
                                               link_config links) {
  auto broker
    = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  return caf::actor_cast<caf::io::middleman_actor>(
    sys.spawn<guarded_middleman_actor, caf::hidden>(broker, std::move(links)));
}

// What the connections of `sys` speak.
caf::expected<link_config> links_of(caf::actor_system& sys) {
  link_config links;
  auto* cfg = dynamic_cast<const system_config*>(&sys.config());
  if (cfg == nullptr)
    return links;
  links.secret = cfg->link_secret();
  links.handshake_timeout = cfg->handshake_timeout();
  links.self = sys.node();
  if (!links.secret.empty() || tls_enabled(sys))
    links_carry_identity(links.self);
  if (!tls_enabled(sys))
    return links;
  auto tls = make_tls_context(cfg->tls());
  if (!tls)
    return std::move(tls.error());
  links.tls = std::move(*tls);
  return links;
}

} // namespace

std::string peer_address(const caf::node_id& node) {
  auto& book = addresses();
  std::lock_guard<std::mutex> guard{book.mtx};
  auto i = book.by_node.find(node);
  return i == book.by_node.end() ? std::string{} : i->second;
}

caf::expected<uint16_t>
publish_guarded(caf::actor_system& sys, caf::strong_actor_ptr whom,
                std::set<std::string> sigs, uint16_t port,
                const std::string& host) {
  auto links = links_of(sys);
  if (!links)
    return std::move(links.error());
  auto publish
    = caf::make_function_view(spawn_middleman_actor(sys, std::move(*links)));
  auto res = publish(caf::publish_atom::value, port, std::move(whom),
                     std::move(sigs), host, true);
  if (!res)
    return std::move(res.error());
  return *res;
}

bool tls_enabled(const caf::actor_system& sys) {
  auto* cfg = dynamic_cast<const system_config*>(&sys.config());
  return cfg != nullptr && cfg->tls().enabled();
}

caf::expected<caf::strong_actor_ptr>
connect_linked(caf::actor_system& sys, const std::string& host, uint16_t port,
               const std::set<std::string>& sigs) {
  auto links = links_of(sys);
  if (!links)
    return std::move(links.error());
  auto proof = !links->tls && !links->secret.empty();
  auto refused = std::make_shared<std::atomic<bool>>(false);
  links->refused = refused;
  auto connect
    = caf::make_function_view(spawn_middleman_actor(sys, std::move(*links)),
                              caf::duration{connect_timeout});
  auto res = connect(caf::connect_atom::value, host, port);
  if (!res) {
    // Only a refused proof is a wrong token: a peer that went away during
    // the handshake (restarting, ...) may be tried again.
    if (proof && refused->load())
      return make_error(errc::unauthorized,
                        "connect to " + host + ":" + std::to_string(port)
                          + ": the peer refused this node's proof of the "
                            "job token, or gave a wrong one: the two hold "
                            "different tokens");
    return std::move(res.error());
  }
  auto& ptr = std::get<1>(*res);
  if (!ptr)
    return caf::make_error(caf::sec::no_actor_published_at_port, port);
  if (!sys.assignable(std::get<2>(*res), sigs))
    return caf::make_error(caf::sec::unexpected_actor_messaging_interface,
                           std::move(std::get<2>(*res)), sigs);
  return std::move(ptr);
}

} // namespace actorps
