#include "core/data/ops/sentencepiece_normalizer.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "core/data/ops/sentencepiece_utf8.h"

namespace sluice {
namespace {

constexpr absl::string_view kEscapedSpace = "\xe2\x96\x81";  // U+2581
constexpr absl::string_view kReplacementChar = "\xef\xbf\xbd";  // U+FFFD

// A Darts-clone double-array unit (darts.h's DoubleArrayUnit).
bool HasLeaf(uint32_t unit) { return ((unit >> 8) & 1) == 1; }
uint32_t Value(uint32_t unit) { return unit & ((1U << 31) - 1); }
uint32_t Label(uint32_t unit) { return unit & ((1U << 31) | 0xFF); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1U << 9)) >> 6); }

}  // namespace

absl::StatusOr<std::unique_ptr<SentencePieceNormalizer>> SentencePieceNormalizer::Create(
    const SentencePieceModelProto& proto) {
  std::unique_ptr<SentencePieceNormalizer> n(new SentencePieceNormalizer());
  n->add_dummy_prefix_ = proto.add_dummy_prefix;
  n->remove_extra_whitespaces_ = proto.remove_extra_whitespaces;
  n->escape_whitespaces_ = proto.escape_whitespaces;
  n->treat_whitespace_as_suffix_ = proto.treat_whitespace_as_suffix;
  n->space_symbol_ = n->escape_whitespaces_ ? kEscapedSpace : absl::string_view(" ");
  const std::string& blob = proto.precompiled_charsmap;
  if (!blob.empty()) {
    uint32_t trie_bytes = 0;
    if (blob.size() > sizeof(trie_bytes)) std::memcpy(&trie_bytes, blob.data(), 4);
    if (blob.size() <= sizeof(trie_bytes) || trie_bytes > blob.size() - sizeof(trie_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the normalizer's precompiled_charsmap is broken: its trie of ", trie_bytes,
          " bytes does not fit in its ", blob.size(), " bytes"));
    }
    n->units_.resize(trie_bytes / sizeof(uint32_t));
    if (!n->units_.empty()) std::memcpy(n->units_.data(), blob.data() + 4, n->units_.size() * 4);
    n->replacements_ = blob.substr(4 + trie_bytes);
    n->replacements_.push_back('\0');  // a replacement running to the end still terminates
  }
  std::vector<std::pair<std::string, int>> user_defined;
  for (const SentencePieceModelProto::Piece& p : proto.pieces) {
    if (p.type == SentencePieceModelProto::PieceType::kUserDefined) {
      user_defined.emplace_back(p.piece, 0);
    }
  }
  if (!user_defined.empty()) n->user_defined_ = std::make_unique<PieceTrie>(user_defined);
  const auto user_defined_start = [&](uint8_t byte) {
    return n->user_defined_ != nullptr && n->user_defined_->HasKeyStartingWith(byte);
  };
  bool is_key = false;
  n->plain_space_ = !user_defined_start(' ') && !n->CharsmapHasKeyStartingWith(" ", &is_key);
  for (int b = 0; b < 0x80; ++b) {
    const char byte[1] = {static_cast<char>(b)};
    bool free = b != ' ' && !user_defined_start(static_cast<uint8_t>(b));
    if (free && n->CharsmapHasKeyStartingWith(absl::string_view(byte, 1), &is_key)) {
      free = !is_key;
      for (int c = 0; free && c < 0x80; ++c) {
        const char pair[2] = {static_cast<char>(b), static_cast<char>(c)};
        free = !n->CharsmapHasKeyStartingWith(absl::string_view(pair, 2), &is_key);
      }
    }
    n->verbatim_before_ascii_[static_cast<size_t>(b)] = free;
  }
  return n;
}

bool SentencePieceNormalizer::CharsmapHasKeyStartingWith(absl::string_view prefix,
                                                         bool* is_key) const {
  *is_key = false;
  if (units_.empty()) return false;
  size_t pos = Offset(units_[0]);
  for (char c : prefix) {
    const uint8_t byte = static_cast<uint8_t>(c);
    pos ^= byte;
    if (pos >= units_.size() || Label(units_[pos]) != byte) return false;
    *is_key = HasLeaf(units_[pos]);
    pos ^= Offset(units_[pos]);
  }
  return true;
}

size_t SentencePieceNormalizer::LongestCharsmapMatch(absl::string_view input,
                                                     uint32_t* value) const {
  if (units_.empty()) return 0;
  const size_t size = units_.size();
  size_t longest = 0;
  size_t pos = Offset(units_[0]);
  for (size_t i = 0; i < input.size(); ++i) {
    const uint8_t byte = static_cast<uint8_t>(input[i]);
    pos ^= byte;
    if (pos >= size) return longest;
    const uint32_t unit = units_[pos];
    if (Label(unit) != byte) return longest;
    pos ^= Offset(unit);
    if (HasLeaf(unit)) {
      if (pos >= size) return longest;
      *value = Value(units_[pos]);
      longest = i + 1;
    }
  }
  return longest;
}

std::pair<absl::string_view, size_t> SentencePieceNormalizer::NormalizePrefix(
    absl::string_view input, bool* valid_utf8) const {
  if (user_defined_ != nullptr) {
    size_t longest = 0;
    user_defined_->ForEachPrefix(input, [&](size_t length, int) { longest = length; });
    if (longest > 0) return {input.substr(0, longest), longest};
  }
  uint32_t value = 0;
  const size_t matched = LongestCharsmapMatch(input, &value);
  if (matched > 0) {
    absl::string_view replacement;
    if (value < replacements_.size()) {
      replacement = absl::string_view(replacements_.data() + value);  // NUL-terminated
    }
    if (!IsValidUtf8(replacement)) *valid_utf8 = false;
    return {replacement, matched};
  }
  const size_t length = ValidUtf8CharLength(input);
  if (length == 0) return {kReplacementChar, 1};
  return {input.substr(0, length), length};
}

bool SentencePieceNormalizer::Normalize(absl::string_view input, std::string* out) const {
  out->clear();
  bool valid_utf8 = true;
  if (remove_extra_whitespaces_) {
    while (!input.empty()) {
      const auto [replacement, consumed] = NormalizePrefix(input, &valid_utf8);
      if (replacement != " ") break;
      input.remove_prefix(consumed);
    }
  }
  if (input.empty()) return valid_utf8;
  const auto add_space = [&] { out->append(space_symbol_.data(), space_symbol_.size()); };
  if (!treat_whitespace_as_suffix_ && add_dummy_prefix_) add_space();
  bool previous_is_space = remove_extra_whitespaces_;
  while (!input.empty()) {
    // The common cases first, with what the general rule below would do with them.
    size_t n = 0;
    while (n < input.size() && verbatim_before_ascii_[static_cast<uint8_t>(input[n])]) ++n;
    // Inside the run an ASCII byte follows each byte; the last one's follower may not be.
    if (n > 0 && n < input.size() && static_cast<uint8_t>(input[n]) >= 0x80) --n;
    if (n > 0) {
      out->append(input.data(), n);
      input.remove_prefix(n);
      previous_is_space = false;
      continue;
    }
    if (input[0] == ' ' && plain_space_) {
      if (!previous_is_space) add_space();
      previous_is_space = remove_extra_whitespaces_;
      input.remove_prefix(1);
      continue;
    }
    auto [replacement, consumed] = NormalizePrefix(input, &valid_utf8);
    if (previous_is_space) {
      while (absl::ConsumePrefix(&replacement, " ")) {
      }
    }
    if (!replacement.empty()) {
      if (escape_whitespaces_ && replacement.find(' ') != absl::string_view::npos) {
        for (char c : replacement) {
          if (c == ' ') {
            add_space();
          } else {
            out->push_back(c);
          }
        }
      } else {
        out->append(replacement.data(), replacement.size());
      }
      previous_is_space = absl::EndsWith(replacement, " ");
    }
    input.remove_prefix(consumed);
    if (!remove_extra_whitespaces_) previous_is_space = false;
  }
  if (remove_extra_whitespaces_) {
    while (absl::EndsWith(*out, space_symbol_)) out->resize(out->size() - space_symbol_.size());
  }
  if (treat_whitespace_as_suffix_ && add_dummy_prefix_) add_space();
  return valid_utf8;
}

}  // namespace sluice
