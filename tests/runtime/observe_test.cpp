// SPDX-License-Identifier: BSD-3-Clause
// Seeing a running job: the Prometheus endpoints of a server, a worker and
// the coordinator, scraped over 127.0.0.1, and the status an observer gets.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include "actors/coordinator/coordinator.hpp"
#include "actors/gate.hpp"
#include "core/link_proof.hpp"
#include "messages/errors.hpp"
#include "runtime/connect.hpp"
#include "runtime/kvstore.hpp"
#include "runtime/metrics.hpp"
#include "runtime/network.hpp"
#include "runtime/system.hpp"
#include "tests/runtime/job_threads.hpp"

using namespace actorps;
using namespace std::chrono_literals;

namespace {

// GET `path` from 127.0.0.1:`port` with HTTP basic auth `user:password`
// (none if empty): the status code and the body.
std::pair<int, std::string> http_get(uint16_t port, const std::string& path,
                                     const std::string& password = {}) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n";
  if (!password.empty()) {
    // Base64 of "user:password".
    static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
                               "vwxyz0123456789+/";
    std::string in = "scraper:" + password;
    std::string out;
    for (size_t i = 0; i < in.size(); i += 3) {
      uint32_t n = static_cast<uint8_t>(in[i]) << 16;
      if (i + 1 < in.size())
        n |= static_cast<uint8_t>(in[i + 1]) << 8;
      if (i + 2 < in.size())
        n |= static_cast<uint8_t>(in[i + 2]);
      out += table[(n >> 18) & 63];
      out += table[(n >> 12) & 63];
      out += i + 1 < in.size() ? table[(n >> 6) & 63] : '=';
      out += i + 2 < in.size() ? table[n & 63] : '=';
    }
    req += "Authorization: Basic " + out + "\r\n";
  }
  req += "\r\n";
  REQUIRE(::send(fd, req.data(), req.size(), 0)
          == static_cast<ssize_t>(req.size()));
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0)
    resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  std::smatch m;
  REQUIRE(std::regex_search(resp, m, std::regex{"^HTTP/1\\.[01] (\\d+)"}));
  auto body = resp.find("\r\n\r\n");
  return {std::stoi(m[1]),
          body == std::string::npos ? "" : resp.substr(body + 4)};
}

// The value of the sample `name{labels}` (labels as printed, in order; ""
// for none) in Prometheus text `text`; -1 if absent.
double sample(const std::string& text, const std::string& name,
              const std::string& labels = "") {
  auto head = labels.empty() ? name + " " : name + "{" + labels + "} ";
  auto at = text.find("\n" + head);
  if (at == std::string::npos)
    return -1;
  return std::stod(text.substr(at + 1 + head.size()));
}

// A server of `shards` shards for the coordinator at `coordinator`, run
// on a thread, with its /metrics endpoint on a free port.
struct metered_server {
  caf::error err;
  std::thread thread;
  uint16_t metrics_port = 0;

  metered_server(uint16_t coordinator, const std::string& tok, uint32_t shards,
                 bool shard_threads = true) {
    server_options so;
    so.coordinator = endpoint{"127.0.0.1", coordinator};
    so.token = tok;
    so.shards = shards;
    so.shard_threads = shard_threads;
    so.metrics.port = 0;
    auto port = std::make_shared<std::promise<uint16_t>>();
    so.on_metrics = [port](uint16_t p) { port->set_value(p); };
    thread = std::thread{[this, so] { err = run_server(so, [](uint32_t) {}); }};
    auto f = port->get_future();
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    metrics_port = f.get();
  }

  // Waits for the server's end (its coordinator ended the job).
  caf::error join() {
    thread.join();
    return err;
  }
};

// A dist_async store of the job at `coordinator`, with its /metrics
// endpoint on a free port.
caf::expected<kvstore> metered_store(uint16_t coordinator,
                                     const std::string& tok) {
  store_options o;
  o.coordinator = "127.0.0.1:" + std::to_string(coordinator);
  o.token = tok;
  o.metrics.port = 0;
  return kvstore::create("dist_async", o);
}

} // namespace

TEST_CASE("metrics: a live server's and worker's counters move by the "
          "amounts pushed and pulled",
          "[integration]") {
  const std::string tok = "tok-metrics";
  coordinator_options co;
  co.token = tok;
  co.sync = false;
  co.metrics.port = 0;
  auto coord_port = std::make_shared<std::promise<uint16_t>>();
  co.on_metrics = [coord_port](uint16_t p) { coord_port->set_value(p); };
  test::coordinator_thread coordinator{co};
  auto coord_metrics = coord_port->get_future();
  REQUIRE(coord_metrics.wait_for(10s) == std::future_status::ready);
  metered_server server{coordinator.port(), tok, 2};
  auto port = server.metrics_port;
  auto password = metrics_password(tok);
  // Without the password, or with the token itself, nothing is shown.
  CHECK(http_get(port, "/metrics").first == 401);
  CHECK(http_get(port, "/metrics", tok).first == 401);
  {
    auto kv = metered_store(coordinator.port(), tok);
    INFO((kv ? std::string{"ok"} : render(kv.error())));
    REQUIRE(kv);
    REQUIRE(kv->metrics_port() != 0);
    constexpr int n = 3000;
    constexpr int pushes = 7;
    Eigen::VectorXf v = Eigen::VectorXf::Ones(n);
    REQUIRE_FALSE(kv->init("w", v));
    auto [code, before] = http_get(port, "/metrics", password);
    REQUIRE(code == 200);
    auto [wcode, wbefore] = http_get(kv->metrics_port(), "/metrics", password);
    REQUIRE(wcode == 200);
    for (int i = 0; i < pushes; ++i)
      REQUIRE_FALSE(kv->push("w", v));
    Eigen::VectorXf out(n);
    auto t = kv->pull("w", out);
    REQUIRE(t);
    REQUIRE_FALSE(kv->wait(*t));
    auto after = http_get(port, "/metrics", password).second;
    INFO(after);
    auto delta = [&](const std::string& name, const std::string& labels = "") {
      auto a = sample(after, name, labels);
      auto b = sample(before, name, labels);
      REQUIRE(a >= 0);
      REQUIRE(b >= 0);
      return a - b;
    };
    // A key of 3000 floats below the slicing bound lives on one shard.
    CHECK(delta("actorps_shard_pushes_total") == pushes);
    CHECK(delta("actorps_shard_pulls_total") == 1);
    CHECK(delta("actorps_shard_updates_total") == pushes);
    CHECK(delta("actorps_shard_bytes_total", "direction=\"push\"")
          == double(pushes) * n * 4);
    CHECK(delta("actorps_shard_bytes_total", "direction=\"pull\"") == n * 4.0);
    CHECK(sample(after, "actorps_shard_bytes_held") == n * 4.0);
    CHECK(sample(after, "actorps_shards") == 2);
    CHECK(sample(after, "process_resident_memory_bytes") > 0);
    // The worker's own view: operations, bytes, the latency histogram.
    auto wafter = http_get(kv->metrics_port(), "/metrics", password).second;
    INFO(wafter);
    auto push = "op=\"push\",worker=\"0\"";
    CHECK(sample(wafter, "actorps_worker_operations_total", push)
            - sample(wbefore, "actorps_worker_operations_total", push)
          == pushes);
    CHECK(
      sample(wafter, "actorps_worker_request_latency_seconds_count", push)
        - sample(wbefore, "actorps_worker_request_latency_seconds_count", push)
      == pushes);
    CHECK(
      sample(wafter, "actorps_worker_request_latency_seconds_bucket",
             push + std::string{",le=\"+Inf\""})
      == sample(wafter, "actorps_worker_request_latency_seconds_count", push));
    CHECK(sample(wafter, "actorps_worker_bytes_total",
                 "direction=\"push\",worker=\"0\"")
            - sample(wbefore, "actorps_worker_bytes_total",
                     "direction=\"push\",worker=\"0\"")
          == double(pushes) * n * 4);
    CHECK(sample(wafter, "actorps_worker_operations_total",
                 "op=\"pull\",worker=\"0\"")
          == 1);
    // The coordinator sums the job.
    auto job = http_get(coord_metrics.get(), "/metrics", password).second;
    INFO(job);
    CHECK(sample(job, "actorps_job_nodes", "role=\"worker\",state=\"alive\"")
          == 1);
    CHECK(sample(job, "actorps_job_dead_nodes") == 0);
    CHECK(sample(job, "actorps_job_keys") == 1);
    CHECK(sample(job, "actorps_job_worker_bytes_total",
                 "direction=\"push\",worker=\"0\"")
          == double(pushes) * n * 4);
    REQUIRE_FALSE(kv->close());
  }
  CHECK_FALSE(server.join());
  CHECK_FALSE(coordinator.join());
}

TEST_CASE("metrics: a replicas job counts the shards a second death would "
          "lose",
          "[metrics]") {
  process_counters c;
  c.job.emplace();
  c.job->replicas = 2;
  c.job->copies.push_back(shard_copies{0, 0, 1, {1}, true});
  c.job->copies.push_back(
    shard_copies{1, 0, shard_copies::no_backup, {}, false});
  c.job->copies.push_back(shard_copies{2, 1, 0, {0}, false});
  auto text = render_metrics(c);
  INFO(text);
  CHECK(sample(text, "actorps_job_replicas") == 2);
  CHECK(sample(text, "actorps_job_shards_without_copy") == 2);
  // Nor does one not paired yet, or one without replicas.
  c.job->copies.clear();
  CHECK(sample(render_metrics(c), "actorps_job_shards_without_copy") == -1);
  c.job->replicas = 1;
  c.job->copies.clear();
  text = render_metrics(c);
  CHECK(sample(text, "actorps_job_replicas") == 1);
  CHECK(sample(text, "actorps_job_shards_without_copy") == -1);
}

TEST_CASE("metrics: a data plane's counters are shown", "[metrics]") {
  process_counters c;
  CHECK(sample(render_metrics(c), "actorps_ucx_segment_sends_total") == -1);
  c.plane = process_counters::plane_counters{5, 3, 2, 7, 11};
  auto text = render_metrics(c);
  INFO(text);
  CHECK(sample(text, "actorps_ucx_segment_sends_total") == 5);
  CHECK(sample(text, "actorps_ucx_in_place_sends_total") == 3);
  CHECK(sample(text, "actorps_ucx_waiting_messages") == 2);
  CHECK(sample(text, "actorps_ucx_caller_receives_total") == 7);
  CHECK(sample(text, "actorps_ucx_plane_thread_runs_total") == 11);
}

TEST_CASE("metrics: a worker's large pushes over UCX on one host leave from "
          "where the client wrote them",
          "[integration]") {
  const std::string tok = "tok-in-place";
  coordinator_options co;
  co.token = tok;
  co.sync = false;
  // UCX when built with it.
  co.transport = default_transport(false);
  test::coordinator_thread coordinator{co};
  // Its shards on the scheduler: its plane's thread runs them over ucx.
  metered_server server{coordinator.port(), tok, 1, false};
  auto port = server.metrics_port;
  auto password = metrics_password(tok);
  {
    auto kv = metered_store(coordinator.port(), tok);
    INFO((kv ? std::string{"ok"} : render(kv.error())));
    REQUIRE(kv);
    if (kv->transport() != "ucx") {
      // Built without UCX: there is no data plane to count.
      CHECK(sample(http_get(kv->metrics_port(), "/metrics", password).second,
                   "actorps_ucx_in_place_sends_total")
            == -1);
      REQUIRE_FALSE(kv->close());
    } else {
      // 1 MB: a slice of its own, large enough for the segment.
      constexpr int n = 256 << 10;
      REQUIRE_FALSE(kv->init("w", Eigen::VectorXf::Zero(n)));
      auto in_place = [&] {
        return sample(http_get(kv->metrics_port(), "/metrics", password).second,
                      "actorps_ucx_in_place_sends_total");
      };
      // The segment to the server is ready after a round trip or a few:
      // push and pull (the default rule assigns) until a push left in place.
      Eigen::VectorXf out(n);
      Eigen::VectorXf v(n);
      for (int i = 0; i < 20 && in_place() <= 0; ++i) {
        v = Eigen::VectorXf::LinSpaced(n, float(i), float(i + n));
        REQUIRE_FALSE(kv->push("w", v));
        auto t = kv->pull("w", out);
        REQUIRE(t);
        REQUIRE_FALSE(kv->wait(*t));
        CHECK(out == v);
      }
      auto pushed = in_place();
      CHECK(pushed > 0);
      // The thread waiting in `wait` received replies itself.
      CHECK(sample(http_get(kv->metrics_port(), "/metrics", password).second,
                   "actorps_ucx_caller_receives_total")
            > 0);
      // A push_pull leaves in place too, and gives the value it pushed.
      v = Eigen::VectorXf::LinSpaced(n, -1.0f, float(n));
      auto t = kv->push_pull("w", v, out);
      REQUIRE(t);
      REQUIRE_FALSE(kv->wait(*t));
      CHECK(out == v);
      CHECK(in_place() == pushed + 1);
      // Requests on a small key: its plane's thread runs its shard for them
      // (those on the 1 MB key went to the shard's mailbox at once).
      REQUIRE_FALSE(kv->init("s", Eigen::VectorXf::Zero(16)));
      Eigen::VectorXf small(16);
      for (int i = 0; i < 5; ++i) {
        auto ts = kv->push_pull("s", Eigen::VectorXf::Constant(16, float(i)),
                                small);
        REQUIRE(ts);
        REQUIRE_FALSE(kv->wait(*ts));
        CHECK(small == Eigen::VectorXf::Constant(16, float(i)));
      }
      auto text = http_get(port, "/metrics", password).second;
      INFO(text);
      // The server's replies went through its segment to the worker.
      CHECK(sample(text, "actorps_ucx_segment_sends_total") > 0);
      CHECK(sample(text, "actorps_ucx_waiting_messages") == 0);
      // Its plane's thread ran its shard for requests.
      CHECK(sample(text, "actorps_ucx_plane_thread_runs_total") > 0);
      REQUIRE_FALSE(kv->close());
    }
  }
  CHECK_FALSE(server.join());
  CHECK_FALSE(coordinator.join());
}

TEST_CASE("metrics: a port in use or out of range is a clear error",
          "[integration]") {
  std::string why;
  auto first = metrics_server::start(
    metrics_options{"127.0.0.1", 0, ""}, [] { return process_counters{}; },
    why);
  REQUIRE(first);
  auto taken = metrics_server::start(
    metrics_options{"127.0.0.1", first->port(), ""},
    [] { return process_counters{}; }, why);
  CHECK_FALSE(taken);
  CHECK_THAT(why, Catch::Contains("cannot listen on 127.0.0.1:"
                                  + std::to_string(first->port())));
  store_options o;
  o.metrics.port = 70000;
  auto kv = kvstore::create("local", o);
  REQUIRE_FALSE(kv);
  CHECK(code_of(kv.error()) == errc::bad_config);
  // A local store shows its workers and shards without a password.
  o.metrics.port = 0;
  o.num_workers = 2;
  auto local = kvstore::create("local", o);
  REQUIRE(local);
  auto text = http_get(local->metrics_port(), "/metrics").second;
  CHECK(sample(text, "actorps_shards") == double(o.num_shards));
  CHECK(sample(text, "actorps_worker_bytes_in_flight", "worker=\"1\"") == 0);
}

TEST_CASE("status: an observer sees the job and can do nothing else",
          "[integration]") {
  const std::string tok = "tok-status";
  coordinator_options co;
  co.token = tok;
  co.sync = true;
  co.num_workers = 2;
  test::coordinator_thread coordinator{co};
  server_options so;
  so.coordinator = endpoint{"127.0.0.1", coordinator.port()};
  so.token = tok;
  so.shards = 1;
  caf::error server_err;
  std::promise<void> joined;
  std::thread server{[&] {
    server_err = run_server(so, [&](uint32_t) { joined.set_value(); });
  }};
  REQUIRE(joined.get_future().wait_for(10s) == std::future_status::ready);
  status_options q;
  q.coordinator = so.coordinator;
  q.token = tok;
  // A wrong token gets nothing.
  auto wrong = q;
  wrong.token = "guess";
  wrong.timeout = 3s;
  auto refused = query_status(wrong);
  REQUIRE_FALSE(refused);
  CHECK(code_of(refused.error()) == errc::unauthorized);
  store_options o;
  o.coordinator = "127.0.0.1:" + std::to_string(coordinator.port());
  o.token = tok;
  {
    auto kv = kvstore::create("dist_sync", o);
    REQUIRE(kv);
    Eigen::VectorXf v = Eigen::VectorXf::Ones(10);
    REQUIRE_FALSE(kv->init("k", v));
    // Rank 0 waits at a barrier for rank 1, which never joined.
    auto waiting = std::async(std::launch::async,
                              [&] { return kv->barrier(); });
    auto s = query_status(q);
    // The barrier may not have reached the coordinator yet: ask again until
    // it did (each answer is a round trip to the job; bounded by a deadline).
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (s && !s->barrier_open && std::chrono::steady_clock::now() < deadline)
      s = query_status(q);
    INFO((s ? format_status(*s) : render(s.error())));
    REQUIRE(s);
    CHECK(s->sync);
    CHECK(s->num_workers == 2);
    CHECK(s->workers_joined == 1);
    CHECK(s->servers_joined == 1);
    CHECK(s->keys == 1);
    REQUIRE(s->nodes.size() == 2);
    for (auto& n : s->nodes) {
      CHECK_FALSE(n.address.empty());
      CHECK_FALSE(n.dead);
    }
    CHECK(s->barrier_open);
    CHECK(s->barrier_waits_for == std::vector<uint32_t>{1});
    REQUIRE(s->servers.size() == 1);
    CHECK(s->servers[0].answered);
    CHECK(s->servers[0].floats_stored == 10);
    REQUIRE(s->workers.size() == 2);
    CHECK(s->workers[0].floats_pushed == 0);
    CHECK_THAT(status_json(*s),
               Catch::Contains("\"missing_workers\": [\n    1"));
    // The observer is no worker: a join as one after it still gets rank 1,
    // and the observer's own node may send nothing but the status.
    auto opts = system_options{};
    opts.network = true;
    opts.token = tok;
    system_config cfg{opts};
    caf::actor_system sys{cfg};
    caf::scoped_actor self{sys};
    auto gate = connect_actor<gate_actor>(sys, "127.0.0.1", coordinator.port());
    REQUIRE(gate);
    job_info info;
    self
      ->request(*gate, 10s, join_atom::value, role::observer,
                core::join_proof(tok), caf::actor{}, join_mode::any,
                wire_version)
      .receive([&](job_info& x) { info = x; },
               [](caf::error& err) { FAIL(render(err)); });
    CHECK(info.data_salt.empty());
    auto c = caf::actor_cast<coordinator_actor>(info.coordinator);
    REQUIRE(c);
    bool denied = false;
    self->request(c, 10s, barrier_atom::value, uint32_t{1})
      .receive([](caf::ok_atom) {},
               [&](caf::error& err) {
                 denied = code_of(err) == errc::unauthorized;
               });
    CHECK(denied);
    self->request(c, 10s, status_atom::value)
      .receive([](job_status& x) { CHECK(x.workers_joined == 1); },
               [](caf::error& err) { FAIL(render(err)); });
    // Rank 1 joins after all, and the barrier lets rank 0 go.
    auto second = kvstore::create("dist_sync", o);
    REQUIRE(second);
    CHECK(second->rank() == 1);
    REQUIRE_FALSE(second->init("k", v));
    REQUIRE_FALSE(second->barrier());
    REQUIRE(waiting.wait_for(30s) == std::future_status::ready);
    CHECK_FALSE(waiting.get());
    REQUIRE_FALSE(second->close());
    REQUIRE_FALSE(kv->close());
  }
  server.join();
  CHECK_FALSE(server_err);
  CHECK_FALSE(coordinator.join());
}
