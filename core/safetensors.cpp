// SPDX-License-Identifier: BSD-3-Clause
#include "core/safetensors.hpp"

#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/layout.hpp"

namespace actorps::core {

status encode_safetensors(const std::vector<named_tensor>& tensors,
                          const std::map<std::string, std::string>& metadata,
                          std::vector<char>& out) {
  static_assert(sizeof(float) == 4, "float32 values");
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "safetensors stores little-endian floats");
  using json = nlohmann::ordered_json;
  json header = json::object();
  if (!metadata.empty()) {
    json meta = json::object();
    for (const auto& [k, v] : metadata)
      meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second)
      return {errc::bad_config, "export: the tensor name '" + t.name
                                  + "' is reserved or repeated"};
    if (shape_size(t.shape) != t.size)
      return {errc::shape_mismatch,
              "export: tensor '" + t.name + "' has " + std::to_string(t.size)
                + " floats, its shape " + shape_string(t.shape) + " needs "
                + std::to_string(shape_size(t.shape))};
    auto bytes = uint64_t{t.size} * sizeof(float);
    header[t.name] = {{"dtype", "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  // Non-ASCII names stay UTF-8; invalid UTF-8 is replaced, not thrown.
  auto text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');
  out.clear();
  out.reserve(8 + text.size() + offset);
  auto n = static_cast<uint64_t>(text.size());
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.insert(out.end(), text.begin(), text.end());
  // Little-endian floats: this machine's order on every platform actorps
  // builds for (x86-64, aarch64).
  for (const auto& t : tensors) {
    auto at = out.size();
    out.resize(at + t.size * sizeof(float));
    if (t.size > 0)
      std::memcpy(out.data() + at, t.data, t.size * sizeof(float));
  }
  return {};
}

} // namespace actorps::core
