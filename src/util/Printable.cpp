#include "util/Printable.h"

#include <cstdint>

#include <fmt/format.h>

namespace shadowgrad::util {
namespace {

// Length of the valid UTF-8 sequence at text[i] (2-4), or 0 when it is not one (overlong, surrogate, > U+10FFFF).
size_t utf8_length(std::string_view text, size_t i, uint32_t* code_point) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t n = 0;
  uint32_t cp = 0, min = 0;
  if (lead >= 0xC2 && lead <= 0xDF) n = 2, cp = lead & 0x1F, min = 0x80;
  else if (lead >= 0xE0 && lead <= 0xEF) n = 3, cp = lead & 0x0F, min = 0x800;
  else if (lead >= 0xF0 && lead <= 0xF4) n = 4, cp = lead & 0x07, min = 0x10000;
  else return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  *code_point = cp;
  return n;
}

// C1 controls, and the code points that reorder or hide what a terminal shows.
bool invisible(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) ||
         cp == 0x200E || cp == 0x200F || cp == 0xFEFF;
}

} // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += char(c);
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t n = c >= 0x80 ? utf8_length(text, i, &cp) : 0;
    if (n > 0 && !invisible(cp)) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    for (size_t k = 0; k < (n > 0 ? n : 1); ++k)
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i + k]));
    i += n > 0 ? n : 1;
  }
  return out;
}

} // namespace shadowgrad::util
