// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/system.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#  include <malloc.h>
#endif

#include "caf/atom.hpp"
#include "caf/io/middleman.hpp"
#include "caf/timespan.hpp"

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
  }
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
