// SPDX-License-Identifier: BSD-3-Clause
#include <string>

#include <catch2/catch.hpp>

#include "core/secret.hpp"

using actorps::core::constant_time_equal;

TEST_CASE("secret: tokens compare equal only when every byte is", "[core]") {
  CHECK(constant_time_equal("", ""));
  CHECK(constant_time_equal("s3cret", "s3cret"));
  CHECK_FALSE(constant_time_equal("s3cret", "s3creT"));
  CHECK_FALSE(constant_time_equal("s3cret", "S3cret"));
  CHECK_FALSE(constant_time_equal("s3cret", "s3cre"));
  CHECK_FALSE(constant_time_equal("s3cre", "s3cret"));
  CHECK_FALSE(constant_time_equal("", "x"));
  // A longer guess that starts with the token is no match either.
  CHECK_FALSE(constant_time_equal("s3cret", std::string{"s3cret\0", 7}));
}
