// SPDX-License-Identifier: BSD-3-Clause
#include "messages/types.hpp"

#include "caf/deserializer.hpp"
#include "caf/error.hpp"
#include "caf/sec.hpp"
#include "caf/serializer.hpp"

namespace actorps {

caf::error inspect(caf::serializer& f, floats& x) {
  auto n = x.data.size();
  if (auto err = f.begin_sequence(n))
    return err;
  if (n > 0)
    if (auto err = f.apply_raw(n * sizeof(float), x.data.data()))
      return err;
  return f.end_sequence();
}

caf::error inspect(caf::deserializer& f, floats& x) {
  size_t n = 0;
  if (auto err = f.begin_sequence(n))
    return err;
  // The length comes from the peer: never trust it beyond what BASP can carry.
  if (n > (size_t{1} << 30))
    return caf::make_error(caf::sec::invalid_argument,
                           "floats: sequence length exceeds 4 GiB");
  x.data.resize(n);
  if (n > 0)
    if (auto err = f.apply_raw(n * sizeof(float), x.data.data()))
      return err;
  return f.end_sequence();
}

} // namespace actorps
