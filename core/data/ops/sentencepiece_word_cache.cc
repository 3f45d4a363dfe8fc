#include "core/data/ops/sentencepiece_word_cache.h"

#include <utility>

namespace sluice {

size_t SentencePieceWordCache::EntryBytes(absl::string_view word, const WordSegmentation& s) {
  constexpr size_t kOverhead = sizeof(Slot) + 32;  // the slot and its index entry
  return kOverhead + word.size() + s.ids.size() * sizeof(int32_t) +
         s.path_scores.size() * sizeof(double);
}

const WordSegmentation* SentencePieceWordCache::Find(absl::string_view word) {
  auto it = index_.find(word);
  if (it == index_.end()) return nullptr;
  it->second->referenced = true;
  return &it->second->segmentation;
}

size_t SentencePieceWordCache::MakeRoom(size_t incoming) {
  // Each full turn of the hand clears every reference bit, so two turns free a slot if any
  // is used: the loop ends.
  while (bytes_ + incoming > max_bytes_ && !index_.empty()) {
    if (hand_ >= slots_.size()) hand_ = 0;
    Slot& slot = slots_[hand_];
    if (slot.used && slot.referenced) {
      slot.referenced = false;
    } else if (slot.used) {
      index_.erase(slot.word);
      bytes_ -= slot.bytes;
      slot.used = false;
      slot.word = std::string();
      slot.segmentation = WordSegmentation();
      free_slots_.push_back(hand_);
    }
    ++hand_;
  }
  if (free_slots_.empty()) return slots_.size();
  const size_t free = free_slots_.back();
  free_slots_.pop_back();
  return free;
}

const WordSegmentation& SentencePieceWordCache::Insert(absl::string_view word,
                                                       WordSegmentation segmentation) {
  const size_t entry_bytes = EntryBytes(word, segmentation);
  const size_t index = MakeRoom(entry_bytes);
  if (index == slots_.size()) slots_.emplace_back();
  Slot& slot = slots_[index];
  slot.word = std::string(word);
  slot.segmentation = std::move(segmentation);
  slot.bytes = entry_bytes;
  slot.referenced = false;
  slot.used = true;
  bytes_ += entry_bytes;
  index_.emplace(absl::string_view(slot.word), &slot);
  return slot.segmentation;
}

}  // namespace sluice
