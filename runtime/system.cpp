// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/system.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#if defined(__GLIBC__)
#  include <malloc.h>
#endif

#include "caf/atom.hpp"
#include "caf/io/middleman.hpp"
#include "caf/timespan.hpp"

#include "core/link_proof.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace actorps {

bool tune_malloc() {
#if defined(__GLIBC__)
  if (auto* t = std::getenv("GLIBC_TUNABLES");
      t != nullptr && std::strstr(t, "glibc.malloc.") != nullptr)
    return false;
  for (auto* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                     "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"})
    if (std::getenv(name) != nullptr)
      return false;
  // Setting either threshold also turns off glibc's dynamic adjustment of
  // both, which is what made round times depend on the process's history.
  constexpr int mmap_threshold = 64 << 20;
  constexpr int trim_threshold = 512 << 20;
  return mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1
         && mallopt(M_TRIM_THRESHOLD, trim_threshold) == 1;
#else
  return false;
#endif
}

system_config::system_config(const system_options& opts) {
  if (opts.keep_freed_memory)
    tune_malloc();
  add_message_types<caf::id_block::actorps>();
  register_error_category(*this);
  if (opts.testing) {
    set("scheduler.policy", caf::atom("testing"));
    set("logger.inline-output", true);
  } else {
    if (opts.threads > 0)
      set("scheduler.max-threads", opts.threads);
    auto sharing = opts.scheduler == scheduler_policy::sharing
                   || (opts.scheduler == scheduler_policy::automatic
                       && opts.network);
    if (sharing)
      set("scheduler.policy", caf::atom("sharing"));
  }
  if (opts.network) {
    load<caf::io::middleman>();
    // Decode in the network thread: one scheduler hop less per message, and
    // messages of one connection reach their mailboxes in order.
    set("middleman.workers", size_t{0});
    set("middleman.heartbeat-interval", caf::timespan{opts.heartbeat});
    set("middleman.connection-timeout", caf::timespan{opts.connection_timeout});
    // Connections speak TLS with these (runtime/connect.hpp).
    tls_ = opts.tls;
    // Without TLS, connections open with the proof of the token
    // (runtime/proof.hpp).
    if (!tls_.enabled())
      link_secret_ = core::link_secret(opts.token);
    handshake_timeout_ = opts.handshake_timeout;
  }
}

namespace {

// An error text for the file of `flag` at `path`, or "".
std::string check_tls_file(const char* flag, const std::string& path,
                           bool secret) {
  auto prefix = std::string{flag} + ": ";
  if (path.empty())
    return prefix + "missing (--tls-cert, --tls-key and --tls-ca go together)";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return prefix + "cannot read " + path;
  if (!S_ISREG(st.st_mode))
    return prefix + path + " is not a regular file";
  if (::access(path.c_str(), R_OK) != 0)
    return prefix + "cannot read " + path;
  if (secret && (st.st_mode & 077) != 0)
    return prefix + path + " is readable or writable by group or others "
           + "(chmod 600 " + path + ")";
  return {};
}

} // namespace

std::string tls_problem(const tls_files& tls) {
  if (!tls.enabled())
    return {};
  for (auto text : {check_tls_file("--tls-cert", tls.cert, false),
                    check_tls_file("--tls-key", tls.key, true),
                    check_tls_file("--tls-ca", tls.ca, false)})
    if (!text.empty())
      return text;
  return {};
}

caf::error check_tls(const tls_files& tls) {
  if (auto text = tls_problem(tls); !text.empty())
    return make_error(errc::bad_config, text);
  return caf::none;
}

std::string to_string(scheduler_policy x) {
  switch (x) {
    case scheduler_policy::stealing:
      return "stealing";
    case scheduler_policy::sharing:
      return "sharing";
    case scheduler_policy::automatic:
      break;
  }
  return "auto";
}

bool parse_scheduler_policy(const std::string& text, scheduler_policy& out) {
  for (auto x : {scheduler_policy::automatic, scheduler_policy::stealing,
                 scheduler_policy::sharing})
    if (text == to_string(x)) {
      out = x;
      return true;
    }
  return false;
}

} // namespace actorps
