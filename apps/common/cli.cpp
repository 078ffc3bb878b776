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

void add_log_option(po::options_description& desc, std::string& level) {
  desc.add_options()("log-level", po::value(&level)->default_value("info"),
                     "error (errors only), info, or debug (also membership "
                     "and node-down events)");
}

std::optional<log_level> parse_log_level(const std::string& text) {
  if (text == "error")
    return log_level::error;
  if (text == "info")
    return log_level::info;
  if (text == "debug")
    return log_level::debug;
  return std::nullopt;
}

int fail(const std::string& app, const std::string& message, int code) {
  std::cerr << app << ": " << message << std::endl;
  return code;
}

} // namespace actorps::apps
