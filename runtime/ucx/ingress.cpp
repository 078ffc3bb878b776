// SPDX-License-Identifier: BSD-3-Clause
#include "runtime/ucx/ingress.hpp"

#include <functional>
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

std::shared_ptr<plane> start_plane(const std::string& token,
                                   std::shared_ptr<frame_queue> queue,
                                   std::string& error) {
  plane_handlers handlers;
  handlers.on_message = [queue](peer_id from, std::vector<char> header,
                                std::vector<char> body) {
    queue->push(frame{from, std::move(header), std::move(body)});
  };
  plane_options opts;
  opts.secret = data_secret(token);
  return plane::start(std::move(opts), std::move(handlers), error);
}

// -- ingress ------------------------------------------------------------------

namespace {

struct ingress {
  caf::event_based_actor* self;
  std::shared_ptr<plane> out;
  std::map<uint32_t, shard_actor> shards;

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

  template <class T>
  bool load(const frame& x, T& value) {
    caf::binary_deserializer source{self->system(), x.body};
    return !source(value) && source.remaining() == 0;
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
        slice_push p;
        if (!load(x, p))
          return bad_body();
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
        slice_pull p;
        if (!load(x, p))
          return bad_body();
        ask(shard, h->priority, on_floats, on_err, pull_atom::value,
            std::move(p));
        return;
      }
      case frame_kind::batch: {
        slice_batch b;
        if (!load(x, b))
          return bad_body();
        ask(
          shard, h->priority,
          [this, from, request](float_parts& v) {
            auto flat = std::make_shared<std::vector<float>>(v.flatten());
            floats_back(from, request, flat->data(), flat->size(), flat);
          },
          on_err, batch_atom::value, std::move(b));
        return;
      }
      default:
        return;
    }
  }
};

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

  void send(uint32_t shard, uint64_t request, data_kind kind, int32_t priority,
            std::vector<char> body) override {
    frame_header h;
    h.kind = static_cast<frame_kind>(kind);
    h.request = request;
    h.shard = shard;
    h.priority = priority;
    auto keep = std::make_shared<std::vector<char>>(std::move(body));
    payload p{keep->data(), keep->size(), keep};
    auto& sys = sys_;
    auto replies = replies_;
    out_->send(peers_.at(shard), encode(h), std::move(p),
               [&sys, replies, request, shard](const std::string& why) {
                 if (why.empty())
                   return;
                 auto err = make_error(errc::dead_node,
                                       "shard " + std::to_string(shard)
                                         + " is unreachable (" + why + ")");
                 std::vector<char> buf;
                 caf::binary_serializer sink{sys, buf};
                 static_cast<void>(sink(err));
                 frame_header f;
                 f.kind = frame_kind::failure;
                 f.request = request;
                 replies->push(frame{0, encode(f), std::move(buf)});
               });
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
      r.body = std::move(x.body);
      out.push_back(std::move(r));
    }
    return out;
  }

private:
  caf::actor_system& sys_;
  std::shared_ptr<plane> out_;
  std::shared_ptr<frame_queue> replies_;
  std::map<uint32_t, peer_id> peers_;
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
      auto state = std::make_shared<ingress>(ingress{self, plane, shards});
      return {
        // Only wakes it: what it serves comes from the queue, which only the
        // plane fills, with frames of peers that proved the job's secret.
        [queue, state](ucx_atom) {
          for (auto& x : queue->take())
            state->serve(x);
        },
      };
    });
  queue->set_target(actor);
  return actor;
}

} // namespace actorps::ucx
