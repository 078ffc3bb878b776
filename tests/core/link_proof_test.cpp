// SPDX-License-Identifier: BSD-3-Clause
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/link_proof.hpp"

using actorps::core::identity_proof;
using actorps::core::join_proof;
using actorps::core::link_proof;
using actorps::core::link_secret;
using actorps::core::worker_secret;
using state = link_proof::state;

namespace {

// Moves what `from` has pending into `to`, `step` bytes at a time, never
// more than `to` asks for; returns the bytes moved.
template <class Proof>
std::size_t pass(Proof& from, Proof& to, std::size_t step = 1000) {
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
template <class Proof>
void run(Proof& a, Proof& b, std::size_t step = 1000) {
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

namespace {

const std::string rank_key = "a rank key of 32 random bytes....";

identity_proof::secret_fn checks_with(std::string key) {
  return [key](uint32_t rank) { return worker_secret(key, rank); };
}

} // namespace

TEST_CASE("identity proof: a worker proves its own rank to a holder of the "
          "rank key",
          "[core]") {
  auto step = GENERATE(std::size_t{1}, std::size_t{5}, std::size_t{1000});
  INFO("bytes per read: " << step);
  auto worker = identity_proof::claimant(3, worker_secret(rank_key, 3));
  auto server = identity_proof::verifier(checks_with(rank_key));
  CHECK(server.pending().size() == identity_proof::challenge_size);
  CHECK(worker.pending().empty());
  run(server, worker, step);
  CHECK(worker.status() == state::done);
  CHECK(server.status() == state::done);
  CHECK(server.proven_rank() == 3);
  // What follows on the socket is BASP's.
  CHECK(worker.wanted() == 0);
  CHECK(server.wanted() == 0);
}

TEST_CASE("identity proof: another rank's claim, a replayed claim and a "
          "foreign challenge fail; no claim proves no rank",
          "[core]") {
  SECTION("worker 1's secret in worker 2's name") {
    auto worker = identity_proof::claimant(2, worker_secret(rank_key, 1));
    auto server = identity_proof::verifier(checks_with(rank_key));
    run(server, worker);
    CHECK(server.status() == state::failed);
    CHECK(server.failure().find("worker 2") != std::string::npos);
    CHECK(server.proven_rank() == identity_proof::no_rank);
  }
  SECTION("a claim answering another connection's challenge") {
    std::array<unsigned char, 32> first{};
    std::array<unsigned char, 32> second{};
    second[0] = 1;
    auto seen = identity_proof::verifier(checks_with(rank_key), first);
    auto worker = identity_proof::claimant(0, worker_secret(rank_key, 0));
    run(seen, worker);
    REQUIRE(seen.proven_rank() == 0);
    // The same claim bytes, replayed against a fresh challenge.
    auto replayed = identity_proof::verifier(checks_with(rank_key), second);
    std::array<unsigned char, identity_proof::claim_size> claim{};
    claim[0] = 0;
    auto mac = identity_proof::claim_mac(worker_secret(rank_key, 0),
                                         first.data(), 0);
    std::copy(mac.begin(), mac.end(), claim.begin() + 4);
    replayed.sent(identity_proof::challenge_size);
    replayed.received(claim.data(), claim.size());
    CHECK(replayed.status() == state::failed);
    // While the same bytes answer the first challenge.
    auto again = identity_proof::verifier(checks_with(rank_key), first);
    again.sent(identity_proof::challenge_size);
    again.received(claim.data(), claim.size());
    CHECK(again.status() == state::done);
    CHECK(again.proven_rank() == 0);
  }
  SECTION("a node that speaks for no worker") {
    auto node = identity_proof::claimant(identity_proof::no_rank, "");
    auto server = identity_proof::verifier(checks_with(rank_key));
    run(server, node);
    CHECK(server.status() == state::done);
    CHECK(server.proven_rank() == identity_proof::no_rank);
  }
  SECTION("a side without the rank key proves no one") {
    auto worker = identity_proof::claimant(0, worker_secret(rank_key, 0));
    auto coordinator
      = identity_proof::verifier([](uint32_t) { return std::string{}; });
    run(coordinator, worker);
    CHECK(coordinator.status() == state::done);
    CHECK(coordinator.proven_rank() == identity_proof::no_rank);
  }
  SECTION("a challenge that is not one") {
    auto worker = identity_proof::claimant(0, worker_secret(rank_key, 0));
    std::string junk = "HTTP/1.1 200 OK\r\n";
    worker.received(reinterpret_cast<const unsigned char*>(junk.data()), 4);
    CHECK(worker.status() == state::failed);
    CHECK(worker.pending().empty());
  }
  SECTION("more bytes than asked for") {
    auto server = identity_proof::verifier(checks_with(rank_key));
    std::vector<unsigned char> flood(identity_proof::claim_size + 1, 0);
    server.received(flood.data(), flood.size());
    CHECK(server.status() == state::failed);
  }
}
