// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: the checkpoint decoder on any bytes a file may hold. A
// checkpoint it accepts must encode and decode to the same records, and
// the streaming reader (record by record from a file) must accept exactly
// what the whole-buffer decoder accepts, with the same records.
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/checkpoint_stream.hpp"

namespace {

namespace core = actorps::core;

// A read-only file system of one file held in memory.
class memory_fs final : public core::file_system {
public:
  explicit memory_fs(const std::vector<char>& bytes) : bytes_(bytes) {
  }

  int create(const std::string&,
             std::unique_ptr<core::writable_file>&) override {
    return ENOSYS;
  }

  int open(const std::string&,
           std::unique_ptr<core::readable_file>& out) override {
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
  class file final : public core::readable_file {
  public:
    explicit file(const std::vector<char>& bytes) : bytes_(bytes) {
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

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<char> bytes(reinterpret_cast<const char*>(data),
                          reinterpret_cast<const char*>(data) + size);
  actorps::state_snapshot snap;
  auto whole = core::decode_checkpoint(bytes, snap);
  memory_fs fs{bytes};
  core::checkpoint_reader in;
  auto st = in.open("mem", fs);
  std::size_t records = 0;
  actorps::slice_record rec;
  for (bool done = false; st.ok() && !done;) {
    st = in.next(rec, done);
    if (st.ok() && !done) {
      if (records >= snap.slices.size()
          || rec.value.data != snap.slices[records].value.data)
        if (whole.ok())
          __builtin_trap();
      ++records;
    }
  }
  if (st.ok() != whole.ok() || (st.ok() && records != snap.slices.size()))
    __builtin_trap();
  if (!whole.ok())
    return 0;
  actorps::state_snapshot again;
  if (!core::decode_checkpoint(core::encode_checkpoint(snap), again).ok()
      || again.slices.size() != snap.slices.size())
    __builtin_trap();
  return 0;
}
