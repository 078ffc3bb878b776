// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/link.hpp"

#include <atomic>
#include <chrono>
#include <iostream>
#include <utility>

#include <sys/socket.h>

#include "caf/io/network/default_multiplexer.hpp"
#include "caf/io/network/operation.hpp"
#include "caf/io/network/stream.hpp"

#include "core/link_proof.hpp"

namespace actorps {

namespace net = caf::io::network;

link_session::~link_session() = default;

bool link_session::buffered() const {
  return false;
}

bool link_session::refused() const {
  return false;
}

uint32_t link_session::proven_rank() const {
  return core::identity_proof::no_rank;
}

namespace {

// One line per second at most: a port scanned or flooded by strangers must
// not flood the log.
void log_refusal(const std::string& addr, const std::string& why) {
  static std::atomic<int64_t> last{0};
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
               .count();
  auto before = last.load();
  if (now - before < 1000 || !last.compare_exchange_strong(before, now))
    return;
  std::cerr << "actorps: refused a connection from " << addr
            << " during its handshake: " << why << std::endl;
}

} // namespace

class link_stream : public net::stream {
public:
  link_stream(net::default_multiplexer& mx, net::native_socket fd,
              std::unique_ptr<link_session> session, bool client,
              link_scribe* owner)
    : net::stream(mx, fd),
      policy_{std::move(session)},
      owner_(owner),
      client_(client) {
    // CAF makes its sockets non-blocking only once they join the loop; the
    // handshake must never wait for the peer.
    static_cast<void>(net::nonblocking(fd, true));
  }

  void handle_event(net::operation op) override {
    if (established_ || policy_.failed) {
      handle_event_impl(op, policy_);
      return;
    }
    // During the handshake even an error (a reset, ...) goes through the
    // session first: it tells a refused proof from a peer that went away.
    shake_hands();
    if (op == net::operation::propagate_error && shaking())
      fail("the connection failed during the handshake", true);
  }

  bool established() const {
    return established_;
  }

  bool shaking() const {
    return !established_ && !policy_.failed;
  }

  uint32_t proven_rank() const {
    return policy_.session->proven_rank();
  }

  // The handshake took too long: it fails now.
  void expire() {
    // Its read event reports it, outside whatever runs now.
    if (shaking())
      fail("the handshake did not finish in time", false);
  }

  // Starts reading for `mgr`; a handshake that failed before fails now.
  void start_reading(net::stream_manager* mgr, bool first) {
    if (first)
      start(mgr);
    else
      activate(mgr);
    reading_ = true;
    // A handshake that failed already shut the socket down: its read event
    // comes and reports the failure (not from in here: the broker may not
    // know the connection before this call returns). One going on goes on
    // here, in the network thread (the accepting side opens it now).
    if (!policy_.failed && !established_) {
      starting_ = true;
      shake_hands();
      starting_ = false;
    }
  }

  // The broker stopped reading (it closes or passivates the connection):
  // nothing may be reported to it any more.
  void stop_reading() {
    reading_ = false;
  }

  // Advances the handshake.
  void shake_hands() {
    switch (policy_.session->shake(fd())) {
      case link_session::step::done:
        established_ = true;
        stop_handshake_writes();
        owner_->established();
        owner_->handshake_ended();
        // What the peer sent right after its handshake may wait in the
        // socket or the session already (where epoll cannot see it): read
        // it now, or, inside the broker's own call, once that returned.
        if (reading_ && !starting_) {
          handle_event_impl(net::operation::read, policy_);
        } else if (reading_) {
          caf::intrusive_ptr<link_scribe> keep{owner_};
          backend().post([this, keep] {
            if (reading_)
              handle_event_impl(net::operation::read, policy_);
          });
        }
        return;
      case link_session::step::want_read:
        // Waiting for the peer: no write events until it answered.
        stop_handshake_writes();
        return;
      case link_session::step::want_write:
        if (!handshake_writes_) {
          handshake_writes_ = true;
          backend().add(net::operation::write, fd(), this);
        }
        return;
      case link_session::step::failed:
        fail(policy_.session->failure(), true);
    }
  }

private:
  void fail(const std::string& why, bool report_now) {
    stop_handshake_writes();
    policy_.failed = true;
    // A connecting side hears of it as its connect's error.
    if (!client_) {
      auto addr = net::remote_addr_of_fd(fd());
      log_refusal(addr ? *addr : std::string{"a peer"}, why);
    } else if (policy_.session->refused()) {
      owner_->refused();
    }

    // The peer sees the end at once, and our read event fires.
    ::shutdown(fd(), SHUT_RDWR);
    owner_->handshake_ended();
    // Reported as a failed read: the broker closes the connection.
    if (report_now && reading_ && !starting_)
      handle_event_impl(net::operation::read, policy_);
  }

  // The read and write calls CAF's stream makes.
  struct policy {
    std::unique_ptr<link_session> session;
    bool failed = false;

    net::rw_state read_some(size_t& result, net::native_socket fd, void* buf,
                            size_t len) {
      result = 0;
      if (failed)
        return net::rw_state::failure;
      return session->read_some(result, fd, buf, len);
    }

    net::rw_state write_some(size_t& result, net::native_socket fd,
                             const void* buf, size_t len) {
      result = 0;
      if (failed)
        return net::rw_state::failure;
      return session->write_some(result, fd, buf, len);
    }

    bool must_read_more(net::native_socket, size_t) {
      return !failed && session->buffered();
    }
  };

  void stop_handshake_writes() {
    if (handshake_writes_) {
      handshake_writes_ = false;
      // The stream itself never wrote before the handshake ended (the
      // scribe holds its flushes back), so this removes only ours.
      if (!state_.writing)
        backend().del(net::operation::write, fd(), this);
    }
  }

  policy policy_;
  link_scribe* owner_;
  bool client_;
  bool established_ = false;
  bool reading_ = false;
  bool starting_ = false;
  bool handshake_writes_ = false;
};

link_scribe::link_scribe(net::default_multiplexer& mx, net::native_socket fd,
                         std::unique_ptr<link_session> session, bool client)
  : caf::io::scribe(net::conn_hdl_from_socket(fd)) {
  // Both sides shake hands from the network thread, once the broker
  // reads (start_reading): nothing can fail before the owner installed
  // its callbacks.
  stream_ = std::make_unique<link_stream>(mx, fd, std::move(session), client,
                                          this);
}

link_scribe::~link_scribe() = default;

void link_scribe::configure_read(caf::io::receive_policy::config config) {
  stream_->configure_read(config);
  if (!launched_) {
    launched_ = true;
    stream_->start_reading(this, true);
  }
}

void link_scribe::ack_writes(bool enable) {
  stream_->ack_writes(enable);
}

std::vector<char>& link_scribe::wr_buf() {
  return stream_->wr_buf();
}

std::vector<char>& link_scribe::rd_buf() {
  return stream_->rd_buf();
}

void link_scribe::graceful_shutdown() {
  stream_->stop_reading();
  stream_->graceful_shutdown();
  detach(&stream_->backend(), false);
}

void link_scribe::flush() {
  if (!stream_->established()) {
    flush_pending_ = true;
    return;
  }
  stream_->flush(this);
}

void link_scribe::established() {
  if (flush_pending_) {
    flush_pending_ = false;
    stream_->flush(this);
  }
}

std::string link_scribe::addr() const {
  auto x = net::remote_addr_of_fd(stream_->fd());
  return x ? *x : std::string{};
}

uint16_t link_scribe::port() const {
  auto x = net::remote_port_of_fd(stream_->fd());
  return x ? *x : uint16_t{0};
}

bool link_scribe::shaking() const {
  return stream_->shaking();
}

uint32_t link_scribe::proven_rank() const {
  return stream_->proven_rank();
}

void link_scribe::expire() {
  stream_->expire();
}

void link_scribe::add_to_loop() {
  stream_->start_reading(this, false);
}

void link_scribe::remove_from_loop() {
  stream_->stop_reading();
  stream_->passivate();
}

void link_scribe::when_handshake_ends(std::function<void()> f) {
  on_end_ = std::move(f);
}

void link_scribe::report_refusal_to(std::shared_ptr<std::atomic<bool>> flag) {
  refusal_ = std::move(flag);
}

void link_scribe::handshake_ended() {
  if (auto f = std::exchange(on_end_, nullptr))
    f();
}

void link_scribe::refused() {
  if (refusal_)
    refusal_->store(true);
}

} // namespace actorps
