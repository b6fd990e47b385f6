#include "config/ConfigSchema.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <limits>

#include <fmt/format.h>

#include "util/Errors.h"

namespace shadowgrad::config {
namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

[[noreturn]] void bad_value(const std::string& key, const std::string& text, const std::string& expected) {
  throw ConfigError(fmt::format("invalid value '{}' for config key '{}': expected {}", text, key, expected));
}

int64_t parse_int(const std::string& key, const std::string& text, int64_t min) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) bad_value(key, text, "an integer");
  if (v < min) bad_value(key, text, fmt::format("an integer >= {}", min));
  return v;
}

[[maybe_unused]] int64_t parse_int_or_auto(const std::string& key, const std::string& text, int64_t min) {
  if (text == "auto") return kAuto;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || v < min)
    bad_value(key, text, fmt::format("an integer >= {} or auto", min));
  return v;
}

double parse_float(const std::string& key, const std::string& text, double min, double max) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v))
    bad_value(key, text, "a finite number");
  if (v < min || v > max) bad_value(key, text, fmt::format("a number in [{}, {}]", min, max));
  return v;
}

[[maybe_unused]] bool parse_bool(const std::string& key, const std::string& text) {
  if (text == "true" || text == "True" || text == "1") return true;
  if (text == "false" || text == "False" || text == "0") return false;
  bad_value(key, text, "true or false");
}

std::vector<KeySpec> build_schema() {
  std::vector<KeySpec> keys;
  std::string section;
#define SG_SECTION(title) section = title;
#define SG_INT(n, def, min, h)                                                                   \
  keys.push_back({section, #n, "int", fmt::format(">= {}", int64_t(min)), fmt::format("{}", int64_t(def)), h, \
                  [](Config& c, const std::string& t) { c.n = parse_int(#n, t, min); },            \
                  [](const Config& c) { return fmt::format("{}", c.n); }});
#define SG_INT_OR_AUTO(n, def, min, h)                                                                      \
  static_assert((min) >= 1, #n ": auto is stored as 0, so its minimum must be at least 1");                      \
  keys.push_back({section, #n, "int", fmt::format(">= {} or auto", int64_t(min)), fmt::format("{}", int64_t(def)), \
                  h, [](Config& c, const std::string& t) { c.n = parse_int_or_auto(#n, t, min); },               \
                  [](const Config& c) { return c.n == kAuto ? std::string("auto") : fmt::format("{}", c.n); }});
#define SG_FLOAT(n, def, min, max, h)                                                          \
  keys.push_back({section, #n, "float", fmt::format("in [{}, {}]", double(min), double(max)),   \
                  fmt::format("{}", double(def)), h,                                            \
                  [](Config& c, const std::string& t) { c.n = parse_float(#n, t, min, max); },   \
                  [](const Config& c) { return fmt::format("{}", c.n); }});
#define SG_BOOL(n, def, h)                                                                   \
  keys.push_back({section, #n, "bool", "true|false", (def) ? "true" : "false", h,             \
                  [](Config& c, const std::string& t) { c.n = parse_bool(#n, t); },           \
                  [](const Config& c) { return std::string(c.n ? "true" : "false"); }});
#define SG_STRING(n, def, h)                                                    \
  keys.push_back({section, #n, "string", "", quote(def), h,                      \
                  [](Config& c, const std::string& t) { c.n = t; },              \
                  [](const Config& c) { return quote(c.n); }});
#define SG_ENUM(n, type, def, h)                                                              \
  keys.push_back({section, #n, "enum", enum_choices<type>(), to_string(type::def), h,                 \
                  [](Config& c, const std::string& t) { c.n = parse_enum<type>(#n, t); },            \
                  [](const Config& c) { return to_string(c.n); }});
#define SG_FROZEN_INT(n, def, min, h) SG_INT(n, def, min, h) keys.back().frozen = true;
#define SG_FROZEN_FLOAT(n, def, min, max, h) SG_FLOAT(n, def, min, max, h) keys.back().frozen = true;
#define SG_FROZEN_BOOL(n, def, h) SG_BOOL(n, def, h) keys.back().frozen = true;
#define SG_FROZEN_STRING(n, def, h) SG_STRING(n, def, h) keys.back().frozen = true;
#define SG_FROZEN_ENUM(n, type, def, h) SG_ENUM(n, type, def, h) keys.back().frozen = true;
#include "config/ConfigKeys.def"
#undef SG_SECTION
#undef SG_INT
#undef SG_FLOAT
#undef SG_BOOL
#undef SG_STRING
#undef SG_ENUM
#undef SG_FROZEN_INT
#undef SG_FROZEN_FLOAT
#undef SG_FROZEN_BOOL
#undef SG_FROZEN_STRING
#undef SG_FROZEN_ENUM
#undef SG_INT_OR_AUTO
  return keys;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

} // namespace

namespace detail {
std::vector<std::string> split_names(std::string_view text) {
  std::vector<std::string> names(1);
  for (char ch : text) {
    if (ch == ',') names.emplace_back();
    else if (ch != ' ') names.back() += ch;
  }
  for (auto& name : names)
    if (name.size() > 1 && name.back() == '_') name.pop_back();  // auto_ (a C++ keyword) is written auto
  return names;
}

void bad_enum_value(const std::string& key, const std::string& text, const std::string& choices) {
  bad_value(key, text, "one of " + choices);
}
} // namespace detail

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> keys = build_schema();
  return keys;
}

const KeySpec* find_key(const std::string& name) {
  for (const auto& k : schema())
    if (k.name == name) return &k;
  return nullptr;
}

std::optional<std::string> canonical_value(const std::string& name, const std::string& text) {
  const KeySpec* key = find_key(name);
  if (!key) return std::nullopt;
  Config probe;
  try {
    key->set(probe, text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return key->get(probe);
}

std::string suggest_key(const std::string& unknown) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  std::string lower = unknown;  // STEPS=5 means steps=5: keys are all lower case
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  for (const auto& k : schema()) {
    size_t d = edit_distance(lower, k.name);
    if (d < best_distance) best_distance = d, best = k.name;
  }
  // Only suggest when at most about a third of the characters differ.
  return best_distance <= std::max<size_t>(2, unknown.size() / 3) ? best : "";
}

std::string override_for_flag(const std::string& arg, const std::string& next) {
  if (arg.rfind("--", 0) != 0) return "";
  std::string name = arg.substr(2), value = next;
  if (auto eq = name.find('='); eq != std::string::npos) value = name.substr(eq + 1), name = name.substr(0, eq);
  std::replace(name.begin(), name.end(), '-', '_');  // --log-period as well as --log_period
  if (!find_key(name)) name = suggest_key(name);
  if (name.empty()) return "";
  return name + "=" + (value.empty() || value.rfind("-", 0) == 0 ? "<value>" : value);
}

} // namespace shadowgrad::config
