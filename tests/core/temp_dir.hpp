// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace actorps::test {

/// A fresh directory under /tmp, removed with its contents at scope exit.
class temp_dir {
public:
  temp_dir() {
    char pattern[] = "/tmp/actorps_test_XXXXXX";
    if (::mkdtemp(pattern) != nullptr)
      path_ = pattern;
  }

  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  ~temp_dir() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }

  const std::string& path() const noexcept {
    return path_;
  }

private:
  std::string path_;
};

} // namespace actorps::test
