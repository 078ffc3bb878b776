// SPDX-License-Identifier: BSD-3-Clause
// The job status for people and for programs: where each shard's copies
// are in a replicas job.
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/status.hpp"

using namespace actorps;
using nlohmann::json;

namespace {

job_status replicas_job() {
  job_status s;
  s.num_workers = 1;
  s.num_servers = 2;
  s.replicas = 2;
  // Shard 0: backed up and complete; shard 1: its rebuilt backup still
  // being sent; shard 2: promoted on server 0, no backup.
  s.copies.push_back(shard_copies{0, 0, 1, {1}, true});
  s.copies.push_back(shard_copies{1, 1, 0, {0}, false});
  s.copies.push_back(shard_copies{2, 0, shard_copies::no_backup, {}, false});
  return s;
}

} // namespace

TEST_CASE("status: a replicas job names each shard's primary and backup",
          "[status]") {
  auto s = replicas_job();
  CHECK(s.shards_without_copy() == 2);
  auto text = format_status(s);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("replicas: 2 copies of each shard; 2 of 3 "
                                   "shards without every backup "
                                   "complete"));
  CHECK_THAT(text, Catch::Matches("[^]*\n0 +server 0 +server 1\n[^]*"));
  CHECK_THAT(text,
             Catch::Matches("[^]*\n1 +server 1 +server 0 \\(copying\\)\n[^]*"));
  CHECK_THAT(text, Catch::Matches("[^]*\n2 +server 0 +none\n[^]*"));
  auto j = json::parse(status_json(s));
  INFO(j.dump(2));
  CHECK(j["replicas"] == 2);
  CHECK(j["shards_without_copy"] == 2);
  REQUIRE(j["shards"].size() == 3);
  CHECK(j["shards"][0]
        == json({{"shard", 0},
                 {"primary", 0},
                 {"backup", 1},
                 {"backups", {1}},
                 {"backup_ready", true}}));
  CHECK(j["shards"][1]["backup_ready"] == false);
  CHECK(j["shards"][2]["backup"].is_null());
  CHECK(j["shards"][2]["backups"].empty());
  CHECK(j["shards"][2]["primary"] == 0);
}

TEST_CASE("status: a job with 3 copies names both backups of each shard",
          "[status]") {
  job_status s;
  s.num_workers = 1;
  s.num_servers = 3;
  s.replicas = 3;
  // Shard 0: both backups complete; shard 1: one backup left (a server
  // died); shard 2: its second backup still being sent.
  s.copies.push_back(shard_copies{0, 0, 1, {1, 2}, true});
  s.copies.push_back(shard_copies{1, 1, 2, {2}, true});
  s.copies.push_back(shard_copies{2, 2, 0, {0, 1}, false});
  CHECK(s.shards_without_copy() == 2);
  auto text = format_status(s);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("replicas: 3 copies of each shard; 2 of 3 "
                                   "shards without every backup complete"));
  CHECK_THAT(text,
             Catch::Matches("[^]*\n0 +server 0 +server 1, server 2\n[^]*"));
  CHECK_THAT(text, Catch::Matches("[^]*\n1 +server 1 +server 2\n[^]*"));
  CHECK_THAT(text,
             Catch::Matches(
               "[^]*\n2 +server 2 +server 0, server 1 \\(copying\\)\n[^]*"));
  auto j = json::parse(status_json(s));
  CHECK(j["shards"][0]["backups"] == json({1, 2}));
  CHECK(j["shards"][1]["backups"] == json({2}));
  CHECK(j["shards_without_copy"] == 2);
}

TEST_CASE("status: a replicas job whose servers are still joining says so",
          "[status]") {
  job_status s;
  s.replicas = 2;
  CHECK_THAT(format_status(s),
             Catch::Contains("replicas: 2 copies of each shard; not paired "
                             "yet"));
  auto j = json::parse(status_json(s));
  CHECK(j["replicas"] == 2);
  CHECK(j["shards"].empty());
  // No count that a script could read as "every shard has a copy".
  CHECK_FALSE(j.contains("shards_without_copy"));
}

TEST_CASE("status: a job without replicas shows no copies", "[status]") {
  job_status s;
  s.num_servers = 1;
  CHECK(s.shards_without_copy() == 0);
  CHECK_THAT(format_status(s), !Catch::Contains("replicas:"));
  auto j = json::parse(status_json(s));
  CHECK(j["replicas"] == 1);
  CHECK_FALSE(j.contains("shards"));
}
