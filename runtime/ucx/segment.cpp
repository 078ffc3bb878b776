// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/ucx/segment.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "core/link_proof.hpp"

namespace actorps::ucx {

namespace {

// The file: a control page (the tag, then one flag per slot: 1 while the
// writer waits for the reader, 0 once the reader is done), then the bytes.
constexpr std::size_t control_size = 4096;
constexpr std::size_t flags_at = 64;
static_assert(flags_at + segment_slots * sizeof(uint32_t) <= control_size);

// Messages start at multiples of a cache line.
constexpr std::size_t alignment = 64;

constexpr char info_magic[4] = {'A', 'P', 'S', 'G'};
constexpr std::size_t info_size = sizeof(info_magic) + 4 + 4 + 8
                                  + segment_tag_size;

std::size_t rounded(std::size_t n) {
  return (n + alignment - 1) / alignment * alignment;
}

std::string why(const char* what) {
  return std::string{what} + ": " + std::strerror(errno);
}

template <class T>
void put(char*& out, T x) {
  std::memcpy(out, &x, sizeof(T));
  out += sizeof(T);
}

template <class T>
T get(const char*& in) {
  T x;
  std::memcpy(&x, in, sizeof(T));
  in += sizeof(T);
  return x;
}

} // namespace

// -- out_segment --------------------------------------------------------------

std::unique_ptr<out_segment> out_segment::create(std::size_t size,
                                                 std::string& error) {
  std::unique_ptr<out_segment> x{new out_segment};
  x->fd_ = ::memfd_create("actorps-plane", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (x->fd_ < 0) {
    error = why("memfd_create");
    return nullptr;
  }
  x->map_size_ = control_size + size;
  if (::ftruncate(x->fd_, static_cast<off_t>(x->map_size_)) != 0) {
    error = why("ftruncate");
    return nullptr;
  }
  // Sealed, the file keeps its size: a reader's copy can never fault.
  if (::fcntl(x->fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
      != 0) {
    error = why("sealing the segment");
    return nullptr;
  }
  auto* map = ::mmap(nullptr, x->map_size_, PROT_READ | PROT_WRITE, MAP_SHARED,
                     x->fd_, 0);
  if (map == MAP_FAILED) {
    error = why("mmap");
    return nullptr;
  }
  x->map_ = map;
  auto* base = static_cast<char*>(map);
  x->flags_ = reinterpret_cast<uint32_t*>(base + flags_at);
  x->data_ = base + control_size;
  x->info_.pid = static_cast<uint32_t>(::getpid());
  x->info_.fd = static_cast<uint32_t>(x->fd_);
  x->info_.size = size;
  if (!core::fill_random(x->info_.tag, segment_tag_size)) {
    error = "no random bytes for a segment's tag";
    return nullptr;
  }
  std::memcpy(base, x->info_.tag, segment_tag_size);
  x->pins_ = std::make_unique<std::atomic<uint8_t>[]>(segment_slots);
  for (uint32_t i = 0; i < segment_slots; ++i)
    x->pins_[i].store(0, std::memory_order_relaxed);
  x->free_indices_.reserve(segment_slots);
  for (uint32_t i = segment_slots; i > 0; --i)
    x->free_indices_.push_back(i - 1);
  return x;
}

out_segment::~out_segment() {
  if (map_ != nullptr)
    ::munmap(map_, map_size_);
  if (fd_ >= 0)
    ::close(fd_);
}

void out_segment::close_file() noexcept {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
}

void out_segment::reclaim() {
  auto freed = [this](const segment_slot& x) {
    if (pins_[x.index].load(std::memory_order_acquire) != 0
        || __atomic_load_n(flags_ + x.index, __ATOMIC_ACQUIRE) != 0)
      return false;
    free_indices_.push_back(x.index);
    return true;
  };
  busy_.erase(std::remove_if(busy_.begin(), busy_.end(), freed), busy_.end());
}

std::optional<segment_slot> out_segment::reserve(std::size_t length) {
  reclaim();
  auto n = rounded(length);
  if (length == 0 || n > info_.size || free_indices_.empty())
    return std::nullopt;
  // The lowest gap that fits: the pages in use stay as few as the bytes in
  // flight need, whatever order the reader frees slots in.
  uint64_t at = 0;
  auto next = busy_.begin();
  for (; next != busy_.end(); ++next) {
    if (next->offset >= at + n)
      break;
    at = next->offset + rounded(next->length);
  }
  if (next == busy_.end() && info_.size - at < n)
    return std::nullopt;
  segment_slot x{at, length, free_indices_.back()};
  free_indices_.pop_back();
  __atomic_store_n(flags_ + x.index, 1u, __ATOMIC_RELAXED);
  busy_.insert(next, x);
  return x;
}

void out_segment::cancel(const segment_slot& x) {
  __atomic_store_n(flags_ + x.index, 0u, __ATOMIC_RELEASE);
}

std::optional<segment_slot>
out_segment::reserve_pinned(std::size_t length, std::size_t max_pinned) {
  // (Only reservations add to the counts, all under their owner's lock.)
  // At most a quarter of the slots too: the rest serve bodies as they go.
  if (pinned_bytes_.load() + rounded(length) > max_pinned
      || pinned_slots_.load() >= segment_slots / 4)
    return std::nullopt;
  auto x = reserve(length);
  if (x) {
    pinned_bytes_ += rounded(length);
    ++pinned_slots_;
    pins_[x->index].store(1, std::memory_order_relaxed);
  }
  return x;
}

std::optional<segment_slot> out_segment::take_pinned(const char* at,
                                                     std::size_t length) {
  if (at < data_ || at >= data_ + info_.size)
    return std::nullopt;
  auto offset = static_cast<uint64_t>(at - data_);
  auto i = std::lower_bound(busy_.begin(), busy_.end(), offset,
                            [](const segment_slot& x, uint64_t y) {
                              return x.offset < y;
                            });
  if (i == busy_.end() || i->offset != offset || length == 0
      || length > i->length)
    return std::nullopt;
  uint8_t unsent = 1;
  if (!pins_[i->index].compare_exchange_strong(unsent, 2))
    return std::nullopt;
  return segment_slot{offset, length, i->index};
}

void out_segment::unpin(const segment_slot& x) noexcept {
  // Never announced: no reader frees it, so this does.
  pinned_bytes_ -= rounded(x.length);
  --pinned_slots_;
  if (pins_[x.index].exchange(0, std::memory_order_acq_rel) == 1)
    cancel(x);
}

// -- in_segment ---------------------------------------------------------------

std::unique_ptr<in_segment> in_segment::open(const segment_info& x,
                                             std::size_t max_size,
                                             std::string& error) {
  if (x.size == 0 || max_size < control_size
      || x.size > max_size - control_size) {
    error = "a segment of " + std::to_string(x.size) + " bytes";
    return nullptr;
  }
  auto path = "/proc/" + std::to_string(x.pid) + "/fd/" + std::to_string(x.fd);
  // Only a memfd, before anything opens it: a file on a network or FUSE
  // mount could block the open (and with it the plane's thread) for good.
  // (Reading the link touches no file system.)
  char target[64] = {};
  auto n = ::readlink(path.c_str(), target, sizeof(target) - 1);
  constexpr char memfd_prefix[] = "/memfd:";
  if (n < 0
      || std::strncmp(target, memfd_prefix, sizeof(memfd_prefix) - 1) != 0) {
    error = path + " is no memfd";
    return nullptr;
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    error = why(path.c_str());
    return nullptr;
  }
  // A regular shmem file (not hugetlbfs, whose writer could punch holes the
  // reader then faults on) of the size announced, sealed against shrinking.
  struct stat st {};
  struct statfs fs {};
  auto total = control_size + x.size;
  auto seals = ::fcntl(fd, F_GET_SEALS);
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)
      || static_cast<uint64_t>(st.st_size) != total || ::fstatfs(fd, &fs) != 0
      || fs.f_type != TMPFS_MAGIC || seals < 0
      || (seals & F_SEAL_SHRINK) == 0) {
    ::close(fd);
    error = path + " is no sealed segment of the size announced";
    return nullptr;
  }
  auto* map = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    error = why("mmap");
    return nullptr;
  }
  std::unique_ptr<in_segment> y{new in_segment};
  y->map_ = map;
  y->map_size_ = total;
  auto* base = static_cast<char*>(map);
  // The messages are read where they lie, never written here: a stray
  // write faults instead of changing what the peer sent.
  if (::mprotect(base + control_size, x.size, PROT_READ) != 0) {
    error = why("mprotect");
    return nullptr;
  }
  if (std::memcmp(base, x.tag, segment_tag_size) != 0) {
    error = path + " is not the segment announced (its tag differs)";
    return nullptr;
  }
  y->flags_ = reinterpret_cast<uint32_t*>(base + flags_at);
  y->data_ = base + control_size;
  y->size_ = x.size;
  y->file_ = {static_cast<uint64_t>(st.st_dev),
              static_cast<uint64_t>(st.st_ino)};
  return y;
}

in_segment::~in_segment() {
  if (map_ != nullptr)
    ::munmap(map_, map_size_);
}

bool in_segment::valid(const segment_slot& x) const noexcept {
  return x.index < segment_slots && x.length > 0 && x.offset <= size_
         && x.length <= size_ - x.offset;
}

void in_segment::release(const segment_slot& x) {
  __atomic_store_n(flags_ + x.index, 0u, __ATOMIC_RELEASE);
}

// -- encoding -----------------------------------------------------------------

std::vector<char> encode(const segment_info& x) {
  std::vector<char> out(info_size);
  auto* at = out.data();
  std::memcpy(at, info_magic, sizeof(info_magic));
  at += sizeof(info_magic);
  put(at, x.pid);
  put(at, x.fd);
  put(at, x.size);
  std::memcpy(at, x.tag, segment_tag_size);
  return out;
}

bool decode(const void* data, std::size_t size, segment_info& x) {
  if (size != info_size
      || std::memcmp(data, info_magic, sizeof(info_magic)) != 0)
    return false;
  auto* at = static_cast<const char*>(data) + sizeof(info_magic);
  x.pid = get<uint32_t>(at);
  x.fd = get<uint32_t>(at);
  x.size = get<uint64_t>(at);
  std::memcpy(x.tag, at, segment_tag_size);
  return true;
}

void encode(const segment_slot& x, char* out) {
  put(out, x.offset);
  put(out, x.length);
  put(out, x.index);
}

segment_slot decode_slot(const char* in) {
  segment_slot x;
  x.offset = get<uint64_t>(in);
  x.length = get<uint64_t>(in);
  x.index = get<uint32_t>(in);
  return x;
}

// -- size ---------------------------------------------------------------------

bool segment_size_from_env(std::size_t& bytes, std::string& error) {
  bytes = default_segment_mb << 20;
  auto* text = std::getenv("ACTORPS_UCX_SEGMENT_MB");
  if (text == nullptr)
    return true;
  std::string s{text};
  std::size_t mb = 0;
  bool ok = !s.empty() && s.size() <= 5;
  for (auto c : s)
    ok = ok && c >= '0' && c <= '9';
  if (ok)
    mb = std::stoul(s);
  if (!ok || mb > max_segment_mb) {
    error = "ACTORPS_UCX_SEGMENT_MB: expected the megabytes of the data "
            "plane's shared-memory segment per peer on this host, 0 to "
            + std::to_string(max_segment_mb) + " (0: none), got '" + s + "'";
    return false;
  }
  bytes = mb << 20;
  return true;
}

} // namespace actorps::ucx
