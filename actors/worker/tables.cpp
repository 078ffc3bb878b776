// SPDX-License-Identifier: BSD-3-Clause
// A worker's side of inits and row-sparse tables: writing a dense key's
// value and making a table on every shard, and pushing and pulling rows (one
// request per shard holding some of them).
#include "actors/worker/shard_link.hpp"
#include "actors/worker/state.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "core/rows.hpp"
#include "messages/errors.hpp"

namespace actorps {

// -- the data channel's encoding of rows --------------------------------------

caf::error to_request(caf::actor_system&, std::shared_ptr<const rows_push> msg,
                      data_request& out) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "row frames carry the rows as they lie in memory");
  out.slice = msg->slice;
  out.worker = msg->worker;
  out.seq = msg->seq;
  out.rows = msg->rows.size();
  struct held {
    std::shared_ptr<const rows_push> msg;
    std::vector<uint8_t> encoded;
  };
  auto keep = std::make_shared<held>();
  keep->msg = std::move(msg);
  // A push with no rows (a sync round's count on a shard) has no body.
  add_values(out, keep->msg->values, keep->encoded);
  auto& rows = keep->msg->rows;
  if (!rows.empty())
    out.pieces.push_back({rows.data(), rows.size() * sizeof(uint64_t)});
  out.keep = std::move(keep);
  return caf::none;
}

caf::error to_request(caf::actor_system&, std::shared_ptr<const rows_pull> msg,
                      data_request& out) {
  out.slice = msg->slice;
  out.worker = msg->worker;
  out.seq = msg->seq;
  out.rows = msg->rows.size();
  out.pieces.push_back({msg->rows.data(), msg->rows.size() * sizeof(uint64_t)});
  out.keep = std::move(msg);
  return caf::none;
}

void write_init(worker_ptr self, key_info info, floats value,
                caf::typed_response_promise<caf::ok_atom> rp) {
  auto whole = info.slices.size() == 1;
  auto id = info.id;
  auto v = std::make_shared<floats>(std::move(value));
  init_slices(self, std::move(info), std::move(rp),
              [self, whole, id, v](const slice_range& s, auto on_ok,
                                   std::function<void(caf::error&)> on_err) {
                slice_init msg{make_slice_id(id, s.part), {}};
                if (whole) {
                  msg.value = std::move(*v);
                } else {
                  auto first = v->data.begin()
                               + static_cast<std::ptrdiff_t>(s.offset);
                  msg.value.data.assign(
                    first, first + static_cast<std::ptrdiff_t>(s.length));
                }
                to_shard<caf::ok_atom>(self, s.shard, 0, std::move(on_ok),
                                       std::move(on_err), init_atom::value,
                                       std::move(msg));
              });
}

void write_table(worker_ptr self, key_info info, table_init spec,
                 caf::typed_response_promise<caf::ok_atom> rp) {
  core::row_layout layout{info.shape[0], info.dim,
                          static_cast<uint32_t>(self->state.cfg.shards.size())};
  auto id = info.id;
  init_slices(
    self, std::move(info), std::move(rp),
    [self, layout, id, spec](const slice_range& s, auto on_ok,
                             std::function<void(caf::error&)> on_err) {
      auto msg = spec;
      msg.slice = make_slice_id(id, s.part);
      msg.rows = layout.rows_on(s.shard);
      msg.dim = layout.dim;
      msg.first = s.shard;
      msg.stride = layout.shards;
      to_shard<caf::ok_atom>(self, s.shard, 0, std::move(on_ok),
                             std::move(on_err), init_atom::value, msg);
    });
}

void start_rows(worker_ptr self, op_kind kind, route& r,
                const std::vector<uint64_t>& ids, int32_t priority,
                std::vector<float> values,
                std::function<void(float_parts)> finish,
                std::function<void(caf::error)> on_error) {
  auto& st = self->state;
  const auto& info = r.info;
  auto pushes = kind == op_kind::push;
  std::string op = pushes ? "push_rows" : "pull_rows";
  auto dim = info.dim;
  if (dim == 0) {
    on_error(make_error(errc::shape_mismatch,
                        op + ": key '" + info.name + "'"
                          + " is not a row table (push and pull it whole)"));
    return;
  }
  if (pushes && values.size() != ids.size() * dim) {
    on_error(make_error(errc::shape_mismatch,
                        op + ": " + std::to_string(ids.size()) + " rows of "
                          + std::to_string(dim) + " floats need "
                          + std::to_string(ids.size() * dim) + " values, got "
                          + std::to_string(values.size())));
    return;
  }
  // fp16 rows cross packed as a dense push's do; 2-bit needs a residual
  // per pushed value kept at the worker, which for a table is the table.
  if (pushes && r.comp.kind == codec::two_bit) {
    on_error(make_error(errc::bad_config,
                        op + ": key '" + info.name
                          + "' is a row table: 2-bit compression is not "
                            "supported for rows (its residuals would be as "
                            "large as the table); use fp16 or none"));
    return;
  }
  core::row_layout layout{info.shape[0], dim,
                          static_cast<uint32_t>(st.cfg.shards.size())};
  std::vector<core::shard_rows> split;
  if (auto res = core::split_rows(layout, ids, split); !res.ok()) {
    res.message.replace(0, 4, op);
    on_error(to_error(res));
    return;
  }
  // One shard's part travels as one message: it must fit the job's bound
  // (a connection that announces more is closed).
  if (auto cap = st.cfg.message_cap; cap > 0)
    for (auto& rows : split) {
      auto bytes = rows.local.size() * (4 * dim + 8) + (uint64_t{1} << 20);
      if (bytes > cap) {
        on_error(make_error(
          errc::bad_config,
          op + ": " + std::to_string(ids.size()) + " rows of "
            + std::to_string(dim) + " floats put "
            + std::to_string(rows.local.size())
            + " rows on one shard, more than one message of this job carries ("
            + std::to_string(cap >> 20) + " MiB): " + op + " them in parts"));
        return;
      }
    }
  // Every row on one shard: that shard's part is the request as it is, so
  // a push sends the values as given and a pull's answer is the output,
  // with no copy either way. (Ids named twice go as they are: the shard
  // sums a push's, and answers a pull's each time.)
  auto whole = !ids.empty()
               && std::any_of(split.begin(), split.end(),
                              [](auto& rows) { return rows.in_order; });
  auto out = std::make_shared<std::vector<float>>(
    pushes || whole ? 0 : ids.size() * dim);
  auto g = std::make_shared<gather>();
  g->finish = [out, whole, finish = std::move(finish)](float_parts x) {
    finish(whole ? std::move(x) : float_parts{std::move(*out)});
  };
  g->on_error = std::move(on_error);
  std::function<void(caf::error&)> fail = [g](caf::error& err) {
    g->fail(std::move(err));
  };
  auto rank = st.cfg.rank;
  for (uint32_t s = 0; s < split.size(); ++s) {
    auto& rows = split[s];
    // Sync rounds and clocks count pushes per shard: in those jobs every
    // shard holding rows gets the push, with no rows if none are its.
    auto clocked = pushes && st.cfg.sync && s < layout.rows;
    if (rows.local.empty() && !clocked)
      continue;
    auto id = make_slice_id(info.id, s);
    auto seq = next_seq(st, r, s);
    ++g->remaining;
    auto n = rows.local.size() * dim;
    if (pushes) {
      floats sum{rows.in_order ? std::move(values)
                               : core::shard_values(rows, values.data(), dim)};
      if (r.comp.kind == codec::fp16) {
        // The shard gets the values fp16 holds, whether they cross packed
        // or stay in this process.
        quantize(r.comp, sum.data.data(), nullptr, sum.data.size());
        sum.encoding = r.comp;
      }
      submit<caf::ok_atom>(
        self, s, priority, kind, n, [g](caf::ok_atom) { g->arrive(); }, fail,
        push_atom::value,
        rows_push{id, rank, seq, std::move(rows.local), std::move(sum)});
      continue;
    }
    auto local = std::move(rows.local);
    submit<shared_floats>(
      self, s, priority, kind, n,
      [g, out, whole, rows = std::move(rows), dim, n](shared_floats& x) {
        if (x.size() != n) {
          g->fail(make_error(errc::bad_config, "pull_rows: a shard answered "
                                                 + std::to_string(x.size())
                                                 + " floats for "
                                                 + std::to_string(n)));
          return;
        }
        if (whole)
          g->out.append(std::move(x));
        else
          core::scatter_rows(rows, x.data(), dim, out->data());
        g->arrive();
      },
      fail, pull_atom::value, rows_pull{id, rank, seq, std::move(local)});
  }
  g->sealed = true;
  if (!g->failed && g->remaining == 0)
    g->finish(float_parts{});
}

void rows_op(worker_ptr self, op_kind kind, std::string key,
             std::vector<uint64_t> rows, int32_t priority,
             std::vector<float> values, std::function<void(float_parts)> done,
             std::function<void(const caf::error&)> fail) {
  auto since = std::chrono::steady_clock::now();
  auto* counters = &self->state.stats.ops[static_cast<size_t>(kind)];
  auto sent = values.size();
  auto failed = [fail, counters](const caf::error& err) {
    ++counters->errors;
    fail(err);
  };
  auto run = [self, kind, key, rows = std::move(rows), priority, failed, since,
              sent, counters, done = std::move(done),
              values = std::move(values)]() mutable {
    auto& r = self->state.routes.at(key);
    start_rows(
      self, kind, r, rows, priority, std::move(values),
      [done, since, sent, counters](float_parts out) mutable {
        counters->record(std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - since)
                           .count());
        counters->floats_out += sent;
        counters->floats_in += out.size;
        done(std::move(out));
      },
      failed);
  };
  with_routes(self, {key}, std::move(run), failed);
}

} // namespace actorps
