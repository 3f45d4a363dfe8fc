// StringBatchPool: the string tensors of a fused map-and-batch (batch_destinations.h) come back
// to it when the consumer and every view of them are done, and the next batch's rows are
// assigned into those strings. A string that already holds as many characters as the row
// written into it allocates nothing, so a batch of parsed records costs no malloc on the
// threads that parse and no free on the consumer's (measured at ~8% of the CPU of the TFRecord
// parse pipeline, mostly glibc arena locking between the parsing threads and the consumer).
//
// How memory is accounted: a tensor handed out is charged as Tensor::TryAllocate charges a
// string tensor (its string objects; the characters written into it are the writer's, as
// everywhere else). An idle vector stays charged for its objects and is also charged for the
// characters its strings keep allocated; one whose characters the budget refuses, or that holds
// more than kMaxIdleChars of them, is freed instead of kept. The pool holds no reference to a
// tensor it handed out, and a vector comes back only once the last tensor viewing it is gone,
// so nothing a consumer holds is ever written again (DESIGN.md invariant 9).
//
//   auto pool = StringBatchPool::Create(/*max_idle=*/2);
//   ASSIGN_OR_RETURN(Tensor rows, pool->Take(Shape({256}), "op 2 (batch)"));
//   rows.mutable_string(0)->assign(bytes);  // reuses the characters of a released batch
//
// Thread safety: Take and the return of vectors (from whichever thread drops the last tensor)
// may run concurrently; the pool may be destroyed while its tensors are still held elsewhere
// (their vectors are then freed when dropped).
#ifndef SLUICE_CORE_STRING_BATCH_POOL_H_
#define SLUICE_CORE_STRING_BATCH_POOL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "sluice/shape.h"
#include "sluice/tensor.h"

namespace sluice {

class StringBatchPool : public std::enable_shared_from_this<StringBatchPool> {
 public:
  // Idle characters kept per vector at most: a batch of huge strings is not kept for reuse.
  static constexpr int64_t kMaxIdleChars = int64_t{64} << 20;

  // Keeps at most `max_idle` released vectors (>= 0; 0 keeps none).
  static std::shared_ptr<StringBatchPool> Create(int64_t max_idle);
  ~StringBatchPool();

  // A string tensor of `shape` whose strings hold unspecified values (the caller assigns every
  // one): an idle vector of exactly that many strings when one is kept, else fresh empty
  // strings. RESOURCE_EXHAUSTED naming `what` as Tensor::TryAllocate's when the budget refuses
  // the strings' objects; INVALID_ARGUMENT for a shape not fully defined.
  absl::StatusOr<Tensor> Take(const Shape& shape, absl::string_view what);

  // Vectors handed out again (reused) and allocated afresh by this pool so far.
  int64_t reused() const;
  int64_t allocated() const;

 private:
  struct Idle {
    std::unique_ptr<std::vector<std::string>> strings;
    int64_t charged = 0;  // objects and kept characters, charged to the memory budget
  };
  explicit StringBatchPool(int64_t max_idle) : max_idle_(max_idle) {}
  // `strings` came back (its last tensor is gone), charged `objects` for its string objects.
  void GiveBack(std::unique_ptr<std::vector<std::string>> strings, int64_t objects);
  // A vector's deleter: gives it back to the pool while the pool lives, else frees it.
  static void Return(std::weak_ptr<StringBatchPool> pool, std::vector<std::string>* strings,
                     int64_t objects);

  const int64_t max_idle_;
  mutable absl::Mutex mu_;
  std::vector<Idle> idle_ ABSL_GUARDED_BY(mu_);
  int64_t reused_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice

#endif  // SLUICE_CORE_STRING_BATCH_POOL_H_
