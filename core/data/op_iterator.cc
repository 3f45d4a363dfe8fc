#include "core/data/op_iterator.h"

#include <atomic>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "core/util/status_context.h"
#include "core/util/status_macros.h"

namespace sluice {

std::string OpLabel(int position, absl::string_view op_name) {
  if (position == 0) return absl::StrCat("source (", op_name, ")");
  return absl::StrCat("op ", position, " (", op_name, ")");
}

std::string TfShapeString(const Shape& shape) {
  std::string out = "[";
  for (int i = 0; i < shape.rank(); ++i) {
    if (i > 0) out += ",";
    if (shape.dim(i) == kUnknownDim) {
      out += "?";
    } else {
      absl::StrAppend(&out, shape.dim(i));
    }
  }
  out += "]";
  return out;
}

namespace {
constexpr absl::string_view kElementErrorPayload = "type.sluice.dev/element_error";
}  // namespace

absl::Status MarkElementError(absl::Status status) {
  if (!status.ok()) status.SetPayload(kElementErrorPayload, absl::Cord("1"));
  return status;
}

bool IsElementError(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kElementErrorPayload).has_value();
}

namespace {

// Skip's default: `count` elements pulled by `next(&element, end_of_sequence)` and dropped.
template <typename NextFn>
absl::Status DropPulled(int64_t count, int64_t* skipped, bool* end_of_sequence,
                        const NextFn& next) {
  *skipped = 0;
  for (; *skipped < count; ++*skipped) {
    Element ignored;
    absl::Status s = next(&ignored, end_of_sequence);
    if (!s.ok() || *end_of_sequence) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status OpIterator::CheckCancelled() {
  if (cancellation_ == nullptr || !cancellation_->cancelled()) return absl::OkStatus();
  if (status_.ok()) status_ = cancellation_->Check(label_);
  return status_;
}

template <typename PullFn>
absl::Status OpIterator::StickyCall(bool* end_of_sequence, const PullFn& pull) {
  if (!status_.ok()) return status_;
  if (ended_) {
    *end_of_sequence = true;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckCancelled());
  *end_of_sequence = false;
  absl::Status s;
  if (cancellation_ != nullptr) {
    const ScopedCancellationContext context(cancellation_);  // for iterators built meanwhile
    s = pull();
  } else {
    s = pull();
  }
  if (!s.ok()) {
    if (!IsElementError(s)) status_ = s;
    return s;
  }
  if (*end_of_sequence) ended_ = true;
  return s;
}

absl::Status OpIterator::GetNext(Element* out, bool* end_of_sequence) {
  return StickyCall(end_of_sequence,
                    [&] { return GetNextInternal(out, end_of_sequence); });
}

bool OpIterator::Rewind() {
  if (!status_.ok() || !RewindInternal()) return false;
  ended_ = false;
  return true;
}

absl::Status OpIterator::GetNextBlock(int64_t max_elements, Element* out, int64_t* n,
                                      bool* end_of_sequence) {
  *n = 0;
  absl::Status s = StickyCall(end_of_sequence, [&] {
    return GetNextBlockInternal(max_elements, out, n, end_of_sequence);
  });
  if (!s.ok() || *end_of_sequence) *n = 0;
  return s;
}

absl::Status OpIterator::Skip(int64_t count, int64_t* skipped, bool* end_of_sequence) {
  *skipped = 0;
  return StickyCall(end_of_sequence,
                    [&] { return SkipInternal(count, skipped, end_of_sequence); });
}

absl::Status OpIterator::SkipInternal(int64_t count, int64_t* skipped, bool* end_of_sequence) {
  return DropPulled(count, skipped, end_of_sequence,
                    [this](Element* e, bool* end) { return GetNextInternal(e, end); });
}

absl::Status OpIterator::GetNextBlockInternal(int64_t, Element*, int64_t*, bool*) {
  return OpError(absl::StatusCode::kUnimplemented, "this op has no bulk path");
}

absl::Status Iterator::GetNextBlock(int64_t, Element*, int64_t*, bool*) {
  return absl::UnimplementedError("this iterator has no bulk path");
}

absl::Status Iterator::Skip(int64_t count, int64_t* skipped, bool* end_of_sequence) {
  *end_of_sequence = false;
  return DropPulled(count, skipped, end_of_sequence,
                    [this](Element* e, bool* end) { return GetNext(e, end); });
}

namespace {
std::atomic<bool> bulk_paths_enabled{true};
}  // namespace

bool BulkPathsEnabled() { return bulk_paths_enabled.load(std::memory_order_relaxed); }
void SetBulkPathsEnabled(bool enabled) {
  bulk_paths_enabled.store(enabled, std::memory_order_relaxed);
}

absl::Status OpIterator::OpError(absl::StatusCode code, absl::string_view message) const {
  return absl::Status(code, absl::StrCat(label_, ": ", message));
}

absl::Status OpIterator::OpError(const absl::Status& status) const {
  return WithContext(label_, status);
}

absl::Status OpIterator::OpError(absl::string_view context, const absl::Status& status) const {
  return WithContext(absl::StrCat(label_, ": ", context), status);
}

}  // namespace sluice
