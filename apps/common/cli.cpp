// SPDX-License-Identifier: BSD-3-Clause
#include "apps/common/cli.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <typeinfo>
#include <vector>

#include <sys/stat.h>

#include "apps/common/train.hpp"
#include "core/checkpoint_dir.hpp"
#include "core/file_system.hpp"
#include "core/hosts.hpp"

namespace po = boost::program_options;

namespace actorps::apps {

void add_common_options(po::options_description& desc,
                        std::string& config_file) {
  desc.add_options()("help,h", "print this help and exit")(
    "config", po::value(&config_file),
    "read options from this file: one 'name = value' per line, names as "
    "the flags without dashes; flags given on the command line win");
}

void add_threads_option(po::options_description& desc, std::size_t& threads,
                        const std::string& help) {
  desc.add_options()("threads", po::value(&threads)->default_value(threads),
                     help.c_str());
}

void add_scheduler_option(po::options_description& desc, std::string& text,
                          const std::string& help) {
  desc.add_options()("scheduler", po::value(&text)->default_value(text),
                     help.c_str());
}

std::optional<int> check_scheduler(const std::string& app,
                                   const std::string& text,
                                   scheduler_policy& out) {
  if (parse_scheduler_policy(text, out))
    return std::nullopt;
  return fail(
    app, "--scheduler must be auto, sharing or stealing, got '" + text + "'",
    2);
}

void add_timeout_options(po::options_description& desc,
                         long& connect_timeout_ms, long& timeout_ms,
                         const std::string& timeout_help) {
  desc.add_options()(
    "connect-timeout-ms",
    po::value(&connect_timeout_ms)->default_value(connect_timeout_ms),
    "how long to keep trying to reach the coordinator, in ms")(
    "timeout-ms", po::value(&timeout_ms)->default_value(timeout_ms),
    timeout_help.c_str());
}

std::string prepare_output(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto folder = fs::path{path}.parent_path();
  if (!folder.empty() && !fs::is_directory(folder, ec)) {
    fs::create_directories(folder, ec);
    if (ec)
      return "cannot create " + folder.string() + ": " + ec.message();
  }
  if (fs::is_directory(path, ec))
    return path + " is a folder";
  auto existed = fs::exists(path, ec);
  if (!std::ofstream{path, std::ios::app})
    return "cannot write " + path;
  if (!existed)
    fs::remove(path, ec);
  return {};
}

std::string write_file_atomically(const std::string& path,
                                  const std::string& text) {
  auto failed = core::write_atomically(core::posix_file_system(), path,
                                       text.data(), text.size());
  return failed.err == 0 ? std::string{} : failed.text();
}

int finish(const std::string& app, const network_flags& flags,
           const std::string& message) {
  if (!message.empty())
    return fail(app, message);
  if (log_started())
    log_info("job done");
  else if (flags.level >= log_level::info)
    std::cout << app << ": job done" << std::endl;
  return 0;
}

namespace {

// Boost converts "-1" to an unsigned option by wrapping it around (to
// 4294967295); refuse a minus sign before any unsigned option's value.
void refuse_negative_unsigned(const po::parsed_options& parsed,
                              const po::variables_map& vm) {
  for (const auto& opt : parsed.options) {
    if (opt.value.empty() || !vm.count(opt.string_key))
      continue;
    const auto& type = vm[opt.string_key].value().type();
    bool is_unsigned = type == typeid(unsigned) || type == typeid(unsigned long)
                       || type == typeid(unsigned long long)
                       || type == typeid(unsigned short);
    auto text = opt.value.front();
    auto first = text.find_first_not_of(" \t");
    if (is_unsigned && first != std::string::npos && text[first] == '-')
      throw std::invalid_argument{
        "--" + opt.string_key + ": expected a count >= 0, got '" + text + "'"};
  }
}

// Boost.ProgramOptions 1.74 fills its error texts by replacing these
// placeholders with the values at fault, and loops forever when a value
// holds one of them (found by fuzzing: `batch=%value%`, and a config line
// without '=' that holds `%invalid_line%`). Returns the first placeholder
// `text` holds, or nullptr. These are every name Boost 1.74 substitutes.
const char* boost_placeholder_in(const std::string& text) {
  for (const char* token : {"%value%", "%canonical_option%", "%option%",
                            "%prefix%", "%original_token%", "%invalid_line%"})
    if (text.find(token) != std::string::npos)
      return token;
  return nullptr;
}

} // namespace

std::optional<int>
parse(int argc, char** argv, const po::options_description& d,
      po::variables_map& vm, const std::string& app, const std::string& usage) {
  for (int i = 1; i < argc; ++i)
    if (auto* token = boost_placeholder_in(argv[i]))
      return fail(app,
                  std::string{"the text "} + token
                    + " cannot appear on the command line",
                  2);
  try {
    // No positional words: a stray word is a mistake, not something to
    // ignore. They are gathered under a hidden name to be named in the error.
    po::options_description with_words;
    with_words.add(d).add_options()("unexpected-words",
                                    po::value<std::vector<std::string>>(), "");
    po::positional_options_description words;
    words.add("unexpected-words", -1);
    auto parsed = po::command_line_parser(argc, argv)
                    .options(with_words)
                    .positional(words)
                    .run();
    po::store(parsed, vm);
    if (vm.count("unexpected-words")) {
      std::string list;
      for (const auto& w :
           vm["unexpected-words"].as<std::vector<std::string>>())
        list += (list.empty() ? "'" : ", '") + w + "'";
      return fail(app,
                  "unexpected word(s) " + list
                    + " on the command line: every option starts with --",
                  2);
    }
    refuse_negative_unsigned(parsed, vm);
    if (vm.count("help")) {
      std::cout << usage << "\n\n" << d << '\n';
      return 0;
    }
    if (vm.count("config")) {
      auto path = vm["config"].as<std::string>();
      std::error_code ec;
      if (!std::filesystem::is_regular_file(path, ec))
        return fail(app,
                    "--config: '" + path
                      + "' is not a regular file (or does not exist)",
                    2);
      // A config file is a few lines: a huge one is a mistake.
      constexpr std::uintmax_t max_config_bytes = 1 << 20;
      if (std::filesystem::file_size(path, ec) > max_config_bytes)
        return fail(app, "--config: '" + path + "' is over 1 MB", 2);
      std::ifstream file{path, std::ios::binary};
      std::string text{std::istreambuf_iterator<char>{file}, {}};
      if (!file && !file.eof())
        return fail(app, "cannot read config file '" + path + "'", 2);
      if (auto* token = boost_placeholder_in(text))
        return fail(app,
                    "config file '" + path + "': the text " + token
                      + " cannot appear in it",
                    2);
      std::istringstream in{text};
      auto from_file = po::parse_config_file(in, d);
      po::store(from_file, vm);
      refuse_negative_unsigned(from_file, vm);
    }
    po::notify(vm);
  } catch (const std::exception& e) {
    return fail(app, std::string{e.what()} + " (see --help)", 2);
  }
  return std::nullopt;
}

std::optional<int> check_range(const std::string& app, const std::string& flag,
                               uint64_t value, uint64_t lo, uint64_t hi) {
  if (value >= lo && value <= hi)
    return std::nullopt;
  return fail(app,
              "--" + flag + " must be " + std::to_string(lo) + ".."
                + std::to_string(hi) + ", got " + std::to_string(value),
              2);
}

void add_token_options(po::options_description& desc, token_flags& flags) {
  desc.add_options()("token-file", po::value(&flags.file),
                     "read the job token from this file (owner-only "
                     "permissions, e.g. chmod 600; else the ACTORPS_TOKEN "
                     "environment variable is used)")(
    "token", po::value(&flags.token),
    "the job token itself: other users of this machine can read it with ps, "
    "prefer --token-file or ACTORPS_TOKEN");
}

void add_server_token_option(po::options_description& desc, std::string& file) {
  desc.add_options()("server-token-file", po::value(&file),
                     "read the servers' own token from this file (owner-only "
                     "permissions; else the ACTORPS_SERVER_TOKEN environment "
                     "variable is used): with one, a node joins as a server "
                     "only if it proves it, so holders of the job token "
                     "alone join as workers only; give the same on the "
                     "coordinator and every server");
}

namespace {

// A token from the file that flag `flag` named, else `given`, else the
// environment variable `env`.
std::optional<int> token_from(const std::string& app, const char* flag,
                              const std::string& file, const std::string& given,
                              const char* env, std::string& out) {
  if (!file.empty()) {
    if (auto e = read_token_file(file, out); !e.empty())
      return fail(app, std::string{flag} + ": " + e, 2);
    return std::nullopt;
  }
  if (!given.empty()) {
    out = given;
    return std::nullopt;
  }
  if (const char* x = std::getenv(env))
    out = x;
  return std::nullopt;
}

} // namespace

std::optional<int> resolve_server_token(const std::string& app,
                                        const std::string& file,
                                        std::string& out) {
  return token_from(app, "--server-token-file", file, {},
                    "ACTORPS_SERVER_TOKEN", out);
}

std::string read_token_file(const std::string& path, std::string& out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return "cannot read " + path;
  if (!S_ISREG(st.st_mode))
    return path + " is not a regular file";
  if ((st.st_mode & 077) != 0)
    return path + " is readable or writable by group or others (chmod 600 "
           + path + ")";
  if (st.st_size > 4096)
    return path + " is over 4 KB: not a token";
  std::ifstream in{path, std::ios::binary};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  if (!in && !in.eof())
    return "cannot read " + path;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
    text.pop_back();
  if (text.empty())
    return path + " is empty";
  if (text.find('\n') != std::string::npos)
    return path + " has more than one line";
  out = std::move(text);
  return {};
}

std::optional<int> resolve_token(const std::string& app,
                                 const token_flags& flags, std::string& out) {
  if (!flags.file.empty() && !flags.token.empty())
    return fail(app, "give --token-file or --token, not both", 2);
  return token_from(app, "--token-file", flags.file, flags.token,
                    "ACTORPS_TOKEN", out);
}

std::optional<int> check_threads(const std::string& app, uint64_t threads) {
  return check_range(app, "threads", threads, 0, max_threads);
}

bool is_loopback(const std::string& host) {
  return core::is_loopback(host);
}

std::string exposure_warning(const std::string& host, bool has_token,
                             bool has_tls) {
  if (is_loopback(host) || (has_token && has_tls))
    return {};
  auto where = "warning: listening on "
               + (host.empty() ? std::string{"every interface"} : host);
  if (has_tls)
    return {};
  if (!has_token)
    return where
           + " without a job token or TLS: anyone who reaches this port can "
             "join the job and read or change the model (set --token-file, "
             "or --tls-cert, --tls-key and --tls-ca)";
  return where
         + " without TLS: the job's parameters and gradients travel in clear "
           "text (the token itself never does: peers prove it); set "
           "--tls-cert, --tls-key and --tls-ca to encrypt them";
}

int guarded_main(const std::string& app, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return fail(app, std::string{"unexpected error: "} + e.what(), 1);
  } catch (...) {
    return fail(app, "unexpected error", 1);
  }
}

void add_network_options(po::options_description& desc, network_flags& flags) {
  desc.add_options()("heartbeat-ms",
                     po::value(&flags.heartbeat_ms)->default_value(1000),
                     "heartbeat interval on every connection, in ms")(
    "connection-timeout-ms",
    po::value(&flags.connection_timeout_ms)->default_value(10000),
    "a connection silent this long is closed and its node counts as dead "
    "(0: never; keep it above the transfer time of the largest message)")(
    "log-level", po::value(&flags.level_text)->default_value("info"),
    "error (errors only), info, or debug (also nodes that go down)")(
    "log-file", po::value(&flags.log_file),
    "also append every log line to this file")(
    "tls-cert", po::value(&flags.tls.cert),
    "mutual TLS: this node's certificate (PEM), signed by the job's CA; "
    "with --tls-key and --tls-ca, every connection is TLS and only peers "
    "holding a certificate from that CA connect (actorps-make-tls, or "
    "apps/tls/make-tls.sh in the source tree, makes them)")(
    "tls-key", po::value(&flags.tls.key),
    "mutual TLS: this node's private key (PEM, owner-only "
    "permissions)")("tls-ca", po::value(&flags.tls.ca),
                    "mutual TLS: the job's CA certificate (PEM)");
  add_scheduler_option(desc, flags.scheduler_text,
                       "CAF scheduler policy: auto (= sharing for these "
                       "networked processes), sharing or stealing");
}

std::optional<int> check(const std::string& app, network_flags& flags) {
  if (flags.heartbeat_ms <= 0 || flags.connection_timeout_ms < 0)
    return fail(app,
                "--heartbeat-ms must be > 0 and "
                "--connection-timeout-ms >= 0",
                2);
  if (auto rc = check_scheduler(app, flags.scheduler_text, flags.scheduler))
    return rc;
  if (flags.level_text == "error")
    flags.level = log_level::error;
  else if (flags.level_text == "info")
    flags.level = log_level::info;
  else if (flags.level_text == "debug")
    flags.level = log_level::debug;
  else
    return fail(app,
                "--log-level must be error, info or debug, got '"
                  + flags.level_text + "'",
                2);
  if (auto text = tls_problem(flags.tls); !text.empty())
    return fail(app, text, 2);
  // From here on, the app's lines are timestamped log lines.
  if (auto e = start_log(app, flags.level, flags.log_file); !e.empty())
    return fail(app, "--log-file: " + e, 2);
  return std::nullopt;
}

void add_export_option(po::options_description& desc, std::string& path,
                       const std::string& who) {
  desc.add_options()("export", po::value(&path),
                     ("after the run, " + who
                      + " writes the store's weights, each key with its "
                        "shape, as one safetensors file at this path (for "
                        "PyTorch, numpy: README)")
                       .c_str());
}

void add_metrics_options(po::options_description& desc, metrics_options& opts) {
  desc.add_options()(
    "metrics-port", po::value(&opts.port)->default_value(opts.port),
    "serve Prometheus metrics at http://HOST:PORT/metrics (0: a free port, "
    "logged at start; -1: off). With a job token, scrapes log in with HTTP "
    "basic auth: any user, the password `actorps-status "
    "--metrics-password` prints")(
    "metrics-host", po::value(&opts.host)->default_value(opts.host),
    "address the metrics listen on (0.0.0.0: every interface)");
}

std::optional<int> check_metrics(const std::string& app,
                                 const metrics_options& opts, bool has_token) {
  if (opts.port < -1 || opts.port > 65535)
    return fail(app,
                "--metrics-port must be -1 (off) or 0..65535, got "
                  + std::to_string(opts.port),
                2);
  if (opts.enabled() && !has_token && !is_loopback(opts.host))
    log_error("--metrics-host " + opts.host
              + " serves the job's counters to anyone who reaches it "
                "(no token set: no password)");
  return std::nullopt;
}

std::optional<int> check_export(const std::string& app,
                                const std::string& path) {
  if (path.empty())
    return std::nullopt;
  if (auto e = prepare_output(path); !e.empty())
    return fail(app, "--export: " + e, 2);
  return std::nullopt;
}

void add_compression_option(po::options_description& desc, std::string& text) {
  desc.add_options()(
    "compression", po::value(&text)->default_value("none"),
    "compression of pushed gradients: none, fp16 (upper 16 bits of each "
    "float, as BigDL), or 2bit[:THRESHOLD] (+THRESHOLD, -THRESHOLD or 0 a "
    "value with error feedback, as MXNet; THRESHOLD defaults to 0.5)");
}

std::optional<int> check_compression(const std::string& app,
                                     const std::string& text,
                                     compression& out) {
  auto c = parse_compression(text);
  if (!c)
    return fail(app,
                "--compression must be none, fp16, 2bit or 2bit:THRESHOLD "
                "(a finite number > 0), got '"
                  + text + "'",
                2);
  out = *c;
  return std::nullopt;
}

std::function<void(const std::string&)>
event_printer(const std::string& /*app*/, const network_flags& flags) {
  if (flags.level < log_level::debug)
    return {};
  return [](const std::string& line) { log_debug(line); };
}

int fail(const std::string& app, const std::string& message, int code) {
  if (log_started())
    log_error(message);
  else
    std::cerr << app << ": " << message << std::endl;
  return code;
}

namespace {

// Shortest text that reads back as `x` ("0.025", not "0.0250000004").
std::string render(float x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(x));
  return buf;
}

} // namespace

void add_train_options(po::options_description& desc, train_options& opts,
                       const std::string& prefix) {
  auto text = [&](const char* what) { return prefix + what; };
  // Boost copies each description, so the temporaries may go.
  desc.add_options()("epochs",
                     po::value(&opts.epochs)->default_value(opts.epochs),
                     text("epochs").c_str())(
    "batch", po::value(&opts.batch)->default_value(opts.batch),
    text("samples per step and worker").c_str())(
    "lr",
    po::value(&opts.learning_rate)
      ->default_value(opts.learning_rate, render(opts.learning_rate)),
    text("learning rate (SGD with momentum on the shards)").c_str())(
    "momentum",
    po::value(&opts.momentum)
      ->default_value(opts.momentum, render(opts.momentum)),
    text("momentum").c_str())(
    "server-momentum",
    po::value(&opts.server_momentum)
      ->default_value(opts.server_momentum, "derived"),
    text("async: the momentum the shards run, in [0, 1) (derived: "
         "max(0, 1 - workers x (1 - momentum)), since asynchrony adds "
         "momentum of its own)")
      .c_str())(
    "lr-schedule",
    po::value(&opts.lr_schedule)->default_value(opts.lr_schedule),
    text("cosine (the learning rate falls to 0 along half a cosine over "
         "all epochs, on the shards) or constant")
      .c_str())("seed", po::value(&opts.seed)->default_value(opts.seed),
                text("seed of the initialization and the shuffling").c_str())(
    "resume", po::value(&opts.resume),
    text("a checkpoint file, or a folder of the coordinator's periodic "
         "checkpoints (the newest whole one is taken): rank 0 loads it "
         "before the first step, and training goes on from its weights and "
         "optimizer state")
      .c_str())(
    "push-every", po::value(&opts.push_every)->default_value(opts.push_every),
    text("steps between exchanges with the store: 1 pushes gradients every "
         "step; K > 1 trains K steps of local SGD with momentum and pushes "
         "the weights' change, which the shards average (local SGD, "
         "Elephas' update frequency; K >= an epoch's steps: once per epoch)")
      .c_str());
}

std::optional<int> resolve_resume(const std::string& app, train_options& opts) {
  if (opts.resume.empty())
    return std::nullopt;
  std::string file;
  if (auto st = core::latest_checkpoint(opts.resume, file); !st.ok())
    return fail(app, "--resume: " + st.message, 2);
  opts.resume = file;
  return std::nullopt;
}

std::optional<int> check(const std::string& app, const train_options& opts) {
  if (auto rc = check_range(app, "epochs", opts.epochs, 1, 100000))
    return rc;
  if (auto rc = check_range(app, "batch", opts.batch, 1, 1000000))
    return rc;
  if (auto rc = check_range(app, "push-every", opts.push_every, 1, 100000000))
    return rc;
  if (!(std::isfinite(opts.learning_rate) && opts.learning_rate > 0))
    return fail(app,
                "--lr must be finite and > 0, got "
                  + std::to_string(opts.learning_rate),
                2);
  if (!(opts.momentum >= 0 && opts.momentum < 1))
    return fail(
      app, "--momentum must be in [0, 1), got " + std::to_string(opts.momentum),
      2);
  if (opts.server_momentum != -1.0f
      && !(opts.server_momentum >= 0 && opts.server_momentum < 1))
    return fail(app,
                "--server-momentum must be in [0, 1), got "
                  + std::to_string(opts.server_momentum),
                2);
  if (opts.lr_schedule != "cosine" && opts.lr_schedule != "constant")
    return fail(app,
                "--lr-schedule must be cosine or constant, got '"
                  + opts.lr_schedule + "'",
                2);
  return std::nullopt;
}

} // namespace actorps::apps
