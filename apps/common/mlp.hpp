// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>

/// A multilayer perceptron (ReLU hidden layers, softmax cross-entropy) with
/// batched Eigen products. Free of CAF: the training loop moves its
/// parameters through actorps, one key per tensor.
namespace actorps::apps {

class mlp {
public:
  /// Layer widths, input first: {784, 256, 128, 10} by default.
  explicit mlp(std::vector<Eigen::Index> widths = {784, 256, 128, 10});

  /// Parameter tensors in order w1, b1, w2, b2, ...: w_i is
  /// widths[i] x widths[i-1] (column-major), b_i a column of widths[i].
  std::vector<Eigen::MatrixXf>& params() {
    return params_;
  }

  const std::vector<Eigen::MatrixXf>& params() const {
    return params_;
  }

  /// Key names of the parameters: "w1", "b1", "w2", ...
  const std::vector<std::string>& names() const {
    return names_;
  }

  /// Glorot-uniform weights and zero biases from `seed` (reproducible).
  void init(uint32_t seed);

  /// Mean softmax cross-entropy of the batch `x` (one sample per column) with
  /// `labels`; fills `grads` (shapes of params()) with the gradient of that
  /// mean.
  float gradients(const Eigen::Ref<const Eigen::MatrixXf>& x,
                  const uint8_t* labels, std::vector<Eigen::MatrixXf>& grads);

  /// Fraction of correctly classified columns of `x`.
  double accuracy(const Eigen::Ref<const Eigen::MatrixXf>& x,
                  const std::vector<uint8_t>& labels);

private:
  // Forward pass into acts_ (acts_[0] is the input's copy-free view).
  void forward(const Eigen::Ref<const Eigen::MatrixXf>& x);

  std::vector<Eigen::Index> widths_;
  std::vector<Eigen::MatrixXf> params_;
  std::vector<std::string> names_;
  // Workspaces reused across batches of the same size.
  std::vector<Eigen::MatrixXf> acts_;
  std::vector<Eigen::MatrixXf> deltas_;
};

} // namespace actorps::apps
