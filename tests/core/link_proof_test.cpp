// SPDX-License-Identifier: BSD-3-Clause
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/link_proof.hpp"

using actorps::core::join_proof;
using actorps::core::link_proof;
using actorps::core::link_secret;
using state = link_proof::state;

namespace {

// Moves what `from` has pending into `to`, `step` bytes at a time, never
// more than `to` asks for; returns the bytes moved.
std::size_t pass(link_proof& from, link_proof& to, std::size_t step = 1000) {
  std::size_t moved = 0;
  while (!from.pending().empty() && to.wanted() > 0
         && from.status() != state::failed) {
    auto n = std::min({step, from.pending().size(), to.wanted()});
    std::vector<unsigned char> chunk(from.pending().begin(),
                                     from.pending().begin()
                                       + static_cast<std::ptrdiff_t>(n));
    from.sent(n);
    to.received(chunk.data(), n);
    moved += n;
  }
  return moved;
}

// Runs a handshake between `a` and `b` until neither moves a byte.
void run(link_proof& a, link_proof& b, std::size_t step = 1000) {
  while (pass(a, b, step) + pass(b, a, step) > 0) {
    // Until quiet.
  }
}

} // namespace

TEST_CASE("link proof: two holders of the token prove it to each other",
          "[core]") {
  auto step = GENERATE(std::size_t{1}, std::size_t{7}, std::size_t{1000});
  INFO("bytes per read: " << step);
  link_proof client{link_secret("tok"), true};
  link_proof server{link_secret("tok"), false};
  CHECK(client.pending().size() == link_proof::hello_size);
  CHECK(client.status() == state::running);
  run(client, server, step);
  CHECK(client.status() == state::done);
  CHECK(server.status() == state::done);
  // Nothing more to read: what follows on the socket is BASP's.
  CHECK(client.wanted() == 0);
  CHECK(server.wanted() == 0);
}

TEST_CASE("link proof: another token, a stranger or a reflected proof fail",
          "[core]") {
  SECTION("another token: whoever checks first fails, the other never "
          "finishes") {
    link_proof client{link_secret("tok"), true};
    link_proof server{link_secret("guess"), false};
    run(client, server);
    CHECK(client.status() == state::failed);
    CHECK(client.failure().find("token") != std::string::npos);
    // The client sent no proof: the server waits for it until the client
    // closes the connection.
    CHECK(server.status() == state::running);
    link_proof late{link_secret("tok"), true};
    link_proof checked{link_secret("guess"), false};
    // The other order: the server reads the client's proof first.
    pass(late, checked);
    // Only the server's hello reaches the client, which answers with its
    // proof.
    std::vector<unsigned char> hello(checked.pending().begin(),
                                     checked.pending().begin()
                                       + link_proof::hello_size);
    checked.sent(hello.size());
    late.received(hello.data(), hello.size());
    pass(late, checked);
    CHECK(checked.status() == state::failed);
  }
  SECTION("a peer that speaks something else") {
    link_proof server{link_secret("tok"), false};
    // A BASP handshake starts with a 4-byte length, not the magic.
    std::vector<unsigned char> basp(link_proof::hello_size, 0);
    server.received(basp.data(), basp.size());
    CHECK(server.status() == state::failed);
    CHECK(server.wanted() == 0);
    CHECK(server.pending().empty());
  }
  SECTION("a server's own hello and proof sent back to it") {
    std::array<unsigned char, 32> nonce{};
    nonce.fill(7);
    link_proof server{link_secret("tok"), false, nonce};
    link_proof mirror{link_secret("tok"), false, nonce};
    // The mirror answers as a server would, with the same nonce: without
    // the client's role in it, its proof would pass.
    run(server, mirror);
    CHECK(server.status() == state::failed);
  }
  SECTION("more bytes than asked for") {
    link_proof server{link_secret("tok"), false};
    std::vector<unsigned char> many(
      link_proof::hello_size + link_proof::proof_size + 1, 'A');
    server.received(many.data(), many.size());
    CHECK(server.status() == state::failed);
  }
}

TEST_CASE("link proof: secrets differ by use and say nothing of the token",
          "[core]") {
  CHECK(link_secret("").empty());
  CHECK(join_proof("").empty());
  CHECK(link_secret("tok").size() == 32);
  CHECK(link_secret("tok") != join_proof("tok"));
  CHECK(link_secret("tok") != link_secret("tok2"));
  CHECK(join_proof("tok").find("tok") == std::string::npos);
}
