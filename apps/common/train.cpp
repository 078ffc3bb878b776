// SPDX-License-Identifier: BSD-3-Clause
#include "apps/common/train.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include "apps/common/mlp.hpp"
#include "core/optimizer.hpp"
#include "messages/errors.hpp"

namespace actorps::apps {

namespace {

using clock_type = std::chrono::steady_clock;

// `updates`: how many updates each slice sees over the whole run.
optimizer_config sgd_momentum(const train_options& opts, float rescale,
                              uint64_t updates) {
  optimizer_config cfg;
  cfg.name = "sgd";
  cfg.learning_rate = opts.learning_rate;
  cfg.momentum = opts.momentum;
  cfg.rescale_grad = rescale;
  if (opts.lr_schedule != "constant") {
    cfg.lr_schedule = opts.lr_schedule;
    cfg.lr_updates = std::max<uint64_t>(updates, 1);
  }
  return cfg;
}

} // namespace

optimizer_config server_optimizer(const train_options& opts, bool sync,
                                  uint32_t workers, uint64_t train_size) {
  if (opts.push_every > 1) {
    // The pushes are weight deltas: the shards move by their mean.
    optimizer_config cfg;
    cfg.name = "sgd";
    cfg.learning_rate = 1.0f;
    cfg.rescale_grad = 1.0f / static_cast<float>(workers);
    return cfg;
  }
  auto steps = train_size / workers / std::max<uint32_t>(opts.batch, 1);
  auto updates = uint64_t{opts.epochs} * steps;
  if (sync) {
    // Sync rounds sum the workers' mean gradients: rescale to their mean.
    return sgd_momentum(opts, 1.0f / static_cast<float>(workers), updates);
  }
  // Asynchrony itself acts like momentum of about 1 - 1/W (Mitliagkas et
  // al., "Asynchrony begets momentum"); keep the total near the requested
  // one. W = 4, momentum 0.9: 0.6 on the shards (diverged at 0.9, measured).
  auto cfg = sgd_momentum(opts, 1.0f, updates * workers);
  cfg.momentum
    = opts.server_momentum >= 0
        ? opts.server_momentum
        : std::max(0.0f,
                   1.0f - static_cast<float>(workers) * (1.0f - opts.momentum));
  return cfg;
}

optimizer_config baseline_optimizer(const train_options& opts,
                                    uint64_t train_size) {
  auto one = opts;
  one.push_every = 1;
  return server_optimizer(one, false, 1, train_size);
}

namespace {

Eigen::Map<Eigen::VectorXf> flat(Eigen::MatrixXf& m) {
  return {m.data(), m.size()};
}

// Copies the columns `idx[first, first + n)` of `d` into `x` and `y`.
void gather(const dataset& d, const std::vector<Eigen::Index>& idx,
            size_t first, Eigen::Index n, Eigen::MatrixXf& x,
            std::vector<uint8_t>& y) {
  x.resize(d.images.rows(), n);
  y.resize(static_cast<size_t>(n));
  for (Eigen::Index j = 0; j < n; ++j) {
    auto i = idx[first + static_cast<size_t>(j)];
    x.col(j) = d.images.col(i);
    y[static_cast<size_t>(j)] = d.labels[static_cast<size_t>(i)];
  }
}

// Reports progress about every 20 steps and at the end of the epoch.
struct epoch_clock {
  clock_type::time_point start = clock_type::now();
  double loss_sum = 0;
  uint64_t steps = 0;

  double seconds() const {
    return std::chrono::duration<double>(clock_type::now() - start).count();
  }
};

// A worker's own SGD with momentum between exchanges (push_every > 1).
struct local_sgd {
  bool on = false;
  optimizer_config cfg;
  std::vector<Eigen::MatrixXf> states;
  std::vector<Eigen::MatrixXf> anchor;
  uint64_t updates = 0;

  local_sgd(const train_options& opts, const std::vector<Eigen::MatrixXf>& ps,
            uint64_t steps_per_epoch)
    : on(opts.push_every > 1) {
    if (!on)
      return;
    auto one = opts;
    one.push_every = 1;
    // One worker's updates over the run: steps_per_epoch x epochs.
    cfg = server_optimizer(one, true, 1, steps_per_epoch * one.batch);
    for (auto& p : ps)
      states.emplace_back(Eigen::MatrixXf::Zero(p.rows(), p.cols()));
    anchor = ps;
  }

  void step(std::vector<Eigen::MatrixXf>& ps,
            std::vector<Eigen::MatrixXf>& grads) {
    for (size_t i = 0; i < ps.size(); ++i)
      core::apply_update(cfg, ps[i].data(), grads[i].data(), states[i].data(),
                         static_cast<size_t>(ps[i].size()), updates);
    ++updates;
  }

  // What to push: the change since the last exchange, as a "gradient"
  // (anchor - now), into `grads`.
  void deltas(const std::vector<Eigen::MatrixXf>& ps,
              std::vector<Eigen::MatrixXf>& grads) const {
    for (size_t i = 0; i < ps.size(); ++i)
      grads[i] = anchor[i] - ps[i];
  }

  // `ps` now holds the store's weights: the next deltas start there.
  void exchanged(const std::vector<Eigen::MatrixXf>& ps) {
    anchor = ps;
  }
};

// Counts the steps of a whole run for `on_step`.
struct step_counter {
  clock_type::time_point start = clock_type::now();
  uint64_t steps = 0;

  void report(const train_callbacks& cb, uint32_t epoch, double loss) {
    ++steps;
    if (cb.on_step)
      cb.on_step(
        {steps, epoch, loss,
         std::chrono::duration<double>(clock_type::now() - start).count()});
  }
};

} // namespace

std::string train_worker(kvstore& kv, const dataset& train, const dataset& test,
                         const train_options& opts, const train_callbacks& cb) {
  auto rank = kv.rank();
  auto workers = kv.num_workers();
  auto fail = [&](const std::string& what, const caf::error& err) {
    return "rank " + std::to_string(rank) + ": " + what + ": " + render(err);
  };
  mlp model;
  model.init(opts.seed);
  auto& params = model.params();
  const auto& names = model.names();
  for (size_t i = 0; i < params.size(); ++i)
    if (auto err = kv.init(names[i], flat(params[i]),
                           {static_cast<uint64_t>(params[i].rows()),
                            static_cast<uint64_t>(params[i].cols())}))
      return fail("init " + names[i], err);
  if (rank == 0)
    if (auto err = kv.set_optimizer(
          server_optimizer(opts, kv.synchronous(), workers,
                           static_cast<uint64_t>(train.size()))))
      return fail("set_optimizer", err);
  if (rank == 0 && !opts.resume.empty())
    if (auto err = kv.load_checkpoint(opts.resume))
      return fail("resume from " + opts.resume, err);
  if (auto err = kv.barrier())
    return fail("barrier", err);
  // This worker's shard of the training set; every shard yields the same
  // number of steps.
  std::vector<Eigen::Index> shard;
  for (Eigen::Index i = rank; i < train.size(); i += workers)
    shard.push_back(i);
  auto steps = static_cast<uint64_t>(train.size() / workers / opts.batch);
  if (steps == 0)
    return "rank " + std::to_string(rank) + ": the training set has "
           + std::to_string(train.size()) + " samples, fewer than one batch "
           + "of " + std::to_string(opts.batch) + " per worker";
  auto layers = params.size();
  // First layers first: their pulls get the highest priority (a step's
  // push_pull carries every layer in one request).
  auto priority = [&](size_t i) { return static_cast<int>(layers - i); };
  auto pull_all = [&]() -> std::string {
    std::vector<pull_ticket> tickets;
    for (size_t i = 0; i < layers; ++i) {
      auto t = kv.pull(names[i], flat(params[i]), priority(i));
      if (!t)
        return fail("pull " + names[i], t.error());
      tickets.push_back(*t);
    }
    for (auto& t : tickets)
      if (auto err = kv.wait(t))
        return fail("pull", err);
    return {};
  };
  std::vector<Eigen::MatrixXf> grads;
  Eigen::MatrixXf x;
  std::vector<uint8_t> y;
  step_counter steps_done;
  // Local SGD (push_every > 1): this worker's own optimizer and the weights
  // of the last exchange.
  local_sgd local{opts, params, steps};
  for (uint32_t epoch = 1; epoch <= opts.epochs; ++epoch) {
    std::mt19937 rng{opts.seed + 1000 * epoch + rank};
    std::shuffle(shard.begin(), shard.end(), rng);
    epoch_clock clock;
    if (auto problem = pull_all(); !problem.empty())
      return problem;
    if (local.on)
      local.exchanged(params);
    for (uint64_t step = 0; step < steps; ++step) {
      gather(train, shard, step * opts.batch, opts.batch, x, y);
      auto loss = model.gradients(x, y.data(), grads);
      clock.loss_sum += loss;
      ++clock.steps;
      if (rank == 0)
        steps_done.report(cb, epoch, loss);
      // Local SGD: a step of its own, and an exchange every K steps (and at
      // the epoch's end) of the weights' change since the last one.
      bool exchange = true;
      if (local.on) {
        local.step(params, grads);
        exchange = (step + 1) % opts.push_every == 0 || step + 1 == steps;
        if (exchange)
          local.deltas(params, grads);
      }
      if (exchange) {
        // One push_pull of every layer: the small ones travel together,
        // one message per shard.
        std::vector<Eigen::Ref<const Eigen::VectorXf>> values;
        std::vector<Eigen::Ref<Eigen::VectorXf>> outs;
        for (size_t i = 0; i < layers; ++i) {
          values.emplace_back(flat(grads[i]));
          outs.emplace_back(flat(params[i]));
        }
        auto t = kv.push_pull_many(names, values, std::move(outs));
        if (!t)
          return fail("push_pull", t.error());
        if (auto err = kv.wait(*t))
          return fail("push_pull", err);
        if (local.on)
          local.exchanged(params);
      }
      if (rank == 0 && cb.on_progress
          && ((step + 1) % 20 == 0 || step + 1 == steps)) {
        auto done = (step + 1) * opts.batch * workers;
        cb.on_progress({epoch, done, steps * opts.batch * workers,
                        clock.loss_sum / double(clock.steps),
                        double(done) / clock.seconds(), step + 1, steps});
      }
    }
    auto seconds = clock.seconds();
    if (auto err = kv.barrier())
      return fail("barrier", err);
    if (rank == 0) {
      if (auto problem = pull_all(); !problem.empty())
        return problem;
      epoch_report r;
      r.epoch = epoch;
      r.loss = clock.loss_sum / double(clock.steps);
      r.accuracy = model.accuracy(test.images, test.labels);
      r.seconds = seconds;
      r.samples_per_s = double(steps * opts.batch * workers) / seconds;
      if (cb.on_epoch)
        cb.on_epoch(r);
    }
  }
  return {};
}

std::string train_baseline(const dataset& train, const dataset& test,
                           const train_options& opts,
                           const train_callbacks& cb) {
  mlp model;
  model.init(opts.seed);
  auto& params = model.params();
  auto cfg = baseline_optimizer(opts, static_cast<uint64_t>(train.size()));
  std::vector<Eigen::MatrixXf> states;
  for (auto& p : params)
    states.emplace_back(Eigen::MatrixXf::Zero(p.rows(), p.cols()));
  std::vector<Eigen::Index> order(static_cast<size_t>(train.size()));
  std::iota(order.begin(), order.end(), Eigen::Index{0});
  auto steps = static_cast<uint64_t>(train.size() / opts.batch);
  if (steps == 0)
    return "the training set has fewer samples than one batch";
  std::vector<Eigen::MatrixXf> grads;
  Eigen::MatrixXf x;
  std::vector<uint8_t> y;
  uint64_t updates = 0;
  step_counter steps_done;
  for (uint32_t epoch = 1; epoch <= opts.epochs; ++epoch) {
    std::mt19937 rng{opts.seed + 1000 * epoch};
    std::shuffle(order.begin(), order.end(), rng);
    epoch_clock clock;
    for (uint64_t step = 0; step < steps; ++step) {
      gather(train, order, step * opts.batch, opts.batch, x, y);
      auto loss = model.gradients(x, y.data(), grads);
      clock.loss_sum += loss;
      ++clock.steps;
      steps_done.report(cb, epoch, loss);
      // The very update rule the shards apply.
      for (size_t i = 0; i < params.size(); ++i)
        core::apply_update(cfg, params[i].data(), grads[i].data(),
                           states[i].data(),
                           static_cast<size_t>(params[i].size()), updates);
      ++updates;
      if (cb.on_progress && ((step + 1) % 20 == 0 || step + 1 == steps)) {
        auto done = (step + 1) * opts.batch;
        cb.on_progress({epoch, done, steps * opts.batch,
                        clock.loss_sum / double(clock.steps),
                        double(done) / clock.seconds(), step + 1, steps});
      }
    }
    epoch_report r;
    r.epoch = epoch;
    r.loss = clock.loss_sum / double(clock.steps);
    r.seconds = clock.seconds();
    r.samples_per_s = double(steps * opts.batch) / r.seconds;
    r.accuracy = model.accuracy(test.images, test.labels);
    if (cb.on_epoch)
      cb.on_epoch(r);
  }
  return {};
}

} // namespace actorps::apps
