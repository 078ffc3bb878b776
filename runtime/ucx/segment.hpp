// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// Internal to runtime/ucx: shared memory between two planes of one host.
// No UCX, no CAF here.
//
// A plane that sends large messages to a peer on its host writes them into
// a memory segment of its own (`out_segment`) and tells the peer, over its
// UCX connection, only where they lie; the peer maps the segment
// (`in_segment`), reads a message where it lies (or copies it out) and
// marks its slot free. So a large message costs one copy in, one read and
// one small message instead of a trip through the kernel's TCP stack.
//
// Safe against the peer: the segment is a memfd sealed against shrinking,
// so no writer can make the reader's copy fault (SIGBUS); every place a
// peer names is checked against the mapping; a reader that dies or stops
// only keeps its slots, and a writer then sends by TCP again; a writer that
// dies leaves a mapping that stays valid until the reader lets go of it.
// The reader opens the segment through /proc/PID/fd/FD, which only a
// process of the same user may, and only until the writer closes the file
// (once the reader answered that it mapped it); a random tag in the
// segment shows that the file it opened is the one the writer meant.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actorps::ucx {

/// Slots of a segment: messages that may be in flight through it at once.
constexpr uint32_t segment_slots = 256;

/// Bytes of the random tag that names a segment.
constexpr std::size_t segment_tag_size = 16;

/// Where a segment lies, as its writer announces it to its reader.
struct segment_info {
  uint32_t pid = 0;
  uint32_t fd = 0;
  /// Bytes for messages (the file holds a control page before them).
  uint64_t size = 0;
  unsigned char tag[segment_tag_size] = {};
};

/// A message's place in a segment.
struct segment_slot {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t index = 0;
};

/// The writer's side: a sealed memfd mapped in this process, handed out in
/// slots (each at the lowest place with room), taken back once the reader
/// freed them.
class out_segment {
public:
  /// A segment of `size` bytes for messages; null with `error` set if the
  /// system refuses one.
  static std::unique_ptr<out_segment> create(std::size_t size,
                                             std::string& error);

  ~out_segment();

  out_segment(const out_segment&) = delete;
  out_segment& operator=(const out_segment&) = delete;

  /// What the reader needs to open it.
  const segment_info& info() const noexcept {
    return info_;
  }

  /// A slot of `length` bytes (> 0); none if the segment has no room now.
  std::optional<segment_slot> reserve(std::size_t length);

  /// Where a reserved slot's bytes go.
  char* data(const segment_slot& x) noexcept {
    return data_ + x.offset;
  }

  /// Gives a reserved slot back without the reader (its message was never
  /// announced).
  void cancel(const segment_slot& x);

  /// A slot of `length` bytes (> 0) that its writer keeps (pinned): its
  /// bytes are the writer's to fill in place and to read back, and the slot
  /// is not taken back, even once a reader freed it, until `unpin`. None if
  /// the segment has no room now, or if the pinned slots would then hold
  /// more than `max_pinned` bytes or a quarter of the slots.
  std::optional<segment_slot> reserve_pinned(std::size_t length,
                                             std::size_t max_pinned);

  /// The pinned slot whose bytes begin at `at`, as a message of `length`
  /// bytes, if it has room for them and was never announced: from now on it
  /// counts as announced (its reader frees it; `cancel` if the announcement
  /// fails). None otherwise: `at` is elsewhere, or the slot went once.
  std::optional<segment_slot> take_pinned(const char* at, std::size_t length);

  /// Lets go of a pinned slot: it is taken back once its reader freed it, at
  /// once if it was never announced. (Atomic stores only: any thread, no
  /// lock.)
  void unpin(const segment_slot& x) noexcept;

  /// Slots reserved and not yet freed.
  std::size_t in_flight() const noexcept {
    return busy_.size();
  }

  /// Closes the segment's file, once its reader said it mapped it: the
  /// mapping stays, and no other process can open the file through
  /// /proc/PID/fd any more (only in the moments between the offer and the
  /// answer could one).
  void close_file() noexcept;

private:
  out_segment() = default;

  // Takes back the slots the reader freed.
  void reclaim();

  segment_info info_;
  int fd_ = -1;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  uint32_t* flags_ = nullptr;
  char* data_ = nullptr;
  // Reserved slots by place.
  std::vector<segment_slot> busy_;
  std::vector<uint32_t> free_indices_;
  // Per slot: 0, not pinned; 1, pinned and never announced; 2, pinned and
  // announced. (The writer's own: the reader never sees them.)
  std::unique_ptr<std::atomic<uint8_t>[]> pins_;
  // Bytes of the slots pinned now (each rounded as it lies), and how many.
  std::atomic<uint64_t> pinned_bytes_{0};
  std::atomic<uint32_t> pinned_slots_{0};
};

/// The reader's side: a peer's segment mapped in this process.
class in_segment {
public:
  /// Maps the segment `x` names; null with `error` set if it cannot be
  /// opened or is not what `x` says (size, seals, tag). `max_size` bounds
  /// the size a peer may announce.
  static std::unique_ptr<in_segment>
  open(const segment_info& x, std::size_t max_size, std::string& error);

  ~in_segment();

  in_segment(const in_segment&) = delete;
  in_segment& operator=(const in_segment&) = delete;

  /// True if `x` lies within the segment.
  bool valid(const segment_slot& x) const noexcept;

  /// Where a valid slot's bytes lie, to be read there (the writer may
  /// still change them: read each byte once) until the slot is released.
  const char* at(const segment_slot& x) const noexcept {
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return data_ + x.offset;
  }

  /// Tells the writer the slot is free.
  void release(const segment_slot& x);

  /// The file mapped (device and inode): one segment serves one peer.
  std::pair<uint64_t, uint64_t> file() const noexcept {
    return file_;
  }

  /// Bytes for messages.
  uint64_t size() const noexcept {
    return size_;
  }

  /// Bytes of messages read where they lie and not yet released (kept by
  /// whoever reads them that way).
  std::atomic<uint64_t> viewed{0};

private:
  in_segment() = default;

  std::pair<uint64_t, uint64_t> file_;

  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  uint32_t* flags_ = nullptr;
  const char* data_ = nullptr;
  uint64_t size_ = 0;
};

/// The bytes a segment announcement carries, and back.
std::vector<char> encode(const segment_info& x);
bool decode(const void* data, std::size_t size, segment_info& x);

/// The bytes that place a message in a segment, and back.
constexpr std::size_t segment_slot_size = 20;
void encode(const segment_slot& x, char* out);
segment_slot decode_slot(const char* in);

/// Megabytes of a plane's shared-memory segment per peer on its host
/// (plane_options::shared_segment) unless ACTORPS_UCX_SEGMENT_MB says
/// otherwise, and the most it may say.
constexpr std::size_t default_segment_mb = 64;
constexpr std::size_t max_segment_mb = 1024;

/// The segment size ACTORPS_UCX_SEGMENT_MB asks for, in bytes (the default
/// when it is not set); false with `error` set if it is no number of
/// megabytes within bounds.
bool segment_size_from_env(std::size_t& bytes, std::string& error);

} // namespace actorps::ucx
