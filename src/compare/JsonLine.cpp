#include "compare/JsonLine.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

namespace shadowgrad::compare {
namespace {

constexpr size_t kMaxDepth = 64; // nested arrays/objects are only skipped; a bound keeps recursion safe

class Parser {
public:
  explicit Parser(std::string_view text) : s_(text) {}

  JsonLine parseObjectLine() {
    JsonLine out;
    skipSpace();
    expect('{');
    skipSpace();
    if (peek() == '}') {
      ++pos_;
    } else {
      for (;;) {
        skipSpace();
        std::string key = parseString();
        skipSpace();
        expect(':');
        skipSpace();
        if (out.numbers.count(key) || out.nonNumeric.count(key))
          fail("duplicate key \"" + key + "\"");
        if (std::optional<double> v = parseScalarNumber())
          out.numbers.emplace(std::move(key), *v);
        else {
          skipValue(0);
          out.nonNumeric.insert(std::move(key));
        }
        skipSpace();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        break;
      }
    }
    skipSpace();
    if (pos_ != s_.size())
      fail("unexpected text after the object");
    return out;
  }

private:
  [[noreturn]] void fail(const std::string &what) const { throw JsonSyntaxError(what, pos_ + 1); }

  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }

  void skipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r' || s_[pos_] == '\n'))
      ++pos_;
  }

  void expect(char c) {
    if (peek() != c)
      fail(std::string("expected '") + c + "'" + (pos_ < s_.size() ? "" : " before end of line"));
    ++pos_;
  }

  bool consumeWord(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w)
      return false;
    pos_ += w.size();
    return true;
  }

  // Returns a number (or NaN for null) if the value here is one; otherwise leaves the position untouched.
  std::optional<double> parseScalarNumber() {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    for (auto [word, value] : {std::pair<std::string_view, double>{"NaN", kNaN},
                               {"nan", kNaN},
                               {"-nan", kNaN},
                               {"null", kNaN},
                               {"Infinity", kInf},
                               {"-Infinity", -kInf},
                               {"inf", kInf},
                               {"-inf", -kInf}}) {
      if (consumeWord(word))
        return value;
    }
    char c = peek();
    if (c != '-' && (c < '0' || c > '9'))
      return std::nullopt;
    double value = 0;
    auto [end, ec] = std::from_chars(s_.data() + pos_, s_.data() + s_.size(), value);
    if (ec == std::errc::invalid_argument)
      fail("malformed number");
    // from_chars reports overflow as out of range; JSON readers give +-inf, and so do we.
    if (ec == std::errc::result_out_of_range)
      value = (c == '-') ? -kInf : kInf;
    pos_ = static_cast<size_t>(end - s_.data());
    return value;
  }

  std::string parseString() {
    expect('"');
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size())
          break;
        char e = s_[pos_++];
        switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u': // keys and values we keep are ASCII; keep the escape text as is
          out += "\\u";
          break;
        default:
          out += e;
          break;
        }
      } else {
        out += c;
      }
    }
    if (pos_ >= s_.size())
      fail("unterminated string");
    ++pos_;
    return out;
  }

  void skipValue(size_t depth) {
    if (depth > kMaxDepth)
      fail("nesting too deep");
    char c = peek();
    if (c == '"') {
      parseString();
    } else if (c == '{' || c == '[') {
      char close = (c == '{') ? '}' : ']';
      ++pos_;
      skipSpace();
      if (peek() == close) {
        ++pos_;
        return;
      }
      for (;;) {
        skipSpace();
        if (close == '}') {
          parseString();
          skipSpace();
          expect(':');
          skipSpace();
        }
        skipValue(depth + 1);
        skipSpace();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(close);
        return;
      }
    } else if (!consumeWord("true") && !consumeWord("false") && !parseScalarNumber()) {
      fail("expected a value");
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

} // namespace

JsonLine parseJsonLine(std::string_view text) { return Parser(text).parseObjectLine(); }

} // namespace shadowgrad::compare
