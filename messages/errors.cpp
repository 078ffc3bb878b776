// SPDX-License-Identifier: BSD-3-Clause
#include "messages/errors.hpp"

#include "caf/actor_system_config.hpp"
#include "caf/make_message.hpp"
#include "caf/message.hpp"
#include "caf/sec.hpp"

namespace actorps {

namespace {

std::string render_code(uint8_t code, const std::string& context) {
  std::string result = "actorps: ";
  result += to_string(static_cast<errc>(code));
  if (!context.empty()) {
    result += " (";
    result += context;
    result += ")";
  }
  return result;
}

// The context of our errors is a message holding one string.
std::string context_text(const caf::message& ctx) {
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return ctx.empty() ? std::string{} : to_string(ctx);
}

} // namespace

caf::error make_error(errc code, std::string message) {
  return caf::error{static_cast<uint8_t>(code), error_category,
                    caf::make_message(std::move(message))};
}

caf::error to_error(const status& st) {
  if (st.ok())
    return caf::none;
  return make_error(st.code, st.message);
}

errc code_of(const caf::error& err) {
  if (!err || err.category() != error_category)
    return errc::none;
  return static_cast<errc>(err.code());
}

std::string context_of(const caf::error& err) {
  if (err.category() == error_category)
    return context_text(err.context());
  return render(err);
}

std::string render(const caf::error& err) {
  if (!err)
    return "no error";
  if (err.category() == error_category)
    return render_code(err.code(), context_text(err.context()));
  if (err.category() == caf::atom("system")) {
    std::string result = "caf: " + to_string(static_cast<caf::sec>(err.code()));
    auto ctx = context_text(err.context());
    if (!ctx.empty())
      result += " (" + ctx + ")";
    return result;
  }
  return to_string(err);
}

void register_error_category(caf::actor_system_config& cfg) {
  cfg.add_error_category(error_category, [](uint8_t code, caf::atom_value,
                                            const caf::message& context) {
    return render_code(code, context_text(context));
  });
}

} // namespace actorps
