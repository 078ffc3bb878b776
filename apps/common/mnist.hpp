// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "core/errc.hpp"

/// Reading (Fashion-)MNIST's idx files, plain or gzip-compressed. Free of
/// CAF.
namespace actorps::apps {

/// Images as columns of floats in [0, 1] (one 784-float column per image)
/// and their labels 0..9.
struct dataset {
  Eigen::MatrixXf images;
  std::vector<uint8_t> labels;

  /// Number of samples.
  Eigen::Index size() const {
    return images.cols();
  }
};

/// Where Debian's dataset-fashion-mnist package puts the files.
constexpr const char* default_data_dir = "/usr/share/datasets/fashion-mnist";

/// Reads one split ("train" or "t10k") from `dir`: `<split>-images-idx3-
/// ubyte.gz` and `<split>-labels-idx1-ubyte.gz`. Checks magic numbers,
/// dimensions (28x28) and that both files hold the same number of samples.
/// Errors (`bad_config`) name the offending path and what was wrong.
status load_split(const std::string& dir, const std::string& split,
                  dataset& out);

/// The checks and decoding of `load_split` on the files' contents (`img`
/// and `lab`, decompressed), whose paths name them in errors.
status parse_split(const std::vector<uint8_t>& img,
                   const std::vector<uint8_t>& lab,
                   const std::string& images_path,
                   const std::string& labels_path, dataset& out);

/// Writes a split in the same format (gzip), e.g. for tests.
status write_split(const std::string& dir, const std::string& split,
                   const dataset& data);

} // namespace actorps::apps
