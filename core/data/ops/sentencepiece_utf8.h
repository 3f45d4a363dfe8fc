// The two UTF-8 rules SentencePiece (0.1.97) segments by, which Sluice's encoder must apply
// exactly as it does:
//   - SentencePieceCharLength: a character's length from its lead byte alone (1 for ASCII and
//     stray continuation bytes, 2 for 0xC0-0xDF, 3 for 0xE0-0xEF, 4 for 0xF0-0xFF), not checked
//     against what follows;
//   - ValidUtf8CharLength: the length of the well-formed character `text` starts with (shortest
//     form, no surrogates, at most U+10FFFF), or 0 when it is malformed.
//
// Thread safety: pure functions.
#ifndef SLUICE_CORE_DATA_OPS_SENTENCEPIECE_UTF8_H_
#define SLUICE_CORE_DATA_OPS_SENTENCEPIECE_UTF8_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace sluice {

inline size_t SentencePieceCharLength(char lead) {
  const uint8_t b = static_cast<uint8_t>(lead);
  return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

inline size_t ValidUtf8CharLength(absl::string_view text) {
  if (text.empty()) return 0;
  const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(text[i])); };
  const auto trail = [&](size_t i) { return (byte(i) & 0xC0) == 0x80; };
  const uint32_t b0 = byte(0);
  if (b0 < 0x80) return 1;
  uint32_t cp = 0;
  size_t n = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2;
    if (text.size() < n || !trail(1)) return 0;
    cp = ((b0 & 0x1F) << 6) | (byte(1) & 0x3F);
    return cp >= 0x80 ? n : 0;
  }
  if ((b0 & 0xF0) == 0xE0) {
    n = 3;
    if (text.size() < n || !trail(1) || !trail(2)) return 0;
    cp = ((b0 & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
    return cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF) ? n : 0;
  }
  if ((b0 & 0xF8) == 0xF0) {
    n = 4;
    if (text.size() < n || !trail(1) || !trail(2) || !trail(3)) return 0;
    cp = ((b0 & 0x07) << 18) | ((byte(1) & 0x3F) << 12) | ((byte(2) & 0x3F) << 6) |
         (byte(3) & 0x3F);
    return cp >= 0x10000 && cp <= 0x10FFFF ? n : 0;
  }
  return 0;
}

// True when all of `text` is well-formed UTF-8.
inline bool IsValidUtf8(absl::string_view text) {
  while (!text.empty()) {
    const size_t n = ValidUtf8CharLength(text);
    if (n == 0) return false;
    text.remove_prefix(n);
  }
  return true;
}

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_SENTENCEPIECE_UTF8_H_
