#include <iostream>

#include <actorps/messages/errors.hpp>
#include <actorps/runtime/kvstore.hpp>

int main() {
  auto kv = actorps::kvstore::create("local"); // in-process: 1 worker, 2 shards
  if (!kv)
    return std::cerr << actorps::render(kv.error()) << '\n', 1;
  actorps::optimizer_config sgd;
  sgd.name = "sgd";
  sgd.learning_rate = 0.1f;
  Eigen::VectorXf w = Eigen::VectorXf::Ones(4);
  Eigen::VectorXf grad = Eigen::VectorXf::Constant(4, 2.0f);
  caf::error err = kv->set_optimizer(sgd);
  if (!err)
    err = kv->init("w", w);
  if (!err)
    err = kv->push("w", grad, /*priority=*/1); // returns at once
  auto ticket = kv->pull("w", w);              // returns at once
  if (!err && ticket)
    err = kv->wait(*ticket); // now w holds the pulled value
  if (err || !ticket)
    return std::cerr << actorps::render(err ? err : ticket.error()) << '\n', 1;
  std::cout << "w = " << w.transpose() << '\n'; // 1 - 0.1 * 2 = 0.8
}
