// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <optional>
#include <string>

#include <boost/program_options.hpp>

namespace actorps::apps {

/// Adds --help and --config to `desc`.
void add_common_options(boost::program_options::options_description& desc,
                        std::string& config_file);

/// Parses the command line, then the --config file (same names as the flags,
/// `name = value` lines; the command line wins). Returns an exit code when
/// the program must stop (0 after --help, 2 after a bad flag or file, with
/// one line on stderr naming `app`), nothing when it may go on.
std::optional<int> parse(int argc, char** argv,
                         const boost::program_options::options_description& d,
                         boost::program_options::variables_map& vm,
                         const std::string& app, const std::string& usage);

/// How much an app prints on stdout.
enum class log_level { error = 0, info = 1, debug = 2 };

/// Adds --log-level (error, info, debug) to `desc`.
void add_log_option(boost::program_options::options_description& desc,
                    std::string& level);

/// Parses a --log-level value; nothing for an unknown one.
std::optional<log_level> parse_log_level(const std::string& text);

/// Prints "app: message" on stderr and returns `code`.
int fail(const std::string& app, const std::string& message, int code = 1);

} // namespace actorps::apps
