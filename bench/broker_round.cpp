// SPDX-License-Identifier: BSD-3-Clause
#include "bench/broker_round.hpp"

#include <algorithm>
#include <cstring>
#include <iostream>
#include <utility>

#include "caf/actor_system.hpp"
#include "caf/after.hpp"
#include "caf/io/broker.hpp"
#include "caf/io/middleman.hpp"
#include "caf/io/receive_policy.hpp"
#include "caf/io/system_messages.hpp"
#include "caf/stateful_actor.hpp"

namespace actorps::bench {

namespace {

using clock_type = std::chrono::steady_clock;
using byte_buffer = std::vector<char>;

// What the client announces before the rounds of each size: the payload
// bytes and how many rounds follow.
struct announcement {
  uint64_t bytes = 0;
  uint64_t rounds = 0;
};

constexpr uint64_t max_bytes = uint64_t{1} << 30;

// Read buffers handed back and forth with the connection. CAF reads into
// its buffer after resizing it to the size configured next, and resizing a
// smaller buffer up zeroes the new bytes: one pass over the payload before
// the kernel writes it. Leaving a buffer of the right size in the message
// (which CAF swaps back as its read buffer) skips that pass.
struct read_buffers {
  std::vector<byte_buffer> spare;

  // Takes `used` (the message's buffer) back and leaves in it a buffer of
  // `size` bytes for the next read.
  void next(byte_buffer& used, size_t size) {
    spare.push_back(std::move(used));
    auto i
      = std::find_if(spare.begin(), spare.end(),
                     [size](const byte_buffer& b) { return b.size() == size; });
    if (i == spare.end()) {
      used = byte_buffer(size);
    } else {
      used = std::move(*i);
      spare.erase(i);
    }
    // Two buffers of a size suffice (the one read into and the one handed
    // back); a few spares cover a change of size.
    if (spare.size() > 4)
      spare.erase(spare.begin());
  }
};

struct server_state {
  static inline const char* name = "actorps.bench.broker_server";
  announcement now;
  uint64_t left = 0;
  std::vector<float> weights;
  read_buffers buffers;
};

caf::behavior
broker_server_conn(caf::stateful_actor<server_state, caf::io::broker>* self,
                   caf::io::connection_handle hdl,
                   std::chrono::milliseconds idle) {
  self->configure_read(hdl,
                       caf::io::receive_policy::exactly(sizeof(announcement)));
  return {
    [=](caf::io::new_data_msg& msg) {
      auto& st = self->state;
      if (st.left == 0) {
        std::memcpy(&st.now, msg.buf.data(), sizeof(announcement));
        if (st.now.bytes == 0 || st.now.bytes % sizeof(float) != 0
            || st.now.bytes > max_bytes || st.now.rounds == 0) {
          std::cout << "error bad announcement of " << st.now.bytes << " bytes"
                    << std::endl;
          self->quit();
          return;
        }
        st.left = st.now.rounds;
        st.weights.assign(st.now.bytes / sizeof(float), 0.0f);
        self->configure_read(hdl,
                             caf::io::receive_policy::exactly(st.now.bytes));
        st.buffers.next(msg.buf, st.now.bytes);
        return;
      }
      // The round's work: the sum into weights the server keeps, and the
      // weights back, copied into CAF's write buffer.
      const auto* in = reinterpret_cast<const float*>(msg.buf.data());
      for (size_t i = 0; i < st.weights.size(); ++i)
        st.weights[i] += in[i];
      self->write(hdl, st.now.bytes, st.weights.data());
      self->flush(hdl);
      auto next = --st.left == 0 ? sizeof(announcement) : st.now.bytes;
      self->configure_read(hdl, caf::io::receive_policy::exactly(next));
      st.buffers.next(msg.buf, next);
    },
    [=](const caf::io::connection_closed_msg&) { self->quit(); },
    caf::after(idle) >> [=] { self->quit(); },
  };
}

caf::behavior broker_acceptor(caf::io::broker* self,
                              std::chrono::milliseconds idle) {
  return {
    [=](const caf::io::new_connection_msg& msg) {
      self->fork(broker_server_conn, msg.handle, idle);
      self->quit();
    },
    caf::after(idle) >> [=] { self->quit(); },
  };
}

struct client_state {
  static inline const char* name = "actorps.bench.broker_client";
  std::vector<uint64_t> sizes;
  uint32_t warmup = 0;
  uint32_t rounds = 0;
  size_t size_index = 0;
  uint32_t round = 0;
  std::vector<float> payload;
  std::vector<float> result;
  std::vector<double> times;
  clock_type::time_point start;
  read_buffers buffers;
  std::shared_ptr<int> rc;
};

using client_actor = caf::stateful_actor<client_state, caf::io::broker>*;

void send_payload(client_actor self, caf::io::connection_handle hdl) {
  auto& st = self->state;
  st.start = clock_type::now();
  self->write(hdl, st.payload.size() * sizeof(float), st.payload.data());
  self->flush(hdl);
}

// Announces the current size and sends its first round.
void begin_size(client_actor self, caf::io::connection_handle hdl) {
  auto& st = self->state;
  auto bytes = st.sizes[st.size_index];
  announcement a{bytes, uint64_t{st.warmup} + st.rounds};
  self->write(hdl, sizeof(a), &a);
  st.payload.assign(bytes / sizeof(float), 1.0f);
  st.result.assign(bytes / sizeof(float), 0.0f);
  st.round = 0;
  st.times.clear();
  self->configure_read(hdl, caf::io::receive_policy::exactly(bytes));
  send_payload(self, hdl);
}

caf::behavior broker_client(client_actor self, caf::io::connection_handle hdl,
                            std::vector<uint64_t> sizes, uint32_t warmup,
                            uint32_t rounds, std::chrono::milliseconds timeout,
                            std::shared_ptr<int> rc) {
  auto& st = self->state;
  st.sizes = std::move(sizes);
  st.warmup = warmup;
  st.rounds = rounds;
  st.rc = std::move(rc);
  begin_size(self, hdl);
  return {
    [=](caf::io::new_data_msg& msg) {
      auto& st = self->state;
      std::memcpy(st.result.data(), msg.buf.data(), msg.buf.size());
      auto elapsed = clock_type::now() - st.start;
      // The server's weights after this round: every pushed 1.0 summed.
      auto expected = static_cast<float>(st.round + 1);
      if (st.result.front() != expected || st.result.back() != expected) {
        std::cout << "error round " << st.round << " answered "
                  << st.result.front() << ", not " << expected << std::endl;
        self->quit();
        return;
      }
      if (st.round++ >= st.warmup)
        st.times.push_back(std::chrono::duration<double>(elapsed).count());
      st.buffers.next(msg.buf, msg.buf.size());
      if (st.round < st.warmup + st.rounds) {
        send_payload(self, hdl);
        return;
      }
      std::sort(st.times.begin(), st.times.end());
      std::cout << "broker " << st.sizes[st.size_index] << ' '
                << st.times[(st.times.size() - 1) / 2] * 1e6 << std::endl;
      if (++st.size_index < st.sizes.size()) {
        begin_size(self, hdl);
        return;
      }
      *st.rc = 0;
      self->quit();
    },
    [=](const caf::io::connection_closed_msg&) {
      std::cout << "error the broker server closed the connection" << std::endl;
      self->quit();
    },
    caf::after(timeout) >>
      [=] {
        std::cout << "error no broker round in time" << std::endl;
        self->quit();
      },
  };
}

} // namespace

int role_broker_server(system_options sys, std::chrono::milliseconds idle) {
  sys.network = true;
  system_config cfg{sys};
  caf::actor_system system{cfg};
  uint16_t port = 0;
  auto server = system.middleman().spawn_server(broker_acceptor, port, idle);
  if (!server) {
    std::cout << "error " << system.render(server.error()) << std::endl;
    return 1;
  }
  std::cout << "port " << port << std::endl;
  return 0; // the system's destructor waits for the brokers
}

int role_broker_client(const std::string& host, uint16_t port,
                       const std::vector<uint64_t>& sizes, uint32_t warmup,
                       uint32_t rounds, system_options sys,
                       std::chrono::milliseconds timeout) {
  for (auto bytes : sizes)
    if (bytes == 0 || bytes % sizeof(float) != 0 || bytes > max_bytes) {
      std::cout << "error bad size " << bytes << std::endl;
      return 2;
    }
  if (sizes.empty() || rounds == 0) {
    std::cout << "error no sizes or no measured rounds" << std::endl;
    return 2;
  }
  sys.network = true;
  auto rc = std::make_shared<int>(1);
  {
    system_config cfg{sys};
    caf::actor_system system{cfg};
    auto client = system.middleman().spawn_client(
      broker_client, host, port, sizes, warmup, rounds, timeout, rc);
    if (!client) {
      std::cout << "error " << system.render(client.error()) << std::endl;
      return 1;
    }
  } // waits for the client broker
  return *rc;
}

} // namespace actorps::bench
