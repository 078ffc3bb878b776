// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

/// The file operations that checkpoints need, behind one small seam (as
/// leveldb's `Env`): the POSIX implementation is the default, and tests
/// substitute one that fails on purpose (a write that stops after N bytes, a
/// failing sync or rename, a short read) to show that a failed save never
/// damages the previous checkpoint. Every operation returns 0 or an errno
/// value; callers turn those into messages. Free of CAF.
namespace actorps::core {

/// A file open for writing.
class writable_file {
public:
  virtual ~writable_file();

  /// Appends all of `n` bytes (retrying short writes).
  virtual int append(const char* data, std::size_t n) = 0;

  /// Flushes the file's data to stable storage.
  virtual int sync() = 0;

  /// Closes the file; further calls are not allowed. Reports delayed write
  /// errors (some file systems only report them here).
  virtual int close() = 0;
};

/// A file open for reading.
class readable_file {
public:
  virtual ~readable_file();

  /// Reads up to `n` bytes into `buf`; `got` is 0 at the end of the file.
  virtual int read(char* buf, std::size_t n, std::size_t& got) = 0;

  /// The file's size when it was opened (a hint: the file may change).
  virtual std::size_t size_hint() const = 0;
};

/// The operations on paths.
class file_system {
public:
  virtual ~file_system();

  /// Creates `path` (or truncates it) for writing, mode 0644.
  virtual int
  create(const std::string& path, std::unique_ptr<writable_file>& out)
    = 0;

  /// Opens `path` for reading. Fails with EISDIR for a directory and
  /// EINVAL for anything else that is not a regular file (a device such as
  /// /dev/zero would never end).
  virtual int open(const std::string& path, std::unique_ptr<readable_file>& out)
    = 0;

  /// Renames `from` to `to`, replacing `to` atomically.
  virtual int rename(const std::string& from, const std::string& to) = 0;

  /// Removes `path`.
  virtual int remove(const std::string& path) = 0;

  /// Makes a rename in the directory that holds `path` durable.
  virtual int sync_dir(const std::string& path) = 0;
};

/// The process's POSIX file system.
file_system& posix_file_system();

/// Renders an errno value like strerror, without strerror's shared buffer.
std::string system_error_text(int err);

/// What `write_atomically` ran into: `err` is 0 or an errno value; `step`
/// the operation that failed ("create", "write", "fsync", "close",
/// "rename", "sync the directory of") and `where` its path(s).
struct write_failure {
  int err = 0;
  const char* step = "";
  std::string where;

  /// "cannot STEP WHERE: error text".
  std::string text() const;
};

/// Writes `n` bytes to `path` so that a reader sees the old file or the
/// whole new one, never a part: to `path + ".tmp"`, synced, renamed over
/// `path`, then the directory synced. On failure the temporary file is
/// removed and `path` is untouched (unless only the directory sync failed).
write_failure write_atomically(file_system& fs, const std::string& path,
                               const char* data, std::size_t n);

} // namespace actorps::core
