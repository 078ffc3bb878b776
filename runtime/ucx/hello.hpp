// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Internal to runtime/ucx: how planes prove the job's secret to each other
// (the hello that opens every connection) and what a plane's address holds.
// No CAF, no UCX here.

#include <cstddef>
#include <string>
#include <vector>

namespace actorps::ucx {

// A hello's header: magic, the identity it claims (u32, little-endian), a
// fresh nonce, an HMAC; its body: the sender's address.
constexpr char hello_magic[4] = {'A', 'P', 'S', 'I'};
constexpr std::size_t identity_size = 4;
constexpr std::size_t nonce_size = 16;
constexpr std::size_t mac_size = 32;
constexpr std::size_t hello_header_size = sizeof(hello_magic) + identity_size
                                          + nonce_size + mac_size;
// A UCX worker address is a few hundred bytes; bound what a hello may claim.
constexpr std::size_t max_address = 16 << 10;

/// HMAC-SHA256 under `secret` of the claimed identity, the nonce, the
/// sender's and the receiver's address: a hello is good for one receiver,
/// one identity, and its nonce only once.
std::vector<unsigned char>
hello_mac(const std::string& secret, uint32_t identity,
          const unsigned char* nonce, const std::vector<char>& from,
          const std::vector<char>& to);

/// The key of the hellos of a plane with `identity`: the data secret, or
/// for an identity > 0 both secrets joined.
std::string hello_key(const std::string& secret, uint32_t identity,
                      const std::string& identity_secret);

/// This host and boot (host name and boot id): peers with the same identity
/// share its memory.
std::string host_identity();

/// A plane's address: magic, the length of `host` (one byte), `host`, then
/// UCX's worker address.
std::vector<char> make_address(const std::string& host, const char* ucp,
                               std::size_t ucp_size);

/// The host identity and UCX's address in `addr`; false if it is no
/// plane's address.
bool split_address(const std::vector<char>& addr, std::string& host,
                   std::vector<char>& ucp);

} // namespace actorps::ucx
