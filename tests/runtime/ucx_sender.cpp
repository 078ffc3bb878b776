// SPDX-License-Identifier: BSD-3-Clause
// Test helper: connects a plane to the plane whose address is argv[1] (hex)
// with the secret argv[2], says "sending" once the peer answered, then sends
// 4 KB messages as fast as the plane takes them until it is killed. With
// argv[3] "large": 256 KB messages, through a shared-memory segment (it
// says "shared" once one went that way), over a connection UCX watches.
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/ucx/plane.hpp"

using namespace actorps::ucx;

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4)
    return 2;
  bool large = argc == 4 && std::string{argv[3]} == "large";
  std::string hex = argv[1];
  std::vector<char> address;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    address.push_back(
      static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  std::mutex mtx;
  std::condition_variable cv;
  bool up = false;
  plane_handlers handlers;
  handlers.on_peer_up = [&](peer_id, const std::vector<char>&, uint32_t) {
    std::lock_guard<std::mutex> guard{mtx};
    up = true;
    cv.notify_all();
  };
  plane_options opts;
  opts.secret = argv[2];
  if (large) {
    opts.shared_memory = false;
    opts.shared_segment = std::size_t{8} << 20;
  }
  std::string error;
  auto p = plane::start(opts, handlers, error);
  if (!p) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  auto to = p->connect(address);
  {
    std::unique_lock<std::mutex> lock{mtx};
    if (!cv.wait_for(lock, std::chrono::seconds(30), [&] { return up; }))
      return 1;
  }
  std::printf("sending\n");
  std::fflush(stdout);
  std::vector<char> body(large ? 256 << 10 : 4096, 'x');
  std::atomic<int> in_flight{0};
  bool said_shared = false;
  for (;;) {
    if (large && !said_shared && p->shared_sends() > 0) {
      said_shared = true;
      std::printf("shared\n");
      std::fflush(stdout);
    }
    while (in_flight.load() > 64)
      std::this_thread::yield();
    ++in_flight;
    p->send(to, std::vector<char>{'s', 'p', 'a', 'm'},
            payload{body.data(), body.size()},
            [&](const std::string&) { --in_flight; });
  }
}
