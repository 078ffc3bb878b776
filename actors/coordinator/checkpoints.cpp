// SPDX-License-Identifier: BSD-3-Clause
// Saves, loads and periodic checkpoints in pieces: the coordinator walks
// the shards one piece at a time, so no message carries more than a piece
// of the model (a heartbeat never waits behind gigabytes) and no process
// holds more of it than its own part.
#include "actors/coordinator/shards.hpp"
#include "actors/coordinator/state.hpp"

#include <chrono>
#include <utility>

#include "caf/send.hpp"

#include "core/optimizer.hpp"
#include "core/restore.hpp"
#include "messages/errors.hpp"

namespace actorps {

namespace {

// Names a shard's records (shards know ids only) and drops those this
// coordinator never registered (a shard that outlived an earlier one).
void name_records(coordinator_state& st, std::vector<slice_record>& recs) {
  std::vector<slice_record> kept;
  kept.reserve(recs.size());
  for (auto& rec : recs) {
    if (rec.key_id >= st.names_by_id.size())
      continue;
    auto& info = st.keys[st.names_by_id[rec.key_id]].info;
    if (rec.part >= info.slices.size())
      continue;
    rec.key = info.name;
    rec.offset = info.slices[rec.part].offset;
    rec.parts = static_cast<uint32_t>(info.slices.size());
    kept.push_back(std::move(rec));
  }
  recs = std::move(kept);
}

// Tells every live shard `xs...`, whose answer (`Reply`) nobody awaits.
template <class Reply, class... Ts>
void tell_live_shards(coordinator_ptr self, Ts... xs) {
  auto& st = self->state;
  for (size_t i = 0; i < st.cfg.shards.size(); ++i)
    if (i >= st.shard_dead.size() || !st.shard_dead[i])
      self->request(st.cfg.shards[i], st.timeout(), xs...)
        .then([](Reply&) {}, [](caf::error&) {});
}

// Gives save `session` up: every live shard drops its copy of the state.
void abandon_save(coordinator_ptr self, uint64_t session) {
  tell_live_shards<save_piece>(self, save_atom::value,
                               save_cursor{session, 0, save_cursor::give_up});
}

// Asks shard `at.shard` for its next records and delivers them named, with
// the cursor that follows (the next shard's first once this one is done).
template <class Promise>
void next_piece(coordinator_ptr self, Promise rp, save_cursor at) {
  auto& st = self->state;
  auto n = static_cast<uint32_t>(st.cfg.shards.size());
  if (at.shard >= n) {
    save_piece last;
    last.optimizer = st.optimizer;
    last.next = at;
    last.done = true;
    rp.deliver(std::move(last));
    return;
  }
  if (at.shard < st.shard_dead.size() && st.shard_dead[at.shard]) {
    rp.deliver(make_error(errc::dead_node, "save_optimizer_states: shard "
                                             + std::to_string(at.shard)
                                             + " is dead"));
    return;
  }
  self->request(st.cfg.shards[at.shard], st.timeout(), save_atom::value, at)
    .then(
      [self, rp, at, n](save_piece& piece) mutable {
        auto& st = self->state;
        // The optimizer the shard's state belongs to, as it saved it.
        name_records(st, piece.records);
        piece.next.session = at.session;
        piece.next.shard = at.shard;
        if (piece.done && at.shard + 1 < n) {
          piece.next = save_cursor{at.session, at.shard + 1, 0};
          piece.done = false;
        }
        rp.deliver(std::move(piece));
      },
      [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
}

// Begins save `session` on every shard, then calls `then`.
template <class Promise, class Then>
void open_save(coordinator_ptr self, Promise rp, uint64_t session, Then then) {
  detail::callback_promise<caf::ok_atom> opened;
  opened.ok = [then](caf::ok_atom&&) mutable { then(); };
  opened.failed = [rp](caf::error err) mutable { rp.deliver(std::move(err)); };
  detail::broadcast<caf::ok_atom>(
    self, std::move(opened), [] { return caf::ok_atom::value; },
    [](size_t, caf::ok_atom) {}, false, save_atom::value, session);
}

// Sends the pieces of periodic checkpoint `number` to on_done one by one,
// each once on_done answered that it wrote the one before: no more of the
// model waits in its mailbox than a piece. Any failure gives the save up on
// every shard.
void stream_checkpoint(coordinator_ptr self, uint64_t number,
                       uint64_t generation, save_cursor at) {
  auto session = at.session;
  // False (and the save given up) if this checkpoint was given up meanwhile
  // (a server died: the generation moved on).
  auto current = [self, generation, session] {
    if (generation == self->state.checkpoint_generation)
      return true;
    abandon_save(self, session);
    return false;
  };
  detail::callback_promise<save_piece> cb;
  cb.ok = [self, number, generation, session, current](save_piece&& piece) {
    if (!current())
      return;
    auto& st = self->state;
    auto done = piece.done;
    auto next = piece.next;
    // The last piece left the shards: a server going down now (the job's
    // end) no longer spoils this checkpoint, and the runner writes the
    // piece before any of the next checkpoint's.
    if (done) {
      st.checkpoint_streaming = 0;
      checkpoint_settled(self);
    }
    self
      ->request(st.cfg.on_done, st.timeout(), save_atom::value, number,
                std::move(piece))
      .then(
        [self, number, generation, done, next, current](caf::ok_atom) {
          if (!done && current())
            stream_checkpoint(self, number, generation, next);
        },
        [self, number, session, current](caf::error&) {
          // The runner could not write it and said so itself.
          if (current() && self->state.checkpoint_streaming == number) {
            self->state.checkpoint_streaming = 0;
            checkpoint_settled(self);
          }
          abandon_save(self, session);
        });
  };
  cb.failed = [self, number, session, current](caf::error err) {
    if (!current())
      return;
    auto& st = self->state;
    st.checkpoint_streaming = 0;
    abandon_save(self, session);
    caf::anon_send(st.cfg.on_done, save_atom::value, number, std::move(err));
    checkpoint_settled(self);
  };
  next_piece(self, std::move(cb), at);
}

// Gives up load `session`: the coordinator forgets it, every shard drops
// what it assembled.
void drop_load(coordinator_ptr self, uint64_t session) {
  self->state.loads.erase(session);
  tell_live_shards<caf::ok_atom>(self, load_atom::value, session, false);
}

// Cuts `records` to this store's slices and hands each shard its pieces.
void load_records(coordinator_ptr self,
                  caf::typed_response_promise<uint64_t> rp, uint64_t session,
                  std::vector<slice_record> records) {
  auto& st = self->state;
  auto i = st.loads.find(session);
  if (i == st.loads.end()) {
    rp.deliver(make_error(errc::checkpoint_io, "load_optimizer_states: session "
                                                 + std::to_string(session)
                                                 + " is not open"));
    return;
  }
  auto& progress = i->second;
  auto shards = static_cast<uint32_t>(st.cfg.shards.size());
  auto per_float = core::state_size(progress.opt, 1);
  std::vector<std::vector<slice_record>> per_shard(shards);
  std::vector<std::pair<uint32_t, slice_record>> cut;
  for (auto& rec : records) {
    auto k = st.keys.find(rec.key);
    if (k == st.keys.end() || !k->second.initialized) {
      drop_load(self, session);
      rp.deliver(make_error(errc::unknown_key,
                            "load_state: key '" + rec.key
                              + "' of the checkpoint is not initialized in "
                                "this store"));
      return;
    }
    cut.clear();
    if (auto res = core::cut_piece(rec, k->second.info, shards, per_float, cut);
        !res.ok()) {
      drop_load(self, session);
      rp.deliver(to_error(res));
      return;
    }
    progress.covered[rec.key] += rec.value.data.size();
    for (auto& [shard, piece] : cut)
      per_shard[shard].push_back(std::move(piece));
  }
  size_t targets = 0;
  for (auto& part : per_shard)
    targets += part.empty() ? 0 : 1;
  if (targets == 0) {
    rp.deliver(session);
    return;
  }
  detail::fan_in<decltype(rp)> fan{rp, targets};
  for (uint32_t s = 0; s < shards; ++s) {
    if (per_shard[s].empty())
      continue;
    self
      ->request(st.cfg.shards[s], st.timeout(), load_atom::value, session,
                std::move(per_shard[s]))
      .then(
        [fan, session](caf::ok_atom) mutable {
          if (fan.arrive())
            fan.promise().deliver(session);
        },
        [self, fan, session](caf::error& err) mutable {
          drop_load(self, session);
          fan.fail(std::move(err));
        });
  }
}

} // namespace

caf::result<save_piece> save_next(coordinator_ptr self, const save_cursor& at) {
  if (at.position == save_cursor::give_up) {
    // Every shard, not only the one the cursor names.
    abandon_save(self, at.session);
    save_piece out;
    out.optimizer = self->state.optimizer;
    out.next = at;
    out.done = true;
    return out;
  }
  auto rp = self->make_response_promise<save_piece>();
  if (at.session != 0) {
    next_piece(self, rp, at);
    return rp;
  }
  auto session = ++self->state.last_session;
  open_save(self, rp, session, [self, rp, session]() mutable {
    next_piece(self, rp, save_cursor{session, 0, 0});
  });
  return rp;
}

caf::result<uint64_t> load_next(coordinator_ptr self, load_piece& piece) {
  auto& st = self->state;
  // Errors are answered before a promise takes the request over.
  if (piece.session == 0) {
    if (auto err = to_error(core::validate(piece.optimizer)))
      return err;
    if (piece.what > load_piece::states_and_optimizer)
      return make_error(errc::bad_config, "load_optimizer_states: unknown kind "
                                            + std::to_string(piece.what)
                                            + " of load");
    // load_optimizer_states (MXNet): a store whose pushes assign (no
    // optimizer set) takes the file's; one with an optimizer keeps it, and
    // its state must be the file's kind.
    auto weights = piece.what == load_piece::everything;
    auto opt = piece.optimizer;
    if (piece.what == load_piece::states && st.optimizer.name != "assign") {
      if (!core::same_rule(st.optimizer, opt))
        return make_error(
          errc::checkpoint_mismatch,
          "load_optimizer_states: the checkpoint holds the state of '"
            + opt.name + "', the store's optimizer is '" + st.optimizer.name
            + "' (set_optimizer to the checkpoint's first, save it with "
              "dump_optimizer, or load_checkpoint)");
      // The file's state, read as the file's optimizer keeps it.
      opt = st.optimizer;
    }
    auto rp = self->make_response_promise<uint64_t>();
    auto session = ++st.last_session;
    // One load at a time per requester is the rule; more than two at once
    // means someone gave up: the oldest goes.
    while (st.loads.size() >= 2)
      drop_load(self, st.loads.begin()->first);
    st.loads[session].opt = opt;
    detail::callback_promise<caf::ok_atom> opened;
    opened.ok = [self, rp, session,
                 records = std::move(piece.records)](caf::ok_atom&&) mutable {
      load_records(self, rp, session, std::move(records));
    };
    opened.failed = [self, rp, session](caf::error err) mutable {
      drop_load(self, session);
      rp.deliver(std::move(err));
    };
    detail::broadcast<caf::ok_atom>(
      self, std::move(opened), [] { return caf::ok_atom::value; },
      [](size_t, caf::ok_atom) {}, false, load_atom::value, session, opt,
      weights);
    return rp;
  }
  auto session = piece.session;
  auto i = st.loads.find(session);
  if (i == st.loads.end())
    return make_error(errc::checkpoint_io, "load_optimizer_states: session "
                                             + std::to_string(session)
                                             + " is not open");
  if (piece.end == load_piece::give_up) {
    drop_load(self, session);
    return session;
  }
  if (piece.end != load_piece::commit) {
    auto rp = self->make_response_promise<uint64_t>();
    load_records(self, rp, session, std::move(piece.records));
    return rp;
  }
  // Every key seen must be whole: shards refuse overlaps, so a count equal
  // to the key's size leaves no gap.
  for (auto& [name, covered] : i->second.covered) {
    auto& info = st.keys[name].info;
    if (covered != info.size) {
      // The message first: dropping the session frees `name`.
      auto err
        = make_error(errc::checkpoint_mismatch,
                     "load_state: key '" + name + "': the checkpoint holds "
                       + std::to_string(covered) + " floats, the key here "
                       + std::to_string(info.size));
      drop_load(self, session);
      return err;
    }
  }
  auto opt = i->second.opt;
  st.loads.erase(i);
  auto rp = self->make_response_promise<uint64_t>();
  detail::broadcast<caf::ok_atom>(
    self, rp,
    [self, opt, session] {
      self->state.optimizer = opt;
      return session;
    },
    [](size_t, caf::ok_atom) {}, false, load_atom::value, session, true);
  return rp;
}

caf::result<caf::ok_atom> load_whole(coordinator_ptr self,
                                     const state_snapshot& snap) {
  auto& st = self->state;
  if (auto err = to_error(core::validate(snap.optimizer)))
    return err;
  // Map names to this store's ids and cut every key's saved slices to
  // this store's (as saved when the slicing is the same).
  std::vector<state_snapshot> per_shard;
  auto find = [&st](const std::string& name) -> const key_info* {
    auto i = st.keys.find(name);
    return i != st.keys.end() && i->second.initialized ? &i->second.info
                                                       : nullptr;
  };
  if (auto res = core::split_snapshot(
        snap, static_cast<uint32_t>(st.cfg.shards.size()), find, per_shard);
      !res.ok())
    return to_error(res);
  auto rp = self->make_response_promise<caf::ok_atom>();
  auto& shards = st.cfg.shards;
  detail::fan_in<decltype(rp)> fan{rp, shards.size()};
  auto opt = snap.optimizer;
  for (size_t i = 0; i < shards.size(); ++i)
    self
      ->request(shards[i], st.timeout(), load_atom::value,
                std::move(per_shard[i]))
      .then(
        [=](caf::ok_atom) {
          if (fan.arrive()) {
            self->state.optimizer = opt;
            fan.promise().deliver(caf::ok_atom::value);
          }
        },
        [=](caf::error& err) { fan.fail(std::move(err)); });
  return rp;
}

void release_barrier(coordinator_ptr self) {
  auto& st = self->state;
  if (st.checkpointing || !st.barrier_complete())
    return;
  if (!st.checkpoint_due()) {
    st.check_barrier();
    return;
  }
  // Every live worker waits here, none pushes: every slice is at the same
  // round. Every shard takes its state as it is now, then the barrier goes
  // on while the pieces travel to on_done.
  st.checkpointing = true;
  auto number = st.barriers_done + 1;
  auto generation = st.checkpoint_generation;
  auto session = ++st.last_session;
  detail::callback_promise<caf::ok_atom> failed_open;
  failed_open.failed = [self, number, generation, session](caf::error err) {
    auto& st = self->state;
    // The shards that took their state drop it.
    abandon_save(self, session);
    if (generation != st.checkpoint_generation)
      return;
    // The job goes on without this checkpoint; the runner says why.
    caf::anon_send(st.cfg.on_done, save_atom::value, number, std::move(err));
    st.checkpointing = false;
    st.last_checkpoint = std::chrono::steady_clock::now();
    st.check_barrier();
    checkpoint_settled(self);
  };
  open_save(self, failed_open, session, [self, number, generation, session] {
    auto& st = self->state;
    if (generation != st.checkpoint_generation)
      return abandon_save(self, session);
    st.checkpointing = false;
    st.last_checkpoint = std::chrono::steady_clock::now();
    st.checkpoint_streaming = number;
    st.check_barrier();
    stream_checkpoint(self, number, generation, save_cursor{session, 0, 0});
  });
}

} // namespace actorps
