// SPDX-License-Identifier: BSD-3-Clause
#include "core/file_system.hpp"

#include <cerrno>
#include <cstdio>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace actorps::core {

writable_file::~writable_file() = default;

readable_file::~readable_file() = default;

file_system::~file_system() = default;

std::string system_error_text(int err) {
  return std::error_code{err, std::generic_category()}.message();
}

namespace {

int close_checked(int fd) {
  // Retrying close on EINTR may close a descriptor reused by another thread
  // (Linux frees the descriptor first), so the result is taken as is.
  return ::close(fd) == 0 ? 0 : errno;
}

class posix_writable final : public writable_file {
public:
  explicit posix_writable(int fd) : fd_(fd) {
    // Nothing else to do.
  }

  ~posix_writable() override {
    if (fd_ >= 0)
      close_checked(fd_);
  }

  int append(const char* data, std::size_t n) override {
    while (n > 0) {
      auto written = ::write(fd_, data, n);
      if (written < 0) {
        if (errno == EINTR)
          continue;
        return errno;
      }
      data += written;
      n -= static_cast<std::size_t>(written);
    }
    return 0;
  }

  int sync() override {
    return ::fsync(fd_) == 0 ? 0 : errno;
  }

  int close() override {
    auto err = close_checked(fd_);
    fd_ = -1;
    return err;
  }

private:
  int fd_;
};

class posix_readable final : public readable_file {
public:
  posix_readable(int fd, std::size_t size) : fd_(fd), size_(size) {
    // Nothing else to do.
  }

  ~posix_readable() override {
    close_checked(fd_);
  }

  int read(char* buf, std::size_t n, std::size_t& got) override {
    for (;;) {
      auto r = ::read(fd_, buf, n);
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0)
        return errno;
      got = static_cast<std::size_t>(r);
      return 0;
    }
  }

  std::size_t size_hint() const override {
    return size_;
  }

private:
  int fd_;
  std::size_t size_;
};

class posix_fs final : public file_system {
public:
  int create(const std::string& path,
             std::unique_ptr<writable_file>& out) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                    0644);
    if (fd < 0)
      return errno;
    out = std::make_unique<posix_writable>(fd);
    return 0;
  }

  int open(const std::string& path,
           std::unique_ptr<readable_file>& out) override {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused
    // below as not a regular file.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
      return errno;
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      close_checked(fd);
      return err;
    }
    if (!S_ISREG(st.st_mode)) {
      close_checked(fd);
      return S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    }
    // Regular files ignore O_NONBLOCK for reads; clear it all the same.
    int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0)
      ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    out = std::make_unique<posix_readable>(
      fd, st.st_size > 0 ? static_cast<std::size_t>(st.st_size) : 0);
    return 0;
  }

  int rename(const std::string& from, const std::string& to) override {
    return ::rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
  }

  int remove(const std::string& path) override {
    return ::unlink(path.c_str()) == 0 ? 0 : errno;
  }

  int sync_dir(const std::string& path) override {
    auto slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? std::string{"."}
                      : slash == 0               ? std::string{"/"}
                                                 : path.substr(0, slash);
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
      return errno;
    int err = ::fsync(fd) == 0 ? 0 : errno;
    int close_err = close_checked(fd);
    return err != 0 ? err : close_err;
  }
};

} // namespace

std::string write_failure::text() const {
  return std::string{"cannot "} + step + " " + where + ": "
         + system_error_text(err);
}

write_failure write_atomically(file_system& fs, const std::string& path,
                               const char* data, std::size_t n) {
  const std::string tmp = path + ".tmp";
  std::unique_ptr<writable_file> file;
  if (int err = fs.create(tmp, file); err != 0)
    return {err, "create", tmp};
  const char* step = "write";
  int err = file->append(data, n);
  if (err == 0) {
    err = file->sync();
    step = "fsync";
  }
  // close reports delayed write errors on some file systems (NFS).
  int close_err = file->close();
  if (err == 0 && close_err != 0) {
    err = close_err;
    step = "close";
  }
  if (err != 0) {
    fs.remove(tmp);
    return {err, step, tmp};
  }
  if (err = fs.rename(tmp, path); err != 0) {
    fs.remove(tmp);
    return {err, "rename", tmp + " to " + path};
  }
  // The file is in place; only its directory entry may still be unsynced.
  if (err = fs.sync_dir(path); err != 0)
    return {err, "sync the directory of", path};
  return {};
}

file_system& posix_file_system() {
  static posix_fs fs;
  return fs;
}

} // namespace actorps::core
