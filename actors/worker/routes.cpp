// SPDX-License-Identifier: BSD-3-Clause
// A worker's routes: what it learns of keys from the coordinator (add_route,
// with_routes, a key's init seen done) and the routes of the key lists its
// callers name again (distinct_routes). What one call sends with them is in
// dispatch.cpp.
#include "actors/worker/state.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "caf/event_based_actor.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include "messages/errors.hpp"

namespace actorps {

namespace {

// True if `info` gives the key of `r` the numbers and slices it has (what a
// kept list's summary and plan read of it).
bool same_layout(const route& r, const key_info& info) {
  auto same = [](const slice_range& a, const slice_range& b) {
    return a.part == b.part && a.shard == b.shard && a.offset == b.offset
           && a.length == b.length;
  };
  return r.info.id == info.id && r.info.size == info.size
         && r.info.dim == info.dim
         && std::equal(r.parts.begin(), r.parts.end(), info.slices.begin(),
                       info.slices.end(), same);
}

} // namespace

// Records the route of `key`; a known route keeps its sequence numbers.
void add_route(worker_ptr self, key_info info) {
  auto& st = self->state;
  auto& routes = st.routes;
  auto i = routes.find(info.name);
  if (i != routes.end()) {
    auto& r = i->second;
    // (A key's slices never change in number; were there more, their
    // numbers would move to the end, the ones kept.)
    if (info.slices.size() > r.parts.size()) {
      auto at = st.seqs.size();
      st.seqs.resize(at + info.slices.size(), 0);
      std::copy_n(st.seqs.begin() + static_cast<std::ptrdiff_t>(r.seq_at),
                  r.parts.size(),
                  st.seqs.begin() + static_cast<std::ptrdiff_t>(at));
      r.seq_at = at;
    }
    // (The same key told again, as every later init and lookup of it
    // does, leaves the kept lists' summaries and plans as they are.)
    if (!same_layout(r, info))
      ++st.route_changes;
    r.parts.assign(info.slices.begin(), info.slices.end());
    r.info = std::move(info);
    return;
  }
  auto name = info.name;
  route r;
  r.parts.assign(info.slices.begin(), info.slices.end());
  r.seq_at = st.seqs.size();
  st.seqs.resize(r.seq_at + info.slices.size(), 0);
  auto c = self->state.key_compression.find(name);
  r.comp = c != self->state.key_compression.end() ? c->second
                                                  : self->state.cfg.compression;
  r.info = std::move(info);
  routes.emplace(std::move(name), std::move(r));
}

namespace {

// Runs the operations that waited behind a lookup, until one stalls again.
void drain_backlog(worker_ptr self) {
  auto& st = self->state;
  while (!st.stalled && !st.backlog.empty()) {
    auto f = std::move(st.backlog.front());
    st.backlog.pop_front();
    f();
  }
}

} // namespace

// Runs `f` once every key of `keys` has a route, fetching missing ones from
// the coordinator first; operations issued meanwhile wait behind it.
void with_routes(worker_ptr self, const std::vector<std::string>& keys,
                 std::function<void()> f,
                 std::function<void(const caf::error&)> on_error) {
  auto& st = self->state;
  if (st.stalled) {
    // Rare (a lookup is in flight): the keys are copied only here.
    st.backlog.emplace_back(
      [self, keys, f = std::move(f), on_error = std::move(on_error)]() mutable {
        with_routes(self, keys, std::move(f), std::move(on_error));
      });
    return;
  }
  std::vector<std::string> missing;
  for (auto& k : keys)
    if (st.routes.count(k) == 0
        && std::find(missing.begin(), missing.end(), k) == missing.end())
      missing.push_back(k);
  if (missing.empty()) {
    f();
    return;
  }
  struct lookups {
    std::size_t remaining = 0;
    caf::error err;
    std::function<void()> f;
    std::function<void(const caf::error&)> on_error;
  };
  auto pending = std::make_shared<lookups>();
  pending->remaining = missing.size();
  pending->f = std::move(f);
  pending->on_error = std::move(on_error);
  auto arrive = [self, pending] {
    if (--pending->remaining > 0)
      return;
    if (pending->err)
      pending->on_error(pending->err);
    else
      pending->f();
    self->state.stalled = false;
    drain_backlog(self);
  };
  st.stalled = true;
  for (auto& k : missing)
    ask_coordinator<key_info>(
      self, st.timeout(),
      [self, arrive](key_info& info) {
        add_route(self, std::move(info));
        arrive();
      },
      [self, k, pending, arrive](caf::error& err) {
        // An init may have made the route known meanwhile: keep it.
        if (self->state.routes.count(k) == 0 && !pending->err)
          pending->err = std::move(err);
        arrive();
      },
      lookup_atom::value, k);
}

// The routes of `keys`, each key looked up once; nothing if one is not
// known or `keys` names a key more than once (seen by the call's stamp on
// each route, without hashing the key list again). `summary`: where the
// list's summary is kept, when the list is.
std::optional<std::vector<route*>>
distinct_routes(worker_ptr self, const core::shared_names_ptr& list,
                list_summary** summary) {
  auto& st = self->state;
  if (auto known = st.distinct.find_adopting(list)) {
    if (summary != nullptr)
      *summary = &known->summary;
    return known->routes;
  }
  const auto& keys = *list;
  auto call = ++st.calls;
  std::vector<route*> rs;
  rs.reserve(keys.size());
  for (auto& k : keys) {
    auto i = st.routes.find(k);
    if (i == st.routes.end() || i->second.named_in == call)
      return std::nullopt;
    i->second.named_in = call;
    rs.push_back(&i->second);
  }
  if (auto* kept = st.distinct.keep(list, route_list{rs, {}});
      kept != nullptr && summary != nullptr)
    *summary = &kept->summary;
  return rs;
}

caf::error init_again(worker_ptr self, const std::string& key) {
  if (self->state.declared.count(key) == 0)
    return caf::none;
  return make_error(errc::already_initialized,
                    "init: key '" + key + "' was already initialized by rank "
                      + std::to_string(self->state.cfg.rank));
}

void joined(worker_ptr self, key_info info,
            caf::typed_response_promise<caf::ok_atom> rp) {
  self->state.declared.insert(info.name);
  add_route(self, std::move(info));
  rp.deliver(caf::ok_atom::value);
}

} // namespace actorps
