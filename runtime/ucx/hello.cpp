// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/ucx/hello.hpp"

#include <cstdio>
#include <cstring>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <unistd.h>

#include "core/link_proof.hpp"
#include "runtime/ucx/plane.hpp"

namespace actorps::ucx {

namespace {

constexpr char address_magic[4] = {'A', 'P', 'S', 'A'};

} // namespace

std::string hello_key(const std::string& secret, uint32_t identity,
                      const std::string& identity_secret) {
  if (identity == 0)
    return secret;
  if (identity_secret.empty())
    return {};
  auto key = secret;
  key.push_back('\0');
  key += identity_secret;
  return core::derive_secret(key, "actorps ucx hello of an identity v1");
}

std::vector<unsigned char>
hello_mac(const std::string& secret, uint32_t identity,
          const unsigned char* nonce, const std::vector<char>& from,
          const std::vector<char>& to) {
  std::vector<unsigned char> msg;
  msg.reserve(identity_size + nonce_size + from.size() + to.size() + 16);
  auto put_size = [&](std::size_t n) {
    for (int i = 0; i < 8; ++i)
      msg.push_back(static_cast<unsigned char>(n >> (8 * i)));
  };
  for (std::size_t i = 0; i < identity_size; ++i)
    msg.push_back(static_cast<unsigned char>(identity >> (8 * i)));
  msg.insert(msg.end(), nonce, nonce + nonce_size);
  put_size(from.size());
  msg.insert(msg.end(), from.begin(), from.end());
  put_size(to.size());
  msg.insert(msg.end(), to.begin(), to.end());
  std::vector<unsigned char> mac(mac_size);
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(),
       msg.size(), mac.data(), &len);
  mac.resize(len);
  return mac;
}

std::string host_identity() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::string id = name;
  if (auto* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char boot[64] = {};
    if (std::fgets(boot, sizeof(boot), f) != nullptr)
      id += std::string{"/"} + boot;
    std::fclose(f);
  }
  if (id.size() > 255)
    id.resize(255);
  return id;
}

std::vector<char> make_address(const std::string& host, const char* ucp,
                               std::size_t ucp_size) {
  std::vector<char> out(address_magic, address_magic + sizeof(address_magic));
  out.push_back(static_cast<char>(host.size()));
  out.insert(out.end(), host.begin(), host.end());
  out.insert(out.end(), ucp, ucp + ucp_size);
  return out;
}

bool split_address(const std::vector<char>& addr, std::string& host,
                   std::vector<char>& ucp) {
  constexpr auto head = sizeof(address_magic) + 1;
  if (addr.size() <= head
      || std::memcmp(addr.data(), address_magic, sizeof(address_magic)) != 0)
    return false;
  auto len = static_cast<unsigned char>(addr[sizeof(address_magic)]);
  if (addr.size() <= head + len)
    return false;
  host.assign(addr.data() + head, len);
  ucp.assign(addr.begin() + static_cast<std::ptrdiff_t>(head + len),
             addr.end());
  return true;
}

std::string data_secret(const std::string& token, const std::string& salt) {
  if (token.empty() && salt.empty())
    return {};
  auto key = token;
  key.push_back('\0');
  key += salt;
  return core::derive_secret(key, "actorps ucx data secret v2");
}

} // namespace actorps::ucx
