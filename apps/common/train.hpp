// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "apps/common/mnist.hpp"
#include "runtime/kvstore.hpp"

/// Data-parallel training of an MLP on (Fashion-)MNIST through actorps: each
/// worker trains on its own shard of the training set, pushes gradients
/// (first layers with the highest priority, as P3 does) and pulls fresh
/// weights each step; the shards apply SGD with momentum.
namespace actorps::apps {

struct train_options {
  uint32_t epochs = 10;
  /// Samples per step and worker.
  uint32_t batch = 16;
  float learning_rate = 0.025f;
  float momentum = 0.9f;
  /// Async stores: the momentum the shards run; negative (the default)
  /// derives it from `momentum` (see `server_optimizer`).
  float server_momentum = -1.0f;
  /// "cosine" (down to 0 over all epochs' updates) or "constant".
  std::string lr_schedule = "cosine";
  uint32_t seed = 42;
  /// Steps between two exchanges with the store (Elephas' update
  /// frequency). 1: every step pushes its gradients (the default). K > 1:
  /// local SGD: each worker runs SGD with momentum on its own copy for K
  /// steps and pushes the difference of its weights since the last
  /// exchange; the shards average them (sync: the mean of the workers'
  /// deltas; async: each delta divided by the number of workers). An
  /// epoch's end is always an exchange, so K >= the steps of an epoch
  /// means once per epoch (Elephas' frequency='epoch').
  uint32_t push_every = 1;
  /// A checkpoint file (save_optimizer_states, or the coordinator's
  /// periodic ones) that rank 0 loads after init and set_optimizer, before
  /// the first step: the run goes on from its weights, optimizer and
  /// optimizer state (its epochs count from 1 again). Empty: none.
  std::string resume;
};

/// One epoch's outcome, as rank 0 (or the baseline) saw it.
struct epoch_report {
  uint32_t epoch = 0;
  double loss = 0;
  double accuracy = 0;
  double samples_per_s = 0;
  double seconds = 0;
};

/// Live progress of rank 0 (or the baseline) within an epoch.
struct progress {
  uint32_t epoch = 0;
  uint64_t done = 0;
  uint64_t total = 0;
  double loss = 0;
  double samples_per_s = 0;
  /// Steps of this epoch done so far, and in all.
  uint64_t step = 0;
  uint64_t steps = 0;
};

/// One training step of rank 0 (or the baseline).
struct step_report {
  /// Steps since the start of training, from 1.
  uint64_t step = 0;
  uint32_t epoch = 0;
  /// This step's batch loss.
  double loss = 0;
  /// Wall time since the start of training.
  double seconds = 0;
};

/// Callbacks of a training run (all optional; called on the rank-0 thread).
struct train_callbacks {
  std::function<void(const progress&)> on_progress;
  std::function<void(const epoch_report&)> on_epoch;
  std::function<void(const step_report&)> on_step;
};

/// The optimizer the shards run for `opts` with `workers` workers on
/// `train_size` samples. With `opts.push_every` > 1: SGD with learning rate
/// 1 and no momentum on the workers' weight deltas, rescaled by 1/W (model
/// averaging). Otherwise: SGD with momentum and the learning-rate schedule
/// spanning all epochs' updates of a slice (sync: one per step, async: one
/// per step and worker); sync stores rescale the summed gradients by 1/W,
/// async stores lower the momentum to max(0, 1 - W * (1 - momentum)), since
/// asynchrony adds momentum of its own (W = 4, momentum 0.9: 0.6), unless
/// `opts.server_momentum` (>= 0) gives it.
optimizer_config server_optimizer(const train_options& opts, bool sync,
                                  uint32_t workers, uint64_t train_size);

/// The optimizer of the single-process baseline (the same rule and
/// schedule, one worker).
optimizer_config baseline_optimizer(const train_options& opts,
                                    uint64_t train_size);

/// Trains on one worker handle of a store; collective (every worker of the
/// store runs it). Rank 0 initializes the parameters, sets the optimizer,
/// evaluates test accuracy after each epoch and reports through `cb`. Every
/// worker processes the same number of steps per epoch (needed by sync
/// stores). Returns what went wrong, or an empty string.
std::string train_worker(kvstore& kv, const dataset& train, const dataset& test,
                         const train_options& opts, const train_callbacks& cb);

/// The same model and loop in one process without a parameter server
/// (the update is applied locally with the same optimizer code).
std::string train_baseline(const dataset& train, const dataset& test,
                           const train_options& opts,
                           const train_callbacks& cb);

} // namespace actorps::apps
