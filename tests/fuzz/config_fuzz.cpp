// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: the apps' --config file parser and the checks after it,
// with the options of the worker app (network, token, train, compression,
// threads, timeouts). Each input is written to a file and parsed as one.
// Run it with -close_fd_mask=2: each bad file prints a line on stderr.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <boost/program_options.hpp>

#include "apps/common/cli.hpp"
#include "apps/common/train.hpp"

namespace po = boost::program_options;
using namespace actorps;
using namespace actorps::apps;

namespace {

/// A folder of this process's own, and the fuzzer's working folder: the
/// options name files (--log-file appends to one), and a fuzzed name must
/// not create or append to anything outside it.
/// Removed at exit (never destroyed: the exit handler still reads it).
const std::string& sandbox() {
  static const std::string* dir = [] {
    auto* tmpl = new std::string{"/tmp/actorps-config-fuzz-XXXXXX"};
    if (::mkdtemp(tmpl->data()) == nullptr || ::chdir(tmpl->c_str()) != 0)
      std::abort();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(sandbox(), ec);
    });
    return tmpl;
  }();
  return *dir;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = sandbox() + "/input.ini";
  {
    std::ofstream out{path, std::ios::binary | std::ios::trunc};
    out.write(reinterpret_cast<const char*>(data),
              static_cast<std::streamsize>(size));
  }
  std::string config_file;
  network_flags net;
  token_flags tok;
  train_options train;
  std::string compression_text;
  std::size_t threads = 0;
  long connect_timeout_ms = 0;
  long timeout_ms = 0;
  po::options_description desc{"Options"};
  add_common_options(desc, config_file);
  add_network_options(desc, net);
  add_token_options(desc, tok);
  add_train_options(desc, train);
  add_compression_option(desc, compression_text);
  add_threads_option(desc, threads);
  add_timeout_options(desc, connect_timeout_ms, timeout_ms, "timeout");
  std::string arg0 = "fuzz";
  std::string arg1 = "--config";
  std::string arg2 = path;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  po::variables_map vm;
  if (!parse(3, argv, desc, vm, "fuzz", "usage")) {
    // The log file's checks run on a name inside the sandbox.
    static const std::string log = sandbox() + "/log";
    if (!net.log_file.empty())
      net.log_file = log;
    static_cast<void>(check("fuzz", net));
    static_cast<void>(check("fuzz", train));
    compression c;
    static_cast<void>(check_compression("fuzz", compression_text, c));
    static_cast<void>(check_threads("fuzz", threads));
    std::string token;
    static_cast<void>(resolve_token("fuzz", tok, token));
    std::remove(log.c_str());
  }
  return 0;
}
