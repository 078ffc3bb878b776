// SPDX-License-Identifier: BSD-3-Clause
#include "bench/cases.hpp"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace actorps::bench {

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB"};
  int u = 0;
  while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + " " + units[u];
}

// "4K", "256K", "4M", "64M", "100" (bytes): one key of that many bytes.
bool parse_size(const std::string& text, uint64_t& bytes) {
  if (text.empty())
    return false;
  uint64_t scale = 1;
  auto digits = text;
  switch (text.back()) {
    case 'K':
    case 'k':
      scale = 1024;
      digits.pop_back();
      break;
    case 'M':
    case 'm':
      scale = 1024 * 1024;
      digits.pop_back();
      break;
    default:
      break;
  }
  if (digits.empty()
      || digits.find_first_not_of("0123456789") != std::string::npos
      || digits.size() > 9)
    return false;
  bytes = std::stoull(digits) * scale;
  return bytes >= sizeof(float) && bytes % sizeof(float) == 0;
}

// A whole number of at most 9 digits.
bool parse_count(const std::string& text, uint64_t& out) {
  if (text.empty() || text.size() > 9
      || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = std::stoull(text);
  return true;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in{text};
  std::string item;
  while (std::getline(in, item, sep))
    if (!item.empty())
      out.push_back(item);
  return out;
}

// The entries of a comma-separated list option; "none" (or nothing) is an
// empty list.
namespace {

std::vector<std::string> list_option(const std::string& text) {
  if (text == "none")
    return {};
  return split(text, ',');
}

} // namespace

// Builds the case list from --sizes ("4K,256K") and --many ("1000x1024",
// keys x floats); "none" turns either off. Returns an error text or an empty
// string.
std::string make_cases(const std::string& sizes, const std::string& many,
                       const std::string& rounds, const std::string& backlog,
                       const compressed_cases& compressed,
                       std::vector<bench_case>& out) {
  std::vector<bool> kinds;
  for (const auto& r : split(rounds, ',')) {
    if (r != "fused" && r != "split")
      return "--round: '" + r + "' is not fused or split";
    kinds.push_back(r == "fused");
  }
  if (kinds.empty())
    return "--round: give fused, split or both";
  std::vector<bench_case> shapes;
  for (const auto& s : list_option(sizes)) {
    uint64_t bytes = 0;
    if (!parse_size(s, bytes))
      return "--sizes: '" + s
             + "' is not a size such as 4K, 256K, 4M or 64M (a multiple of "
               "4 bytes)";
    shapes.push_back({human_bytes(bytes), 1, bytes / sizeof(float)});
  }
  for (const auto& m : list_option(many)) {
    auto parts = split(m, 'x');
    uint64_t keys = 0;
    uint64_t floats = 0;
    if (parts.size() != 2 || !parse_count(parts[0], keys)
        || !parse_count(parts[1], floats) || keys == 0 || keys > 1000000
        || floats == 0)
      return "--many: '" + m
             + "' is not KEYSxFLOATS such as 1000x1024 (keys at most 1e6)";
    shapes.push_back(
      {std::to_string(keys) + " keys x " + std::to_string(floats) + " floats",
       static_cast<uint32_t>(keys), floats});
  }
  for (const auto& c : shapes)
    for (auto fused : kinds) {
      out.push_back(c);
      out.back().fused = fused;
    }
  if (backlog != "0") {
    uint64_t bytes = 0;
    if (!parse_size(backlog, bytes))
      return "--backlog: '" + backlog
             + "' is not a size such as 256M (or 0 for no priority cases)";
    // The same pull at priority 10 and at the backlog's priority 0.
    for (int32_t prio : {10, 0}) {
      bench_case c{"4 KB pull, " + human_bytes(bytes) + " queued", 1, 1024};
      c.priority = prio;
      c.backlog = bytes / sizeof(float);
      out.push_back(c);
    }
  }
  // Compressed pushes: fused rounds of one key per size and codec.
  for (const auto& s : split(compressed.sizes, ',')) {
    uint64_t bytes = 0;
    if (!parse_size(s, bytes))
      return "--compressed-sizes: '" + s + "' is not a size such as 4M";
    for (const auto& text : split(compressed.codecs, ',')) {
      auto c = parse_compression(text);
      if (!c)
        return "--compression: '" + text
               + "' is not fp16, 2bit or 2bit:THRESHOLD";
      if (c->kind == codec::none)
        continue;
      bench_case x{human_bytes(bytes) + " " + text, 1, bytes / sizeof(float),
                   true};
      x.comp = *c;
      out.push_back(x);
    }
  }
  return {};
}

std::string add_row_cases(const std::string& rows,
                          std::vector<bench_case>& out) {
  for (const auto& r : list_option(rows)) {
    auto parts = split(r, 'x');
    uint64_t table = 0;
    uint64_t dim = 0;
    uint64_t batch = 0;
    if (parts.size() != 3 || !parse_count(parts[0], table)
        || !parse_count(parts[1], dim) || !parse_count(parts[2], batch)
        || dim == 0 || dim > 65536 || batch == 0 || batch > 1000000
        || table < batch)
      return "--rows: '" + r
             + "' is not ROWSxDIMxBATCH such as 10000000x16x1000 (rows of "
               "the table, floats per row up to 65536, rows per round up to "
               "1e6 and at most the table's)";
    bench_case c{std::to_string(batch) + " rows x " + std::to_string(dim)
                   + " floats of " + std::to_string(table),
                 static_cast<uint32_t>(batch), dim};
    c.table_rows = table;
    out.push_back(c);
  }
  return {};
}

// Cases travel to the worker processes as
// "keys:floats:fused:priority:backlog:codec:threshold:table_rows;...".
std::string encode_cases(const std::vector<bench_case>& cases) {
  std::string out;
  for (const auto& c : cases) {
    char threshold[32];
    std::snprintf(threshold, sizeof(threshold), "%.9g",
                  static_cast<double>(c.comp.threshold));
    out += std::to_string(c.keys) + ":" + std::to_string(c.floats) + ":"
           + (c.fused ? "1" : "0") + ":" + std::to_string(c.priority + 1) + ":"
           + std::to_string(c.backlog) + ":"
           + std::to_string(static_cast<int>(c.comp.kind)) + ":" + threshold
           + ":" + std::to_string(c.table_rows) + ";";
  }
  return out;
}

std::vector<bench_case> decode_cases(const std::string& text) {
  std::vector<bench_case> out;
  for (const auto& item : split(text, ';')) {
    auto parts = split(item, ':');
    uint64_t keys = 0;
    uint64_t floats = 0;
    uint64_t prio = 0;
    uint64_t backlog = 0;
    uint64_t kind = 0;
    uint64_t table_rows = 0;
    if (parts.size() == 8 && parse_count(parts[0], keys)
        && parse_count(parts[1], floats) && parse_count(parts[3], prio)
        && parse_count(parts[4], backlog) && parse_count(parts[5], kind)
        && kind <= static_cast<uint64_t>(codec::two_bit)
        && parse_count(parts[7], table_rows)) {
      out.push_back({"", static_cast<uint32_t>(keys), floats, parts[2] == "1"});
      out.back().priority = static_cast<int32_t>(prio) - 1;
      out.back().backlog = backlog;
      out.back().comp = compression{static_cast<codec>(kind),
                                    std::strtof(parts[6].c_str(), nullptr)};
      out.back().table_rows = table_rows;
    }
  }
  return out;
}

double weights_mb(const std::vector<bench_case>& cases) {
  uint64_t bytes = 0;
  for (const auto& c : cases)
    bytes += c.row_case() ? c.table_rows * c.floats * sizeof(float)
                          : c.payload_bytes() + c.backlog * sizeof(float);
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

} // namespace actorps::bench
