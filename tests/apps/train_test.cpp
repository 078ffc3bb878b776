// SPDX-License-Identifier: BSD-3-Clause
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <unistd.h>

#include "apps/common/mlp.hpp"
#include "apps/common/mnist.hpp"
#include "apps/common/train.hpp"
#include "messages/errors.hpp"

using namespace actorps;
using namespace actorps::apps;

namespace {

// A scratch folder removed at the end of the test.
struct temp_dir {
  std::filesystem::path path;

  temp_dir() {
    path = std::filesystem::temp_directory_path()
           / ("actorps-train-" + std::to_string(::getpid()) + "-"
              + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }

  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// `n` samples of a 10-class problem a small MLP can learn: class k lights up
// pixels [70 k, 70 k + 70) of a 28x28 image, plus noise.
dataset make_data(Eigen::Index n, uint32_t seed) {
  std::mt19937 rng{seed};
  std::uniform_real_distribution<float> noise{0.0f, 0.3f};
  dataset d;
  d.images.resize(784, n);
  d.labels.resize(static_cast<size_t>(n));
  for (Eigen::Index j = 0; j < n; ++j) {
    auto label = static_cast<uint8_t>(rng() % 10);
    d.labels[static_cast<size_t>(j)] = label;
    for (Eigen::Index p = 0; p < 784; ++p)
      d.images(p, j) = noise(rng);
    d.images.block(70 * label, j, 70, 1).array() += 0.7f;
  }
  return d;
}

// The epochs' reports of training through `kv` (the baseline if null).
std::vector<epoch_report> epochs_of(kvstore* kv, const dataset& train,
                                    const dataset& test,
                                    const train_options& opts) {
  std::vector<epoch_report> reports;
  train_callbacks cb;
  cb.on_epoch = [&](const epoch_report& r) { reports.push_back(r); };
  auto problem = kv ? train_worker(*kv, train, test, opts, cb)
                    : train_baseline(train, test, opts, cb);
  CHECK(problem.empty());
  return reports;
}

} // namespace

TEST_CASE("mnist: written splits read back exactly", "[apps]") {
  temp_dir dir;
  auto data = make_data(37, 1);
  // The file stores bytes: round to what a byte can hold.
  data.images = (data.images * 255.0f).array().round() / 255.0f;
  REQUIRE(write_split(dir.path.string(), "train", data).ok());
  dataset back;
  auto st = load_split(dir.path.string(), "train", back);
  INFO(st.message);
  REQUIRE(st.ok());
  CHECK(back.size() == 37);
  CHECK(back.labels == data.labels);
  CHECK(back.images.isApprox(data.images));
}

TEST_CASE("mnist: missing and corrupt files name their path", "[apps]") {
  temp_dir dir;
  dataset out;
  SECTION("missing") {
    auto st = load_split(dir.path.string(), "train", out);
    CHECK(st.code == errc::bad_config);
    CHECK(st.message.find("train-images-idx3-ubyte.gz") != std::string::npos);
    CHECK(st.message.find("dataset-fashion-mnist") != std::string::npos);
  }
  SECTION("bad magic, truncated, or mismatched counts") {
    auto data = make_data(10, 2);
    REQUIRE(write_split(dir.path.string(), "train", data).ok());
    auto labels = dir.path / "train-labels-idx1-ubyte.gz";
    auto images = dir.path / "train-images-idx3-ubyte.gz";
    SECTION("labels swapped for images") {
      std::filesystem::copy_file(
        labels, images, std::filesystem::copy_options::overwrite_existing);
      auto st = load_split(dir.path.string(), "train", out);
      CHECK(st.code == errc::bad_config);
      CHECK(st.message.find(images.string()) != std::string::npos);
    }
    SECTION("fewer labels than images") {
      auto fewer = make_data(9, 3);
      temp_dir other;
      REQUIRE(write_split(other.path.string(), "train", fewer).ok());
      std::filesystem::copy_file(
        other.path / "train-labels-idx1-ubyte.gz", labels,
        std::filesystem::copy_options::overwrite_existing);
      auto st = load_split(dir.path.string(), "train", out);
      CHECK(st.code == errc::bad_config);
      CHECK(st.message.find("10 images") != std::string::npos);
    }
    SECTION("a plain file cut short") {
      std::ofstream f{images.string(), std::ios::binary | std::ios::trunc};
      const char header[] = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28};
      f.write(header, sizeof(header));
      f.close();
      auto st = load_split(dir.path.string(), "train", out);
      CHECK(st.code == errc::bad_config);
      CHECK(st.message.find("header says 10 images") != std::string::npos);
    }
  }
}

TEST_CASE("mlp: gradients match finite differences", "[apps]") {
  mlp model{{6, 5, 4, 3}};
  model.init(7);
  std::mt19937 rng{3};
  std::normal_distribution<float> dist;
  Eigen::MatrixXf x(6, 4);
  for (Eigen::Index i = 0; i < x.size(); ++i)
    x.data()[i] = dist(rng);
  std::vector<uint8_t> y{0, 2, 1, 2};
  std::vector<Eigen::MatrixXf> grads;
  model.gradients(x, y.data(), grads);
  std::vector<Eigen::MatrixXf> scratch;
  // Central differences in double-checked float: relative tolerance 2e-2.
  for (size_t p = 0; p < model.params().size(); ++p) {
    auto& param = model.params()[p];
    for (Eigen::Index k = 0; k < param.size(); k += 3) {
      const float h = 1e-2f;
      auto saved = param.data()[k];
      param.data()[k] = saved + h;
      auto up = model.gradients(x, y.data(), scratch);
      param.data()[k] = saved - h;
      auto down = model.gradients(x, y.data(), scratch);
      param.data()[k] = saved;
      auto numeric = (up - down) / (2 * h);
      INFO("param " << model.names()[p] << " index " << k);
      CHECK(grads[p].data()[k] == Approx(numeric).epsilon(2e-2).margin(1e-3));
    }
  }
}

TEST_CASE("train: a few hundred samples, one epoch, the loss goes down",
          "[apps][integration]") {
  auto train = make_data(640, 11);
  auto test = make_data(200, 12);
  train_options opts;
  opts.epochs = 2;
  opts.batch = 16;
  SECTION("through a local store with 2 workers") {
    store_options so;
    so.num_workers = 2;
    so.threads = 2;
    auto kv = kvstore::create("local_async", so);
    REQUIRE(kv);
    auto other = kv->worker(1);
    REQUIRE(other);
    std::vector<double> losses;
    std::vector<double> accuracies;
    train_callbacks cb;
    cb.on_epoch = [&](const epoch_report& r) {
      losses.push_back(r.loss);
      accuracies.push_back(r.accuracy);
    };
    std::string second;
    std::thread t{
      [&] { second = train_worker(*other, train, test, opts, {}); }};
    auto first = train_worker(*kv, train, test, opts, cb);
    t.join();
    CHECK(first.empty());
    CHECK(second.empty());
    REQUIRE(losses.size() == 2);
    CHECK(losses[1] < losses[0]);
    CHECK(accuracies[1] > 0.5);
  }
  SECTION("in one process, the baseline") {
    std::vector<double> losses;
    train_callbacks cb;
    cb.on_epoch = [&](const epoch_report& r) { losses.push_back(r.loss); };
    CHECK(train_baseline(train, test, opts, cb).empty());
    REQUIRE(losses.size() == 2);
    CHECK(losses[1] < losses[0]);
  }
}

TEST_CASE("train: a store with one worker follows the baseline exactly",
          "[apps][integration]") {
  // Same data order, same update rule and schedule (applied by the shards
  // instead of in place): the epochs' losses and accuracies are equal bit
  // for bit. Both runs use the default cosine schedule.
  auto train = make_data(320, 21);
  auto test = make_data(100, 22);
  train_options opts;
  opts.epochs = 3;
  opts.batch = 16;
  REQUIRE(opts.lr_schedule == "cosine");
  auto run = [&](kvstore* kv) { return epochs_of(kv, train, test, opts); };
  store_options so;
  so.num_workers = 1;
  so.num_shards = 2;
  so.threads = 2;
  auto kv = kvstore::create("local_async", so);
  REQUIRE(kv);
  auto through_store = run(&*kv);
  auto baseline = run(nullptr);
  REQUIRE(through_store.size() == 3);
  REQUIRE(baseline.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    INFO("epoch " << i + 1);
    CHECK(through_store[i].loss == baseline[i].loss);
    CHECK(through_store[i].accuracy == baseline[i].accuracy);
  }
  // The schedule matters: a constant rate ends elsewhere.
  opts.lr_schedule = "constant";
  auto constant = run(nullptr);
  REQUIRE(constant.size() == 3);
  CHECK(constant[2].loss != baseline[2].loss);
}

TEST_CASE("train: local SGD (--push-every) with one worker follows the "
          "baseline, and with two it trains",
          "[apps][integration]") {
  // One worker that pushes its weights' change every 4 steps (and at each
  // epoch's end): the shards add the change as it is (mean of one), so the
  // run is the baseline's up to rounding in w - (w - local).
  auto train = make_data(320, 21);
  auto test = make_data(100, 22);
  train_options opts;
  opts.epochs = 3;
  opts.batch = 16;
  opts.push_every = 4;
  auto run = [&](kvstore* kv) { return epochs_of(kv, train, test, opts); };
  store_options so;
  so.num_workers = 1;
  so.threads = 2;
  auto kv = kvstore::create("local_sync", so);
  REQUIRE(kv);
  auto local = run(&*kv);
  auto baseline = run(nullptr);
  REQUIRE(local.size() == 3);
  REQUIRE(baseline.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    INFO("epoch " << i + 1);
    CHECK(local[i].loss == Approx(baseline[i].loss).epsilon(1e-4));
  }
  // Pushing the plain gradients instead (K = 1) is the baseline exactly;
  // the deltas of K = 4 are not gradients: pushed as if they were (lr 1
  // ignored) the run would differ.
  CHECK(server_optimizer(opts, true, 2, 320).learning_rate == 1.0f);
  CHECK(server_optimizer(opts, true, 2, 320).rescale_grad == 0.5f);
  CHECK(baseline_optimizer(opts, 320).learning_rate == opts.learning_rate);
  // Two workers averaging every 5 steps, sync and async: the loss falls.
  for (auto type : {"local_sync", "local_async"}) {
    INFO(type);
    so.num_workers = 2;
    auto two = kvstore::create(type, so);
    REQUIRE(two);
    auto second = two->worker(1);
    REQUIRE(second);
    opts.push_every = 5;
    std::vector<epoch_report> reports;
    std::string other;
    std::thread t{[&] {
      other = train_worker(*second, train, test, opts, train_callbacks{});
    }};
    train_callbacks cb;
    cb.on_epoch = [&](const epoch_report& r) { reports.push_back(r); };
    CHECK(train_worker(*two, train, test, opts, cb).empty());
    t.join();
    CHECK(other.empty());
    REQUIRE(reports.size() == 3);
    CHECK(reports[2].loss < reports[0].loss);
  }
}
