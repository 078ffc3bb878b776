// SPDX-License-Identifier: BSD-3-Clause
#include "core/rows.hpp"

#include <algorithm>
#include <string>

#include "core/prefetch.hpp"

namespace actorps::core {

namespace {

// Distinct ids to small indices in one allocation (open addressing, linear
// probing): a node-based map costs an allocation per id. Ids are below
// 2^63, so all ones marks a free place.
class id_index {
public:
  explicit id_index(std::size_t n = 0) {
    reserve(n);
  }

  // Room for `n` ids without growing.
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n)
      cap <<= 1;
    if (cap <= keys_.size())
      return;
    auto old_keys = std::move(keys_);
    auto old_values = std::move(values_);
    keys_.assign(cap, free_place);
    values_.resize(cap);
    mask_ = cap - 1;
    size_ = 0;
    for (std::size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != free_place)
        insert(old_keys[i], old_values[i]);
  }

  // The index of `id`, and whether it was new (then it got `fresh`).
  std::pair<uint32_t, bool> insert(uint64_t id, uint32_t fresh) {
    if (2 * (size_ + 1) > keys_.size())
      reserve(size_ + 1);
    for (auto h = (id * 0x9e3779b97f4a7c15ULL) >> 20;; ++h) {
      auto at = h & mask_;
      if (keys_[at] == free_place) {
        keys_[at] = id;
        values_[at] = fresh;
        ++size_;
        return {fresh, true};
      }
      if (keys_[at] == id)
        return {values_[at], false};
    }
  }

private:
  static constexpr uint64_t free_place = ~uint64_t{0};
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> values_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

} // namespace

status split_rows(const row_layout& layout, const std::vector<uint64_t>& ids,
                  std::vector<shard_rows>& out) {
  if (layout.shards == 0 || layout.dim == 0)
    return {errc::bad_config, "rows: a table needs a row size and a shard"};
  std::vector<shard_rows> result(layout.shards);
  auto expect = ids.size() / layout.shards + 16;
  for (auto& r : result) {
    r.local.reserve(expect);
    r.uses.reserve(expect);
  }
  id_index seen{ids.size()};
  for (uint64_t pos = 0; pos < ids.size(); ++pos) {
    auto id = ids[pos];
    if (id >= layout.rows)
      return {errc::unknown_key, "rows: row " + std::to_string(id)
                                   + " out of range (the table has "
                                   + std::to_string(layout.rows) + " rows)"};
    // (One shard: no division, a cost on the order of the hashing.)
    auto one = layout.shards == 1;
    auto& r = result[one ? 0 : layout.shard_of(id)];
    auto [index, fresh] = seen.insert(id,
                                      static_cast<uint32_t>(r.local.size()));
    if (fresh)
      r.local.push_back(one ? id : layout.local_of(id));
    r.uses.emplace_back(pos, index);
  }
  out = std::move(result);
  return {};
}

bool find_repeat(const std::vector<uint64_t>& rows, uint64_t& repeated) {
  id_index seen{rows.size()};
  for (auto r : rows)
    if (!seen.insert(r, 0).second) {
      repeated = r;
      return true;
    }
  return false;
}

std::vector<float> summed_rows(const shard_rows& rows, const float* values,
                               uint64_t dim) {
  // A row's first use comes before its repeats, and first uses come in
  // index order: each row is copied once, then added to, with no zero fill.
  std::vector<float> sum;
  sum.reserve(rows.local.size() * dim);
  for (auto [pos, idx] : rows.uses) {
    auto* src = values + pos * dim;
    if (uint64_t{idx} * dim == sum.size()) {
      sum.insert(sum.end(), src, src + dim);
      continue;
    }
    auto* dst = sum.data() + uint64_t{idx} * dim;
    for (uint64_t j = 0; j < dim; ++j)
      dst[j] += src[j];
  }
  return sum;
}

std::vector<float> gather_rows(const float* table, uint64_t dim,
                               const std::vector<uint64_t>& rows) {
  constexpr std::size_t ahead = 8;
  std::vector<float> out;
  out.reserve(rows.size() * dim);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i + ahead < rows.size())
      prefetch_lines(table + rows[i + ahead] * dim, dim * sizeof(float));
    const auto* row = table + rows[i] * dim;
    out.insert(out.end(), row, row + dim);
  }
  return out;
}

void scatter_rows(const shard_rows& rows, const float* pulled, uint64_t dim,
                  float* out) {
  for (auto [pos, idx] : rows.uses)
    std::copy(pulled + idx * dim, pulled + (idx + 1) * dim, out + pos * dim);
}

struct row_sum::index : id_index {};

row_sum::row_sum() = default;
row_sum::row_sum(row_sum&&) noexcept = default;
row_sum& row_sum::operator=(row_sum&&) noexcept = default;
row_sum::~row_sum() = default;

void row_sum::add(std::vector<uint64_t>& rows, const float* values,
                  std::vector<float>* owned, uint64_t dim) {
  if (rows_.empty() && index_ == nullptr) {
    // The first push of the round: its rows and values as they are.
    rows_ = std::move(rows);
    if (owned != nullptr && owned->size() == rows_.size() * dim)
      sum_ = std::move(*owned);
    else
      sum_.assign(values, values + rows_.size() * dim);
    return;
  }
  if (index_ == nullptr) {
    index_ = std::make_unique<index>();
    index_->reserve(rows_.size() + rows.size());
    for (std::size_t i = 0; i < rows_.size(); ++i)
      index_->insert(rows_[i], static_cast<uint32_t>(i));
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto [at, fresh] = index_->insert(rows[i],
                                      static_cast<uint32_t>(rows_.size()));
    const float* row = values + i * dim;
    if (fresh) {
      rows_.push_back(rows[i]);
      sum_.insert(sum_.end(), row, row + dim);
    } else {
      auto* dst = sum_.data() + uint64_t{at} * dim;
      for (uint64_t j = 0; j < dim; ++j)
        dst[j] += row[j];
    }
  }
}

status reslice_rows(const std::vector<const slice_record*>& saved,
                    const row_layout& layout, uint64_t per_row_state,
                    std::vector<slice_record>& out) {
  auto key = saved.empty() ? std::string{"?"} : saved.front()->key;
  auto mismatch = [&](const std::string& why) {
    return status{errc::checkpoint_mismatch,
                  "load_state: table '" + key + "': " + why};
  };
  auto dim = layout.dim;
  if (saved.empty() || dim == 0 || layout.shards == 0)
    return mismatch("no saved parts");
  // The saved parts by part number: as many as the saved store had shards
  // holding rows of this table.
  row_layout old{layout.rows, dim, static_cast<uint32_t>(saved.size())};
  if (old.rows < old.shards)
    return mismatch(std::to_string(saved.size()) + " saved parts for "
                    + std::to_string(layout.rows) + " rows");
  std::vector<const slice_record*> by_part(saved.size(), nullptr);
  for (auto* rec : saved) {
    if (rec->part >= by_part.size() || by_part[rec->part] != nullptr)
      return mismatch("saved part " + std::to_string(rec->part)
                      + " is repeated or out of range");
    by_part[rec->part] = rec;
    auto rows = old.rows_on(rec->part);
    auto what = "saved part " + std::to_string(rec->part) + " ";
    if (rec->value.data.size() != rows * dim)
      return mismatch(what + "has " + std::to_string(rec->value.data.size())
                      + " floats, the table here needs "
                      + std::to_string(rows * dim) + " (" + std::to_string(rows)
                      + " rows of " + std::to_string(dim) + ")");
    if (rec->state.data.size() != rows * per_row_state)
      return mismatch(what + "has " + std::to_string(rec->state.data.size())
                      + " state floats, expected "
                      + std::to_string(rows * per_row_state));
    if (!rec->row_steps.empty() && rec->row_steps.size() != rows)
      return mismatch(what + "has " + std::to_string(rec->row_steps.size())
                      + " row steps for " + std::to_string(rows) + " rows");
  }
  std::vector<slice_record> result;
  uint64_t offset = 0;
  for (uint32_t s = 0; s < layout.shards; ++s) {
    auto rows = layout.rows_on(s);
    if (rows == 0)
      break;
    slice_record rec;
    rec.key_id = saved.front()->key_id;
    rec.key = key;
    rec.part = s;
    rec.offset = offset;
    rec.value.data.resize(rows * dim);
    rec.state.data.resize(rows * per_row_state);
    rec.row_steps.resize(rows, 0);
    for (uint64_t i = 0; i < rows; ++i) {
      auto row = i * layout.shards + s;
      auto* from = by_part[old.shard_of(row)];
      auto j = old.local_of(row);
      std::copy_n(from->value.data.data() + j * dim, dim,
                  rec.value.data.data() + i * dim);
      std::copy_n(from->state.data.data() + j * per_row_state, per_row_state,
                  rec.state.data.data() + i * per_row_state);
      if (!from->row_steps.empty())
        rec.row_steps[i] = from->row_steps[j];
    }
    offset += rows * dim;
    result.push_back(std::move(rec));
  }
  out = std::move(result);
  return {};
}

} // namespace actorps::core
