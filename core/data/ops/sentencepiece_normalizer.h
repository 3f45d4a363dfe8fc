// SentencePiece's text normalization, as libsentencepiece 0.1.97 does it before segmenting:
//
//   - the precompiled charsmap (NormalizerSpec.precompiled_charsmap: a little-endian uint32
//     size, a Darts-clone double array of that many bytes, then NUL-terminated replacement
//     strings) rewrites the longest matching prefix at each position (nmt_nfkc, nfkc, ...; an
//     empty charsmap rewrites nothing: "identity");
//   - user-defined symbols pass through unchanged (the longest one matching at a position wins
//     over the charsmap);
//   - malformed UTF-8 becomes U+FFFD, one byte at a time;
//   - remove_extra_whitespaces drops leading and trailing spaces and folds runs of them;
//   - add_dummy_prefix puts one space first (last with treat_whitespace_as_suffix);
//   - escape_whitespaces writes each space as U+2581 ("▁").
//
//   ASSIGN_OR_RETURN(auto n, SentencePieceNormalizer::Create(proto));
//   std::string out;
//   n->Normalize("  Hello   world", &out);  // "▁Hello▁world"
//
// Thread safety: immutable after Create; Normalize may run on many threads at once.
#ifndef SLUICE_CORE_DATA_OPS_SENTENCEPIECE_NORMALIZER_H_
#define SLUICE_CORE_DATA_OPS_SENTENCEPIECE_NORMALIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/data/ops/piece_trie.h"
#include "core/data/ops/sentencepiece_model_proto.h"

namespace sluice {

class SentencePieceNormalizer {
 public:
  // The normalizer of `proto` (its NormalizerSpec, treat_whitespace_as_suffix and USER_DEFINED
  // pieces). INVALID_ARGUMENT when the charsmap is malformed (its header's size does not fit).
  static absl::StatusOr<std::unique_ptr<SentencePieceNormalizer>> Create(
      const SentencePieceModelProto& proto);

  // Replaces *out with the normalized `input`. Never fails: any bytes normalize to something
  // (lookups into a corrupt charsmap are bounds-checked and find nothing). Allocates only when
  // *out must grow. Returns false when a charsmap replacement was not valid UTF-8 (only a
  // corrupt or hostile charsmap does that): segmenting must then not assume character
  // boundaries line up with the whitespace symbol.
  bool Normalize(absl::string_view input, std::string* out) const;

  // The whitespace symbol in normalized text: "▁" (escape_whitespaces) or " ".
  absl::string_view space_symbol() const { return space_symbol_; }

 private:
  SentencePieceNormalizer() = default;

  // The replacement of the longest rule matching a prefix of `input` (non-empty) and how many
  // input bytes it consumes; *valid_utf8 is cleared when a charsmap replacement is malformed.
  std::pair<absl::string_view, size_t> NormalizePrefix(absl::string_view input,
                                                       bool* valid_utf8) const;
  // Length of the longest charsmap key prefixing `input` (0: none) and its replacement offset.
  size_t LongestCharsmapMatch(absl::string_view input, uint32_t* value) const;

  // Whether some charsmap key starts with `prefix` (non-empty); *is_key says whether
  // `prefix` itself is one.
  bool CharsmapHasKeyStartingWith(absl::string_view prefix, bool* is_key) const;

  // The charsmap's double array (units) and its replacement strings, NUL-terminated.
  std::vector<uint32_t> units_;
  std::string replacements_;
  std::unique_ptr<PieceTrie> user_defined_;  // null without user-defined pieces
  bool add_dummy_prefix_ = true;
  bool remove_extra_whitespaces_ = true;
  bool escape_whitespaces_ = true;
  bool treat_whitespace_as_suffix_ = false;
  absl::string_view space_symbol_;
  // ASCII bytes other than space that normalize to themselves when an ASCII byte (or the end)
  // follows: no user-defined symbol starts with them, no charsmap key is the byte alone or
  // starts with it and an ASCII byte (NFKC's keys start with a letter and a combining mark).
  // Runs of them are copied at once.
  std::array<bool, 256> verbatim_before_ascii_{};
  // Whether a space is only a space (no rule starts with it).
  bool plain_space_ = false;
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_SENTENCEPIECE_NORMALIZER_H_
