#include "core/data/ops/ignore_errors_iterator.h"

#include <cstdio>
#include <utility>

#include "core/data/op_iterator.h"

namespace sluice {
namespace {

class IgnoreErrorsIterator : public OpIterator {
 public:
  IgnoreErrorsIterator(std::string label, std::unique_ptr<Iterator> input, bool log_warning,
                       std::shared_ptr<std::atomic<int64_t>> ignored)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        log_warning_(log_warning),
        ignored_(std::move(ignored)) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (true) {
      absl::Status s = input_->GetNext(out, end_of_sequence);
      if (s.ok()) return s;
      if (s.code() != absl::StatusCode::kDataLoss &&
          s.code() != absl::StatusCode::kInvalidArgument) {
        return s;
      }
      if (ignored_ != nullptr) ignored_->fetch_add(1);
      if (log_warning_) {
        std::fprintf(stderr, "sluice: %s: ignoring an error: %s\n", label().c_str(),
                     std::string(s.message()).c_str());
      }
      if (!IsElementError(s)) {  // the input cannot go on
        *end_of_sequence = true;
        return absl::OkStatus();
      }
    }
  }

 private:
  std::unique_ptr<Iterator> input_;
  const bool log_warning_;
  const std::shared_ptr<std::atomic<int64_t>> ignored_;
};

}  // namespace

std::unique_ptr<Iterator> NewIgnoreErrorsIterator(std::string label,
                                                  std::unique_ptr<Iterator> input,
                                                  bool log_warning,
                                                  std::shared_ptr<std::atomic<int64_t>> ignored) {
  return std::make_unique<IgnoreErrorsIterator>(std::move(label), std::move(input), log_warning,
                                                std::move(ignored));
}

}  // namespace sluice
