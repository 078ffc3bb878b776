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
#include "core/load_pieces.hpp"
#include "core/safetensors.hpp"
#include "messages/errors.hpp"
#include "runtime/handle.hpp"

namespace actorps {

caf::error kvstore::save_optimizer_states(const std::string& path,
                                          bool dump_optimizer) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("save_optimizer_states");
  if (auto err = wait_all())
    return err;
  // Piece by piece into the file: this process holds one piece at a time.
  core::checkpoint_writer out;
  auto err = d.each_saved_piece([&](save_piece& piece) -> caf::error {
    if (!out.is_open())
      if (auto st = out.open(path, piece.optimizer, core::posix_file_system(),
                             dump_optimizer);
          !st.ok())
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
  return load_file(path, false);
}

caf::error kvstore::load_checkpoint(const std::string& path) {
  return load_file(path, true);
}

caf::error kvstore::load_file(const std::string& path, bool whole) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error(whole ? "load_checkpoint" : "load_optimizer_states");
  if (auto err = wait_all())
    return err;
  // Record by record from the file, in pieces of at most
  // save_piece_bytes to the coordinator; the shards take it all at the
  // commit, or nothing.
  core::load_pieces in;
  if (auto st = in.open(path, save_piece_bytes, max_piece_records); !st.ok())
    return to_error(st);
  load_piece piece;
  piece.optimizer = in.optimizer();
  piece.what = whole                   ? load_piece::everything
               : in.optimizer_dumped() ? load_piece::states_and_optimizer
                                       : load_piece::states;
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
  // The store's key says how long a row is, for records too large for one
  // piece (written before pieces), which go in pieces of whole rows.
  auto row_size = [&d](const std::string& key, uint64_t& dim) -> status {
    auto info = d.meta(key);
    if (!info)
      return {code_of(info.error()), render(info.error())};
    dim = info->dim;
    return {};
  };
  for (bool done = false; !done;) {
    std::vector<slice_record> records;
    if (auto st = in.next(records, done, row_size); !st.ok())
      return give_up(to_error(st));
    if (records.empty() && piece.session != 0)
      continue;
    // The records move into the message (no copy of their floats); the
    // session and the optimizer stay for the next one.
    load_piece out;
    out.session = piece.session;
    out.optimizer = piece.optimizer;
    out.what = piece.what;
    out.records = std::move(records);
    if (auto err = d.call(
          d.timeout(), [&](uint64_t session) { piece.session = session; },
          load_atom::value, std::move(out)))
      return give_up(err);
  }
  piece.end = load_piece::commit;
  return d.call(
    d.timeout(), [](uint64_t) {}, load_atom::value, piece);
}

} // namespace actorps
