// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/proof.hpp"

#include <array>
#include <cerrno>

#include <sys/socket.h>
#include <sys/types.h>

#include "caf/policy/tcp.hpp"

#include "core/link_proof.hpp"
#include "runtime/link.hpp"

namespace actorps {

namespace net = caf::io::network;

namespace {

bool would_block() {
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

// Runs `x` as far as it goes: its pending bytes first (nothing BASP writes
// goes before them), then exactly what it still lacks, never more (the
// peer's first BASP bytes stay for BASP). `write(data, size)` and
// `read(buf, size)` give the bytes moved, 0 if the socket would block, or
// -1 once the connection is gone: then `lost(reading)` says the step.
template <class Exchange, class Write, class Read, class Lost>
link_session::step drive(Exchange& x, Write write, Read read, Lost lost) {
  using step = link_session::step;
  for (;;) {
    while (!x.pending().empty()) {
      const auto& out = x.pending();
      auto n = write(out.data(), out.size());
      if (n < 0)
        return lost(false);
      if (n == 0)
        return step::want_write;
      x.sent(static_cast<std::size_t>(n));
    }
    switch (x.status()) {
      case core::link_proof::state::done:
        return step::done;
      case core::link_proof::state::failed:
        return step::failed;
      case core::link_proof::state::running:
        break;
    }
    std::array<unsigned char, 2 * core::link_proof::hello_size> buf;
    static_assert(core::link_proof::hello_size + core::link_proof::proof_size
                    <= sizeof(buf)
                  && core::identity_proof::challenge_size <= sizeof(buf)
                  && core::identity_proof::claim_size <= sizeof(buf));
    auto n = read(buf.data(), x.wanted());
    if (n < 0)
      return lost(true);
    if (n == 0)
      return step::want_read;
    x.received(buf.data(), static_cast<std::size_t>(n));
  }
}

class proof_session : public link_session {
public:
  proof_session(const std::string& secret, bool client)
    : proof_(secret, client) {
    // nop
  }

  step shake(net::native_socket fd) override {
    auto write = [fd](const unsigned char* data, std::size_t size) -> long {
      auto n = ::send(fd, data, size, MSG_NOSIGNAL);
      return n > 0 ? n : n < 0 && would_block() ? 0 : -1;
    };
    auto read = [fd](unsigned char* buf, std::size_t size) -> long {
      auto n = ::recv(fd, buf, size, 0);
      return n > 0 ? n : n < 0 && would_block() ? 0 : -1;
    };
    return drive(proof_, write, read, [this](bool reading) {
      if (!reading)
        return lost("the connection closed during the handshake");
      // Closed right after our proof: the peer refused it.
      refused_ = proof_.answered();
      return lost(refused_ ? "the peer refused this node's proof of the "
                             "token (a job with another token)"
                           : "the peer closed the connection during the "
                             "handshake");
    });
  }

  std::string failure() const override {
    return lost_.empty() ? proof_.failure() : lost_;
  }

  bool refused() const override {
    return refused_ || proof_.wrong_proof();
  }

  net::rw_state read_some(size_t& result, net::native_socket fd, void* buf,
                          size_t len) override {
    return caf::policy::tcp::read_some(result, fd, buf, len);
  }

  net::rw_state write_some(size_t& result, net::native_socket fd,
                           const void* buf, size_t len) override {
    return caf::policy::tcp::write_some(result, fd, buf, len);
  }

private:
  step lost(const char* why) {
    lost_ = why;
    return step::failed;
  }

  core::link_proof proof_;
  std::string lost_;
  bool refused_ = false;
};

// The inner session's handshake, then the identity exchange through its
// reads and writes (so inside TLS under TLS). Reads ask for exactly what
// the exchange lacks: BASP's first bytes stay for BASP.
class identity_session : public link_session {
public:
  identity_session(std::unique_ptr<link_session> inner,
                   core::identity_proof identity)
    : inner_(std::move(inner)), identity_(std::move(identity)) {
    // nop
  }

  step shake(net::native_socket fd) override {
    if (!inner_done_) {
      auto s = inner_->shake(fd);
      if (s != step::done)
        return s;
      inner_done_ = true;
    }
    auto* inner = inner_.get();
    auto write = [inner, fd](const unsigned char* data,
                             std::size_t size) -> long {
      size_t n = 0;
      auto rw = inner->write_some(n, fd, data, size);
      return rw == net::rw_state::failure ? -1 : static_cast<long>(n);
    };
    auto read = [inner, fd](unsigned char* buf, std::size_t size) -> long {
      size_t n = 0;
      auto rw = inner->read_some(n, fd, buf, size);
      return rw == net::rw_state::failure ? -1 : static_cast<long>(n);
    };
    return drive(identity_, write, read, [this](bool) {
      return lost("the connection closed during the identity exchange");
    });
  }

  std::string failure() const override {
    if (!inner_done_)
      return inner_->failure();
    return lost_.empty() ? identity_.failure() : lost_;
  }

  bool refused() const override {
    return !inner_done_ && inner_->refused();
  }

  bool buffered() const override {
    return inner_->buffered();
  }

  uint32_t proven_rank() const override {
    return identity_.proven_rank();
  }

  net::rw_state read_some(size_t& result, net::native_socket fd, void* buf,
                          size_t len) override {
    return inner_->read_some(result, fd, buf, len);
  }

  net::rw_state write_some(size_t& result, net::native_socket fd,
                           const void* buf, size_t len) override {
    return inner_->write_some(result, fd, buf, len);
  }

private:
  step lost(const char* why) {
    lost_ = why;
    return step::failed;
  }

  std::unique_ptr<link_session> inner_;
  core::identity_proof identity_;
  bool inner_done_ = false;
  std::string lost_;
};

} // namespace

std::unique_ptr<link_session> with_identity(std::unique_ptr<link_session> inner,
                                            core::identity_proof identity) {
  return std::make_unique<identity_session>(std::move(inner),
                                            std::move(identity));
}

std::unique_ptr<link_session> make_proof_session(const std::string& secret,
                                                 bool client) {
  return std::make_unique<proof_session>(secret, client);
}

} // namespace actorps
