// SPDX-License-Identifier: BSD-3-Clause
#pragma once

// The record codec of core/checkpoint.cpp, shared with the streaming
// writer and reader (core/checkpoint_stream.cpp). Internal: not installed.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/values.hpp"

namespace actorps::core::codec {

constexpr std::size_t magic_size = 8;
constexpr std::size_t record_header_size = 8;

/// The file's first 8 bytes.
const char* magic_bytes() noexcept;

/// Appends one framed record (length, CRC, payload) to `buf`.
/// `settings`: saved with dump_optimizer (see checkpoint.hpp).
void append_record(std::vector<char>& buf, const optimizer_config& x,
                   bool settings = false);
void append_record(std::vector<char>& buf, const slice_record& x);
void append_end_record(std::vector<char>& buf, uint64_t count);

uint32_t load_u32(const char* p) noexcept;

/// Parses one payload; an empty string on success, else what is wrong.
std::string parse(const char* payload, std::size_t len, optimizer_config& x,
                  bool& settings);
std::string parse(const char* payload, std::size_t len, slice_record& x);

/// Whether the payload is the end record; `count` its slice record count.
bool parse_end(const char* payload, std::size_t len, uint64_t& count);

} // namespace actorps::core::codec
