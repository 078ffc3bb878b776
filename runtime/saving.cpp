// SPDX-License-Identifier: BSD-3-Clause
// Saving, loading and exporting a store's state (kvstore methods): in
// pieces, so that neither this process nor any message holds more of the
// model than a piece at a time (export_weights, which writes whole
// tensors, excepted).
#include "runtime/kvstore.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/checkpoint_stream.hpp"
#include "core/restore.hpp"
#include "core/safetensors.hpp"
#include "messages/errors.hpp"
#include "runtime/handle.hpp"

namespace actorps {

caf::error kvstore::save_optimizer_states(const std::string& path) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("save_optimizer_states");
  if (auto err = wait_all())
    return err;
  // Piece by piece into the file: this process holds one piece at a time.
  core::checkpoint_writer out;
  auto err = d.each_saved_piece([&](save_piece& piece) -> caf::error {
    if (!out.is_open())
      if (auto st = out.open(path, piece.optimizer); !st.ok())
        return to_error(st);
    for (auto& rec : piece.records)
      if (auto st = out.add(rec); !st.ok())
        return to_error(st);
    return caf::none;
  });
  if (err)
    return err;
  return to_error(out.finish());
}

caf::error kvstore::export_weights(const std::string& path,
                                   bool optimizer_state) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("export_weights");
  if (auto err = wait_all())
    return err;
  auto snap = d.snapshot();
  if (!snap)
    return std::move(snap.error());
  // Each key whole, from its slices; its optimizer state block by block
  // (a slice's state holds J blocks of the slice's length).
  struct whole {
    std::vector<uint64_t> shape;
    std::vector<float> values;
    std::vector<std::vector<float>> states;
    uint64_t covered = 0;
    // Row tables: the row size and the number of slices (shards holding
    // rows).
    uint64_t dim = 0;
    uint64_t parts = 0;
  };
  std::map<std::string, whole> keys;
  for (auto& rec : snap->slices) {
    auto& k = keys[rec.key];
    if (k.shape.empty()) {
      auto info = d.meta(rec.key);
      if (!info)
        return std::move(info.error());
      k.shape = info->shape;
      k.values.resize(info->size);
      k.dim = info->dim;
      k.parts = info->slices.size();
    }
    auto n = rec.value.data.size();
    if (k.dim > 0) {
      // A table's shard holds rows part, part + S, ...: put them back.
      if (auto err = place_table_rows(rec, k.dim, k.parts, k.values,
                                      optimizer_state ? &k.states : nullptr))
        return err;
      k.covered += n;
      continue;
    }
    // A piece of a slice begins `first` floats into it.
    auto at = rec.offset + rec.first;
    if (at < rec.offset || at > k.values.size() || n > k.values.size() - at)
      return make_error(errc::checkpoint_corrupt,
                        "export_weights: a slice of key '" + rec.key
                          + "' lies outside it");
    std::copy(rec.value.data.begin(), rec.value.data.end(),
              k.values.begin() + static_cast<std::ptrdiff_t>(at));
    k.covered += n;
    if (!optimizer_state || n == 0 || rec.state.data.size() % n != 0)
      continue;
    auto blocks = rec.state.data.size() / n;
    if (blocks > k.states.size())
      k.states.resize(blocks, std::vector<float>(k.values.size()));
    for (size_t j = 0; j < blocks && j < k.states.size(); ++j)
      std::copy_n(rec.state.data.begin() + static_cast<std::ptrdiff_t>(j * n),
                  n, k.states[j].begin() + static_cast<std::ptrdiff_t>(at));
  }
  std::vector<core::named_tensor> tensors;
  for (auto& [name, k] : keys) {
    if (k.covered != k.values.size())
      return make_error(errc::not_initialized,
                        "export_weights: key '" + name + "' has "
                          + std::to_string(k.covered) + " of its "
                          + std::to_string(k.values.size())
                          + " floats on the shards");
    tensors.push_back({name, k.shape, k.values.data(), k.values.size()});
  }
  for (auto& [name, k] : keys)
    for (size_t j = 0; j < k.states.size(); ++j)
      tensors.push_back({"__optimizer__/" + name + "/" + std::to_string(j),
                         k.shape, k.states[j].data(), k.states[j].size()});
  std::map<std::string, std::string> meta{{"producer", "actorps"},
                                          {"format", "pt"}};
  if (optimizer_state)
    meta["optimizer"] = snap->optimizer.name;
  std::vector<char> bytes;
  if (auto st = core::encode_safetensors(tensors, meta, bytes); !st.ok())
    return to_error(st);
  return to_error(core::write_file_atomic(path, bytes));
}

caf::error kvstore::load_optimizer_states(const std::string& path) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("load_optimizer_states");
  if (auto err = wait_all())
    return err;
  // Record by record from the file, in pieces of at most
  // save_piece_bytes to the coordinator; the shards take it all at the
  // commit, or nothing.
  core::checkpoint_reader in;
  if (auto st = in.open(path); !st.ok())
    return to_error(st);
  load_piece piece;
  piece.optimizer = in.optimizer();
  uint64_t bytes = 0;
  // The records move into the message (no copy of their floats); the
  // session and the optimizer stay for the next one.
  auto send = [&]() -> caf::error {
    load_piece out;
    out.session = piece.session;
    out.optimizer = piece.optimizer;
    out.records = std::move(piece.records);
    piece.records.clear();
    bytes = 0;
    return d.call(
      d.timeout(), [&](uint64_t session) { piece.session = session; },
      load_atom::value, std::move(out));
  };
  // A failed step leaves nothing behind on the shards.
  auto give_up = [&](caf::error err) {
    if (piece.session != 0) {
      piece.records.clear();
      piece.end = load_piece::give_up;
      d.call(
        d.timeout(), [](uint64_t) {}, load_atom::value, piece);
    }
    return err;
  };
  // Checkpoints written before pieces do not say over how many parts a
  // table was saved: count them first (a whole read of the file).
  std::map<std::string, uint32_t> parts;
  bool counted = false;
  for (bool done = false;;) {
    slice_record rec;
    if (auto st = in.next(rec, done); !st.ok())
      return give_up(to_error(st));
    if (done)
      break;
    if (rec.parts == 0) {
      if (!counted) {
        if (auto st = core::count_saved_parts(path, parts); !st.ok())
          return give_up(to_error(st));
        counted = true;
      }
      rec.parts = parts[rec.key];
    }
    // A record written before pieces may be a whole table part of
    // gigabytes: it goes in pieces too, of whole rows (the store's key
    // says how long a row is).
    std::vector<slice_record> cut;
    if (core::record_payload_size(rec) <= save_piece_bytes) {
      cut.push_back(std::move(rec));
    } else {
      auto info = d.meta(rec.key);
      if (!info)
        return give_up(std::move(info.error()));
      if (!core::shape_fits(rec, info->dim))
        return give_up(make_error(errc::checkpoint_mismatch,
                                  "load_state: a record of key '" + rec.key
                                    + "' does not fit its rows of "
                                    + std::to_string(info->dim) + " floats in "
                                    + path));
      for (uint64_t from = 0; from < rec.value.data.size();) {
        slice_record part;
        from = core::take_piece(rec, from, save_piece_bytes, info->dim, part);
        if (rec.total != 0) {
          // Already a piece: keep where it lies in its slice.
          part.first += rec.first;
          part.total = rec.total;
        }
        cut.push_back(std::move(part));
      }
    }
    for (auto& part : cut) {
      bytes += core::record_payload_size(part);
      piece.records.push_back(std::move(part));
      if (bytes >= save_piece_bytes
          || piece.records.size() >= max_piece_records)
        if (auto err = send())
          return give_up(err);
    }
  }
  if (!piece.records.empty() || piece.session == 0)
    if (auto err = send())
      return give_up(err);
  piece.end = load_piece::commit;
  return d.call(
    d.timeout(), [](uint64_t) {}, load_atom::value, piece);
}

} // namespace actorps
