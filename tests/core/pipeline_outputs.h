// Pipeline outputs as text, for tests that compare two pipelines' runs output by output:
// every batch's bytes, every element error and the terminal error, in order.
#ifndef SLUICE_TESTS_CORE_PIPELINE_OUTPUTS_H_
#define SLUICE_TESTS_CORE_PIPELINE_OUTPUTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/data/executor.h"
#include "core/data/iterator.h"
#include "core/data/op_iterator.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"

namespace sluice {
namespace pipeline_test {

// One output as text: each leaf's dtype, shape and every value's bytes, or the error.
inline std::string Describe(const absl::Status& s, const Element& e) {
  if (!s.ok()) return absl::StrCat("error ", s.ToString());
  std::string out;
  for (const Tensor& t : e.Flatten()) {
    absl::StrAppend(&out, DTypeName(t.dtype()), t.shape().ToString(), ":");
    if (t.dtype() == DType::kString) {
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        absl::StrAppend(&out, absl::CHexEscape(t.string_at(i)), ",");
      }
    } else {
      absl::StrAppend(&out, absl::BytesToHexString(absl::string_view(
                                static_cast<const char*>(t.raw_data()), t.byte_size())));
    }
    absl::StrAppend(&out, ";");
  }
  return out;
}

struct Outputs {
  std::vector<std::string> outputs;  // Describe() of each output, then "end" or the last error
  std::vector<Element> held;         // the batches, when held
};

// Drains `expression` (bounded: at most `limit` outputs; iteration goes on after element
// errors). With `hold`, keeps every batch and describes them only at the end, after all later
// batches were built: a batch written again after it was handed out would differ then.
inline Outputs Drain(const std::string& expression, bool hold, int limit = 100000) {
  Outputs run;
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  EXPECT_TRUE(ds.ok()) << ds.status();
  if (!ds.ok()) return run;
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
  EXPECT_TRUE(it.ok()) << it.status();
  if (!it.ok()) return run;
  std::vector<absl::Status> statuses;
  for (int i = 0; i < limit; ++i) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (s.ok() && end) break;
    statuses.push_back(s);
    run.held.push_back(e);
    if (!hold) run.outputs.push_back(Describe(s, e));
    if (!s.ok() && !IsElementError(s)) break;  // the input's terminal error
  }
  if (hold) {
    for (size_t i = 0; i < statuses.size(); ++i) {
      run.outputs.push_back(Describe(statuses[i], run.held[i]));
    }
  } else {
    run.held.clear();
  }
  return run;
}

}  // namespace pipeline_test
}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_PIPELINE_OUTPUTS_H_
