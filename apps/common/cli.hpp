// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include <boost/program_options.hpp>

#include "core/compression.hpp"
#include "runtime/scheduler_policy.hpp"

namespace actorps::apps {

struct train_options;

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

/// Adds --threads (scheduler threads of the app's actor system; 0: CAF's
/// default) to `desc`.
void add_threads_option(boost::program_options::options_description& desc,
                        std::size_t& threads,
                        const std::string& help
                        = "scheduler threads (0: CAF's default)");

/// Adds --connect-timeout-ms (how long to keep trying to reach the
/// coordinator) and --timeout-ms (`timeout_help`) to `desc`.
void add_timeout_options(boost::program_options::options_description& desc,
                         long& connect_timeout_ms, long& timeout_ms,
                         const std::string& timeout_help);

/// How much an app prints on stdout.
enum class log_level { error = 0, info = 1, debug = 2 };

/// The flags every distributed app shares: heartbeat, connection timeout,
/// and log level.
struct network_flags {
  long heartbeat_ms = 1000;
  long connection_timeout_ms = 10000;
  std::string level_text = "info";
  std::string scheduler_text = "auto";
  /// Set by `check`.
  log_level level = log_level::info;
  /// Set by `check`.
  scheduler_policy scheduler = scheduler_policy::automatic;

  std::chrono::milliseconds heartbeat() const {
    return std::chrono::milliseconds{heartbeat_ms};
  }

  std::chrono::milliseconds connection_timeout() const {
    return std::chrono::milliseconds{connection_timeout_ms};
  }
};

/// Adds --heartbeat-ms, --connection-timeout-ms, --log-level and --scheduler
/// to `desc`.
void add_network_options(boost::program_options::options_description& desc,
                         network_flags& flags);

/// Copies the connection settings of `flags` (heartbeat, connection timeout,
/// scheduler) into `x`: a `system_options` or a `store_options`.
template <class Options>
void apply_network(const network_flags& flags, Options& x) {
  x.heartbeat = flags.heartbeat();
  x.connection_timeout = flags.connection_timeout();
  x.scheduler = flags.scheduler;
}

/// At --log-level debug, a printer of "app: line" on stdout for a runner's
/// `on_event`; below it, an empty function.
std::function<void(const std::string&)>
event_printer(const std::string& app, const network_flags& flags);

/// Validates `flags` and sets `flags.level` and `flags.scheduler`; an exit code
/// (2, with one line on stderr) if a value is bad.
std::optional<int> check(const std::string& app, network_flags& flags);

/// Adds the training job's flags (--epochs, --batch, --lr, --momentum,
/// --lr-schedule, --seed) to `desc`; `prefix` starts each description
/// (e.g. "mnist: ").
void add_train_options(boost::program_options::options_description& desc,
                       train_options& opts, const std::string& prefix = "");

/// Validates the training flags; an exit code (2, with one line on stderr)
/// if a value is bad.
std::optional<int> check(const std::string& app, const train_options& opts);

/// Adds --compression (text into `text`) to `desc`.
void add_compression_option(boost::program_options::options_description& desc,
                            std::string& text);

/// Parses the --compression text into `out`; an exit code (2, with one line
/// on stderr) if it is not none, fp16, 2bit or 2bit:THRESHOLD.
std::optional<int> check_compression(const std::string& app,
                                     const std::string& text, compression& out);

/// The end of a runner's app: `message` (an error from the runner; empty:
/// none) on stderr and 1, or "app: job done" at --log-level info and 0.
int finish(const std::string& app, const network_flags& flags,
           const std::string& message);

/// Makes sure a file can be written at `path` before a long run writes it:
/// creates its folder, and opens it for appending (a file this creates is
/// removed again; an existing one is left as it is). An error text naming
/// the path, or an empty string.
std::string prepare_output(const std::string& path);

/// Writes `text` to `path` atomically: to a temporary file in the same
/// folder, then renamed over `path`, so a reader sees all of it or no
/// file. An error text naming the path, or an empty string.
std::string write_file_atomically(const std::string& path,
                                  const std::string& text);

/// Prints "app: message" on stderr and returns `code`.
int fail(const std::string& app, const std::string& message, int code = 1);

} // namespace actorps::apps
