// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// The slice ids and sequence numbers of a batch request, packed for the
// wire (the UCX plane's batch frames): 1 byte a slice for keys in order,
// up to 3 for 10000 keys in any order, at most 10 (5 of key delta and flag,
// 5 of part), instead of 16, for the many-small-keys case where ids and
// sequence numbers were most of the bytes sent (10000 keys of 1 float: 352 KB a
// round for 39 KB of values).
//
// Layout, every number an unsigned LEB128 varint of at most 10 bytes whose
// last byte is not 0 unless it is the only one (one encoding per value):
// - per slice, in order: (zigzag(key - previous key) << 1) | (part != 0),
//   then the part if it is not 0 (the first slice's previous key is 0);
// - then runs of equal sequence numbers: per run, zigzag(seq - the previous
//   run's seq) (the first run's previous seq is 0) and its length (>= 1);
//   adjacent runs differ, and the lengths add up to the count of slices.
// No CAF here.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace actorps::core {

/// Most bytes `pack_ids` writes for `n` slices: 10 a slice (5 of key delta
/// and flag, below 2^35; 5 of part) and 20 a run of sequence numbers.
constexpr uint64_t max_packed_ids(uint64_t n) noexcept {
  return n * (10 + 20);
}

/// Bytes that packed ids of `size` bytes take in a frame: padded with zeros
/// to whole 4-byte words (a raw body is whole floats).
constexpr uint64_t padded_ids(uint64_t size) noexcept {
  return (size + 3) / 4 * 4;
}

/// Appends the packed form of `n` slices and their sequence numbers to
/// `out`.
void pack_ids(const uint64_t* slices, const uint64_t* seqs, std::size_t n,
              std::vector<uint8_t>& out);

/// Reads exactly `size` bytes at `data` as the packed form of `n` slices
/// into `slices` and `seqs` (each room for `n`); false, with the outputs
/// unspecified, if they are not exactly that (too short, too long, a
/// varint too long or not in its one form, a key or part beyond 32 bits,
/// a run of length 0 or equal to the one before, runs that do not add up
/// to `n`).
bool unpack_ids(const uint8_t* data, std::size_t size, std::size_t n,
                uint64_t* slices, uint64_t* seqs);

} // namespace actorps::core
