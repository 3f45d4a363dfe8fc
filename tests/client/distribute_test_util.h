// Helpers for the distribution tests: run a DistributedDataset to the end and look at the
// per-replica values as plain vectors.
#ifndef SLUICE_TESTS_CLIENT_DISTRIBUTE_TEST_UTIL_H_
#define SLUICE_TESTS_CLIENT_DISTRIBUTE_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sluice/dataset.h"
#include "gtest/gtest.h"
#include "sluice/distributed_dataset.h"

namespace sluice::testing {

inline Dataset ParseOrDie(const std::string& expression) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  EXPECT_TRUE(ds.ok()) << expression << ": " << ds.status();
  return ds.ok() ? *ds : Dataset::Range(0);
}

// Same structure and the same PerReplicaSpec at every leaf.
inline bool SpecEquals(const DistributedElementSpec& a, const DistributedElementSpec& b) {
  return a.SameStructure(b) && a.Flatten() == b.Flatten();
}

// The int64 values of a tensor, row-major.
inline std::vector<int64_t> Int64Values(const Tensor& t) {
  if (t.dtype() != DType::kInt64) {
    ADD_FAILURE() << "expected an int64 tensor, got " << DTypeName(t.dtype());
    return {};
  }
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
}

// steps[s][r]: the values of replica r at step s (the first leaf of each element).
using Int64Steps = std::vector<std::vector<std::vector<int64_t>>>;

// Iterates to the end (at most max_steps steps); fails the test on an error.
inline Int64Steps RunInt64(const DistributedDataset& dist, int max_steps = 100000) {
  Int64Steps out;
  absl::StatusOr<DistributedIterator> it = dist.MakeIterator();
  EXPECT_TRUE(it.ok()) << it.status();
  if (!it.ok()) return out;
  for (int s = 0; s < max_steps; ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (!x.ok()) {
      EXPECT_TRUE(absl::IsOutOfRange(x.status())) << x.status();
      break;
    }
    std::vector<std::vector<int64_t>> step;
    for (const Element& e : x->values()) step.push_back(Int64Values(e.Flatten()[0]));
    out.push_back(std::move(step));
  }
  return out;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_CLIENT_DISTRIBUTE_TEST_UTIL_H_
