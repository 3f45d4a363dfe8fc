#include "core/data/ops/permuted_source_iterator.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/index_permutation.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/random_access_source.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

class PermutedSourceIterator : public OpIterator {
 public:
  PermutedSourceIterator(std::string label, proto::PermutedSource source,
                         RecordIndexOptions index_options)
      : OpIterator(std::move(label)),
        source_(std::move(source)),
        index_options_(std::move(index_options)),
        next_(source_.begin()) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (inner_ == nullptr) {
      absl::Status s = Open();
      if (!s.ok()) return OpError(s);
    }
    if (next_ >= source_.end()) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    absl::StatusOr<Element> e = inner_->Get((*permutation_)(next_));
    if (IsElementError(e.status())) {  // a bad jsonl line: only this element is spoiled
      ++next_;
      return MarkElementError(OpError(e.status()));
    }
    if (!e.ok()) return OpError(e.status());
    ++next_;
    *out = *std::move(e);
    return absl::OkStatus();
  }

 private:
  absl::Status Open() {
    RETURN_IF_ERROR(ValidatePermutedSource(source_));
    ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessSource> inner,
                     RandomAccessSource::Open(source_.source(), index_options_));
    if (source_.end() > inner->size()) {
      return Invalid(absl::StrCat("end (", source_.end(), ") is past the source's ",
                                  inner->size(), " elements"));
    }
    ASSIGN_OR_RETURN(IndexPermutation p,
                     IndexPermutation::Create(inner->size(), source_.shuffle(), source_.seed(),
                                              source_.epoch(), source_.block_size()));
    permutation_.emplace(std::move(p));
    inner_ = std::move(inner);
    return absl::OkStatus();
  }

  const proto::PermutedSource source_;
  const RecordIndexOptions index_options_;
  std::unique_ptr<RandomAccessSource> inner_;
  std::optional<IndexPermutation> permutation_;
  int64_t next_;
};

}  // namespace

absl::Status ValidatePermutedSource(const proto::PermutedSource& source) {
  if (!source.has_source() || source.source().kind_case() == proto::SourceDef::KIND_NOT_SET) {
    return Invalid("source is not set");
  }
  absl::Status access = CheckRandomAccess(source.source());
  if (!access.ok()) return Invalid(absl::StrCat("source: ", access.message()));
  if (!proto::ShuffleMode_IsValid(source.shuffle())) {
    return Invalid(absl::StrCat("shuffle: unknown mode ", static_cast<int>(source.shuffle())));
  }
  if (source.shuffle() == proto::SHUFFLE_BLOCK && source.block_size() < 1) {
    return Invalid(absl::StrCat("block_size must be positive with SHUFFLE_BLOCK, got ",
                                source.block_size()));
  }
  if (source.block_size() < 0) {
    return Invalid(absl::StrCat("block_size must be >= 0, got ", source.block_size()));
  }
  if (source.epoch() < 0) {
    return Invalid(absl::StrCat("epoch must be >= 0, got ", source.epoch()));
  }
  if (source.begin() < 0) {
    return Invalid(absl::StrCat("begin must be >= 0, got ", source.begin()));
  }
  if (source.end() < source.begin()) {
    return Invalid(absl::StrCat("end (", source.end(), ") must be >= begin (", source.begin(),
                                ")"));
  }
  return absl::OkStatus();
}

std::unique_ptr<Iterator> NewPermutedSourceIterator(std::string label,
                                                    proto::PermutedSource source,
                                                    RecordIndexOptions index_options) {
  return std::make_unique<PermutedSourceIterator>(std::move(label), std::move(source),
                                                  std::move(index_options));
}

}  // namespace sluice
