// SPDX-License-Identifier: BSD-3-Clause
#include "core/errc.hpp"

#include <set>
#include <string>

#include <catch2/catch.hpp>

using actorps::errc;

TEST_CASE("errc: every value has a distinct name", "[core]") {
  std::set<std::string> names;
  for (int i = 0; i < actorps::errc_count; ++i) {
    auto name = to_string(static_cast<errc>(i));
    INFO("errc value " << i << " renders as '" << name << "'");
    CHECK_FALSE(name.empty());
    // "errc(N)" is the fallback for values missing from the switch.
    CHECK(name.find("errc(") == std::string::npos);
    CHECK(names.insert(name).second);
  }
  CHECK(names.size() == actorps::errc_count);
}

TEST_CASE("errc: none is success", "[core]") {
  SECTION("a default status is ok") {
    actorps::status st;
    CHECK(st.ok());
    CHECK(to_string(st.code) == "none");
  }
  SECTION("any other code is not ok") {
    actorps::status st{errc::bad_optimizer, "x"};
    CHECK_FALSE(st.ok());
  }
  SECTION("values past the end use the fallback") {
    auto past_end = static_cast<errc>(actorps::errc_count);
    auto expected = "errc(" + std::to_string(actorps::errc_count) + ")";
    CHECK(to_string(past_end) == expected);
  }
}
