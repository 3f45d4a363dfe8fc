#include "core/data/ops/list_files.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/distribute/auto_shard.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/shuffle_iterator.h"
#include "core/io/file_system.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

class NameListIterator : public OpIterator {
 public:
  NameListIterator(std::string label, std::vector<std::string> names)
      : OpIterator(std::move(label)), names_(std::move(names)) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (next_ >= names_.size()) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    *out = Element(Tensor::StringScalar(names_[next_++]));
    return absl::OkStatus();
  }

 private:
  const std::vector<std::string> names_;
  size_t next_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandFilePatterns(
    const proto::ListFilesSource& source) {
  std::vector<std::string> names;
  for (const std::string& pattern : source.patterns()) {
    ASSIGN_OR_RETURN(std::vector<std::string> matched, GlobFiles(pattern));
    names.insert(names.end(), matched.begin(), matched.end());
  }
  if (names.empty()) {
    std::vector<std::string> quoted;
    for (const std::string& p : source.patterns()) quoted.push_back(absl::StrCat("'", p, "'"));
    return absl::NotFoundError(
        absl::StrCat("No files matched pattern: ", absl::StrJoin(quoted, ", ")));
  }
  if (source.num_shards() > 0) {
    const int64_t n = static_cast<int64_t>(names.size());
    if (n < source.num_shards()) return TooFewFilesError(n, source.num_shards());
    std::vector<std::string> kept;
    for (int64_t i = source.shard_index(); i < n; i += source.num_shards()) {
      kept.push_back(std::move(names[i]));
    }
    names = std::move(kept);
  }
  return names;
}

absl::StatusOr<std::unique_ptr<Iterator>> NewListFilesIterator(
    std::string label, const proto::ListFilesSource& source, int64_t iteration) {
  if (source.patterns_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": no file pattern given"));
  }
  absl::StatusOr<std::vector<std::string>> names = ExpandFilePatterns(source);
  if (!names.ok()) {
    return absl::Status(names.status().code(),
                        absl::StrCat(label, ": ", names.status().message()));
  }
  if (source.shuffle()) {
    const uint64_t seed = source.has_seed()
                              ? static_cast<uint64_t>(source.seed())
                              : (static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                    std::random_device{}();
    std::mt19937_64 gen(ShuffleIterationSeed(seed, iteration));
    // Fisher-Yates with unbiased, portable draws, so the order depends only on the seed.
    for (size_t i = names->size(); i > 1; --i) {
      std::swap((*names)[i - 1], (*names)[UniformBelow(gen, i)]);
    }
  }
  return std::unique_ptr<Iterator>(new NameListIterator(std::move(label), *std::move(names)));
}

}  // namespace sluice
