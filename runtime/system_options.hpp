// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// The settings of an actorps actor system, without CAF: what apps, the
// facade's options and the benchmark harness fill in. runtime/system.hpp
// turns them into a CAF configuration.

#include <chrono>
#include <cstddef>
#include <string>

#include <actorps/runtime/scheduler_policy.hpp>

namespace actorps {

/// Mutual TLS between the processes of a job: PEM files of this node's
/// certificate, its private key and the job's CA certificate. Set all three
/// or none; with them, a node accepts and opens only TLS connections whose
/// peer holds a certificate signed by the CA (see the README's trust model).
struct tls_files {
  std::string cert;
  std::string key;
  std::string ca;

  /// True if any of the three is set.
  bool enabled() const noexcept {
    return !cert.empty() || !key.empty() || !ca.empty();
  }
};

/// What is wrong with `tls`: "" if it is unset, or if all three files are
/// set and each is a readable regular file, the key readable by its owner
/// only (chmod 600, as ssh wants of a key); else one line naming the flag
/// (`--tls-cert`, `--tls-key`, `--tls-ca`) and the problem.
std::string tls_problem(const tls_files& tls);

/// Scheduler and network settings of an actorps actor system.
struct system_options {
  /// Scheduler threads; 0 keeps CAF's default (max(cores, 4)).
  std::size_t threads = 0;
  /// Use CAF's deterministic test scheduler (message-level tests).
  bool testing = false;
  /// Load CAF's network layer (io::middleman) for distributed jobs.
  bool network = false;
  /// Network: how often CAF sends a heartbeat on each connection (0: off).
  std::chrono::milliseconds heartbeat{1000};
  /// Network: a connection silent for this long is closed, so a hung peer
  /// shows up as down (0: off). Must exceed the transfer time of the largest
  /// message, or healthy connections get closed.
  std::chrono::milliseconds connection_timeout{10000};
  /// Scheduler policy (see scheduler_policy).
  scheduler_policy scheduler = scheduler_policy::automatic;
  /// Calls `tune_malloc()` when the actor system is configured.
  bool keep_freed_memory = true;
  /// Network: mutual TLS on every connection (checked by `check_tls`).
  tls_files tls;
  /// Network without TLS: the job's token. Set, every connection this
  /// system publishes or opens through actorps begins with both sides
  /// proving it (an HMAC over fresh nonces; the token never travels), and a
  /// peer that cannot is cut off before CAF reads a message of it.
  std::string token;
  /// Network: an accepted connection whose peer has not finished the
  /// handshake (TLS, or the proof of the token) after this long is closed
  /// when the next connection arrives.
  std::chrono::milliseconds handshake_timeout{10000};
};

/// Sets glibc malloc's thresholds for the data plane (process-wide): blocks
/// of up to 64 MB come from the heap, not from a fresh mmap each, and up to
/// 512 MB freed at the top of a heap stay with the process instead of going
/// back to the kernel. Without it, glibc's dynamic thresholds give back the
/// slice buffers a round frees, and the next round faults every page in
/// again (measured: 1.5-2x slower rounds, depending on what ran before; see
/// docs/benchmarks.md). Leaves malloc alone, and returns false, when the
/// environment already tunes it (GLIBC_TUNABLES with glibc.malloc, or a
/// MALLOC_*_ variable) or the C library is not glibc. Idempotent.
bool tune_malloc();

} // namespace actorps
