// SPDX-License-Identifier: BSD-3-Clause
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/safetensors.hpp"

using namespace actorps;
using namespace actorps::core;

namespace {

uint64_t header_length(const std::vector<char>& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(file[i]);
  return n;
}

} // namespace

TEST_CASE("safetensors: the header names each tensor, the data follows "
          "aligned",
          "[safetensors]") {
  std::vector<float> a{1.5f, -2.0f, 3.25f, 4.0f, 5.0f, 6.0f};
  std::vector<float> b{7.0f};
  std::vector<char> file;
  REQUIRE(encode_safetensors({{"w", {2, 3}, a.data(), a.size()},
                              {"b", {1}, b.data(), b.size()}},
                             {{"producer", "test"}}, file)
            .ok());
  auto n = header_length(file);
  REQUIRE(file.size() == 8 + n + (a.size() + b.size()) * sizeof(float));
  CHECK((8 + n) % 8 == 0);
  std::string header(file.data() + 8, n);
  CHECK(
    header.find(R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})")
    != std::string::npos);
  CHECK(header.find(R"("b":{"dtype":"F32","shape":[1],"data_offsets":[24,28]})")
        != std::string::npos);
  CHECK(header.find(R"("__metadata__":{"producer":"test"})")
        != std::string::npos);
  // The values, little-endian, in order.
  std::vector<float> data(a.size() + b.size());
  std::memcpy(data.data(), file.data() + 8 + n, data.size() * sizeof(float));
  CHECK(std::vector<float>(data.begin(), data.begin() + 6) == a);
  CHECK(data[6] == 7.0f);
}

TEST_CASE("safetensors: repeated or reserved names and wrong sizes are "
          "refused",
          "[safetensors]") {
  std::vector<float> a{1, 2};
  std::vector<char> file;
  CHECK(encode_safetensors({{"w", {2}, a.data(), 2}, {"w", {2}, a.data(), 2}},
                           {}, file)
          .code
        == errc::bad_config);
  CHECK(encode_safetensors({{"__metadata__", {2}, a.data(), 2}}, {}, file).code
        == errc::bad_config);
  CHECK(encode_safetensors({{"w", {3}, a.data(), 2}}, {}, file).code
        == errc::shape_mismatch);
  // A name JSON must escape stays one valid string.
  REQUIRE(encode_safetensors({{"a\"b\\c", {2}, a.data(), 2}}, {}, file).ok());
  std::string header(file.data() + 8, header_length(file));
  CHECK(header.find(R"("a\"b\\c")") != std::string::npos);
}
