// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Plain TCP in a job with a token: the session of a connection
// (runtime/link.hpp) that opens with the proof of the token
// (core/link_proof.hpp) and then carries BASP's bytes as CAF's own TCP
// scribes do. Internal: used by runtime/guard.cpp.

#include <memory>
#include <string>

namespace actorps {

class link_session;

/// The session of one plain TCP connection whose two sides must prove
/// `secret` (`core::link_secret` of the job's token, not empty) to each
/// other, as the connecting side (`client`) or the accepting one.
std::unique_ptr<link_session> make_proof_session(const std::string& secret,
                                                 bool client);

} // namespace actorps
