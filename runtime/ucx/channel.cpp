// SPDX-License-Identifier: BSD-3-Clause
// A worker's data channel over the UCX plane (make_worker_channel in
// runtime/ucx/ingress.hpp): requests out as frames, reply frames back as
// data replies, a request that cannot leave as a `dead_node` failure.
#include "runtime/ucx/ingress.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/binary_serializer.hpp"

#include "messages/errors.hpp"
#include "runtime/ucx/frames.hpp"

namespace actorps::ucx {

namespace {

std::vector<char> failure_header(uint64_t request) {
  frame_header f;
  f.kind = frame_kind::failure;
  f.request = request;
  return encode(f);
}

buffer error_body(caf::actor_system& sys, caf::error err) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  static_cast<void>(sink(err));
  return buffer{buf.data(), buf.size()};
}

class worker_channel : public data_channel {
public:
  worker_channel(caf::actor_system& sys, std::shared_ptr<plane> out,
                 std::shared_ptr<frame_queue> replies,
                 std::map<uint32_t, peer_id> shard_peers)
    : sys_(sys),
      out_(std::move(out)),
      replies_(std::move(replies)),
      peers_(std::move(shard_peers)) {
    // nop
  }

  bool carries(uint32_t shard) const override {
    std::lock_guard<std::mutex> guard{mtx_};
    return peers_.count(shard) > 0;
  }

  lent_room lease(uint32_t shard, std::size_t bytes) override {
    peer_id to = 0;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      auto i = peers_.find(shard);
      if (i == peers_.end() || dead_.count(shard) > 0)
        return {};
      to = i->second;
    }
    // (Such a request carries its values alone: to_request in
    // actors/worker/dispatch.cpp.)
    auto x = out_->lease(to, bytes);
    return lent_room{reinterpret_cast<float*>(x.data), std::move(x.keep)};
  }

  bool drive(const std::function<bool()>& done,
             std::chrono::steady_clock::time_point until) override {
    return out_->drive(done, until);
  }

  void wake_driver() override {
    out_->wake_driver();
  }

  void send(data_request x) override {
    frame_header h;
    h.kind = static_cast<frame_kind>(x.kind);
    h.request = x.request;
    h.shard = x.shard;
    h.priority = x.priority;
    auto header = x.kind == data_kind::batch
                    ? encode(h, batch_meta{x.worker, x.op, x.slices, x.ids_size,
                                           x.encoding, x.count})
                    : encode(h, slice_meta{x.slice, x.worker, x.seq, x.encoding,
                                           x.count, x.rows});
    std::vector<payload::piece> pieces;
    pieces.reserve(x.pieces.size());
    for (const auto& p : x.pieces)
      pieces.push_back(payload::piece{p.data, p.size});
    auto& sys = sys_;
    auto replies = replies_;
    auto request = x.request;
    auto shard = x.shard;
    out_->send(peer_of(shard), std::move(header),
               payload{std::move(pieces), std::move(x.keep)},
               [&sys, replies, request, shard](const std::string& why) {
                 if (why.empty())
                   return;
                 auto err = make_error(errc::dead_node,
                                       "shard " + std::to_string(shard)
                                         + " is unreachable (" + why + ")");
                 replies->push(
                   frame{0, 0, failure_header(request), error_body(sys, err)});
               });
  }

  void shard_down(uint32_t shard) override {
    peer_id peer = 0;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      auto i = peers_.find(shard);
      if (i == peers_.end())
        return;
      dead_.insert(shard);
      for (const auto& [other, p] : peers_)
        if (p == i->second && dead_.count(other) == 0)
          return;
      peer = i->second;
    }
    out_->drop(peer, "UCX: the server of shard " + std::to_string(shard)
                       + " is down");
  }

  bool reroute(uint32_t shard, const std::string& address) override {
    if (address.empty())
      return false;
    auto peer
      = out_->connect(std::vector<char>(address.begin(), address.end()));
    std::lock_guard<std::mutex> guard{mtx_};
    peers_[shard] = peer;
    dead_.erase(shard);
    return true;
  }

  std::vector<data_reply> take() override {
    std::vector<data_reply> out;
    for (auto& x : replies_->take()) {
      auto h = decode(x.header);
      if (!h
          || (h->kind != frame_kind::reply && h->kind != frame_kind::failure))
        continue;
      // A server answers a request to the address its sender's hello
      // named: a reply stamped for another identity was asked for by a
      // peer that named this plane's address, and is none of ours. (Local
      // failures come from no peer.)
      if (x.from != 0 && h->shard != out_->identity())
        continue;
      data_reply r;
      r.request = h->request;
      r.failed = h->kind == frame_kind::failure;
      std::vector<float> values;
      if (r.failed) {
        r.error = x.body.bytes();
      } else if (auto in_place = x.body.floats_in_place(); !in_place.empty()) {
        // Values in the server's segment are read there, by whoever copies
        // them to their destination.
        r.values = std::move(in_place);
      } else if (x.body.take_floats(values)) {
        r.values = shared_floats{std::move(values)};
      } else {
        r.failed = true;
        auto body = error_body(
          sys_, make_error(errc::bad_config,
                           "ucx: a reply of " + std::to_string(x.body.size())
                             + " bytes holds no float values"));
        r.error = body.bytes();
      }
      out.push_back(std::move(r));
    }
    return out;
  }

private:
  peer_id peer_of(uint32_t shard) const {
    std::lock_guard<std::mutex> guard{mtx_};
    return peers_.at(shard);
  }

  caf::actor_system& sys_;
  std::shared_ptr<plane> out_;
  std::shared_ptr<frame_queue> replies_;
  // Shards to peers: the worker changes them, clients lease room by them.
  mutable std::mutex mtx_;
  std::map<uint32_t, peer_id> peers_;
  std::set<uint32_t> dead_;
};

} // namespace

std::shared_ptr<data_channel>
make_worker_channel(caf::actor_system& sys, std::shared_ptr<plane> plane,
                    std::shared_ptr<frame_queue> replies,
                    std::map<uint32_t, peer_id> shard_peers) {
  return std::make_shared<worker_channel>(
    sys, std::move(plane), std::move(replies), std::move(shard_peers));
}

} // namespace actorps::ucx
