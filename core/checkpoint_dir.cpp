// SPDX-License-Identifier: BSD-3-Clause
#include "core/checkpoint_dir.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/checkpoint_stream.hpp"

namespace actorps::core {

namespace fs = std::filesystem;

namespace {

constexpr const char* prefix = "checkpoint-";
constexpr const char* suffix = ".actorps";

// The numbered checkpoint files in `dir` with their numbers, newest first.
std::vector<std::pair<uint64_t, fs::path>> listed(const fs::path& dir) {
  std::vector<std::pair<uint64_t, fs::path>> found;
  std::error_code ec;
  for (auto& entry : fs::directory_iterator{dir, ec}) {
    auto name = entry.path().filename().string();
    auto plen = std::char_traits<char>::length(prefix);
    auto slen = std::char_traits<char>::length(suffix);
    if (name.size() <= plen + slen || name.compare(0, plen, prefix) != 0
        || name.compare(name.size() - slen, slen, suffix) != 0)
      continue;
    auto digits = name.substr(plen, name.size() - plen - slen);
    if (digits.empty() || digits.size() > 19
        || digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    found.emplace_back(std::stoull(digits), entry.path());
  }
  std::sort(found.begin(), found.end(),
            [](auto& a, auto& b) { return a.first > b.first; });
  return found;
}

// The numbered checkpoint files in `dir`, newest first.
std::vector<fs::path> numbered(const fs::path& dir) {
  std::vector<fs::path> out;
  for (auto& f : listed(dir))
    out.push_back(f.second);
  return out;
}

} // namespace

uint64_t highest_checkpoint_number(const std::string& dir) {
  auto found = listed(dir);
  return found.empty() ? 0 : found.front().first;
}

std::string checkpoint_name(uint64_t number) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%06llu%s", prefix,
                static_cast<unsigned long long>(number), suffix);
  return buf;
}

status numbered_checkpoint_path(const std::string& dir, uint64_t number,
                                std::string& path) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return {errc::checkpoint_io,
            "checkpoint: cannot create " + dir + ": " + ec.message()};
  path = (fs::path{dir} / checkpoint_name(number)).string();
  return {};
}

void prune_checkpoints(const std::string& dir, uint32_t keep) {
  std::error_code ec;
  auto files = numbered(dir);
  for (size_t i = std::max<uint32_t>(keep, 1); i < files.size(); ++i)
    fs::remove(files[i], ec);
}

status write_numbered_checkpoint(const std::string& dir, uint64_t number,
                                 const state_snapshot& snap, uint32_t keep,
                                 std::string& path) {
  if (auto st = numbered_checkpoint_path(dir, number, path); !st.ok())
    return st;
  if (auto st = check_encodable(snap); !st.ok())
    return st;
  if (auto st = write_file_atomic(path, encode_checkpoint(snap)); !st.ok())
    return st;
  prune_checkpoints(dir, keep);
  return {};
}

status latest_checkpoint(const std::string& path, std::string& out) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    out = path;
    return {};
  }
  if (!fs::is_directory(path, ec))
    return {errc::checkpoint_io,
            path + " is neither a checkpoint file nor a folder"};
  auto files = numbered(path);
  if (files.empty())
    return {errc::checkpoint_io, "no checkpoint-*.actorps in " + path};
  std::string why;
  for (auto& f : files) {
    // Record by record: a checkpoint of a large model need not fit in
    // memory to be checked.
    auto st = verify_checkpoint(f.string());
    if (st.ok()) {
      out = f.string();
      return {};
    }
    why += "\n  " + f.string() + ": " + st.message;
  }
  return {errc::checkpoint_corrupt,
          "no checkpoint in " + path + " reads back whole:" + why};
}

} // namespace actorps::core
