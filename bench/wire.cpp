// SPDX-License-Identifier: BSD-3-Clause
#include "bench/wire.hpp"

#include <cstddef>
#include <cstdlib>

#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

namespace actorps::bench {

bool tcp_bytes(uint64_t& sent, uint64_t& received) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr)
    return false;
  auto self = ::dirfd(dir);
  sent = 0;
  received = 0;
  bool any = false;
  while (auto* entry = ::readdir(dir)) {
    char* end = nullptr;
    auto fd = static_cast<int>(std::strtol(entry->d_name, &end, 10));
    if (end == entry->d_name || *end != '\0' || fd == self)
      continue;
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
      continue;
    tcp_info info{};
    socklen_t len = sizeof(info);
    // Not a TCP socket (or a kernel without these fields): skipped.
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0
        || len < offsetof(tcp_info, tcpi_bytes_received)
                   + sizeof(info.tcpi_bytes_received))
      continue;
    sent += info.tcpi_bytes_acked;
    received += info.tcpi_bytes_received;
    any = true;
  }
  ::closedir(dir);
  return any;
}

} // namespace actorps::bench
