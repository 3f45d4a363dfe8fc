// Building blocks shared by the executor's iterators (core/data/executor.h): a base class giving
// every op iterator the Iterator contract's sticky errors and end of sequence, a factory type
// for ops that re-create their input (repeat), and TF-style formatting helpers for messages.
#ifndef SLUICE_CORE_OP_ITERATOR_H_
#define SLUICE_CORE_OP_ITERATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/data/cancellation.h"
#include "core/data/iterator.h"
#include "sluice/shape.h"

namespace sluice {

// Makes a fresh iterator over one op's output, from the beginning. Must be callable many times
// (repeat() calls it once per epoch) and from any thread that owns the resulting iterator.
using IteratorFactory = std::function<std::unique_ptr<Iterator>()>;

// How errors name an op, as core/data/spec_inference.h's DescribePosition does: position 0 is the
// source, "source (range)"; op i >= 1 (def.ops(i - 1)) is "op 2 (batch)".
std::string OpLabel(int position, absl::string_view op_name);

// TF's TensorShape::DebugString: "[]", "[2]", "[2,3]" (unknown dims print as "?").
std::string TfShapeString(const Shape& shape);

// An error that spoils only the current element: the iterator that returned it (and every op
// downstream that passed it on) can go on to the next element, as TF's map does after its
// function fails. ignore_errors() skips such elements; any other error ends the sequence.
// MarkElementError adds a payload to `status` (an OK status stays OK).
absl::Status MarkElementError(absl::Status status);
bool IsElementError(const absl::Status& status);

// The backstop behind the allocator that can refuse (sluice/tensor.h), for pipeline work run on
// a thread of its own or of a pool, where an escaping exception would end the process: runs
// `f` (returning absl::Status or absl::StatusOr<T>) and turns std::bad_alloc (an allocation
// outside the memory budget's checks failing) into RESOURCE_EXHAUSTED naming `label`, so the
// pipeline fails and the process keeps serving.
template <typename F>
auto CatchingBadAlloc(absl::string_view label, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        label, ": out of memory (std::bad_alloc) outside the memory budget's checks "
               "(--memory_limit, --max_element_bytes)"));
  }
}

// An iterator for one op. Subclasses implement GetNextInternal; GetNext makes an error or the
// end of sequence sticky, as the Iterator contract requires, except an element error
// (IsElementError), which is returned once and iteration may continue. Not thread-safe.
class OpIterator : public Iterator {
 public:
  // `label` names the op in errors this iterator raises (OpLabel()). The iterator takes the
  // thread's CurrentCancellation() (core/data/cancellation.h): the pipeline's token while the
  // executor builds it, or while an op of it pulls.
  explicit OpIterator(std::string label)
      : label_(std::move(label)), cancellation_(CurrentCancellation()) {}

  absl::Status GetNext(Element* out, bool* end_of_sequence) final;
  // As GetNext: errors and the end are sticky, an element error is returned once.
  absl::Status GetNextBlock(int64_t max_elements, Element* out, int64_t* n,
                            bool* end_of_sequence) final;

  // As GetNext: errors and the end are sticky, an element error is returned once.
  absl::Status Skip(int64_t count, int64_t* skipped, bool* end_of_sequence) final;

  // Iterator::Rewind: false after an error; else RewindInternal(), and the end of sequence
  // is no longer sticky when it says true.
  bool Rewind() final;

  const std::string& label() const { return label_; }

  // The pipeline's token (core/data/cancellation.h; taken at construction): once it is
  // cancelled, GetNext and GetNextBlock return CANCELLED naming the op (sticky) before calling
  // into the op, so an op that loops over its input stops within one pull. For ops with
  // threads or waits of their own (OnCancel); null when the pipeline has none.
  CancellationToken* cancellation() const { return cancellation_.get(); }

 protected:
  // Same contract as GetNext; called only while no error or end has been returned.
  virtual absl::Status GetNextInternal(Element* out, bool* end_of_sequence) = 0;
  // Same contract as GetNextBlock; called only while no error or end has been returned, and
  // only when SupportsBlocks(). The default is UNIMPLEMENTED.
  virtual absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                            bool* end_of_sequence);

  // Same contract as Skip; called only while no error or end has been returned. The default
  // calls GetNextInternal.
  virtual absl::Status SkipInternal(int64_t count, int64_t* skipped, bool* end_of_sequence);

  // Iterator::Rewind's contract for the op; called only while no error has been returned. The
  // default is false.
  virtual bool RewindInternal() { return false; }

  // `code` with "<label>: <message>".
  absl::Status OpError(absl::StatusCode code, absl::string_view message) const;
  // `status` (an error from below: its code and payloads kept, core/util/status_context.h)
  // with "<label>: " or "<label>: <context>: " before its message. OK stays OK.
  absl::Status OpError(const absl::Status& status) const;
  absl::Status OpError(absl::string_view context, const absl::Status& status) const;
  absl::Status InvalidArgument(absl::string_view message) const {
    return OpError(absl::StatusCode::kInvalidArgument, message);
  }

 private:
  // CANCELLED (sticky) when the token is cancelled, else OK.
  absl::Status CheckCancelled();
  // The sticky error and end around `pull()` (one of the *Internal calls), for GetNext,
  // GetNextBlock and Skip.
  template <typename PullFn>
  absl::Status StickyCall(bool* end_of_sequence, const PullFn& pull);

  const std::string label_;
  std::shared_ptr<CancellationToken> cancellation_;
  absl::Status status_;
  bool ended_ = false;
};

}  // namespace sluice

#endif  // SLUICE_CORE_OP_ITERATOR_H_
