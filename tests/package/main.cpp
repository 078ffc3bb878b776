// SPDX-License-Identifier: BSD-3-Clause
// The README's embedding example, built against the installed package.
#include <iostream>

#include <actorps/messages/errors.hpp>
#include <actorps/runtime/kvstore.hpp>

int main() {
  auto kv = actorps::kvstore::create("local"); // 1 worker, 2 shards
  if (!kv) {
    std::cerr << actorps::render(kv.error()) << '\n';
    return 1;
  }
  actorps::optimizer_config sgd;
  sgd.name = "sgd";
  sgd.learning_rate = 0.1f;
  Eigen::VectorXf w = Eigen::VectorXf::Ones(4);
  Eigen::VectorXf grad = Eigen::VectorXf::Constant(4, 2.0f);
  if (auto err = kv->set_optimizer(sgd);
      err || (err = kv->init("w", w)) || (err = kv->push("w", grad, 1))) {
    std::cerr << actorps::render(err) << '\n';
    return 1;
  }
  auto ticket = kv->pull("w", w); // returns at once
  if (!ticket || kv->wait(*ticket))
    return 1;
  std::cout << "w = " << w.transpose() << '\n'; // 1 - 0.1 * 2 = 0.8
  return w.isApproxToConstant(0.8f) ? 0 : 1;
}
