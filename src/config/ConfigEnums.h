#pragma once
// The enum config types of ConfigEnums.def as `enum class`es, with their names:
//
//   config::GradDtype d = config::parse_enum<config::GradDtype>("grad_dtype", "bfloat16");  // ConfigError if not one
//   config::to_string(d)        // "bfloat16"
//   fmt::format("{}", d)        // "bfloat16"
//   config::enum_choices<config::GradDtype>()  // "float32|bfloat16|float16"
//
// Code outside src/config compares values (cfg.grad_dtype == config::GradDtype::bfloat16), never names.
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

namespace shadowgrad::config {

#define SG_ENUM_TYPE(Type, ...) enum class Type { __VA_ARGS__ };
#include "config/ConfigEnums.def"
#undef SG_ENUM_TYPE

// EnumNames<E>::text is the comma-separated value list as written in ConfigEnums.def ("float32, bfloat16").
template <class E> struct EnumNames : std::false_type {};
#define SG_ENUM_TYPE(Type, ...)                                        \
  template <> struct EnumNames<Type> : std::true_type {                \
    static constexpr std::string_view text = #__VA_ARGS__;             \
  };
#include "config/ConfigEnums.def"
#undef SG_ENUM_TYPE

namespace detail {
std::vector<std::string> split_names(std::string_view text);
[[noreturn]] void bad_enum_value(const std::string& key, const std::string& text, const std::string& choices);
} // namespace detail

// The names of E's values, in declaration order (the enum's underlying values).
template <class E> const std::vector<std::string>& enum_names() {
  static const std::vector<std::string> names = detail::split_names(EnumNames<E>::text);
  return names;
}

template <class E> std::string enum_choices() {
  std::string out;
  for (const auto& n : enum_names<E>()) out += (out.empty() ? "" : "|") + n;
  return out;
}

template <class E, class = std::enable_if_t<EnumNames<E>::value>> const std::string& to_string(E value) {
  return enum_names<E>().at(static_cast<size_t>(value));
}

// Throws ConfigError naming the key, the value and the choices when `text` is not one of E's names.
template <class E> E parse_enum(const std::string& key, const std::string& text) {
  const auto& names = enum_names<E>();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<E>(i);
  detail::bad_enum_value(key, text, enum_choices<E>());
}

} // namespace shadowgrad::config

// fmt/spdlog print a config enum as its name.
template <class E>
struct fmt::formatter<E, char, std::enable_if_t<shadowgrad::config::EnumNames<E>::value>>
    : fmt::formatter<std::string_view> {
  template <class Context> auto format(E value, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(shadowgrad::config::to_string(value), ctx);
  }
};
