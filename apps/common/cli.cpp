// SPDX-License-Identifier: BSD-3-Clause
#include "apps/common/cli.hpp"

#include <fstream>
#include <iostream>

namespace po = boost::program_options;

namespace actorps::apps {

void add_common_options(po::options_description& desc,
                        std::string& config_file) {
  desc.add_options()("help,h", "print this help and exit")(
    "config", po::value(&config_file),
    "read options from this file: one 'name = value' per line, names as "
    "the flags without dashes; flags given on the command line win");
}

std::optional<int>
parse(int argc, char** argv, const po::options_description& d,
      po::variables_map& vm, const std::string& app, const std::string& usage) {
  try {
    po::store(po::parse_command_line(argc, argv, d), vm);
    if (vm.count("help")) {
      std::cout << usage << "\n\n" << d << '\n';
      return 0;
    }
    if (vm.count("config")) {
      auto path = vm["config"].as<std::string>();
      std::ifstream in{path};
      if (!in)
        return fail(app, "cannot read config file '" + path + "'", 2);
      po::store(po::parse_config_file(in, d), vm);
    }
    po::notify(vm);
  } catch (const std::exception& e) {
    return fail(app, std::string{e.what()} + " (see --help)", 2);
  }
  return std::nullopt;
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
    "error (errors only), info, or debug (also nodes that go down)");
}

std::optional<int> check(const std::string& app, network_flags& flags) {
  if (flags.heartbeat_ms <= 0 || flags.connection_timeout_ms < 0)
    return fail(app,
                "--heartbeat-ms must be > 0 and "
                "--connection-timeout-ms >= 0",
                2);
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
  return std::nullopt;
}

int fail(const std::string& app, const std::string& message, int code) {
  std::cerr << app << ": " << message << std::endl;
  return code;
}

} // namespace actorps::apps
