// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

/// Which shards a routing table moves a worker to (issue 23). A worker that
/// waits for a dead shard's backup or replacement asks the coordinator for
/// a newer table, opens connections to the servers it names on a helper
/// thread, then moves the shards whose handles changed. Two answers can be
/// on their way at once (a second shard died while the first answer's
/// servers were being reached): they come back in either order, and the
/// same table may come twice. Free of CAF.
namespace actorps::core {

/// The indexes of the shards that a table of version `version` with the
/// handles `table` moves, for a worker whose handles are `current` and that
/// adopted a table of version `adopted` already: none when the table is
/// older (it would move shards back to handles a newer table replaced),
/// else those whose handle differs (a shard the same table moved before
/// keeps its requests in flight where they are: sending them again would
/// run them twice, or, on a restored shard that numbers afresh, refuse
/// them). `same(a, b)` compares a current handle with a table's.
template <class Current, class Table, class Same>
std::vector<uint32_t> moved_shards(const std::vector<Current>& current,
                                   const std::vector<Table>& table,
                                   uint64_t version, uint64_t adopted,
                                   Same same) {
  std::vector<uint32_t> moved;
  if (version < adopted)
    return moved;
  auto n = current.size() < table.size() ? current.size() : table.size();
  for (std::size_t i = 0; i < n; ++i)
    if (!same(current[i], table[i]))
      moved.push_back(static_cast<uint32_t>(i));
  return moved;
}

} // namespace actorps::core
