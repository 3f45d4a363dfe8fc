// A bounded cache of word → segmentation for one SentencePiece encoder on one thread: the ids
// a whitespace-delimited word encodes to, and for unigram models what is needed to reuse them
// exactly (sentencepiece_encoder.h says how). Eviction is CLOCK (second chance) over entries;
// the bound is on bytes (keys, ids, scores and a fixed overhead per entry).
//
//   SentencePieceWordCache cache(8 << 20);
//   if (const WordSegmentation* s = cache.Find(word)) use(*s);
//   else cache.Insert(word, Segment(word));
//
// Thread safety: none; one cache per thread (thread_local in the encoder).
#ifndef SLUICE_CORE_DATA_OPS_SENTENCEPIECE_WORD_CACHE_H_
#define SLUICE_CORE_DATA_OPS_SENTENCEPIECE_WORD_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace sluice {

struct WordSegmentation {
  // The word's ids (byte pieces already expanded).
  std::vector<int32_t> ids;
  // Unigram only: the score each piece of the best path adds (before byte expansion), the
  // smallest difference between two candidates the search compared, and the largest
  // magnitude of a path score it met, all computed from a start score of 0.
  std::vector<double> path_scores;
  double min_gap = std::numeric_limits<double>::infinity();
  double max_magnitude = 0.0;
};

class SentencePieceWordCache {
 public:
  // Holds at most about `max_bytes` of entries (at least one entry, however large).
  explicit SentencePieceWordCache(size_t max_bytes) : max_bytes_(max_bytes) {}
  SentencePieceWordCache(const SentencePieceWordCache&) = delete;
  SentencePieceWordCache& operator=(const SentencePieceWordCache&) = delete;

  // The segmentation of `word`, or null. The pointer is valid until the next Insert.
  const WordSegmentation* Find(absl::string_view word);

  // Stores `segmentation` for `word` (not already present), evicting as needed; returns it.
  const WordSegmentation& Insert(absl::string_view word, WordSegmentation segmentation);

  size_t bytes() const { return bytes_; }
  size_t size() const { return index_.size(); }

 private:
  struct Slot {
    std::string word;
    WordSegmentation segmentation;
    size_t bytes = 0;
    bool referenced = false;
    bool used = false;
  };

  static size_t EntryBytes(absl::string_view word, const WordSegmentation& s);
  // Frees slots by CLOCK until `incoming` more bytes fit (or nothing is left); returns a free
  // slot's index, or slots_.size() when a new slot is needed.
  size_t MakeRoom(size_t incoming);

  const size_t max_bytes_;
  size_t bytes_ = 0;
  size_t hand_ = 0;
  std::deque<Slot> slots_;  // a deque: keys of index_ point into slots' words, which never move
  std::vector<size_t> free_slots_;
  absl::flat_hash_map<absl::string_view, Slot*> index_;  // into slots_
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_SENTENCEPIECE_WORD_CACHE_H_
