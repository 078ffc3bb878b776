// SPDX-License-Identifier: BSD-3-Clause
// The client facade's row-sparse tables: init_table, push_rows, pull_rows.
#include "runtime/kvstore.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "actors/worker/worker.hpp"
#include "messages/errors.hpp"
#include "runtime/handle.hpp"

namespace actorps {

namespace {

// What a call on the rows of `info` can check before anything is sent: a
// row table, every id in range, `got` floats (`what`s) for the rows.
caf::error check_call(const char* op, const key_info& info,
                      const std::vector<uint64_t>& ids, uint64_t got,
                      const char* what) {
  std::string name = op;
  if (info.dim == 0 || info.shape.empty())
    return make_error(errc::shape_mismatch,
                      name + ": key '" + info.name
                        + "' is not a row table (push and pull it whole)");
  auto rows = info.shape[0];
  for (auto id : ids)
    if (id >= rows)
      return make_error(errc::unknown_key, name + ": row " + std::to_string(id)
                                             + " out of range (the table has "
                                             + std::to_string(rows) + " rows)");
  auto n = static_cast<uint64_t>(ids.size()) * info.dim;
  if (got != n)
    return make_error(errc::shape_mismatch,
                      name + ": " + std::to_string(ids.size()) + " rows of "
                        + std::to_string(info.dim) + " floats need "
                        + std::to_string(n) + " " + what + "s, got "
                        + std::to_string(got));
  return caf::none;
}

} // namespace

caf::error kvstore::init_table(const std::string& key, uint64_t rows,
                               uint64_t dim, const table_fill& fill) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("init_table");
  if (!std::isfinite(fill.low) || !std::isfinite(fill.high))
    return make_error(errc::bad_config,
                      "init_table: the fill's bounds must be finite numbers");
  table_init spec;
  spec.rows = rows;
  spec.dim = dim;
  spec.rule = fill.rule == table_fill::uniform ? table_init::uniform
                                               : table_init::constant;
  spec.low = fill.low;
  spec.high = fill.high;
  spec.seed = fill.seed;
  return d.call(
    d.timeout(), [](caf::ok_atom) {}, init_atom::value, key, spec);
}

caf::error kvstore::push_rows(const std::string& key,
                              const std::vector<uint64_t>& ids,
                              const Eigen::Ref<const Eigen::VectorXf>& values,
                              int priority) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("push_rows");
  // Refused at the call, as a dense push's bad key or size is (the worker
  // checks again: the routing may have changed since).
  auto info = d.meta(key);
  if (!info)
    return std::move(info.error());
  if (auto err = check_call("push_rows", *info, ids,
                            static_cast<uint64_t>(values.size()), "value"))
    return err;
  if (auto err = d.throttle())
    return err;
  floats payload;
  payload.data.assign(values.data(), values.data() + values.size());
  d.start([](caf::ok_atom) {}, push_atom::value, key, ids,
          static_cast<int32_t>(priority), std::move(payload));
  return caf::none;
}

caf::expected<pull_ticket>
kvstore::pull_rows(const std::string& key, const std::vector<uint64_t>& ids,
                   Eigen::Ref<Eigen::VectorXf> out, int priority) {
  auto& d = *impl_;
  if (d.closed)
    return closed_error("pull_rows");
  auto info = d.meta(key);
  if (!info)
    return std::move(info.error());
  if (auto err = check_call("pull_rows", *info, ids,
                            static_cast<uint64_t>(out.size()), "output"))
    return err;
  auto n = static_cast<uint64_t>(ids.size()) * info->dim;
  payload::target_list targets{payload::target{0, n, out.data()}};
  return d.start_pull(std::move(targets), n, pull_atom::value, key, ids,
                      static_cast<int32_t>(priority));
}

caf::error place_table_rows(const slice_record& rec, uint64_t dim,
                            uint64_t parts, std::vector<float>& values,
                            std::vector<std::vector<float>>* states) {
  auto n = rec.value.data.size();
  auto rows = n / dim;
  // A piece of the part begins at its row `first / dim`.
  auto r0 = rec.first / dim;
  auto bad = [&] {
    return make_error(errc::checkpoint_corrupt,
                      "export_weights: a slice of table '" + rec.key
                        + "' does not fit it");
  };
  if (n % dim != 0 || rec.first % dim != 0 || rec.part >= parts
      || (rows > 0
          && (r0 + rows - 1) * parts + rec.part >= values.size() / dim))
    return bad();
  for (uint64_t i = 0; i < rows; ++i)
    std::copy_n(
      rec.value.data.begin() + static_cast<std::ptrdiff_t>(i * dim), dim,
      values.begin()
        + static_cast<std::ptrdiff_t>(((r0 + i) * parts + rec.part) * dim));
  if (states == nullptr || n == 0 || rec.state.data.size() % n != 0)
    return caf::none;
  auto blocks = rec.state.data.size() / n;
  if (blocks > states->size())
    states->resize(blocks, std::vector<float>(values.size()));
  // On the shard, row i's state is its blocks one after the other.
  for (uint64_t i = 0; i < rows; ++i)
    for (uint64_t j = 0; j < blocks; ++j)
      std::copy_n(
        rec.state.data.begin()
          + static_cast<std::ptrdiff_t>((i * blocks + j) * dim),
        dim,
        (*states)[j].begin()
          + static_cast<std::ptrdiff_t>(((r0 + i) * parts + rec.part) * dim));
  return caf::none;
}

} // namespace actorps
