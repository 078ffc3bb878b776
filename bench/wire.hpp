// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>

/// Bytes on the wire, as the kernel counts them for this process's TCP
/// connections (no CAF).
namespace actorps::bench {

/// TCP payload bytes of every TCP socket this process holds open: sent (and
/// acknowledged by the peer) and received, from TCP_INFO (tcpi_bytes_acked,
/// tcpi_bytes_received). Counts what crossed the connections, protocol
/// headers of CAF's BASP included, TCP/IP headers excluded. False if no
/// socket reports them (a kernel before 4.2).
bool tcp_bytes(uint64_t& sent, uint64_t& received);

} // namespace actorps::bench
