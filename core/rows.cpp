// SPDX-License-Identifier: BSD-3-Clause
#include "core/rows.hpp"

#include <algorithm>
#include <string>

#include "core/prefetch.hpp"

namespace actorps::core {

namespace {

__extension__ typedef unsigned __int128 u128;

// Distinct ids to small indices in one allocation (open addressing, linear
// probing): a node-based map costs an allocation per id. A place is taken
// when its stamp is the index's current one, so emptying the index is one
// increment, not a pass over its memory: a thread's scratch index (see
// `with_scratch_index`) serves call after call without being cleared or
// allocated again.
class id_index {
public:
  explicit id_index(std::size_t n = 0) {
    reserve(n);
  }

  // Room for `n` ids without growing.
  void reserve(std::size_t n) {
    auto cap = capacity_for(n);
    if (cap <= mask_ + 1 && !places_.empty())
      return;
    std::vector<place> old(cap);
    old.swap(places_);
    auto old_mask = mask_;
    auto old_stamp = stamp_;
    mask_ = cap - 1;
    stamp_ = 1;
    size_ = 0;
    for (std::size_t i = 0; i <= old_mask && i < old.size(); ++i)
      if (old[i].stamp == old_stamp)
        insert(old[i].id, old[i].value);
  }

  // Empties the index and spreads it over as much of its room as `n` ids
  // need (a small request probes a small part of a large index: fewer
  // cache misses).
  void reset(std::size_t n) {
    next_stamp();
    size_ = 0;
    auto cap = capacity_for(n);
    if (cap > places_.size()) {
      places_.assign(cap, place{});
      stamp_ = 1;
    }
    mask_ = cap - 1;
  }

  // The index of `id`, and whether it was new (then it got `fresh`).
  std::pair<uint32_t, bool> insert(uint64_t id, uint32_t fresh) {
    if (2 * (size_ + 1) > mask_ + 1)
      reserve(size_ + 1);
    for (auto h = (id * 0x9e3779b97f4a7c15ULL) >> 20;; ++h) {
      auto& p = places_[h & mask_];
      if (p.stamp != stamp_) {
        p = place{id, fresh, stamp_};
        ++size_;
        return {fresh, true};
      }
      if (p.id == id)
        return {p.value, false};
    }
  }

private:
  struct place {
    uint64_t id = 0;
    uint32_t value = 0;
    uint32_t stamp = 0;
  };

  static std::size_t capacity_for(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n)
      cap <<= 1;
    return cap;
  }

  void next_stamp() {
    if (++stamp_ == 0) {
      // (After 2^32 stamps: they start over.)
      for (auto& p : places_)
        p.stamp = 0;
      stamp_ = 1;
    }
  }

  std::vector<place> places_;
  uint32_t stamp_ = 1;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

// An empty index with room for `n` ids: the calling thread's own, kept from
// call to call, for requests of up to 2^15 rows (an index of 1 MB at most
// stays with each thread); a fresh one for larger requests.
template <class F>
auto with_scratch_index(std::size_t n, F&& f) {
  constexpr std::size_t kept = std::size_t{1} << 15;
  if (n > kept) {
    id_index fresh{n};
    return f(fresh);
  }
  thread_local id_index scratch;
  scratch.reset(n);
  return f(scratch);
}

// Adds `n` rows (`ids`, their values one row of `dim` floats each) to the
// distinct rows `rows` and their sums `sum` through `index`, which maps
// each row of `rows` to its place: a new row is appended, a known one
// added to.
void merge_rows(id_index& index, const uint64_t* ids, std::size_t n,
                const float* values, uint64_t dim, std::vector<uint64_t>& rows,
                std::vector<float>& sum) {
  for (std::size_t i = 0; i < n; ++i) {
    auto [at, fresh] = index.insert(ids[i], static_cast<uint32_t>(rows.size()));
    const float* src = values + i * dim;
    if (fresh) {
      rows.push_back(ids[i]);
      sum.insert(sum.end(), src, src + dim);
    } else {
      float* dst = sum.data() + uint64_t{at} * dim;
      for (uint64_t j = 0; j < dim; ++j)
        dst[j] += src[j];
    }
  }
}

// Whether some id appears more than once in `ids` (at most 2^15 of them):
// one pass over a table of 4-byte places, each 0 or the position + 1 of the
// id it holds, kept by the calling thread and emptied by one memset per
// call. A quarter of id_index's bytes, nothing to reset place by place: a
// request of 1000 rows took 8.7 us in id_index (a cold server's shard,
// median of 3000) against about 2 here (docs/benchmarks.md).
bool any_repeat(const std::vector<uint64_t>& ids) {
  const auto n = ids.size();
  unsigned bits = 4;
  while ((std::size_t{1} << bits) < 2 * n)
    ++bits;
  const auto mask = (std::size_t{1} << bits) - 1;
  thread_local std::vector<uint32_t> places;
  places.assign(mask + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = ids[i];
    for (auto h = static_cast<std::size_t>((id * 0x9e3779b97f4a7c15ULL)
                                           >> (64 - bits));
         ; h = (h + 1) & mask) {
      const auto p = places[h];
      if (p == 0) {
        places[h] = static_cast<uint32_t>(i + 1);
        break;
      }
      if (ids[p - 1] == id)
        return true;
    }
  }
  return false;
}

} // namespace

status split_rows(const row_layout& layout, const std::vector<uint64_t>& ids,
                  std::vector<shard_rows>& out) {
  if (layout.shards == 0 || layout.dim == 0)
    return {errc::bad_config, "rows: a table needs a row size and a shard"};
  for (auto id : ids)
    if (id >= layout.rows)
      return {errc::unknown_key, "rows: row " + std::to_string(id)
                                   + " out of range (the table has "
                                   + std::to_string(layout.rows) + " rows)"};
  out.assign(layout.shards, shard_rows{});
  if (layout.shards == 1) {
    // (No division: the local index is the id.)
    out[0].local = ids;
    out[0].in_order = !ids.empty();
    return {};
  }
  // One pass, a multiplication in place of each division: in a table of at
  // most 2^32 rows (`narrow`) ids are below 2^32, where Lemire's
  // c = 2^64 / shards + 1 (shards > 1) gives id / shards exactly as the
  // high word of c * id (D. Lemire, O. Kaser, N. Kurz, "Faster remainder by
  // direct computation", 2019); larger tables divide.
  const uint64_t shards = layout.shards;
  const bool narrow = layout.rows <= (uint64_t{1} << 32);
  const uint64_t c = ~uint64_t{0} / shards + 1;
  auto expect = ids.size() / shards + ids.size() / (4 * shards) + 16;
  for (auto& r : out) {
    r.local.reserve(expect);
    r.positions.reserve(expect);
  }
  for (uint64_t pos = 0; pos < ids.size(); ++pos) {
    auto id = ids[pos];
    auto q = narrow ? static_cast<uint64_t>((u128{c} * id) >> 64) : id / shards;
    auto& r = out[id - q * shards];
    r.local.push_back(q);
    r.positions.push_back(pos);
  }
  for (auto& r : out)
    if (!ids.empty() && r.local.size() == ids.size()) {
      // Every id on one shard: the request as it is there.
      r.positions.clear();
      r.in_order = true;
    }
  return {};
}

bool sum_repeats(std::vector<uint64_t>& rows, const float* values, uint64_t dim,
                 std::vector<float>& summed) {
  // Most requests name each row once: that is checked apart, cheaply.
  if (rows.size() < 2
      || (rows.size() <= (std::size_t{1} << 15) && !any_repeat(rows)))
    return false;
  return with_scratch_index(rows.size(), [&](id_index& seen) {
    std::size_t i = 0;
    for (; i < rows.size(); ++i)
      if (!seen.insert(rows[i], static_cast<uint32_t>(i)).second)
        break;
    if (i == rows.size())
      return false;
    // Rows [0, i) are distinct, each indexed by its place: from the first
    // repeat on, new rows go to the end and repeats are added in place.
    std::vector<uint64_t> distinct(
      rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(i));
    summed.assign(values, values + i * dim);
    merge_rows(seen, rows.data() + i, rows.size() - i, values + i * dim, dim,
               distinct, summed);
    rows = std::move(distinct);
    return true;
  });
}

std::vector<float> shard_values(const shard_rows& rows, const float* values,
                                uint64_t dim) {
  if (rows.in_order)
    return std::vector<float>(values, values + rows.local.size() * dim);
  // (Plain loops: a call to memmove or a vector insert per row of a few
  // floats costs more than the copy.)
  std::vector<float> out(rows.local.size() * dim);
  float* dst = out.data();
  for (auto pos : rows.positions) {
    const float* src = values + pos * dim;
    for (uint64_t j = 0; j < dim; ++j)
      dst[j] = src[j];
    dst += dim;
  }
  return out;
}

std::vector<float> gather_rows(const float* table, uint64_t dim,
                               const std::vector<uint64_t>& rows) {
  constexpr std::size_t ahead = 8;
  // Zero-filled, then plain loops: cheaper than a vector insert (a call to
  // memmove) per row of a few floats (1000 rows of 16: 8.8 us against
  // about 3, docs/benchmarks.md).
  std::vector<float> out(rows.size() * dim);
  float* dst = out.data();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i + ahead < rows.size())
      prefetch_lines(table + rows[i + ahead] * dim, dim * sizeof(float));
    const auto* row = table + rows[i] * dim;
    for (uint64_t j = 0; j < dim; ++j)
      dst[j] = row[j];
    dst += dim;
  }
  return out;
}

void scatter_rows(const shard_rows& rows, const float* pulled, uint64_t dim,
                  float* out) {
  if (rows.in_order) {
    std::copy_n(pulled, rows.local.size() * dim, out);
    return;
  }
  for (auto pos : rows.positions) {
    float* dst = out + pos * dim;
    for (uint64_t j = 0; j < dim; ++j)
      dst[j] = pulled[j];
    pulled += dim;
  }
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
  merge_rows(*index_, rows.data(), rows.size(), values, dim, rows_, sum_);
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
