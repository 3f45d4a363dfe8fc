// Sluice's own SentencePiece encoder: the ids libsentencepiece 0.1.97's
// SentencePieceProcessor::Encode gives, for unigram and BPE models, without the library.
//
//   ASSIGN_OR_RETURN(SentencePieceModelProto proto, ParseSentencePieceModelProto(bytes));
//   ASSIGN_OR_RETURN(auto encoder, SentencePieceEncoder::Create(proto));
//   std::vector<int32_t> ids;
//   encoder->Encode("Hello world", &ids);
//
// What it reproduces: normalization (sentencepiece_normalizer.h); unigram segmentation by the
// library's optimized Viterbi search, including its float arithmetic (a path's score is
// accumulated in float, so near-ties depend on where in the text a word stands); BPE by
// highest-scoring merge first, leftmost on ties; user-defined pieces (always whole), unknown
// characters (the <unk> id, or with byte_fallback their UTF-8 bytes' <0xXX> pieces), control
// pieces (never produced from text).
//
// The speed: pieces never contain the whitespace symbol "▁" except as their first character
// (spm_train's split_by_whitespace, the default), so no piece crosses the start of a word and
// each word segments on its own. Words are looked up in a per-thread cache
// (sentencepiece_word_cache.h, bounded in bytes). For unigram models a cached segmentation is
// reused only when it provably equals what the float search would find where the word stands:
// every comparison the search made for the word, from a start score of 0, was decided by more
// than the float rounding error that the path score reached before the word can add (bounded
// from the word's length and the scores' magnitude); otherwise the word is searched again from
// the real start score. Models whose pieces contain "▁" elsewhere, or with whitespace as a
// suffix, are searched whole (still exact, without the cache); so are words longer than 256
// bytes. Memory: each thread keeps up to word_cache_bytes for each of the last 4 encoders it
// used, and scratch space for its longest text up to 1 MiB (a longer text's is freed after it).
//
// Thread safety: immutable after Create; Encode may run on many threads at once (each thread
// has its own cache and scratch space, so the steady state allocates nothing but what *ids
// must grow by).
#ifndef SLUICE_CORE_DATA_OPS_SENTENCEPIECE_ENCODER_H_
#define SLUICE_CORE_DATA_OPS_SENTENCEPIECE_ENCODER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/data/ops/piece_trie.h"
#include "core/data/ops/sentencepiece_model_proto.h"
#include "core/data/ops/sentencepiece_normalizer.h"
#include "core/data/ops/sentencepiece_word_cache.h"

namespace sluice {

struct SentencePieceEncoderOptions {
  // Cache words' segmentations (per thread). Off: every text is searched whole (tests compare
  // both ways).
  bool word_cache = true;
  // The bound of each thread's word cache, in bytes.
  size_t word_cache_bytes = 8 << 20;
};

class SentencePieceEncoder {
 public:
  // An encoder for `proto`. UNIMPLEMENTED for what it does not encode itself (word and char
  // models; BPE models with UNUSED pieces, whose library resegmentation depends on the whole
  // text): the caller falls back to the library. INVALID_ARGUMENT for models the library also
  // refuses: no pieces, an empty or repeated piece, no or two <unk> pieces, a byte piece
  // without byte_fallback or not of the form <0xXX>, byte_fallback without all 256 of them, a
  // broken charsmap. Messages name the piece and its id; the caller adds the file.
  static absl::StatusOr<std::unique_ptr<SentencePieceEncoder>> Create(
      const SentencePieceModelProto& proto, SentencePieceEncoderOptions options = {});

  SentencePieceEncoder(const SentencePieceEncoder&) = delete;
  SentencePieceEncoder& operator=(const SentencePieceEncoder&) = delete;

  // Appends the ids of `text` to *ids. Never fails: any bytes encode (malformed UTF-8 as
  // U+FFFD, as the library does).
  void Encode(absl::string_view text, std::vector<int32_t>* ids) const;

  // The <s> / </s> ids (-1 when the piece is missing or not a control piece) and the
  // vocabulary size, as SentencePieceProcessor's bos_id, eos_id and GetPieceSize.
  int bos_id() const { return bos_id_; }
  int eos_id() const { return eos_id_; }
  int vocab_size() const { return static_cast<int>(types_.size()); }
  // Whether words are segmented separately through the cache (see the file comment).
  bool splits_words() const { return split_words_; }

 private:
  friend class UnigramSearch;  // the search, in the .cc
  struct Scratch;
  static Scratch& ThreadScratch();
  SentencePieceEncoder() = default;
  absl::Status Init(const SentencePieceModelProto& proto);

  // Appends the ids of a normalized `text`.
  void EncodeNormalized(absl::string_view text, Scratch& scratch, bool split,
                        std::vector<int32_t>* ids) const;
  // Unigram: the search of `text` from 0 in double precision, with its decision margins, for
  // the cache.
  WordSegmentation UnigramAnalyze(absl::string_view text, Scratch& scratch) const;
  // Whether `s` is what the float search gives for its word from path score `start`.
  static bool ReusableAt(const WordSegmentation& s, size_t word_bytes, float start);
  // BPE: the final pieces of `text` into scratch.path.
  void BpeSegment(absl::string_view text, Scratch& scratch) const;
  // Appends scratch.path's ids (expanding unknown pieces to bytes with byte_fallback).
  void AppendPathIds(absl::string_view text, const Scratch& scratch,
                     std::vector<int32_t>* ids) const;
  // Unigram: the score a piece of `length` bytes with `id` adds to a path, as the library
  // computes it (user-defined pieces get a bonus, unknown characters a penalty).
  double PieceScore(int id, size_t length) const;
  int PieceToId(absl::string_view piece) const;
  // This thread's cache for this encoder.
  SentencePieceWordCache& ThreadCache() const;

  SentencePieceEncoderOptions options_;
  uint64_t serial_ = 0;  // tells this encoder's per-thread caches from another's
  bool bpe_ = false;
  std::unique_ptr<SentencePieceNormalizer> normalizer_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<SentencePieceModelProto::PieceType> types_;
  // NORMAL, USER_DEFINED and UNUSED pieces (the library's "pieces_"), and the others.
  std::unique_ptr<PieceTrie> trie_;
  absl::flat_hash_map<absl::string_view, int> normal_ids_;
  absl::flat_hash_map<absl::string_view, int> reserved_ids_;
  std::unique_ptr<PieceTrie> user_defined_;  // BPE's frozen symbols; null when none
  int unk_id_ = -1;
  int bos_id_ = -1;
  int eos_id_ = -1;
  bool byte_fallback_ = false;
  std::array<int32_t, 256> byte_ids_{};
  float min_score_ = 0.0f;
  float max_score_ = 0.0f;
  bool split_words_ = false;
  std::string space_symbol_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_SENTENCEPIECE_ENCODER_H_
