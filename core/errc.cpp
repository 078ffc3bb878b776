// SPDX-License-Identifier: BSD-3-Clause
#include "core/errc.hpp"

namespace actorps {

std::string to_string(errc x) {
  switch (x) {
    case errc::none:
      return "none";
    case errc::unknown_key:
      return "unknown_key";
    case errc::shape_mismatch:
      return "shape_mismatch";
    case errc::not_initialized:
      return "not_initialized";
    case errc::already_initialized:
      return "already_initialized";
    case errc::bad_optimizer:
      return "bad_optimizer";
    case errc::dead_node:
      return "dead_node";
    case errc::timeout:
      return "timeout";
    case errc::unauthorized:
      return "unauthorized";
    case errc::bad_config:
      return "bad_config";
    case errc::closed:
      return "closed";
    case errc::checkpoint_io:
      return "checkpoint_io";
    case errc::checkpoint_corrupt:
      return "checkpoint_corrupt";
    case errc::checkpoint_mismatch:
      return "checkpoint_mismatch";
    case errc::interrupted:
      return "interrupted";
  }
  return "errc(" + std::to_string(static_cast<int>(x)) + ")";
}

} // namespace actorps
