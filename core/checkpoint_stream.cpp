// SPDX-License-Identifier: BSD-3-Clause
#include "core/checkpoint_stream.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "core/checkpoint.hpp"
#include "core/checkpoint_codec.hpp"

namespace actorps::core {

namespace {

std::string hex32(uint32_t x) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", static_cast<unsigned>(x));
  return buf;
}

} // namespace

// -- writer -------------------------------------------------------------------

checkpoint_writer::~checkpoint_writer() {
  abort();
}

status checkpoint_writer::fail(const char* step, int err) {
  auto where = path_ + ".tmp";
  abort();
  return {errc::checkpoint_io, std::string{"checkpoint: cannot "} + step + " "
                                 + where + ": " + system_error_text(err)};
}

status checkpoint_writer::open(const std::string& path,
                               const optimizer_config& opt, file_system& fs,
                               bool dump_optimizer) {
  abort();
  fs_ = &fs;
  path_ = path;
  count_ = 0;
  if (int err = fs.create(path + ".tmp", file_); err != 0) {
    file_.reset();
    return fail("create", err);
  }
  buf_.assign(codec::magic_bytes(), codec::magic_bytes() + codec::magic_size);
  codec::append_record(buf_, opt, dump_optimizer);
  if (int err = file_->append(buf_.data(), buf_.size()); err != 0)
    return fail("write", err);
  return {};
}

status checkpoint_writer::add(const slice_record& rec) {
  if (!is_open())
    return {errc::checkpoint_io, "checkpoint: the writer is not open"};
  if (auto st = check_encodable(rec); !st.ok()) {
    abort();
    return st;
  }
  buf_.clear();
  codec::append_record(buf_, rec);
  if (int err = file_->append(buf_.data(), buf_.size()); err != 0)
    return fail("write", err);
  ++count_;
  return {};
}

status checkpoint_writer::finish() {
  if (!is_open())
    return {errc::checkpoint_io, "checkpoint: the writer is not open"};
  buf_.clear();
  codec::append_end_record(buf_, count_);
  if (int err = file_->append(buf_.data(), buf_.size()); err != 0)
    return fail("write", err);
  if (int err = file_->sync(); err != 0)
    return fail("fsync", err);
  auto file = std::move(file_);
  auto tmp = path_ + ".tmp";
  if (int err = file->close(); err != 0) {
    fs_->remove(tmp);
    return {errc::checkpoint_io,
            "checkpoint: cannot close " + tmp + ": " + system_error_text(err)};
  }
  if (int err = fs_->rename(tmp, path_); err != 0) {
    fs_->remove(tmp);
    return {errc::checkpoint_io, "checkpoint: cannot rename " + tmp + " to "
                                   + path_ + ": " + system_error_text(err)};
  }
  if (int err = fs_->sync_dir(path_); err != 0)
    return {errc::checkpoint_io, "checkpoint: cannot sync the directory of "
                                   + path_ + ": " + system_error_text(err)};
  return {};
}

void checkpoint_writer::abort() {
  if (file_ == nullptr)
    return;
  file_->close();
  file_.reset();
  fs_->remove(path_ + ".tmp");
}

// -- reader -------------------------------------------------------------------

status checkpoint_reader::corrupt(const std::string& what) const {
  return {errc::checkpoint_corrupt,
          "checkpoint: " + what + (path_.empty() ? "" : " in " + path_)};
}

namespace {

// Reads exactly `n` bytes unless the file ends first (`got` says how many).
int read_fully(readable_file& f, char* buf, std::size_t n, std::size_t& got) {
  got = 0;
  while (got < n) {
    std::size_t k = 0;
    if (int err = f.read(buf + got, n - got, k); err != 0)
      return err;
    if (k == 0)
      break;
    got += k;
  }
  return 0;
}

} // namespace

status checkpoint_reader::open(const std::string& path, file_system& fs) {
  path_ = path;
  index_ = 0;
  optimizer_ = optimizer_config{};
  dumped_ = false;
  if (int err = fs.open(path, file_); err != 0) {
    file_.reset();
    return {errc::checkpoint_io,
            std::string{"checkpoint: cannot "}
              + (err == EINVAL ? "read (not a regular file)" : "open") + " "
              + path + ": " + system_error_text(err)};
  }
  left_ = file_->size_hint();
  char head[codec::magic_size];
  std::size_t got = 0;
  if (int err = read_fully(*file_, head, sizeof(head), got); err != 0)
    return {errc::checkpoint_io,
            "checkpoint: cannot read " + path + ": " + system_error_text(err)};
  if (got != sizeof(head)
      || std::memcmp(head, codec::magic_bytes(), sizeof(head)) != 0)
    return corrupt("bad magic (not an actorps checkpoint of version 1)");
  left_ = left_ >= got ? left_ - got : 0;
  if (auto st = read_record(0, payload_); !st.ok())
    return st;
  if (auto why = codec::parse(payload_.data(), payload_.size(), optimizer_,
                              dumped_);
      !why.empty())
    return corrupt("record 0 (optimizer): " + why);
  index_ = 1;
  return {};
}

status checkpoint_reader::read_record(uint64_t index,
                                      std::vector<char>& payload) {
  auto name = "record " + std::to_string(index);
  char head[codec::record_header_size];
  std::size_t got = 0;
  if (int err = read_fully(*file_, head, sizeof(head), got); err != 0)
    return {errc::checkpoint_io,
            "checkpoint: cannot read " + path_ + ": " + system_error_text(err)};
  if (got == 0)
    return corrupt(index == 0 ? std::string{"missing optimizer record"}
                              : "missing end record after record "
                                  + std::to_string(index - 1));
  if (got < sizeof(head))
    return corrupt(name + ": truncated header, " + std::to_string(got)
                   + " bytes left");
  left_ = left_ >= got ? left_ - got : 0;
  auto len = codec::load_u32(head);
  auto stored = codec::load_u32(head + 4);
  // Sized by the file, not by the record: a length past the file's end is
  // corruption, never an allocation.
  if (len > left_)
    return corrupt(name + ": payload length " + std::to_string(len)
                   + " exceeds the " + std::to_string(left_) + " bytes left");
  payload.resize(len);
  if (int err = read_fully(*file_, payload.data(), len, got); err != 0)
    return {errc::checkpoint_io,
            "checkpoint: cannot read " + path_ + ": " + system_error_text(err)};
  if (got != len)
    return corrupt(name + ": payload length " + std::to_string(len)
                   + " exceeds the " + std::to_string(got) + " bytes left");
  left_ -= len;
  auto computed = crc32(payload.data(), len);
  if (computed != stored)
    return corrupt(name + ": CRC mismatch (stored " + hex32(stored)
                   + ", computed " + hex32(computed) + ")");
  return {};
}

status checkpoint_reader::next(slice_record& out, bool& done) {
  done = false;
  if (file_ == nullptr)
    return {errc::checkpoint_io, "checkpoint: the reader is not open"};
  if (auto st = read_record(index_, payload_); !st.ok())
    return st;
  auto name = "record " + std::to_string(index_);
  uint64_t count = 0;
  if (codec::parse_end(payload_.data(), payload_.size(), count)) {
    if (count != index_ - 1)
      return corrupt(name + " (end): says " + std::to_string(count)
                     + " slice records, found " + std::to_string(index_ - 1));
    char extra = 0;
    std::size_t got = 0;
    if (int err = read_fully(*file_, &extra, 1, got); err == 0 && got != 0)
      return corrupt("trailing bytes after the end record");
    done = true;
    return {};
  }
  slice_record rec;
  if (auto why = codec::parse(payload_.data(), payload_.size(), rec);
      !why.empty())
    return corrupt(name + " (slice): " + why);
  out = std::move(rec);
  ++index_;
  return {};
}

namespace {

// One file's bytes, held in memory, as the only file of a file system.
class memory_file_system final : public file_system {
public:
  explicit memory_file_system(const std::vector<char>& bytes) : bytes_(bytes) {
    // nop
  }

  int create(const std::string&, std::unique_ptr<writable_file>&) override {
    return ENOSYS;
  }

  int open(const std::string&, std::unique_ptr<readable_file>& out) override {
    out = std::make_unique<file>(bytes_);
    return 0;
  }

  int rename(const std::string&, const std::string&) override {
    return ENOSYS;
  }

  int remove(const std::string&) override {
    return ENOSYS;
  }

  int sync_dir(const std::string&) override {
    return ENOSYS;
  }

private:
  class file final : public readable_file {
  public:
    explicit file(const std::vector<char>& bytes) : bytes_(bytes) {
      // nop
    }

    int read(char* buf, std::size_t n, std::size_t& got) override {
      got = std::min(n, bytes_.size() - at_);
      if (got > 0)
        std::memcpy(buf, bytes_.data() + at_, got);
      at_ += got;
      return 0;
    }

    std::size_t size_hint() const override {
      return bytes_.size();
    }

  private:
    const std::vector<char>& bytes_;
    std::size_t at_ = 0;
  };

  const std::vector<char>& bytes_;
};

} // namespace

status decode_checkpoint(const std::vector<char>& bytes, state_snapshot& out) {
  // The streaming reader over the bytes: one parser for files and buffers.
  memory_file_system fs{bytes};
  checkpoint_reader in;
  if (auto st = in.open("", fs); !st.ok())
    return st;
  state_snapshot result;
  result.optimizer = in.optimizer();
  for (bool done = false;;) {
    slice_record rec;
    if (auto st = in.next(rec, done); !st.ok())
      return st;
    if (done)
      break;
    result.slices.push_back(std::move(rec));
  }
  out = std::move(result);
  return {};
}

status verify_checkpoint(const std::string& path, file_system& fs) {
  checkpoint_reader in;
  if (auto st = in.open(path, fs); !st.ok())
    return st;
  slice_record rec;
  for (bool done = false; !done;)
    if (auto st = in.next(rec, done); !st.ok())
      return st;
  return {};
}

status count_saved_parts(const std::string& path,
                         std::map<std::string, uint32_t>& out,
                         file_system& fs) {
  checkpoint_reader in;
  if (auto st = in.open(path, fs); !st.ok())
    return st;
  std::map<std::string, std::set<uint32_t>> seen;
  slice_record rec;
  for (bool done = false;;) {
    if (auto st = in.next(rec, done); !st.ok())
      return st;
    if (done)
      break;
    seen[rec.key].insert(rec.part);
  }
  out.clear();
  for (auto& [key, parts] : seen)
    out[key] = static_cast<uint32_t>(parts.size());
  return {};
}

} // namespace actorps::core
