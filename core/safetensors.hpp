// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <actorps/core/errc.hpp>

/// The safetensors format (Hugging Face's, read by PyTorch, numpy, JAX and
/// most ML tools): an 8-byte little-endian length N, N bytes of JSON naming
/// each tensor's dtype, shape and byte range, then the tensors' raw bytes,
/// back to back. actorps writes float32 tensors ("F32") only.
namespace actorps::core {

/// One float32 tensor to write; `data` holds `size` floats (the product of
/// `shape`) and must outlive the call.
struct named_tensor {
  std::string name;
  std::vector<uint64_t> shape;
  const float* data = nullptr;
  std::size_t size = 0;
};

/// The safetensors file of `tensors`, in their order, with string
/// `metadata` ("__metadata__"; empty: none). The JSON header is padded
/// with spaces to a multiple of 8 bytes, so that the data starts aligned.
/// Refuses (bad_config) a repeated name, the name "__metadata__", and a
/// size that does not match the shape.
status encode_safetensors(const std::vector<named_tensor>& tensors,
                          const std::map<std::string, std::string>& metadata,
                          std::vector<char>& out);

} // namespace actorps::core
