// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

/// The networked apps' log (coordinator, server, worker): every line reads
/// "2026-11-22T10:00:00.123Z worker[3] text", a UTC timestamp, the role and
/// the rank once the node has one. Info and debug lines go to stdout,
/// errors and warnings to stderr, and all of them to a log file when one
/// is given. spdlog (Debian libspdlog-dev) writes them; no spdlog header
/// leaks out of log.cpp.
namespace actorps::apps {

/// How much a networked app logs.
enum class log_level { error = 0, info = 1, debug = 2 };

/// Starts the log of `app` ("actorps-worker": role "worker") at `level`,
/// also appending to `file` unless it is empty. An error text (the file
/// cannot be opened), or an empty string. Lines before this call (bad
/// flags) are plain "app: text" on stderr.
std::string start_log(const std::string& app, log_level level,
                      const std::string& file);

/// True once start_log succeeded.
bool log_started();

/// The node's rank, shown as role[rank] from now on.
void set_log_rank(uint32_t rank);

/// One line at info (stdout), debug (stdout, only at --log-level debug)
/// or error (stderr, always).
void log_info(const std::string& text);
void log_debug(const std::string& text);
void log_error(const std::string& text);

/// An info line printed at every level (what scripts read, as the
/// coordinator's "listening on").
void log_always(const std::string& text);

/// A stream whose every line (ended by '\n' or std::endl) is one log_info
/// line: for code that writes to an ostream.
std::ostream& log_stream();

} // namespace actorps::apps
