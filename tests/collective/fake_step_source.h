// FakeStepSource: a StepSource of `num_steps` steps for collective tests. Step s holds, for
// replica r, the int64 vector [tag, s, r] (spec int64 [None]); `fetches` counts GetNextStep calls
// (end of data included); fail_at >= 0 makes that step an INTERNAL error.
#ifndef SLUICE_TESTS_COLLECTIVE_FAKE_STEP_SOURCE_H_
#define SLUICE_TESTS_COLLECTIVE_FAKE_STEP_SOURCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sluice/element.h"
#include "sluice/distributed_dataset.h"

namespace sluice {

inline ElementSpec FakePieceSpec() {
  return ElementSpec(TensorSpec{DType::kInt64, Shape({-1})});
}

class FakeStepSource : public StepSource {
 public:
  FakeStepSource(int64_t tag, int64_t num_steps, int64_t replicas, int64_t* fetches,
                 int64_t fail_at = -1)
      : tag_(tag), num_steps_(num_steps), replicas_(replicas), fetches_(fetches),
        fail_at_(fail_at) {}

  absl::Status GetNextStep(std::vector<Element>* out, bool* end_of_data) override {
    if (fetches_ != nullptr) ++*fetches_;
    if (next_ == fail_at_) return absl::InternalError(absl::StrCat("fake failure at ", next_));
    if (next_ >= num_steps_) {
      *end_of_data = true;
      return absl::OkStatus();
    }
    *end_of_data = false;
    out->clear();
    for (int64_t r = 0; r < replicas_; ++r) {
      out->push_back(Element(Tensor::FromVector<int64_t>({tag_, next_, r})));
    }
    ++next_;
    return absl::OkStatus();
  }

 private:
  int64_t tag_;
  int64_t num_steps_;
  int64_t replicas_;
  int64_t* fetches_;
  int64_t fail_at_;
  int64_t next_ = 0;
};

// "[t,s,r]" per replica, or "[]" for a size-0 dummy, joined by " ".
inline std::string DescribeStep(const std::vector<Element>& step) {
  std::string out;
  for (const Element& e : step) {
    if (!out.empty()) out += " ";
    const Tensor& t = e.leaf();
    out += "[";
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      out += absl::StrCat(i ? "," : "", t.data<int64_t>()[i]);
    }
    out += "]";
  }
  return out;
}

}  // namespace sluice

#endif  // SLUICE_TESTS_COLLECTIVE_FAKE_STEP_SOURCE_H_
