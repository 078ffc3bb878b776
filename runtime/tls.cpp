// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/tls.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <utility>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "caf/io/network/native_socket.hpp"
#include "caf/io/network/rw_state.hpp"
#include "caf/raise_error.hpp"

#include "messages/errors.hpp"
#include "runtime/link.hpp"
#include "runtime/system_options.hpp"

namespace actorps {

namespace net = caf::io::network;

namespace {

// -- a socket BIO that never raises SIGPIPE -----------------------------------
// OpenSSL's own socket BIO writes with write(2): a peer that closed its end
// would kill the process with SIGPIPE. This one sends with MSG_NOSIGNAL.

int socket_of(BIO* bio) {
  return static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
}

int bio_write(BIO* bio, const char* buf, int len) {
  BIO_clear_retry_flags(bio);
  auto n = ::send(socket_of(bio), buf, static_cast<size_t>(len), MSG_NOSIGNAL);
  if (n >= 0)
    return static_cast<int>(n);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
    BIO_set_retry_write(bio);
  return -1;
}

int bio_read(BIO* bio, char* buf, int len) {
  BIO_clear_retry_flags(bio);
  auto n = ::recv(socket_of(bio), buf, static_cast<size_t>(len), 0);
  if (n > 0)
    return static_cast<int>(n);
  if (n == 0) {
#ifdef BIO_FLAGS_IN_EOF
    BIO_set_flags(bio, BIO_FLAGS_IN_EOF);
#endif
    return 0;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
    BIO_set_retry_read(bio);
  return -1;
}

long bio_ctrl(BIO* bio, int cmd, long, void*) {
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;
#ifdef BIO_FLAGS_IN_EOF
    case BIO_CTRL_EOF:
      return BIO_test_flags(bio, BIO_FLAGS_IN_EOF) != 0 ? 1 : 0;
#endif
    default:
      return 0;
  }
}

int bio_create(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

const BIO_METHOD* socket_method() {
  static const BIO_METHOD* method = [] {
    auto* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                           "actorps socket");
    BIO_meth_set_write(m, bio_write);
    BIO_meth_set_read(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    return m;
  }();
  return method;
}

// One OpenSSL error queue per thread: whatever an earlier call on this
// thread left there must not be read as this call's failure.
struct clear_errors {
  clear_errors() {
    ERR_clear_error();
  }
  ~clear_errors() {
    ERR_clear_error();
  }
};

std::string last_error(const char* what) {
  std::string msg = what;
  if (auto e = ERR_peek_last_error(); e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    msg += ": ";
    msg += buf;
  }
  ERR_clear_error();
  return msg;
}

} // namespace

// -- context ------------------------------------------------------------------

caf::expected<tls_context> make_tls_context(const tls_files& files) {
  clear_errors guard;
  tls_context ctx{SSL_CTX_new(TLS_method()), SSL_CTX_free};
  if (!ctx)
    return make_error(errc::bad_config, last_error("TLS: no context"));
  auto* c = ctx.get();
  // Every node runs actorps' own TLS layer: nothing older than 1.3 is needed.
  SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION);
  auto options = SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET;
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  // A peer that exits without closing TLS is a closed connection, not an
  // error (the job notices the node going down either way).
  options |= SSL_OP_IGNORE_UNEXPECTED_EOF;
#endif
  SSL_CTX_set_options(c, options);
  SSL_CTX_set_num_tickets(c, 0);
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE
                        | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  if (SSL_CTX_use_certificate_chain_file(c, files.cert.c_str()) != 1)
    return make_error(errc::bad_config,
                      last_error(("--tls-cert " + files.cert).c_str()));
  if (SSL_CTX_use_PrivateKey_file(c, files.key.c_str(), SSL_FILETYPE_PEM) != 1)
    return make_error(errc::bad_config,
                      last_error(("--tls-key " + files.key).c_str()));
  if (SSL_CTX_check_private_key(c) != 1)
    return make_error(errc::bad_config,
                      last_error(("--tls-key " + files.key
                                  + " does not match --tls-cert " + files.cert)
                                   .c_str()));
  if (SSL_CTX_load_verify_locations(c, files.ca.c_str(), nullptr) != 1)
    return make_error(errc::bad_config,
                      last_error(("--tls-ca " + files.ca).c_str()));
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  return ctx;
}

// -- session ----------------------------------------------------------------

namespace {

class tls_session : public link_session {
public:
  tls_session(SSL* ssl, bool client) : ssl_(ssl) {
    if (client)
      SSL_set_connect_state(ssl);
    else
      SSL_set_accept_state(ssl);
  }

  ~tls_session() override {
    SSL_free(ssl_);
  }

  step shake(net::native_socket fd) override {
    clear_errors guard;
    if (!bio_set_) {
      bio_set_ = true;
      auto* bio = BIO_new(socket_method());
      BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
      SSL_set_bio(ssl_, bio, bio);
    }
    auto ret = SSL_do_handshake(ssl_);
    if (ret == 1)
      return step::done;
    switch (SSL_get_error(ssl_, ret)) {
      case SSL_ERROR_WANT_READ:
        return step::want_read;
      case SSL_ERROR_WANT_WRITE:
        return step::want_write;
      default:
        // No certificate, one the CA did not sign, or no TLS at all.
        failure_ = last_error("TLS handshake");
        return step::failed;
    }
  }

  std::string failure() const override {
    return failure_;
  }

  // One event moves all it can: SSL_read and SSL_write move one record
  // (16 KB) per call, CAF's stream calls these a bounded number of times.
  net::rw_state read_some(size_t& result, net::native_socket, void* buf,
                          size_t len) override {
    auto* out = static_cast<char*>(buf);
    return transfer(result, len, net::rw_state::indeterminate,
                    [&](size_t at, int n) {
                      return SSL_read(ssl_, out + at, n);
                    });
  }

  net::rw_state write_some(size_t& result, net::native_socket, const void* buf,
                           size_t len) override {
    auto* in = static_cast<const char*>(buf);
    // Nothing written yet: the write event stays and retries.
    return transfer(result, len, net::rw_state::success, [&](size_t at, int n) {
      return SSL_write(ssl_, in + at, n);
    });
  }

  // Decrypted bytes OpenSSL holds are invisible to epoll: read them now.
  bool buffered() const override {
    return SSL_pending(ssl_) > 0;
  }

private:
  // Calls `step(offset, count)` on the rest of the buffer until `len`
  // bytes moved or OpenSSL would block (`blocked` if nothing moved).
  template <class Step>
  net::rw_state
  transfer(size_t& result, size_t len, net::rw_state blocked, Step step) {
    result = 0;
    if (len == 0)
      return net::rw_state::indeterminate;
    clear_errors guard;
    while (result < len) {
      auto n = step(result,
                    static_cast<int>(std::min<size_t>(len - result, INT_MAX)));
      if (n > 0) {
        result += static_cast<size_t>(n);
        continue;
      }
      switch (SSL_get_error(ssl_, n)) {
        case SSL_ERROR_WANT_READ:
        case SSL_ERROR_WANT_WRITE:
          return result > 0 ? net::rw_state::success : blocked;
        default:
          // What moved before the failure counts; the failure shows
          // again on the next call.
          return result > 0 ? net::rw_state::success : net::rw_state::failure;
      }
    }
    return net::rw_state::success;
  }

  SSL* ssl_;
  bool bio_set_ = false;
  std::string failure_;
};

} // namespace

std::unique_ptr<link_session> make_tls_session(const tls_context& ctx,
                                               bool client) {
  clear_errors guard;
  auto* ssl = SSL_new(ctx.get());
  if (ssl == nullptr)
    CAF_RAISE_ERROR("TLS: cannot create a session");
  return std::make_unique<tls_session>(ssl, client);
}

} // namespace actorps
