// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/system.hpp"

#include "caf/atom.hpp"
#include "caf/io/middleman.hpp"
#include "caf/timespan.hpp"

#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace actorps {

system_config::system_config(const system_options& opts) {
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
