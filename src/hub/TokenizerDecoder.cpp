#include "hub/TokenizerDecoder.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/Errors.h"

namespace shadowgrad::hub {

using nlohmann::json;

namespace {

// One code point off a UTF-8 string at i (the tokenizer's own strings are valid UTF-8).
uint32_t next_code_point(const std::string& s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  uint32_t cp = n == 1 ? b : b & (0x3F >> (n - 1));
  for (int k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

// Bytes to text where they are not valid UTF-8: each maximal invalid subsequence becomes one U+FFFD, as Rust's
// String::from_utf8_lossy (which tokenizers uses) does. A completion cut mid-character ends in one.
std::string utf8_lossy(const std::string& bytes) {
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    int n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (Unicode table 3-7)
    if (b < 0x80) n = 1;
    else if (b >= 0xC2 && b <= 0xDF) n = 2;
    else if (b >= 0xE0 && b <= 0xEF) n = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4) n = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    int valid = 1;
    for (; valid < n && i + valid < bytes.size(); ++valid) {
      const auto c = static_cast<unsigned char>(bytes[i + valid]);
      if (valid == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
    }
    if (valid == n) out.append(bytes, i, n);
    else out += "\xEF\xBF\xBD";
    i += valid;
  }
  return out;
}

// GPT-2's byte-to-character table, inverted: the printable Latin-1 bytes stand for themselves, the other 68 were
// moved to U+0100 and up, in order.
const std::unordered_map<uint32_t, char>& byte_of_char() {
  static const std::unordered_map<uint32_t, char> table = [] {
    std::unordered_map<uint32_t, char> t;
    uint32_t moved = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      t[printable ? b : 256 + moved++] = char(b);
    }
    return t;
  }();
  return table;
}

// "<0x0A>" -> '\n'; false for anything else.
bool byte_token(const std::string& t, char& byte) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return false;
  const auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  if (!hex(t[3]) || !hex(t[4])) return false;
  byte = char(std::stoi(t.substr(3, 2), nullptr, 16));
  return true;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

} // namespace

TokenizerDecoder::TokenizerDecoder(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw DataError(fmt::format("{}: cannot open", path));
  json doc;
  try {
    doc = json::parse(in);
    const json& vocab = doc.at("model").at("vocab");
    if (!vocab.is_object()) throw DataError(fmt::format("{}: model.vocab is not an object of token: id", path));
    auto put = [&](int64_t id, const std::string& piece, bool special) {
      if (id < 0 || id > (int64_t(1) << 24))
        throw DataError(fmt::format("{}: token id {} is out of range", path, id));
      if (id >= int64_t(pieces_.size())) pieces_.resize(id + 1), special_.resize(id + 1);
      pieces_[id] = piece;
      special_[id] = special;
    };
    for (const auto& [piece, id] : vocab.items()) put(id.get<int64_t>(), piece, false);
    if (doc.contains("added_tokens") && doc["added_tokens"].is_array())
      for (const json& t : doc["added_tokens"])
        put(t.at("id").get<int64_t>(), t.at("content").get<std::string>(), t.value("special", false));
    const json& decoder = doc.contains("decoder") ? doc["decoder"] : json();
    if (decoder.is_null()) join_with_spaces_ = true;
    else add_steps(decoder, path);
  } catch (const json::exception& e) {
    throw DataError(fmt::format("{}: not a tokenizer.json this decoder reads ({})", path, e.what()));
  }
}

std::optional<TokenizerDecoder> TokenizerDecoder::from_directory(const std::string& dir) {
  if (dir.empty()) return std::nullopt;
  const std::string path = (std::filesystem::path(dir) / "tokenizer.json").string();
  if (!std::filesystem::exists(path)) return std::nullopt;
  return TokenizerDecoder(path);
}

void TokenizerDecoder::add_steps(const json& d, const std::string& path) {
  const std::string type = d.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const json& each : d.at("decoders")) add_steps(each, path);
  } else if (type == "ByteLevel") {
    steps_.push_back({Step::Kind::byte_level});
  } else if (type == "ByteFallback") {
    steps_.push_back({Step::Kind::byte_fallback});
  } else if (type == "Fuse") {
    steps_.push_back({Step::Kind::fuse});
  } else if (type == "Replace") {
    if (!d.at("pattern").contains("String"))
      throw DataError(fmt::format("{}: a Replace decoder with a regex pattern is not supported", path));
    steps_.push_back({Step::Kind::replace, d["pattern"]["String"].get<std::string>(), d.at("content").get<std::string>()});
  } else if (type == "Strip") {
    steps_.push_back({Step::Kind::strip, d.at("content").get<std::string>(), "", d.at("start").get<int64_t>(),
                      d.at("stop").get<int64_t>()});
  } else if (type == "Metaspace") {
    const std::string scheme = d.value("prepend_scheme", d.value("add_prefix_space", true) ? "always" : "never");
    steps_.push_back({Step::Kind::metaspace, d.at("replacement").get<std::string>(), "", scheme == "never" ? 0 : 1});
  } else {
    throw DataError(fmt::format("{}: decoder type '{}' is not supported (ByteLevel, Metaspace, Sequence of Replace, "
                                "ByteFallback, Fuse, Strip are)",
                                path, type));
  }
}

std::vector<std::string> TokenizerDecoder::apply(std::vector<std::string> tokens) const {
  for (const Step& step : steps_) {
    std::vector<std::string> out;
    switch (step.kind) {
      case Step::Kind::byte_level: {  // one string of every token's bytes
        std::string bytes;
        for (const std::string& t : tokens) {
          std::string mine;
          bool mapped = true;
          for (size_t i = 0; i < t.size() && mapped;) {
            const auto it = byte_of_char().find(next_code_point(t, i));
            if (it == byte_of_char().end()) mapped = false;
            else mine += it->second;
          }
          bytes += mapped ? mine : t;  // a token outside the table (an added token) goes in as it is
        }
        out.push_back(utf8_lossy(bytes));
        break;
      }
      case Step::Kind::byte_fallback: {  // runs of <0xHH> tokens become their bytes
        std::string run;
        size_t run_tokens = 0;
        auto flush = [&] {
          if (run_tokens == 0) return;
          const std::string text = utf8_lossy(run);
          // tokenizers gives one U+FFFD per byte token when the run is not valid UTF-8
          if (text != run)
            for (size_t k = 0; k < run_tokens; ++k) out.push_back("\xEF\xBF\xBD");
          else out.push_back(text);
          run.clear();
          run_tokens = 0;
        };
        for (const std::string& t : tokens) {
          char b;
          if (byte_token(t, b)) {
            run += b;
            ++run_tokens;
          } else {
            flush();
            out.push_back(t);
          }
        }
        flush();
        break;
      }
      case Step::Kind::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        out.push_back(all);
        break;
      }
      case Step::Kind::replace:
        for (const std::string& t : tokens) out.push_back(replace_all(t, step.from, step.to));
        break;
      case Step::Kind::strip:
        for (const std::string& t : tokens) {
          std::vector<std::string> chars;
          for (size_t i = 0; i < t.size();) {
            const size_t at = i;
            next_code_point(t, i);
            chars.push_back(t.substr(at, i - at));
          }
          size_t begin = 0, end = chars.size();
          while (begin < end && int64_t(begin) < step.start && chars[begin] == step.from) ++begin;
          while (end > begin && int64_t(chars.size() - end) < step.stop && chars[end - 1] == step.from) --end;
          std::string kept;
          for (size_t i = begin; i < end; ++i) kept += chars[i];
          out.push_back(kept);
        }
        break;
      case Step::Kind::metaspace:  // the replacement character becomes a space, and is dropped from the first token
        for (size_t i = 0; i < tokens.size(); ++i)
          out.push_back(replace_all(tokens[i], step.from, i == 0 && step.start == 1 ? "" : " "));
        break;
    }
    tokens = std::move(out);
  }
  return tokens;
}

std::string TokenizerDecoder::decode(const std::vector<int64_t>& ids) const {
  std::vector<std::string> tokens;
  for (int64_t id : ids)
    if (id >= 0 && id < int64_t(pieces_.size()) && !special_[id] && !pieces_[id].empty()) tokens.push_back(pieces_[id]);
  std::string text;
  if (join_with_spaces_)
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
  else
    for (const std::string& t : apply(std::move(tokens))) text += t;
  return text;
}

} // namespace shadowgrad::hub
