// SPDX-License-Identifier: BSD-3-Clause
#include "apps/common/mnist.hpp"

#include <cerrno>
#include <cstring>

#include <zlib.h>

namespace actorps::apps {

namespace {

constexpr uint32_t images_magic = 0x00000803;
constexpr uint32_t labels_magic = 0x00000801;
constexpr uint32_t side = 28;

// A gzip (or plain) file read in full; gzread handles both.
status read_all(const std::string& path, std::vector<uint8_t>& out) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr)
    return {errc::bad_config,
            "cannot open " + path + ": "
              + (errno != 0 ? std::strerror(errno) : "unknown error")
              + " (install Debian's dataset-fashion-mnist or pass --data)"};
  out.clear();
  uint8_t buf[1 << 16];
  for (;;) {
    auto n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int code = 0;
      std::string why = gzerror(f, &code);
      gzclose(f);
      return {errc::bad_config, "corrupt file " + path + ": " + why};
    }
    if (n == 0)
      break;
    out.insert(out.end(), buf, buf + n);
  }
  gzclose(f);
  return {};
}

uint32_t big_endian(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16)
         | (uint32_t{b[at + 2]} << 8) | uint32_t{b[at + 3]};
}

status bad(const std::string& path, const std::string& what) {
  return {errc::bad_config, "corrupt file " + path + ": " + what};
}

} // namespace

status load_split(const std::string& dir, const std::string& split,
                  dataset& out) {
  auto images_path = dir + "/" + split + "-images-idx3-ubyte.gz";
  auto labels_path = dir + "/" + split + "-labels-idx1-ubyte.gz";
  std::vector<uint8_t> img;
  std::vector<uint8_t> lab;
  if (auto st = read_all(images_path, img); !st.ok())
    return st;
  if (auto st = read_all(labels_path, lab); !st.ok())
    return st;
  return parse_split(img, lab, images_path, labels_path, out);
}

status parse_split(const std::vector<uint8_t>& img,
                   const std::vector<uint8_t>& lab,
                   const std::string& images_path,
                   const std::string& labels_path, dataset& out) {
  if (img.size() < 16 || big_endian(img, 0) != images_magic)
    return bad(images_path, "not an idx3 image file (bad magic number)");
  if (lab.size() < 8 || big_endian(lab, 0) != labels_magic)
    return bad(labels_path, "not an idx1 label file (bad magic number)");
  auto n = big_endian(img, 4);
  if (big_endian(img, 8) != side || big_endian(img, 12) != side)
    return bad(images_path, "images are not 28x28");
  if (img.size() != 16 + uint64_t{n} * side * side)
    return bad(images_path, "holds " + std::to_string(img.size() - 16)
                              + " pixel bytes, header says " + std::to_string(n)
                              + " images");
  auto m = big_endian(lab, 4);
  if (lab.size() != 8 + uint64_t{m})
    return bad(labels_path, "holds " + std::to_string(lab.size() - 8)
                              + " labels, header says " + std::to_string(m));
  if (m != n)
    return {errc::bad_config, images_path + " has " + std::to_string(n)
                                + " images but " + labels_path + " has "
                                + std::to_string(m) + " labels"};
  dataset d;
  d.images.resize(side * side, n);
  const uint8_t* pixels = img.data() + 16;
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t p = 0; p < side * side; ++p)
      d.images(p, i) = pixels[uint64_t{i} * side * side + p] / 255.0f;
  d.labels.assign(lab.begin() + 8, lab.end());
  for (auto l : d.labels)
    if (l > 9)
      return bad(labels_path, "label " + std::to_string(l) + " is not 0..9");
  out = std::move(d);
  return {};
}

namespace {

void put_big_endian(std::vector<uint8_t>& b, uint32_t x) {
  b.push_back(static_cast<uint8_t>(x >> 24));
  b.push_back(static_cast<uint8_t>(x >> 16));
  b.push_back(static_cast<uint8_t>(x >> 8));
  b.push_back(static_cast<uint8_t>(x));
}

status write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr)
    return {errc::bad_config, "cannot write " + path};
  auto n = gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  auto rc = gzclose(f);
  if (n != static_cast<int>(bytes.size()) || rc != Z_OK)
    return {errc::bad_config, "cannot write " + path};
  return {};
}

} // namespace

status write_split(const std::string& dir, const std::string& split,
                   const dataset& data) {
  auto n = static_cast<uint32_t>(data.size());
  std::vector<uint8_t> img;
  put_big_endian(img, images_magic);
  put_big_endian(img, n);
  put_big_endian(img, side);
  put_big_endian(img, side);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t p = 0; p < side * side; ++p)
      img.push_back(static_cast<uint8_t>(data.images(p, i) * 255.0f + 0.5f));
  std::vector<uint8_t> lab;
  put_big_endian(lab, labels_magic);
  put_big_endian(lab, n);
  lab.insert(lab.end(), data.labels.begin(), data.labels.end());
  if (auto st = write_gz(dir + "/" + split + "-images-idx3-ubyte.gz", img);
      !st.ok())
    return st;
  return write_gz(dir + "/" + split + "-labels-idx1-ubyte.gz", lab);
}

} // namespace actorps::apps
