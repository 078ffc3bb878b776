// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: the wire decoding of every actorps message type. The
// first byte picks the type; the rest is what a peer sent. A decoded value
// is encoded again, which must work. The types that carry actor handles
// (job_info, routing_table) decode in an actor system without CAF's
// network layer: a handle of this node is looked up in its registry, one of
// another node fails to decode (no proxy registry), as it would for a node
// that BASP does not know.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"
#include "caf/deserializer.hpp"
#include "caf/node_id.hpp"
#include "caf/serializer.hpp"

#include "messages/type_ids.hpp"

namespace {

// The actor system the handles decode in (one per process: starting one
// per input would dwarf the decoding). Never destroyed: its threads still
// run when libFuzzer exits, and static destruction would pull the system
// from under them.
caf::actor_system& system() {
  static auto* cfg = new caf::actor_system_config;
  static auto* sys = new caf::actor_system{*cfg};
  return *sys;
}

// Decodes a `T` (in `ctx`, for types with actor handles) and encodes it
// again, which must work.
template <class T>
void decode(const uint8_t* data, size_t size,
            caf::execution_unit* ctx = nullptr) {
  T x{};
  caf::binary_deserializer source{ctx, reinterpret_cast<const char*>(data),
                                  size};
  if (source(x))
    return;
  std::vector<char> buf;
  caf::binary_serializer sink{ctx, buf};
  if (sink(x))
    __builtin_trap();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  auto rest = data + 1;
  auto n = size - 1;
  using namespace actorps;
  switch (data[0] % 30) {
    case 0:
      decode<compression>(rest, n);
      break;
    case 1:
      decode<floats>(rest, n);
      break;
    case 2:
      decode<shared_floats>(rest, n);
      break;
    case 3:
      decode<float_parts>(rest, n);
      break;
    case 4:
      decode<slice_init>(rest, n);
      break;
    case 5:
      decode<slice_push>(rest, n);
      break;
    case 6:
      decode<slice_pull>(rest, n);
      break;
    case 7:
      decode<slice_batch>(rest, n);
      break;
    case 8:
      decode<optimizer_config>(rest, n);
      break;
    case 9:
      decode<slice_record>(rest, n);
      break;
    case 10:
      decode<state_snapshot>(rest, n);
      break;
    case 11:
      decode<shard_stats>(rest, n);
      break;
    case 12:
      decode<key_info>(rest, n);
      break;
    case 13:
      decode<std::vector<uint32_t>>(rest, n);
      break;
    case 14:
      decode<std::vector<uint64_t>>(rest, n);
      break;
    case 15:
      decode<std::vector<slice_record>>(rest, n);
      break;
    case 16:
      decode<std::vector<caf::node_id>>(rest, n);
      break;
    case 17:
      decode<std::vector<slice_range>>(rest, n);
      break;
    case 18:
      decode<job_status>(rest, n);
      break;
    case 19:
      decode<worker_stats>(rest, n);
      break;
    case 20:
      decode<job_info>(rest, n, system().dummy_execution_unit());
      break;
    case 21:
      decode<routing_table>(rest, n, system().dummy_execution_unit());
      break;
    case 22:
      decode<table_init>(rest, n);
      break;
    case 23:
      decode<rows_push>(rest, n);
      break;
    case 24:
      decode<rows_pull>(rest, n);
      break;
    case 25:
      decode<save_cursor>(rest, n);
      break;
    case 26:
      decode<save_piece>(rest, n);
      break;
    case 27:
      decode<load_piece>(rest, n);
      break;
    case 28:
      decode<replica_batch>(rest, n);
      break;
    default:
      decode<replica_state>(rest, n);
      break;
  }
  return 0;
}
