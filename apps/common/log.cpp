// SPDX-License-Identifier: BSD-3-Clause
#include "apps/common/log.hpp"

#include <memory>
#include <mutex>
#include <streambuf>
#include <vector>

#include <spdlog/logger.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace actorps::apps {

namespace {

struct log_state {
  std::mutex mtx;
  std::shared_ptr<spdlog::logger> out;
  std::shared_ptr<spdlog::logger> err;
  std::string role;
  std::string tag;
  log_level level = log_level::info;
};

log_state& state() {
  static log_state st;
  return st;
}

void write(const std::shared_ptr<spdlog::logger>& to,
           spdlog::level::level_enum lvl, const std::string& text) {
  auto& st = state();
  std::string tag;
  {
    std::lock_guard<std::mutex> guard{st.mtx};
    tag = st.tag;
  }
  to->log(lvl, "{} {}", tag, text);
}

// Splits what is written into lines, each one log_info line.
class line_buf : public std::streambuf {
protected:
  int overflow(int c) override {
    if (c == traits_type::eof())
      return 0;
    if (c == '\n')
      flush_line();
    else
      line_.push_back(static_cast<char>(c));
    return c;
  }

  int sync() override {
    if (!line_.empty())
      flush_line();
    return 0;
  }

private:
  void flush_line() {
    log_info(line_);
    line_.clear();
  }

  std::string line_;
};

} // namespace

std::string start_log(const std::string& app, log_level level,
                      const std::string& file) {
  auto& st = state();
  auto role = app.rfind("actorps-", 0) == 0 ? app.substr(8) : app;
  std::vector<spdlog::sink_ptr> out_sinks{
    std::make_shared<spdlog::sinks::stdout_sink_mt>()};
  std::vector<spdlog::sink_ptr> err_sinks{
    std::make_shared<spdlog::sinks::stderr_sink_mt>()};
  if (!file.empty()) {
    try {
      auto f = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file);
      out_sinks.push_back(f);
      err_sinks.push_back(f);
    } catch (const spdlog::spdlog_ex& e) {
      return "cannot open " + file + " (" + e.what() + ")";
    }
  }
  auto make = [](const char* name, std::vector<spdlog::sink_ptr>& sinks) {
    auto l = std::make_shared<spdlog::logger>(name, sinks.begin(), sinks.end());
    l->set_formatter(std::make_unique<spdlog::pattern_formatter>(
      "%Y-%m-%dT%H:%M:%S.%eZ %v", spdlog::pattern_time_type::utc));
    l->set_level(spdlog::level::trace);
    // Every line at once: scripts and tests read the output live.
    l->flush_on(spdlog::level::trace);
    return l;
  };
  std::lock_guard<std::mutex> guard{st.mtx};
  st.out = make("out", out_sinks);
  st.err = make("err", err_sinks);
  st.role = role;
  st.tag = role == "coordinator" ? role : role + "[?]";
  st.level = level;
  return {};
}

bool log_started() {
  auto& st = state();
  std::lock_guard<std::mutex> guard{st.mtx};
  return st.out != nullptr;
}

void set_log_rank(uint32_t rank) {
  auto& st = state();
  std::lock_guard<std::mutex> guard{st.mtx};
  st.tag = st.role + "[" + std::to_string(rank) + "]";
}

void log_info(const std::string& text) {
  auto& st = state();
  if (st.out && st.level >= log_level::info)
    write(st.out, spdlog::level::info, text);
}

void log_debug(const std::string& text) {
  auto& st = state();
  if (st.out && st.level >= log_level::debug)
    write(st.out, spdlog::level::debug, text);
}

void log_error(const std::string& text) {
  auto& st = state();
  if (st.err)
    write(st.err, spdlog::level::err, text);
}

void log_always(const std::string& text) {
  auto& st = state();
  if (st.out)
    write(st.out, spdlog::level::info, text);
}

std::ostream& log_stream() {
  // One per thread: lines of two threads never mix.
  static thread_local line_buf buf;
  static thread_local std::ostream stream{&buf};
  return stream;
}

} // namespace actorps::apps
