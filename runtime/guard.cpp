// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/guard.hpp"

#include <utility>

#include "caf/actor_system.hpp"
#include "caf/function_view.hpp"
#include "caf/io/basp_broker.hpp"
#include "caf/io/middleman.hpp"
#include "caf/io/middleman_actor_impl.hpp"
#include "caf/io/network/default_multiplexer.hpp"
#include "caf/io/network/doorman_impl.hpp"
#include "caf/io/network/scribe_impl.hpp"
#include "caf/make_counted.hpp"

#include "actors/trust.hpp"
#include "messages/errors.hpp"
#include "runtime/system.hpp"
#include "runtime/tls.hpp"

namespace actorps {

namespace {

namespace net = caf::io::network;

// A connection that refuses to read an oversized message from a node that
// was not admitted. CAF's BASP broker reads a header, then asks for exactly
// the payload length it declares (configure_read); CAF would resize its read
// buffer to that length at once. `Base` is CAF's TCP scribe or ours for TLS.
template <class Base>
class guarded : public Base {
public:
  template <class... Ts>
  explicit guarded(Ts&&... xs) : Base(std::forward<Ts>(xs)...) {
    // nop
  }

  void configure_read(caf::io::receive_policy::config config) override {
    if (config.second > unadmitted_message_cap && !peer_admitted()) {
      refused_ = true;
      Base::configure_read(caf::io::receive_policy::at_most(1));
      return;
    }
    Base::configure_read(config);
  }

  bool consume(caf::execution_unit* ctx, const void* buf,
               size_t size) override {
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
  bool peer_admitted() {
    auto* broker = dynamic_cast<caf::io::basp_broker*>(this->parent());
    if (broker == nullptr)
      return false;
    auto node = broker->instance.tbl().lookup_direct(this->hdl());
    return node && admitted_in_process(node);
  }

  bool refused_ = false;
  bool closed_ = false;
};

// Accepts connections as guarded scribes, over TLS when given a context.
class guarded_doorman : public net::doorman_impl {
public:
  guarded_doorman(net::default_multiplexer& mx, net::native_socket fd,
                  tls_context tls)
    : net::doorman_impl(mx, fd), tls_(std::move(tls)) {
    // nop
  }

  bool new_connection() override {
    if (detached())
      return false;
    auto& mx = acceptor_.backend();
    auto fd = acceptor_.accepted_socket();
    caf::io::scribe_ptr scribe;
    if (tls_)
      scribe = caf::make_counted<guarded<tls_scribe>>(mx, fd, tls_, false);
    else
      scribe = caf::make_counted<guarded<net::scribe_impl>>(mx, fd);
    auto hdl = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    return doorman::new_connection(&mx, hdl);
  }

private:
  tls_context tls_;
};

// CAF's middleman actor, opening guarded doormen and, with a TLS context,
// TLS connections. One serves one publish or one connect: the doorman or
// connection then belongs to the BASP broker, and the actor ends when the
// last handle to it goes.
class guarded_middleman_actor : public caf::io::middleman_actor_impl {
public:
  guarded_middleman_actor(caf::actor_config& cfg, caf::actor broker,
                          tls_context tls)
    : caf::io::middleman_actor_impl(cfg, std::move(broker)),
      tls_(std::move(tls)) {
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
    return caf::make_counted<guarded_doorman>(multiplexer(), *fd, tls_);
  }

  caf::expected<caf::io::scribe_ptr> connect(const std::string& host,
                                             uint16_t port) override {
    if (!tls_)
      return caf::io::middleman_actor_impl::connect(host, port);
    auto fd = net::new_tcp_connection(host, port);
    if (!fd)
      return std::move(fd.error());
    return caf::make_counted<tls_scribe>(multiplexer(), *fd, tls_, true);
  }

private:
  tls_context tls_;
};

caf::io::middleman_actor spawn_middleman_actor(caf::actor_system& sys,
                                               tls_context tls) {
  auto broker
    = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  return caf::actor_cast<caf::io::middleman_actor>(
    sys.spawn<guarded_middleman_actor, caf::hidden>(broker, std::move(tls)));
}

// The TLS context of `sys`: none without TLS files.
caf::expected<tls_context> context_of(caf::actor_system& sys) {
  if (!tls_enabled(sys))
    return tls_context{};
  return make_tls_context(
    dynamic_cast<const system_config&>(sys.config()).tls());
}

} // namespace

caf::expected<uint16_t>
publish_guarded(caf::actor_system& sys, caf::strong_actor_ptr whom,
                std::set<std::string> sigs, uint16_t port,
                const std::string& host) {
  auto tls = context_of(sys);
  if (!tls)
    return std::move(tls.error());
  auto publish
    = caf::make_function_view(spawn_middleman_actor(sys, std::move(*tls)));
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
connect_tls(caf::actor_system& sys, const std::string& host, uint16_t port,
            const std::set<std::string>& sigs) {
  auto tls = context_of(sys);
  if (!tls)
    return std::move(tls.error());
  if (!*tls)
    return make_error(errc::bad_config, "connect: this node has no TLS files");
  auto connect
    = caf::make_function_view(spawn_middleman_actor(sys, std::move(*tls)),
                              caf::duration{connect_timeout});
  auto res = connect(caf::connect_atom::value, host, port);
  if (!res)
    return std::move(res.error());
  auto& ptr = std::get<1>(*res);
  if (!ptr)
    return caf::make_error(caf::sec::no_actor_published_at_port, port);
  if (!sys.assignable(std::get<2>(*res), sigs))
    return caf::make_error(caf::sec::unexpected_actor_messaging_interface,
                           std::move(std::get<2>(*res)), sigs);
  return std::move(ptr);
}

} // namespace actorps
