// SPDX-License-Identifier: BSD-3-Clause
// Periodic checkpoints of a distributed job, and a new job resuming from
// them (real processes on 127.0.0.1).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/checkpoint.hpp"
#include "tests/core/temp_dir.hpp"
#include "tests/integration/dist_job.hpp"
#include "tests/integration/process.hpp"

using namespace actorps::test;
namespace fs = std::filesystem;

namespace {

// The tensors of a safetensors file, by name, as float32 values.
std::map<std::string, std::vector<float>>
read_safetensors(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::string file{std::istreambuf_iterator<char>{in}, {}};
  REQUIRE(file.size() > 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(file[i]);
  auto header = nlohmann::json::parse(file.substr(8, n));
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, t] : header.items()) {
    if (name == "__metadata__")
      continue;
    auto begin = t["data_offsets"][0].get<size_t>();
    auto end = t["data_offsets"][1].get<size_t>();
    std::vector<float> v((end - begin) / sizeof(float));
    std::memcpy(v.data(), file.data() + 8 + n + begin, end - begin);
    out[name] = std::move(v);
  }
  return out;
}

// The epoch-1 loss an mnist worker printed.
double first_loss(const std::string& out) {
  auto at = out.find("done: loss ");
  REQUIRE(at != std::string::npos);
  return std::stod(out.substr(at + 11));
}

} // namespace

TEST_CASE("dist: checkpoints at barriers hold the job's weights, and a new "
          "job resumes from the newest",
          "[integration]") {
  temp_dir tmp;
  auto dir = tmp.path() + "/ckpt";
  std::vector<std::string> data{"--job", "mnist",        "--limit-train",
                                "1024",  "--limit-test", "200"};
  auto worker_args = [&](const std::string& run) {
    auto v = data;
    v.insert(v.end(), {"--out", tmp.path() + "/" + run});
    return v;
  };
  std::string first_out;
  {
    dist_job job{
      "dist_sync", 1, 1, {"--checkpoint-dir", dir, "--checkpoint-every", "0"}};
    job.add_server();
    auto args = worker_args("a");
    args.insert(args.end(),
                {"--epochs", "2", "--export", tmp.path() + "/a.safetensors"});
    auto& w = job.add_worker(args);
    CHECK_EXIT(w, 0, job_time);
    first_out = w.output();
    CHECK_EXIT(*job.servers[0], 0, job_time);
    CHECK_EXIT(*job.coordinator, 0, job_time);
    CHECK_THAT(job.coordinator->output(),
               Catch::Contains("checkpoint at barrier"));
  }
  // The newest two stay (the default --checkpoint-keep).
  std::vector<std::string> files;
  for (auto& e : fs::directory_iterator{dir})
    files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  INFO(files.size());
  REQUIRE(files.size() == 2);
  // The newest was taken at the last barrier (close's), after the last
  // push: it holds exactly the weights the worker exported.
  std::vector<char> bytes;
  REQUIRE(actorps::core::read_file(dir + "/" + files.back(), bytes).ok());
  actorps::state_snapshot snap;
  REQUIRE(actorps::core::decode_checkpoint(bytes, snap).ok());
  auto exported = read_safetensors(tmp.path() + "/a.safetensors");
  REQUIRE_FALSE(exported.empty());
  std::map<std::string, std::vector<float>> saved;
  for (auto& rec : snap.slices) {
    auto& v = saved[rec.key];
    v.resize(std::max(v.size(), rec.offset + rec.value.data.size()));
    std::copy(rec.value.data.begin(), rec.value.data.end(),
              v.begin() + static_cast<std::ptrdiff_t>(rec.offset));
  }
  CHECK(saved == exported);
  // A new job resumes from the folder: rank 0 takes the newest checkpoint
  // and trains on from it, so its first epoch starts from trained weights.
  // It checkpoints into the same folder: its checkpoints are numbered
  // after the first job's, so pruning keeps them, not the old ones.
  auto old_newest = std::stoull(files.back().substr(11, 6));
  dist_job job{
    "dist_sync", 1, 1, {"--checkpoint-dir", dir, "--checkpoint-every", "0"}};
  job.add_server();
  auto args = worker_args("b");
  args.insert(args.end(), {"--epochs", "1", "--resume", dir});
  auto& w = job.add_worker(args);
  CHECK_EXIT(w, 0, job_time);
  CHECK_THAT(w.output(),
             Catch::Contains("resuming from " + dir + "/" + files.back()));
  CHECK(first_loss(w.output()) < first_loss(first_out));
  REQUIRE(job.coordinator->wait_exit(job_time));
  std::vector<std::string> after;
  for (auto& e : fs::directory_iterator{dir})
    after.push_back(e.path().filename().string());
  REQUIRE(after.size() == 2);
  // A barrier that comes while the last checkpoint still streams takes
  // none (on a loaded machine the resumed job may write only one): the
  // newest is this job's, and once it wrote two, no old one is left.
  std::sort(after.begin(), after.end());
  INFO(job.coordinator->output());
  CHECK(std::stoull(after.back().substr(11, 6)) > old_newest);
  auto ours = std::count_if(after.begin(), after.end(), [&](auto& name) {
    return std::stoull(name.substr(11, 6)) > old_newest;
  });
  size_t written = 0;
  auto& log = job.coordinator->output();
  // Written ones name their file: "checkpoint at barrier N: DIR/... (K
  // records)".
  for (auto at = log.find(".actorps ("); at != std::string::npos;
       at = log.find(".actorps (", at + 1))
    ++written;
  CHECK(ours == static_cast<long>(std::min<size_t>(written, 2)));
  // A folder without checkpoints is refused before anything runs.
  fs::create_directories(tmp.path() + "/none");
  auto bad_args = worker_args("c");
  bad_args.insert(bad_args.end(), {"--resume", tmp.path() + "/none"});
  process bad{[&] {
    std::vector<std::string> v{ACTORPS_WORKER_BIN, "--coordinator", job.address,
                               "--token", token()};
    v.insert(v.end(), bad_args.begin(), bad_args.end());
    return v;
  }()};
  CHECK_EXIT(bad, 2, startup);
  CHECK_THAT(bad.output(), Catch::Contains("--resume: no checkpoint"));
}
