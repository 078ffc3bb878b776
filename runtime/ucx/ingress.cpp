// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/ucx/ingress.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "caf/actor_system.hpp"
#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/message_priority.hpp"
#include "caf/send.hpp"

#include "messages/errors.hpp"
#include "messages/type_ids.hpp"
#include "runtime/ucx/frames.hpp"

namespace actorps::ucx {

// -- frame_queue --------------------------------------------------------------

void frame_queue::set_target(caf::actor target) {
  bool wake;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    target_ = std::move(target);
    wake = !items_.empty();
  }
  if (wake)
    caf::anon_send(target_, ucx_atom::value);
}

void frame_queue::push(frame x) {
  caf::actor wake;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (items_.empty())
      wake = target_;
    items_.push_back(std::move(x));
  }
  if (wake)
    caf::anon_send(wake, ucx_atom::value);
}

std::vector<frame> frame_queue::take() {
  std::lock_guard<std::mutex> guard{mtx_};
  return std::exchange(items_, {});
}

std::shared_ptr<plane>
start_plane(const std::string& token, const std::string& salt,
            std::shared_ptr<frame_queue> queue, std::string& error) {
  plane_handlers handlers;
  handlers.on_message = [queue](peer_id from, std::vector<char> header,
                                buffer body) {
    queue->push(frame{from, std::move(header), std::move(body)});
  };
  plane_options opts;
  opts.secret = data_secret(token, salt);
  return plane::start(std::move(opts), std::move(handlers), error);
}

// -- ingress ------------------------------------------------------------------

namespace {

struct ingress {
  caf::event_based_actor* self;
  std::shared_ptr<plane> out;
  std::map<uint32_t, shard_actor> shards;
  // The peers each worker rank sent requests from, to drop them when the
  // worker's node goes down.
  std::map<uint32_t, std::set<peer_id>> peers_of;

  void seen(uint32_t worker, peer_id from) {
    // A dropped peer's frames no longer arrive; a rank beyond any job's
    // (the shard refuses it) is not recorded.
    if (worker < (uint32_t{1} << 20))
      peers_of[worker].insert(from);
  }

  // Worker `rank`'s node went down: its peers are dropped, so that replies
  // still owed to it fail instead of waiting on a peer that never reads.
  void worker_down(uint32_t rank) {
    auto i = peers_of.find(rank);
    if (i == peers_of.end())
      return;
    for (auto peer : i->second)
      out->drop(peer, "UCX: worker " + std::to_string(rank) + " is down");
    peers_of.erase(i);
  }

  void send(peer_id to, frame_kind kind, uint64_t request, payload body) {
    frame_header h;
    h.kind = kind;
    h.request = request;
    out->send(to, encode(h), std::move(body));
  }

  void fail(peer_id to, uint64_t request, const caf::error& err) {
    auto buf = std::make_shared<std::vector<char>>();
    caf::binary_serializer sink{self->system(), *buf};
    auto copy = err;
    if (sink(copy))
      buf->clear();
    payload body{buf->data(), buf->size(), buf};
    send(to, frame_kind::failure, request, std::move(body));
  }

  void floats_back(peer_id to, uint64_t request, const float* data,
                   std::size_t n, std::shared_ptr<const void> keep) {
    send(to, frame_kind::reply, request,
         payload{data, n * sizeof(float), std::move(keep)});
  }

  // The pieces of a pulled value, in the value's order, sent as they lie
  // in the shards' buffers.
  void parts_back(peer_id to, uint64_t request, float_parts& v) {
    auto keep = std::make_shared<float_parts>(std::move(v));
    auto order = keep->pieces;
    std::sort(order.begin(), order.end(),
              [](const float_piece& x, const float_piece& y) {
                return x.at < y.at;
              });
    std::vector<payload::piece> pieces;
    pieces.reserve(order.size());
    for (const auto& p : order)
      pieces.push_back(payload::piece{keep->buffers[p.buffer].data() + p.from,
                                      p.length * sizeof(float)});
    send(to, frame_kind::reply, request,
         payload{std::move(pieces), std::move(keep)});
  }

  // The values of a push frame's body, or none if the body is not
  // `meta.count` values as `meta.encoding` lays them out.
  static std::optional<floats> values_of(const slice_meta& meta, buffer& body) {
    floats out;
    out.encoding = meta.encoding;
    if (meta.count > (uint64_t{1} << 40)
        || body.size() != encoded_size(meta.encoding, meta.count))
      return std::nullopt;
    if (meta.encoding.kind == codec::none) {
      if (!body.take_floats(out.data))
        return std::nullopt;
      out.data.resize(meta.count);
      return out;
    }
    out.data.resize(meta.count);
    decode(meta.encoding, reinterpret_cast<const uint8_t*>(body.data()),
           meta.count, out.data.data());
    return out;
  }

  template <class OnOk, class... Ts>
  void ask(const shard_actor& shard, int32_t priority, OnOk on_ok,
           std::function<void(caf::error&)> on_err, Ts&&... xs) {
    if (priority > 0)
      self
        ->request<caf::message_priority::high>(shard, caf::infinite,
                                               std::forward<Ts>(xs)...)
        .then(std::move(on_ok), std::move(on_err));
    else
      self->request(shard, caf::infinite, std::forward<Ts>(xs)...)
        .then(std::move(on_ok), std::move(on_err));
  }

  void serve(frame& x) {
    auto h = decode(x.header);
    if (!h || h->kind == frame_kind::reply || h->kind == frame_kind::failure)
      return;
    auto from = x.from;
    auto request = h->request;
    auto i = shards.find(h->shard);
    if (i == shards.end()) {
      fail(from, request,
           make_error(errc::bad_config, "ucx: no shard "
                                          + std::to_string(h->shard)
                                          + " on this server"));
      return;
    }
    auto& shard = i->second;
    std::function<void(caf::error&)> on_err
      = [this, from, request](caf::error& err) { fail(from, request, err); };
    auto on_floats = [this, from, request](shared_floats& v) {
      auto keep = std::make_shared<shared_floats>(v);
      floats_back(from, request, keep->data(), keep->size(), keep);
    };
    auto bad_body = [&] {
      fail(from, request,
           make_error(errc::bad_config, "ucx: a request body does not decode"));
    };
    switch (h->kind) {
      case frame_kind::push:
      case frame_kind::push_pull: {
        auto meta = decode_meta(x.header);
        if (!meta)
          return bad_body();
        auto values = values_of(*meta, x.body);
        if (!values)
          return bad_body();
        seen(meta->worker, from);
        slice_push p{meta->slice, meta->worker, meta->seq, std::move(*values)};
        if (h->kind == frame_kind::push)
          ask(
            shard, h->priority,
            [this, from, request](caf::ok_atom) {
              send(from, frame_kind::reply, request, payload{});
            },
            on_err, push_atom::value, std::move(p));
        else
          ask(shard, h->priority, on_floats, on_err, push_pull_atom::value,
              std::move(p));
        return;
      }
      case frame_kind::pull: {
        auto meta = decode_meta(x.header);
        if (!meta || x.body.size() != 0)
          return bad_body();
        seen(meta->worker, from);
        ask(shard, h->priority, on_floats, on_err, pull_atom::value,
            slice_pull{meta->slice, meta->worker, meta->seq});
        return;
      }
      case frame_kind::batch: {
        slice_batch b;
        caf::binary_deserializer source{self->system(), x.body.data(),
                                        x.body.size()};
        if (source(b) || source.remaining() != 0)
          return bad_body();
        seen(b.worker, from);
        ask(
          shard, h->priority,
          [this, from, request](float_parts& v) {
            parts_back(from, request, v);
          },
          on_err, batch_atom::value, std::move(b));
        return;
      }
      default:
        return;
    }
  }
};

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
    return peers_.count(shard) > 0;
  }

  void send(data_request x) override {
    frame_header h;
    h.kind = static_cast<frame_kind>(x.kind);
    h.request = x.request;
    h.shard = x.shard;
    h.priority = x.priority;
    auto header = x.kind == data_kind::batch
                    ? encode(h)
                    : encode(h, slice_meta{x.slice, x.worker, x.seq, x.encoding,
                                           x.count});
    auto& sys = sys_;
    auto replies = replies_;
    auto request = x.request;
    auto shard = x.shard;
    out_->send(
      peers_.at(shard), std::move(header),
      payload{x.data, x.size, std::move(x.keep)},
      [&sys, replies, request, shard](const std::string& why) {
        if (why.empty())
          return;
        auto err = make_error(errc::dead_node, "shard " + std::to_string(shard)
                                                 + " is unreachable (" + why
                                                 + ")");
        replies->push(frame{0, failure_header(request), error_body(sys, err)});
      });
  }

  void shard_down(uint32_t shard) override {
    auto i = peers_.find(shard);
    if (i == peers_.end())
      return;
    dead_.insert(shard);
    for (const auto& [other, peer] : peers_)
      if (peer == i->second && dead_.count(other) == 0)
        return;
    out_->drop(i->second, "UCX: the server of shard " + std::to_string(shard)
                            + " is down");
  }

  std::vector<data_reply> take() override {
    std::vector<data_reply> out;
    for (auto& x : replies_->take()) {
      auto h = decode(x.header);
      if (!h
          || (h->kind != frame_kind::reply && h->kind != frame_kind::failure))
        continue;
      data_reply r;
      r.request = h->request;
      r.failed = h->kind == frame_kind::failure;
      if (r.failed) {
        r.error = x.body.bytes();
      } else if (!x.body.take_floats(r.values)) {
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
  caf::actor_system& sys_;
  std::shared_ptr<plane> out_;
  std::shared_ptr<frame_queue> replies_;
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

caf::actor spawn_ingress(caf::actor_system& sys,
                         std::shared_ptr<frame_queue> queue,
                         std::shared_ptr<plane> plane,
                         std::map<uint32_t, shard_actor> shards) {
  auto actor = sys.spawn(
    [queue, plane, shards](caf::event_based_actor* self) -> caf::behavior {
      auto state = std::make_shared<ingress>(ingress{self, plane, shards, {}});
      return {
        // Only wakes it: what it serves comes from the queue, which only the
        // plane fills, with frames of peers that proved the job's secret.
        [queue, state](ucx_atom) {
          for (auto& x : queue->take())
            state->serve(x);
        },
        // From the server's runner (this actor is not published).
        [state](node_down_atom, uint32_t worker_rank) {
          state->worker_down(worker_rank);
        },
      };
    });
  queue->set_target(actor);
  return actor;
}

} // namespace actorps::ucx
