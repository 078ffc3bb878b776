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

class proof_session : public link_session {
public:
  proof_session(const std::string& secret, bool client)
    : proof_(secret, client) {
    // nop
  }

  step shake(net::native_socket fd) override {
    for (;;) {
      // Our bytes first: the proof goes out before anything BASP writes.
      while (!proof_.pending().empty()) {
        const auto& out = proof_.pending();
        auto n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
        if (n > 0) {
          proof_.sent(static_cast<std::size_t>(n));
          continue;
        }
        if (n < 0 && would_block())
          return step::want_write;
        return lost("the connection closed during the handshake");
      }
      switch (proof_.status()) {
        case core::link_proof::state::done:
          return step::done;
        case core::link_proof::state::failed:
          return step::failed;
        case core::link_proof::state::running:
          break;
      }
      // Exactly what the handshake still lacks, never more: the peer's
      // first BASP bytes stay in the socket.
      std::array<unsigned char,
                 core::link_proof::hello_size + core::link_proof::proof_size>
        buf;
      auto n = ::recv(fd, buf.data(), proof_.wanted(), 0);
      if (n > 0) {
        proof_.received(buf.data(), static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && would_block())
        return step::want_read;
      // Closed right after our proof: the peer refused it.
      refused_ = proof_.answered();
      return lost(refused_ ? "the peer refused this node's proof of the "
                             "token (a job with another token)"
                           : "the peer closed the connection during the "
                             "handshake");
    }
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

} // namespace

std::unique_ptr<link_session> make_proof_session(const std::string& secret,
                                                 bool client) {
  return std::make_unique<proof_session>(secret, client);
}

} // namespace actorps
