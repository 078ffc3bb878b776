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
  } else if (opts.threads > 0) {
    set("scheduler.max-threads", opts.threads);
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

} // namespace actorps
