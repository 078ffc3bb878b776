// SPDX-License-Identifier: BSD-3-Clause
#include "apps/common/mlp.hpp"

#include <cmath>
#include <random>

namespace actorps::apps {

mlp::mlp(std::vector<Eigen::Index> widths) : widths_(std::move(widths)) {
  for (size_t i = 1; i < widths_.size(); ++i) {
    params_.emplace_back(Eigen::MatrixXf::Zero(widths_[i], widths_[i - 1]));
    params_.emplace_back(Eigen::MatrixXf::Zero(widths_[i], 1));
    names_.push_back("w" + std::to_string(i));
    names_.push_back("b" + std::to_string(i));
  }
}

void mlp::init(uint32_t seed) {
  std::mt19937 rng{seed};
  for (size_t l = 0; l + 1 < widths_.size(); ++l) {
    auto& w = params_[2 * l];
    auto limit = std::sqrt(6.0f / static_cast<float>(w.rows() + w.cols()));
    std::uniform_real_distribution<float> dist{-limit, limit};
    for (Eigen::Index j = 0; j < w.cols(); ++j)
      for (Eigen::Index i = 0; i < w.rows(); ++i)
        w(i, j) = dist(rng);
    params_[2 * l + 1].setZero();
  }
}

void mlp::forward(const Eigen::Ref<const Eigen::MatrixXf>& x) {
  auto layers = widths_.size() - 1;
  acts_.resize(layers + 1);
  for (size_t l = 0; l < layers; ++l) {
    Eigen::Ref<const Eigen::MatrixXf> in
      = l == 0 ? x : Eigen::Ref<const Eigen::MatrixXf>{acts_[l]};
    auto& out = acts_[l + 1];
    out.noalias() = params_[2 * l] * in;
    out.colwise() += params_[2 * l + 1].col(0);
    if (l + 1 < layers)
      out = out.cwiseMax(0.0f);
  }
}

float mlp::gradients(const Eigen::Ref<const Eigen::MatrixXf>& x,
                     const uint8_t* labels,
                     std::vector<Eigen::MatrixXf>& grads) {
  auto layers = widths_.size() - 1;
  auto n = x.cols();
  forward(x);
  // Softmax in place on the logits, then the loss and dL/dlogits.
  auto& z = acts_[layers];
  double loss = 0;
  for (Eigen::Index j = 0; j < n; ++j) {
    auto col = z.col(j);
    col.array() -= col.maxCoeff();
    col = col.array().exp();
    col /= col.sum();
    loss -= std::log(std::max(col(labels[j]), 1e-30f));
    col(labels[j]) -= 1.0f;
  }
  deltas_.resize(layers);
  deltas_[layers - 1] = z / static_cast<float>(n);
  grads.resize(params_.size());
  for (size_t l = layers; l-- > 0;) {
    Eigen::Ref<const Eigen::MatrixXf> in
      = l == 0 ? x : Eigen::Ref<const Eigen::MatrixXf>{acts_[l]};
    grads[2 * l].noalias() = deltas_[l] * in.transpose();
    grads[2 * l + 1] = deltas_[l].rowwise().sum();
    if (l > 0) {
      deltas_[l - 1].noalias() = params_[2 * l].transpose() * deltas_[l];
      // ReLU: pass the gradient where the activation was positive.
      deltas_[l - 1].array() *= (acts_[l].array() > 0.0f).cast<float>();
    }
  }
  return static_cast<float>(loss / static_cast<double>(n));
}

double mlp::accuracy(const Eigen::Ref<const Eigen::MatrixXf>& x,
                     const std::vector<uint8_t>& labels) {
  constexpr Eigen::Index chunk = 1000;
  Eigen::Index right = 0;
  for (Eigen::Index first = 0; first < x.cols(); first += chunk) {
    auto n = std::min(chunk, x.cols() - first);
    forward(x.middleCols(first, n));
    const auto& z = acts_.back();
    for (Eigen::Index j = 0; j < n; ++j) {
      Eigen::Index best = 0;
      z.col(j).maxCoeff(&best);
      if (best == labels[first + j])
        ++right;
    }
  }
  return x.cols() == 0
           ? 0.0
           : static_cast<double>(right) / static_cast<double>(x.cols());
}

} // namespace actorps::apps
