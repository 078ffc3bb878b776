// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <string>

#include "caf/atom.hpp"
#include "caf/error.hpp"
#include "caf/fwd.hpp"
#include "caf/make_message.hpp"
#include "caf/message.hpp"

#include <actorps/core/errc.hpp>

CAF_ERROR_CODE_ENUM(actorps::errc, "actorps")

namespace actorps {

/// The error category of actorps errors.
constexpr caf::atom_value error_category = caf::atom("actorps");

/// Builds an actorps error with a human message.
caf::error make_error(errc code, std::string message);

/// Converts a pure status into an error (none for success).
caf::error to_error(const status& st);

/// Returns the code of `err` if it belongs to actorps, `errc::none` else.
errc code_of(const caf::error& err);

/// The human message of an actorps error (its context text), or the
/// rendering of any other error.
std::string context_of(const caf::error& err);

/// Renders any error for humans: "actorps: shape_mismatch (push: ...)".
/// Works without an actor system, so the facade and the apps can print errors.
std::string render(const caf::error& err);

/// Registers the renderer of the actorps category with `cfg`.
void register_error_category(caf::actor_system_config& cfg);

} // namespace actorps
