// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <actorps/core/compression.hpp>

/// Values that the pure libraries compute on and the actors exchange: float
/// payloads, slice ids, key layouts, optimizer settings and saved state.
/// Free of CAF: their wire encoding (`inspect` overloads and the raw-byte
/// serializers) lives in `messages/types.hpp`, which includes this header.
namespace actorps {

/// A dense float32 payload. Crosses the network as one codec tag and one
/// raw byte run (both ends must share endianness), not element by element.
/// With an `encoding` other than none, the floats cross the network packed,
/// 2 bytes (fp16) or 2 bits (two_bit) a value. Quantized by that codec first
/// (see `quantize`), they arrive as the same floats; fp16 packing truncates
/// as quantizing does, so fp16 floats may also be sent unquantized.
struct floats {
  std::vector<float> data;
  compression encoding{};
};

/// A float buffer shared by reference: copying a `shared_floats` (as CAF does
/// with the messages that hold one) never copies the floats. While shared it
/// is read-only; `mutate` and `take` copy it first if anyone else holds it,
/// so a shard can hand its value to a reader and keep updating it safely
/// (copy on write). Crosses the network as one raw byte run, like `floats`.
class shared_floats {
public:
  shared_floats() = default;

  /// Takes over `x` without copying it.
  explicit shared_floats(std::vector<float> x);

  /// A view of the `n` floats at `data`, valid while `keep` (and every copy
  /// of this) lives: memory that is not ours to change, such as a pulled
  /// value in a peer's shared-memory segment (runtime/ucx/segment.hpp),
  /// read where it lies. Read-only like a shared buffer: `vec`, `mutate`
  /// and `take` copy it into a buffer of its own first.
  shared_floats(std::shared_ptr<const void> keep, const float* data,
                std::size_t n);

  shared_floats(const shared_floats&) = default;
  shared_floats& operator=(const shared_floats&) = default;

  /// Moved from, a view (or buffer) is left empty, never pointing at
  /// memory it no longer keeps.
  shared_floats(shared_floats&& other) noexcept;
  shared_floats& operator=(shared_floats&& other) noexcept;

  const float* data() const noexcept {
    return buf_ ? buf_->data() : view_;
  }

  std::size_t size() const noexcept {
    return buf_ ? buf_->size() : view_size_;
  }

  bool empty() const noexcept {
    return size() == 0;
  }

  /// Fetches what `size` reads into the cache, without waiting for it (a
  /// batch over 10000 small slices reads one after another).
  [[gnu::always_inline]] void prefetch_size() const noexcept {
    if (buf_)
      __builtin_prefetch(buf_.get());
  }

  /// Fetches the first floats for writing (call `prefetch_size` a while
  /// before: this reads where they lie).
  [[gnu::always_inline]] void prefetch_data() const noexcept {
    if (buf_)
      __builtin_prefetch(buf_->data(), 1);
  }

  /// The floats, read-only (a view is copied into a buffer of its own
  /// first: not while another thread reads this object).
  const std::vector<float>& vec() const;

  /// True if this is a view (see above).
  bool is_view() const noexcept {
    return view_ != nullptr;
  }

  /// True if no other `shared_floats` refers to this buffer (never for a
  /// view).
  bool unique() const noexcept;

  /// The buffer for writing: copied first if it is shared.
  std::vector<float>& mutate();

  /// Moves the buffer out if this is its only holder, else copies it; this
  /// object is empty afterwards.
  std::vector<float> take();

private:
  // Copies a view into a buffer of its own, letting go of what it viewed.
  void own() const;

  mutable std::shared_ptr<std::vector<float>> buf_;
  // A view: its floats and what keeps them (buf_ is null then).
  mutable std::shared_ptr<const void> keep_;
  mutable const float* view_ = nullptr;
  mutable std::size_t view_size_ = 0;
};

/// `length` floats of buffer `buffer` of a `float_parts`, starting at
/// `from` in that buffer, which hold the floats [at, at + length) of the
/// value.
struct float_piece {
  uint32_t buffer = 0;
  uint64_t from = 0;
  uint64_t at = 0;
  uint64_t length = 0;
};

/// A value of `size` floats held as pieces of shared buffers (a scatter /
/// gather list): the payload between a client and its worker actor. Large
/// slices travel in buffers of their own, moved or shared end to end
/// instead of being packed into (and cut out of) one big vector; a pulled
/// slice may share the shard's own buffer (see `shared_floats`).
///
/// A pushed value's pieces must be in order and contiguous (piece i starts
/// where piece i-1 ends, the first at 0, the last ends at `size`); a pulled
/// value's pieces cover every float once, in any order.
struct float_parts {
  uint64_t size = 0;
  std::vector<shared_floats> buffers;
  std::vector<float_piece> pieces;

  float_parts() = default;

  /// One buffer holding the whole value (tests, small values).
  explicit float_parts(std::vector<float> x);

  /// Appends all of `buf` as the floats [size, size + buf.size()).
  void append(shared_floats buf);

  /// Checks that every piece lies inside its buffer and inside [0, size);
  /// with `contiguous`, also that the pieces are in order without gaps.
  bool valid(bool contiguous) const;

  /// Copies every piece to `dst + at` (`dst` holds `size` floats).
  void copy_to(float* dst) const;

  /// The value as one vector.
  std::vector<float> flatten() const;
};

/// Identifies one contiguous slice of one key: `(key_id << 32) | part`.
using slice_id = uint64_t;

/// Builds the id of slice `part` of key `key_id`.
constexpr slice_id make_slice_id(uint32_t key_id, uint32_t part) noexcept {
  return (static_cast<uint64_t>(key_id) << 32) | part;
}

/// Key id of a slice id.
constexpr uint32_t key_of(slice_id id) noexcept {
  return static_cast<uint32_t>(id >> 32);
}

/// Part index of a slice id.
constexpr uint32_t part_of(slice_id id) noexcept {
  return static_cast<uint32_t>(id & 0xFFFFFFFFu);
}

/// What each operation of a `slice_batch` does to its slice.
enum class op_kind : uint8_t {
  /// Contributes the slice's part of `slice_batch::data`.
  push = 0,
  /// Reads the slice.
  pull = 1,
  /// A push, then a pull of the value it produced (MXNet's pushpull): in sync
  /// mode the pull waits for the push's round, as a separate pull would.
  push_pull = 2,
};

/// Names the update rule and its hyper-parameters, as MXNet's optimizers
/// take them. Names: "assign" (no optimizer: value = merged push),
/// "accumulate" (value += merged push), "sgd" (with `momentum` > 0: heavy
/// ball), "nesterov", "adagrad", "adam", "rmsprop". The exact formulas are in
/// `core/optimizer.hpp`.
struct optimizer_config {
  std::string name = "assign";
  float learning_rate = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  /// Gradients are multiplied by this before anything else.
  float rescale_grad = 1.0f;
  /// Clip rescaled gradients to [-clip, clip]; <= 0 disables clipping.
  float clip_gradient = -1.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  /// Below 0: the optimizer's default, as MXNet's (1e-7 for adagrad, 1e-8
  /// for adam and rmsprop); see core::epsilon_of.
  float epsilon = -1.0f;
  /// Decay of RMSProp's running mean of squared gradients (MXNet `gamma1`).
  float rho = 0.9f;
  /// Gradient ascent instead of descent (the gradient's sign is flipped).
  bool ascent = false;
  /// Learning-rate schedule over a slice's update count t (as MXNet's
  /// lr_scheduler, kept on the servers with the optimizer state):
  /// "constant"; "factor": learning_rate * lr_factor^floor(t / lr_updates),
  /// never below lr_final (MXNet's FactorScheduler); "cosine": from
  /// learning_rate down to lr_final along half a cosine over lr_updates
  /// updates, counted from 1 as MXNet's CosineScheduler, lr_final after that.
  std::string lr_schedule = "constant";
  /// Updates per decay ("factor") or until lr_final ("cosine").
  uint64_t lr_updates = 0;
  float lr_factor = 1.0f;
  float lr_final = 0.0f;
};

/// Saved state of one slice: weights, optimizer state and update count.
/// `key` is empty when a shard produces the record (shards know ids only)
/// and filled by whoever maps ids to names.
struct slice_record {
  uint32_t key_id = 0;
  std::string key;
  uint32_t part = 0;
  uint64_t offset = 0;
  uint64_t step = 0;
  floats value;
  floats state;
  /// A row table's slice: each row's update count (empty for dense slices,
  /// and in checkpoints written before row tables).
  std::vector<uint64_t> row_steps;
  /// A piece of a slice (saves and loads move a large slice in pieces):
  /// where the piece begins in the slice, in floats (a table's piece holds
  /// whole rows: a multiple of the row size), and the whole slice's floats;
  /// 0 and 0 for a whole slice. A dense piece's state holds its blocks
  /// (see core::state_size) each as long as the piece; a table piece's
  /// state is its rows' state, row after row.
  uint64_t first = 0;
  uint64_t total = 0;
  /// How many slices the key had where this record was saved (0: not
  /// known, in checkpoints written before pieces): a table saved over S
  /// shards has S parts, and its rows go back where this store keeps them.
  uint32_t parts = 0;
  /// Only between a coordinator and a shard loading a table that another
  /// number of shards saved: the local row of this slice each row of
  /// `value` belongs to (empty: the rows from `first` on, in order).
  std::vector<uint64_t> rows;

  /// The whole slice's floats.
  uint64_t slice_floats() const noexcept {
    return total != 0 ? total : value.data.size();
  }
};

/// The optimizer and every slice of one shard (or, merged, of a store).
struct state_snapshot {
  optimizer_config optimizer;
  std::vector<slice_record> slices;
};

/// One contiguous slice of a key and the shard that owns it.
struct slice_range {
  uint32_t part = 0;
  uint32_t shard = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

/// What the coordinator knows of a key: its wire id, shape and slices.
/// (Its numbers lie first: a call naming many keys reads them for each.)
struct key_info {
  uint32_t id = 0;
  uint64_t size = 0;
  /// A row-sparse table of shape [rows, dim]: its row size, and one slice
  /// per shard s < rows (part s, its rows s, s + S, ...; see
  /// core/rows.hpp). 0: a dense key.
  uint64_t dim = 0;
  std::string name;
  std::vector<uint64_t> shape;
  std::vector<slice_range> slices;
};

} // namespace actorps
