#include "core/data/ops/sentencepiece_encoder.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/ops/sentencepiece_utf8.h"
#include "core/util/status_macros.h"

namespace sluice {

using PieceType = SentencePieceModelProto::PieceType;

namespace {

// The library's penalty below the lowest piece score for an unknown character.
constexpr float kUnknownPenalty = 10.0f;
// Per-thread word caches kept for encoders other than the latest ones used.
constexpr size_t kMaxCachesPerThread = 4;
// Models with a score of larger magnitude (or NaN) are not cached: a path's float score then
// stays far from overflow (text of at most 2^31 pieces).
constexpr float kMaxCacheableScore = 1e6f;
// Longer words are not cached.
constexpr size_t kMaxCachedWordBytes = 256;
// Scratch space a thread keeps after a text (a longer text's is freed after it).
constexpr size_t kKeptScratchBytes = 1 << 20;

// The best path ending at a position of the text: its last piece and total score. The float
// instantiation is the library's search; the double one measures decision margins.
template <typename Score>
struct BestPathEnd {
  int id = -1;
  Score score = 0;
  int start = -1;
};

// Observes the search's comparisons (the double search records margins; the float one not).
struct NoMargins {
  void Compared(double, double) {}
  void Reached(double) {}
};
struct Margins {
  double min_gap = std::numeric_limits<double>::infinity();
  double max_magnitude = 0.0;
  void Compared(double candidate, double incumbent) {
    min_gap = std::min(min_gap, std::fabs(candidate - incumbent));
  }
  void Reached(double value) { max_magnitude = std::max(max_magnitude, std::fabs(value)); }
};

std::string BytePiece(int byte) {
  char text[8];
  std::snprintf(text, sizeof(text), "<0x%02X>", byte);
  return text;
}

}  // namespace

struct SentencePieceEncoder::Scratch {
  struct PathPiece {
    int id;
    uint32_t begin, end;
    double score;
  };
  struct Symbol {
    int prev, next;
    bool frozen;
    uint32_t begin, length;
  };
  struct MergeCandidate {
    float score;
    int left, right;
    size_t length;
  };
  std::string normalized;
  std::vector<BestPathEnd<float>> best_float;
  std::vector<BestPathEnd<double>> best_double;
  std::vector<PathPiece> path;
  std::vector<Symbol> symbols;
  std::vector<MergeCandidate> merges;
};

SentencePieceEncoder::Scratch& SentencePieceEncoder::ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

absl::StatusOr<std::unique_ptr<SentencePieceEncoder>> SentencePieceEncoder::Create(
    const SentencePieceModelProto& proto, SentencePieceEncoderOptions options) {
  using ModelType = SentencePieceModelProto::ModelType;
  if (proto.model_type != ModelType::kUnigram && proto.model_type != ModelType::kBpe) {
    return absl::UnimplementedError(absl::StrCat(
        "Sluice's encoder handles unigram and BPE models; this is a ",
        proto.model_type == ModelType::kWord ? "word" : "char", " model"));
  }
  std::unique_ptr<SentencePieceEncoder> e(new SentencePieceEncoder());
  static std::atomic<uint64_t> next_serial{1};
  e->serial_ = next_serial.fetch_add(1);
  e->options_ = options;
  e->bpe_ = proto.model_type == ModelType::kBpe;
  RETURN_IF_ERROR(e->Init(proto));
  return e;
}

absl::Status SentencePieceEncoder::Init(const SentencePieceModelProto& proto) {
  if (proto.pieces.empty()) return absl::InvalidArgumentError("the model has no pieces");
  byte_fallback_ = proto.byte_fallback;
  absl::flat_hash_map<std::string, int> byte_of_piece;
  for (int b = 0; b < 256; ++b) byte_of_piece.emplace(BytePiece(b), b);
  std::vector<bool> byte_found(256, false);
  min_score_ = std::numeric_limits<float>::max();
  max_score_ = std::numeric_limits<float>::min();  // as the library: the least positive float
  for (const SentencePieceModelProto::Piece& p : proto.pieces) {
    pieces_.push_back(p.piece);
    scores_.push_back(p.score);
    types_.push_back(p.type);
  }
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const int id = static_cast<int>(i);
    const std::string& piece = pieces_[i];
    const PieceType type = types_[i];
    const auto where = [&] { return absl::StrCat("piece ", id, " '", piece, "'"); };
    if (piece.empty()) return absl::InvalidArgumentError(absl::StrCat("piece ", id, " is empty"));
    const bool normal =
        type == PieceType::kNormal || type == PieceType::kUserDefined || type == PieceType::kUnused;
    if (!(normal ? normal_ids_ : reserved_ids_).emplace(piece, id).second) {
      return absl::InvalidArgumentError(absl::StrCat(where(), " is defined twice"));
    }
    if (type == PieceType::kNormal) {
      min_score_ = std::min(min_score_, scores_[i]);
      max_score_ = std::max(max_score_, scores_[i]);
    }
    if (type == PieceType::kUnused && bpe_) {
      return absl::UnimplementedError(absl::StrCat(
          "Sluice's encoder does not handle BPE models with unused pieces (", where(), ")"));
    }
    if (type == PieceType::kUnknown) {
      if (unk_id_ >= 0) return absl::InvalidArgumentError(absl::StrCat(where(), ": a second <unk>"));
      unk_id_ = id;
    }
    if (type == PieceType::kByte) {
      if (!byte_fallback_) {
        return absl::InvalidArgumentError(
            absl::StrCat("byte ", where(), " in a model without byte_fallback"));
      }
      auto it = byte_of_piece.find(piece);
      if (it == byte_of_piece.end()) {
        return absl::InvalidArgumentError(absl::StrCat("byte ", where(), " is not <0xXX>"));
      }
      byte_found[static_cast<size_t>(it->second)] = true;
      byte_ids_[static_cast<size_t>(it->second)] = id;
    }
  }
  if (unk_id_ < 0) return absl::InvalidArgumentError("the model has no <unk> (UNKNOWN) piece");
  if (byte_fallback_ && std::find(byte_found.begin(), byte_found.end(), false) != byte_found.end()) {
    return absl::InvalidArgumentError("byte_fallback is set but not all 256 byte pieces exist");
  }
  if (!bpe_ && normal_ids_.empty()) {
    return absl::InvalidArgumentError("the model has no normal or user-defined pieces");
  }
  ASSIGN_OR_RETURN(normalizer_, SentencePieceNormalizer::Create(proto));
  space_symbol_ = std::string(normalizer_->space_symbol());
  std::vector<std::pair<std::string, int>> trie_keys;
  std::vector<std::pair<std::string, int>> user_defined;
  split_words_ = options_.word_cache && !proto.treat_whitespace_as_suffix;
  // The cache's reuse rule bounds float rounding, not overflow or NaN: with scores this
  // large (real models' lie in [-50, 0]) or not finite, every text is searched whole.
  for (float score : scores_) {
    if (!(std::fabs(score) <= kMaxCacheableScore)) split_words_ = false;
  }
  for (const auto& [piece, id] : normal_ids_) {
    trie_keys.emplace_back(std::string(piece), id);
    if (types_[static_cast<size_t>(id)] == PieceType::kUserDefined) {
      user_defined.emplace_back(std::string(piece), id);
    }
    // A piece with the whitespace symbol past its start could span two words.
    if (piece.find(space_symbol_, 1) != absl::string_view::npos || !IsValidUtf8(piece)) {
      split_words_ = false;
    }
  }
  trie_ = std::make_unique<PieceTrie>(std::move(trie_keys));
  if (!user_defined.empty()) user_defined_ = std::make_unique<PieceTrie>(std::move(user_defined));
  const auto control_id = [&](const std::string& piece) {
    const int id = PieceToId(piece);
    return types_[static_cast<size_t>(id)] == PieceType::kControl ? id : -1;
  };
  bos_id_ = control_id(proto.bos_piece);
  eos_id_ = control_id(proto.eos_piece);
  return absl::OkStatus();
}

int SentencePieceEncoder::PieceToId(absl::string_view piece) const {
  if (auto it = reserved_ids_.find(piece); it != reserved_ids_.end()) return it->second;
  if (auto it = normal_ids_.find(piece); it != normal_ids_.end()) return it->second;
  return unk_id_;
}

SentencePieceWordCache& SentencePieceEncoder::ThreadCache() const {
  thread_local std::vector<std::pair<uint64_t, std::unique_ptr<SentencePieceWordCache>>> caches;
  for (auto& [serial, cache] : caches) {
    if (serial == serial_) return *cache;
  }
  if (caches.size() >= kMaxCachesPerThread) caches.erase(caches.begin());
  caches.emplace_back(serial_, std::make_unique<SentencePieceWordCache>(options_.word_cache_bytes));
  return *caches.back().second;
}

double SentencePieceEncoder::PieceScore(int id, size_t length) const {
  if (id == unk_id_) return static_cast<double>(min_score_ - kUnknownPenalty);
  // The library's `length * max_score_ - 0.1`: a float product, then a double difference.
  if (types_[static_cast<size_t>(id)] == PieceType::kUserDefined) {
    return static_cast<float>(length) * max_score_ - 0.1;
  }
  return static_cast<double>(scores_[static_cast<size_t>(id)]);
}

// The unigram search of libsentencepiece's EncodeOptimized: for each character start, every
// piece starting there updates the best path ending where it ends; a character no piece of its
// own length covers is an unknown piece. With Score = float it is the library's arithmetic
// (a candidate is a double sum, kept as a float; an unknown's is a float sum).
class UnigramSearch {
 public:
  template <typename Score, typename Observer>
  static Score Run(const SentencePieceEncoder& e, absl::string_view text, Score start,
                   std::vector<BestPathEnd<Score>>& best, Observer& observer,
                   std::vector<SentencePieceEncoder::Scratch::PathPiece>& path) {
    const size_t size = text.size();
    best.assign(size + 1, BestPathEnd<Score>());
    best[0].score = start;
    const float unknown_score = e.min_score_ - kUnknownPenalty;
    for (size_t at = 0; at < size;) {
      const Score till_here = best[at].score;
      const size_t char_length = std::min(SentencePieceCharLength(text[at]), size - at);
      bool has_single_char_piece = false;
      e.trie_->ForEachPrefix(text.substr(at), [&](size_t length, int id) {
        const PieceType type = e.types_[static_cast<size_t>(id)];
        if (type == PieceType::kUnused) return;
        const double candidate = e.PieceScore(id, length) + static_cast<double>(till_here);
        Offer(best[at + length], candidate, id, at, observer);
        if (length == char_length) has_single_char_piece = true;
      });
      if (!has_single_char_piece) {
        const Score candidate = static_cast<Score>(unknown_score) + till_here;
        Offer(best[at + char_length], candidate, e.unk_id_, at, observer);
      }
      at += char_length;
    }
    path.clear();
    for (size_t end = size; end > 0;) {
      const BestPathEnd<Score>& node = best[end];
      if (node.start < 0 || static_cast<size_t>(node.start) >= end) break;  // cannot happen
      const size_t begin = static_cast<size_t>(node.start);
      path.push_back({node.id, static_cast<uint32_t>(begin), static_cast<uint32_t>(end),
                      e.PieceScore(node.id, end - begin)});
      end = begin;
    }
    std::reverse(path.begin(), path.end());
    return best[size].score;
  }

 private:
  template <typename Score, typename Candidate, typename Observer>
  static void Offer(BestPathEnd<Score>& target, Candidate candidate, int id, size_t start,
                    Observer& observer) {
    observer.Reached(static_cast<double>(candidate));
    if (target.start != -1) {
      observer.Compared(static_cast<double>(candidate), static_cast<double>(target.score));
      if (!(candidate > target.score)) return;
    }
    target.score = static_cast<Score>(candidate);
    target.start = static_cast<int>(start);
    target.id = id;
  }
};

void SentencePieceEncoder::Encode(absl::string_view text, std::vector<int32_t>* ids) const {
  Scratch& scratch = ThreadScratch();
  const bool valid_utf8 = normalizer_->Normalize(text, &scratch.normalized);
  const size_t first = ids->size();
  EncodeNormalized(scratch.normalized, scratch, split_words_ && valid_utf8, ids);
  if (scratch.normalized.capacity() > kKeptScratchBytes) scratch = Scratch();
  if (!byte_fallback_) {
    // As the library, a run of unknown pieces is one <unk> (byte_fallback spells them out).
    const auto runs = std::unique(ids->begin() + static_cast<std::ptrdiff_t>(first), ids->end(),
                                  [&](int32_t a, int32_t b) { return a == unk_id_ && b == unk_id_; });
    ids->erase(runs, ids->end());
  }
}

void SentencePieceEncoder::EncodeNormalized(absl::string_view text, Scratch& scratch, bool split,
                                            std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  NoMargins exact;
  if (!split) {
    if (bpe_) {
      BpeSegment(text, scratch);
    } else {
      UnigramSearch::Run<float>(*this, text, 0.0f, scratch.best_float, exact, scratch.path);
    }
    AppendPathIds(text, scratch, ids);
    return;
  }
  SentencePieceWordCache& cache = ThreadCache();
  float path_score = 0.0f;  // unigram: the library's float score of the best path so far
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find(space_symbol_, begin + 1);
    if (end == absl::string_view::npos) end = text.size();
    const absl::string_view word = text.substr(begin, end - begin);
    begin = end;
    // Long words (rarely seen twice) are segmented in place, not cached.
    const WordSegmentation* s = word.size() <= kMaxCachedWordBytes ? cache.Find(word) : nullptr;
    if (s == nullptr && word.size() <= kMaxCachedWordBytes) {
      if (bpe_) {
        WordSegmentation fresh;
        BpeSegment(word, scratch);
        AppendPathIds(word, scratch, &fresh.ids);
        s = &cache.Insert(word, std::move(fresh));
      } else {
        s = &cache.Insert(word, UnigramAnalyze(word, scratch));
      }
    }
    if (s != nullptr && (bpe_ || ReusableAt(*s, word.size(), path_score))) {
      ids->insert(ids->end(), s->ids.begin(), s->ids.end());
      for (double piece_score : s->path_scores) {
        path_score = static_cast<float>(piece_score + static_cast<double>(path_score));
      }
    } else if (bpe_) {
      BpeSegment(word, scratch);
      AppendPathIds(word, scratch, ids);
    } else {
      path_score = UnigramSearch::Run<float>(*this, word, path_score, scratch.best_float, exact,
                                             scratch.path);
      AppendPathIds(word, scratch, ids);
    }
  }
}

WordSegmentation SentencePieceEncoder::UnigramAnalyze(absl::string_view text,
                                                      Scratch& scratch) const {
  Margins margins;
  UnigramSearch::Run<double>(*this, text, 0.0, scratch.best_double, margins, scratch.path);
  WordSegmentation s;
  AppendPathIds(text, scratch, &s.ids);
  s.path_scores.reserve(scratch.path.size());
  for (const Scratch::PathPiece& p : scratch.path) s.path_scores.push_back(p.score);
  s.min_gap = margins.min_gap;
  s.max_magnitude = margins.max_magnitude;
  return s;
}

bool SentencePieceEncoder::ReusableAt(const WordSegmentation& s, size_t word_bytes,
                                      float start) {
  if (s.min_gap == std::numeric_limits<double>::infinity()) return true;
  // Every stored path score is a float rounding of a sum of magnitude at most `magnitude`
  // (error at most magnitude * 2^-24 each); a comparison's two sides each carry the errors of
  // a chain of at most word_bytes pieces plus their own rounding. Twice that, for margin.
  const double magnitude = std::fabs(static_cast<double>(start)) + s.max_magnitude + 1.0;
  const double error_bound = (2.0 * static_cast<double>(word_bytes) + 4.0) * magnitude * 0x1p-23;
  return s.min_gap > error_bound;
}

void SentencePieceEncoder::BpeSegment(absl::string_view text, Scratch& scratch) const {
  using Symbol = Scratch::Symbol;
  using MergeCandidate = Scratch::MergeCandidate;
  std::vector<Symbol>& symbols = scratch.symbols;
  std::vector<MergeCandidate>& merges = scratch.merges;
  symbols.clear();
  merges.clear();
  scratch.path.clear();
  for (size_t at = 0; at < text.size();) {
    size_t length = 0;
    if (user_defined_ != nullptr) {
      user_defined_->ForEachPrefix(text.substr(at), [&](size_t l, int) { length = l; });
    }
    const bool frozen = length > 0;
    if (!frozen) length = std::min(SentencePieceCharLength(text[at]), text.size() - at);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, at + length < text.size() ? index + 1 : -1, frozen,
                       static_cast<uint32_t>(at), static_cast<uint32_t>(length)});
    at += length;
  }
  // The library's agenda: highest score first, the leftmost pair on ties.
  const auto lower = [](const MergeCandidate& a, const MergeCandidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  const auto consider = [&](int left, int right) {
    if (left < 0 || right < 0 || symbols[left].frozen || symbols[right].frozen) return;
    const size_t length = symbols[left].length + symbols[right].length;
    const auto it = normal_ids_.find(text.substr(symbols[left].begin, length));
    if (it == normal_ids_.end()) return;
    merges.push_back({scores_[static_cast<size_t>(it->second)], left, right, length});
    std::push_heap(merges.begin(), merges.end(), lower);
  };
  for (size_t i = 1; i < symbols.size(); ++i) consider(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!merges.empty()) {
    std::pop_heap(merges.begin(), merges.end(), lower);
    const MergeCandidate top = merges.back();
    merges.pop_back();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    // Stale: a side was merged away or grew since the pair was queued.
    if (left.length == 0 || right.length == 0 || left.length + right.length != top.length) {
      continue;
    }
    left.length += right.length;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    right.length = 0;
    consider(left.prev, top.left);
    consider(top.left, left.next);
  }
  for (int index = symbols.empty() ? -1 : 0; index != -1; index = symbols[index].next) {
    const Symbol& s = symbols[index];
    const absl::string_view piece = text.substr(s.begin, s.length);
    scratch.path.push_back({PieceToId(piece), s.begin, s.begin + s.length, 0.0});
  }
}

void SentencePieceEncoder::AppendPathIds(absl::string_view text, const Scratch& scratch,
                                         std::vector<int32_t>* ids) const {
  for (const Scratch::PathPiece& p : scratch.path) {
    if (byte_fallback_ && types_[static_cast<size_t>(p.id)] == PieceType::kUnknown) {
      for (uint32_t i = p.begin; i < p.end; ++i) {
        ids->push_back(byte_ids_[static_cast<uint8_t>(text[i])]);
      }
    } else {
      ids->push_back(p.id);
    }
  }
}

}  // namespace sluice
