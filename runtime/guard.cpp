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

namespace actorps {

namespace {

namespace net = caf::io::network;

// A connection that refuses to read an oversized message from a node that
// was not admitted. CAF's BASP broker reads a header, then asks for exactly
// the payload length it declares (configure_read); CAF would resize its read
// buffer to that length at once.
class guarded_scribe : public net::scribe_impl {
public:
  guarded_scribe(net::default_multiplexer& mx, net::native_socket fd)
    : net::scribe_impl(mx, fd) {
    // nop
  }

  void configure_read(caf::io::receive_policy::config config) override {
    if (config.second > unadmitted_message_cap && !peer_admitted()) {
      refused_ = true;
      net::scribe_impl::configure_read(caf::io::receive_policy::at_most(1));
      return;
    }
    net::scribe_impl::configure_read(config);
  }

  bool consume(caf::execution_unit* ctx, const void* buf,
               size_t size) override {
    if (!refused_ && net::scribe_impl::consume(ctx, buf, size) && !refused_)
      return true;
    // Refused (now or by the header just consumed): close the connection
    // as a failed read would, so that BASP forgets it at once.
    if (!closed_) {
      closed_ = true;
      io_failure(ctx, net::operation::read);
    }
    return false;
  }

private:
  bool peer_admitted() {
    auto* broker = dynamic_cast<caf::io::basp_broker*>(parent());
    if (broker == nullptr)
      return false;
    auto node = broker->instance.tbl().lookup_direct(hdl());
    return node && admitted_in_process(node);
  }

  bool refused_ = false;
  bool closed_ = false;
};

// Accepts connections as guarded_scribes.
class guarded_doorman : public net::doorman_impl {
public:
  using net::doorman_impl::doorman_impl;

  bool new_connection() override {
    if (detached())
      return false;
    auto& mx = acceptor_.backend();
    auto scribe
      = caf::make_counted<guarded_scribe>(mx, acceptor_.accepted_socket());
    auto hdl = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    return doorman::new_connection(&mx, hdl);
  }
};

// CAF's middleman actor, opening guarded_doormen. One serves one publish:
// the doorman then belongs to the BASP broker, and the actor ends when the
// last handle to it goes.
class guarded_middleman_actor : public caf::io::middleman_actor_impl {
public:
  guarded_middleman_actor(caf::actor_config& cfg, caf::actor broker)
    : caf::io::middleman_actor_impl(cfg, std::move(broker)) {
    // nop
  }

protected:
  caf::expected<caf::io::doorman_ptr> open(uint16_t port, const char* addr,
                                           bool reuse) override {
    auto fd = net::new_tcp_acceptor_impl(port, addr, reuse);
    if (!fd)
      return std::move(fd.error());
    auto& mx
      = dynamic_cast<net::default_multiplexer&>(system().middleman().backend());
    return caf::make_counted<guarded_doorman>(mx, *fd);
  }
};

} // namespace

caf::expected<uint16_t>
publish_guarded(caf::actor_system& sys, caf::strong_actor_ptr whom,
                std::set<std::string> sigs, uint16_t port,
                const std::string& host) {
  auto broker
    = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  auto mm = caf::actor_cast<caf::io::middleman_actor>(
    sys.spawn<guarded_middleman_actor, caf::hidden>(broker));
  auto publish = caf::make_function_view(mm);
  auto res = publish(caf::publish_atom::value, port, std::move(whom),
                     std::move(sigs), host, true);
  if (!res)
    return std::move(res.error());
  return *res;
}

} // namespace actorps
