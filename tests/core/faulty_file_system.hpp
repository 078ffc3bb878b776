// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cerrno>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "core/file_system.hpp"

namespace actorps::test {

/// The POSIX file system with faults injected on purpose: every operation
/// really happens on disk until its fault strikes, so a test sees exactly
/// what a crash or a full disk would leave behind.
class faulty_file_system final : public core::file_system {
public:
  /// A write fails with ENOSPC once this many bytes were written (the bytes
  /// before it reach the file).
  std::optional<std::size_t> fail_write_after;
  /// sync fails with EIO.
  bool fail_sync = false;
  /// close reports EIO (as NFS does for delayed write errors).
  bool fail_close = false;
  /// rename fails with EIO.
  bool fail_rename = false;
  /// A read sees the file end after this many bytes (a short read: the file
  /// was truncated under the reader).
  std::optional<std::size_t> end_reads_at;
  /// Number of remove calls (a failed save cleans up its temporary file).
  int removes = 0;

  int create(const std::string& path,
             std::unique_ptr<core::writable_file>& out) override {
    std::unique_ptr<core::writable_file> real;
    if (int err = base().create(path, real); err != 0)
      return err;
    out = std::make_unique<writer>(*this, std::move(real));
    return 0;
  }

  int open(const std::string& path,
           std::unique_ptr<core::readable_file>& out) override {
    std::unique_ptr<core::readable_file> real;
    if (int err = base().open(path, real); err != 0)
      return err;
    out = std::make_unique<reader>(*this, std::move(real));
    return 0;
  }

  int rename(const std::string& from, const std::string& to) override {
    return fail_rename ? EIO : base().rename(from, to);
  }

  int remove(const std::string& path) override {
    ++removes;
    return base().remove(path);
  }

  int sync_dir(const std::string& path) override {
    return base().sync_dir(path);
  }

private:
  static core::file_system& base() {
    return core::posix_file_system();
  }

  class writer final : public core::writable_file {
  public:
    writer(faulty_file_system& fs, std::unique_ptr<core::writable_file> real)
      : fs_(fs), real_(std::move(real)) {
      // Nothing else to do.
    }

    int append(const char* data, std::size_t n) override {
      if (fs_.fail_write_after) {
        auto room = *fs_.fail_write_after - written_;
        if (n > room) {
          if (int err = real_->append(data, room); err != 0)
            return err;
          written_ += room;
          return ENOSPC;
        }
      }
      written_ += n;
      return real_->append(data, n);
    }

    int sync() override {
      return fs_.fail_sync ? EIO : real_->sync();
    }

    int close() override {
      int err = real_->close();
      return fs_.fail_close ? EIO : err;
    }

  private:
    faulty_file_system& fs_;
    std::unique_ptr<core::writable_file> real_;
    std::size_t written_ = 0;
  };

  class reader final : public core::readable_file {
  public:
    reader(faulty_file_system& fs, std::unique_ptr<core::readable_file> real)
      : fs_(fs), real_(std::move(real)) {
      // Nothing else to do.
    }

    int read(char* buf, std::size_t n, std::size_t& got) override {
      if (fs_.end_reads_at) {
        auto left = *fs_.end_reads_at - read_;
        if (n > left)
          n = left;
        if (n == 0) {
          got = 0;
          return 0;
        }
      }
      int err = real_->read(buf, n, got);
      read_ += got;
      return err;
    }

    std::size_t size_hint() const override {
      return real_->size_hint();
    }

  private:
    faulty_file_system& fs_;
    std::unique_ptr<core::readable_file> real_;
    std::size_t read_ = 0;
  };
};

} // namespace actorps::test
