// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Plain TCP in a job with a token: the session of a connection
// (runtime/link.hpp) that opens with the proof of the token
// (core/link_proof.hpp) and then carries BASP's bytes as CAF's own TCP
// scribes do; and, after that proof or TLS, the exchange that tells which
// worker the connecting side speaks for. Internal: used by
// runtime/guard.cpp.

#include <memory>
#include <string>

#include "core/link_proof.hpp"

namespace actorps {

class link_session;

/// The session of one plain TCP connection whose two sides must prove
/// `secret` (`core::link_secret` of the job's token, not empty) to each
/// other, as the connecting side (`client`) or the accepting one.
std::unique_ptr<link_session> make_proof_session(const std::string& secret,
                                                 bool client);

/// `inner` (TLS or the proof of the token), then `identity`: the accepting
/// side's challenge and the connecting side's claim of the worker rank it
/// speaks for (core::identity_proof), through `inner`'s reads and writes.
/// The session's proven_rank is what the peer proved.
std::unique_ptr<link_session> with_identity(std::unique_ptr<link_session> inner,
                                            core::identity_proof identity);

} // namespace actorps
