// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <boost/program_options.hpp>

#include "apps/common/log.hpp"
#include "core/compression.hpp"
#include "runtime/metrics.hpp"
#include "runtime/scheduler_policy.hpp"
#include "runtime/system_options.hpp"

namespace actorps::apps {

struct train_options;

/// Adds --help and --config to `desc`.
void add_common_options(boost::program_options::options_description& desc,
                        std::string& config_file);

/// Parses the command line, then the --config file (same names as the flags,
/// `name = value` lines; the command line wins). Returns an exit code when
/// the program must stop (0 after --help, 2 after a bad flag or file, with
/// one line on stderr naming `app`), nothing when it may go on. Refuses
/// positional words, a --config that is not a regular file, and a negative
/// value for an unsigned option (Boost would wrap it around).
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

/// Adds --scheduler (CAF's scheduler policy: auto, sharing or stealing;
/// `help` says what auto is for the app) to `desc`.
void add_scheduler_option(boost::program_options::options_description& desc,
                          std::string& text, const std::string& help);

/// Parses --scheduler's `text` into `out`; an exit code (2, with one line on
/// stderr) if it names no policy.
std::optional<int> check_scheduler(const std::string& app,
                                   const std::string& text,
                                   scheduler_policy& out);

/// Adds --connect-timeout-ms (how long to keep trying to reach the
/// coordinator) and --timeout-ms (`timeout_help`) to `desc`.
void add_timeout_options(boost::program_options::options_description& desc,
                         long& connect_timeout_ms, long& timeout_ms,
                         const std::string& timeout_help);

/// Nothing if `lo <= value <= hi`; else exit code 2 after "--flag must be
/// lo..hi, got value" on stderr.
std::optional<int> check_range(const std::string& app, const std::string& flag,
                               uint64_t value, uint64_t lo, uint64_t hi);

/// Largest thread counts and node counts the apps accept.
constexpr uint64_t max_threads = 512;
constexpr uint64_t max_workers = 65536;
constexpr uint64_t max_servers = 4096;
constexpr uint64_t max_shards = 1024;

/// `check_range` of --threads: 0 (CAF's default) to `max_threads`.
std::optional<int> check_threads(const std::string& app, uint64_t threads);

/// True for an address only this machine reaches: 127.0.0.0/8, ::1,
/// localhost.
bool is_loopback(const std::string& host);

/// The warning an app that listens on `host` prints when peers beyond this
/// machine can reach it without TLS (anyone may join when no job token is
/// set either; else the token travels in clear text). Empty: no warning.
/// With TLS, only holders of a certificate from the job's CA connect.
std::string exposure_warning(const std::string& host, bool has_token,
                             bool has_tls);

/// Runs an app's `main` body: an exception that escapes it becomes one line
/// on stderr and exit code 1, never an abort.
int guarded_main(const std::string& app, const std::function<int()>& body);

/// Where the job token comes from: --token-file, else the ACTORPS_TOKEN
/// environment variable, else --token (which `ps` shows to every user).
struct token_flags {
  std::string token;
  std::string file;
};

/// Adds --token-file and --token to `desc`.
void add_token_options(boost::program_options::options_description& desc,
                       token_flags& flags);

/// Adds --server-token-file to `desc` (the coordinator and server apps):
/// a token of the servers' own, which a node must prove to join as a
/// server.
void add_server_token_option(boost::program_options::options_description& desc,
                             std::string& file);

/// The servers' token into `out`: from `file` (read_token_file's rules),
/// else the ACTORPS_SERVER_TOKEN environment variable, else none; exit code
/// 2, after one line on stderr, if the file is refused.
std::optional<int> resolve_server_token(const std::string& app,
                                        const std::string& file,
                                        std::string& out);

/// Reads a token file into `out`: a regular file of at most 4 KB, readable
/// by its owner only (as ssh wants of a key), one line (a trailing newline
/// is dropped). An error text naming the file, or an empty string.
std::string read_token_file(const std::string& path, std::string& out);

/// The job token from `flags` (see token_flags) into `out`; exit code 2,
/// after one line on stderr, if the file is refused or both flags are given.
std::optional<int> resolve_token(const std::string& app,
                                 const token_flags& flags, std::string& out);

/// The flags every distributed app shares: heartbeat, connection timeout,
/// log level, scheduler and TLS files.
struct network_flags {
  long heartbeat_ms = 1000;
  long connection_timeout_ms = 10000;
  std::string level_text = "info";
  /// --log-file: every log line is appended there too.
  std::string log_file;
  std::string scheduler_text = "auto";
  /// Mutual TLS files (checked by `check`).
  tls_files tls;
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

/// Adds --heartbeat-ms, --connection-timeout-ms, --log-level, --scheduler,
/// --tls-cert, --tls-key and --tls-ca to `desc`.
void add_network_options(boost::program_options::options_description& desc,
                         network_flags& flags);

/// Copies the connection settings of `flags` (heartbeat, connection timeout,
/// scheduler, TLS) into `x`: a `system_options` or a `store_options`.
template <class Options>
void apply_network(const network_flags& flags, Options& x) {
  x.heartbeat = flags.heartbeat();
  x.connection_timeout = flags.connection_timeout();
  x.scheduler = flags.scheduler;
  x.tls = flags.tls;
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

/// Replaces a --resume folder by its newest whole checkpoint file; exit
/// code 2 after one line on stderr if there is none.
std::optional<int> resolve_resume(const std::string& app, train_options& opts);

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

/// --export PATH: after the run, the store's weights as one safetensors
/// file (kvstore::export_weights). `who` says which process writes it.
void add_export_option(boost::program_options::options_description& desc,
                       std::string& path, const std::string& who);

/// Nothing if `path` is empty or a file can be written there (checked
/// before the run); else exit code 2 after "--export: ..." on stderr.
std::optional<int> check_export(const std::string& app,
                                const std::string& path);

/// Adds --metrics-port and --metrics-host (Prometheus /metrics of this
/// process) to `desc`.
void add_metrics_options(boost::program_options::options_description& desc,
                         metrics_options& opts);

/// Nothing if the metrics flags are good; else exit code 2 after one line
/// on stderr. Warns when they listen beyond loopback without a token.
std::optional<int> check_metrics(const std::string& app,
                                 const metrics_options& opts, bool has_token);

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
