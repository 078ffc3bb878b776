// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <actorps/core/errc.hpp>
#include <actorps/core/file_system.hpp>
#include <actorps/core/values.hpp>

/// Checkpoint encoding of optimizer state and weights, free of CAF.
///
/// File layout (all integers little-endian):
///   magic "ACTORPS\x01" (8 bytes)
///   then records, each:  u32 payload length | u32 CRC-32 of payload | payload
///   record 0 payload: the optimizer_config
///   record 1..n payload: one slice_record each
///   last record payload: the ASCII text "END" followed by u64 record count
/// Strings are u32 length + bytes; float arrays are u64 count + raw float32.
/// Field order: optimizer_config is name, learning_rate, momentum,
/// weight_decay, rescale_grad, clip_gradient, beta1, beta2, epsilon, rho (each
/// float as its 32-bit pattern, as a u32), ascent (u8, 0 or 1), then
/// lr_schedule, u64 lr_updates, lr_factor, lr_final (a record that ends after
/// ascent, as written before schedules existed, reads as the defaults), then
/// u8 dump_optimizer, written only as 1 (load_optimizer_states takes these
/// settings too; a record that ends before it reads as 0);
/// slice_record is u32 key_id, key, u32 part, u64 offset, u64 step, value,
/// state, row_steps (u64 count + u64 each; a record that ends after state,
/// as written before row tables existed, has none). The end record's count is
/// the number of slice records (n). Bytes after the end record or left over
/// inside a payload are corruption too. A missing end record, a short read, a
/// bad length or a CRC mismatch is `errc::checkpoint_corrupt`, with a message
/// saying which record and why.
namespace actorps::core {

/// CRC-32 (IEEE 802.3, reflected, as zlib's crc32) of `n` bytes.
uint32_t crc32(const void* data, std::size_t n) noexcept;

/// Bytes the payload of `x`'s record takes (u64: a table's part may hold
/// more than a record's u32 length can say).
uint64_t record_payload_size(std::size_t key_bytes, uint64_t values,
                             uint64_t state, uint64_t row_steps) noexcept;

/// The same for one record as it is.
uint64_t record_payload_size(const slice_record& x) noexcept;

/// Whether one record fits the format (see below).
status check_encodable(const slice_record& rec);

/// Whether every record of `snapshot` fits the format (a payload below
/// 4 GiB: a dense slice always does; a shard's part of a large table with
/// its optimizer state may not); `checkpoint_io` naming the first that
/// does not, and what to do about it.
status check_encodable(const state_snapshot& snapshot);

/// Encodes a snapshot into the checkpoint byte format.
/// Precondition: `check_encodable(snapshot)` holds.
std::vector<char> encode_checkpoint(const state_snapshot& snapshot);

/// Decodes bytes produced by `encode_checkpoint`; `slices[i].key` and all
/// other fields round-trip exactly (floats bit for bit). On failure `out` is
/// left unchanged. Runs core::checkpoint_reader (checkpoint_stream.hpp) over
/// the bytes: one parser for files and buffers.
status decode_checkpoint(const std::vector<char>& bytes, state_snapshot& out);

/// Writes `bytes` to `path` atomically: to "<path>.tmp", flush, fsync,
/// rename over `path`; the temporary file is removed on failure. Errors are
/// `errc::checkpoint_io` naming the path and the system error.
status write_file_atomic(const std::string& path,
                         const std::vector<char>& bytes,
                         file_system& fs = posix_file_system());

/// Reads the whole file; `errc::checkpoint_io` naming the path on failure
/// (also for anything but a regular file: a device such as /dev/zero would
/// never end), with `out` left unchanged.
status read_file(const std::string& path, std::vector<char>& out,
                 file_system& fs = posix_file_system());

} // namespace actorps::core
