// SPDX-License-Identifier: BSD-3-Clause
#include "core/load_pieces.hpp"

#include <algorithm>
#include <utility>

#include "core/checkpoint.hpp"
#include "core/checkpoint_dir.hpp"
#include "core/restore.hpp"

namespace actorps::core {

status load_pieces::open(const std::string& path, uint64_t budget,
                         std::size_t max_records, file_system& fs) {
  fs_ = &fs;
  path_ = path;
  budget_ = std::max<uint64_t>(budget, 1);
  max_records_ = std::max<std::size_t>(max_records, 1);
  parts_.clear();
  counted_ = false;
  end_ = false;
  cut_.clear();
  return in_.open(path, fs);
}

status load_pieces::take(slice_record rec, const row_size_fn& row_size) {
  if (rec.parts == 0) {
    if (!counted_) {
      if (auto st = count_saved_parts(path_, parts_, *fs_); !st.ok())
        return st;
      counted_ = true;
    }
    rec.parts = parts_[rec.key];
  }
  if (record_payload_size(rec) <= budget_) {
    cut_.push_back(std::move(rec));
    return {};
  }
  // A record written before pieces may be a whole table part of
  // gigabytes: it goes in pieces too, of whole rows.
  uint64_t dim = 0;
  if (auto st = row_size(rec.key, dim); !st.ok())
    return st;
  if (!shape_fits(rec, dim))
    return {errc::checkpoint_mismatch, "load_state: a record of key '" + rec.key
                                         + "' does not fit its rows of "
                                         + std::to_string(dim) + " floats in "
                                         + path_};
  for (uint64_t from = 0; from < rec.value.data.size();) {
    slice_record part;
    from = take_piece(rec, from, budget_, dim, part);
    if (rec.total != 0) {
      // Already a piece: keep where it lies in its slice.
      part.first += rec.first;
      part.total = rec.total;
    }
    cut_.push_back(std::move(part));
  }
  return {};
}

status load_pieces::next(std::vector<slice_record>& out, bool& done,
                         const row_size_fn& row_size) {
  out.clear();
  done = false;
  uint64_t bytes = 0;
  for (;;) {
    while (!cut_.empty()) {
      bytes += record_payload_size(cut_.front());
      out.push_back(std::move(cut_.front()));
      cut_.pop_front();
      if (bytes >= budget_ || out.size() >= max_records_) {
        done = end_ && cut_.empty();
        return {};
      }
    }
    if (end_) {
      done = true;
      return {};
    }
    slice_record rec;
    bool end = false;
    if (auto st = in_.next(rec, end); !st.ok())
      return st;
    if (end) {
      end_ = true;
      continue;
    }
    if (auto st = take(std::move(rec), row_size); !st.ok())
      return st;
  }
}

restore_reads::restore_reads(std::string dir, std::size_t max_readers,
                             uint64_t budget, std::size_t max_records)
  : dir_(std::move(dir)),
    max_readers_(std::max<std::size_t>(max_readers, 1)),
    budget_(budget),
    max_records_(max_records) {
  // Nothing else to do.
}

status restore_reads::next(uint64_t id, uint64_t index, optimizer_config& opt,
                           std::vector<slice_record>& out, bool& done) {
  if (index == 0) {
    while (readers_.size() >= max_readers_)
      readers_.erase(readers_.begin());
    auto& r = readers_[id];
    auto st = latest_checkpoint(dir_, r.path);
    if (st.ok())
      st = r.in.open(r.path, budget_, max_records_);
    if (!st.ok()) {
      readers_.erase(id);
      return st;
    }
  }
  auto i = readers_.find(id);
  if (i == readers_.end() || i->second.next != index)
    return {errc::checkpoint_io, "restore " + std::to_string(id) + ": piece "
                                   + std::to_string(index)
                                   + " is not the next one being read"};
  auto& r = i->second;
  ++r.next;
  opt = r.in.optimizer();
  auto row_size = [](const std::string& key, uint64_t&) -> status {
    return {errc::checkpoint_mismatch,
            "restore: a record of key '" + key
              + "' is larger than a piece (a checkpoint written by an older "
                "actorps)"};
  };
  auto st = r.in.next(out, done, row_size);
  if (!st.ok() || done) {
    if (st.ok())
      last_path_ = r.path;
    readers_.erase(i);
  }
  return st;
}

} // namespace actorps::core
