// Helpers shared by the step-frame codec's tests (tests/worker/step_frame*_test.cc,
// tests/adversarial/compressed_frame_test.cc): a frame's bytes as one string and back, and a
// frame-by-frame comparison, a tensor's bytes as text. Header-only; gtest expectations.
#ifndef SLUICE_TESTS_WORKER_STEP_FRAME_TEST_UTIL_H_
#define SLUICE_TESTS_WORKER_STEP_FRAME_TEST_UTIL_H_

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rpc/step_frame.h"
#include "gtest/gtest.h"

namespace sluice {

inline std::vector<grpc::Slice> SlicesOf(const grpc::ByteBuffer& bb) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bb.Dump(&slices).ok());
  return slices;
}

// A tensor as text that holds every byte: dtype, shape and payload (numeric bytes, or each
// string with its length), so that two reads compare byte for byte.
inline std::string TensorBytesText(const Tensor& t) {
  std::string out = absl::StrCat(static_cast<int>(t.dtype()), ":", t.shape().ToString(), ":");
  if (t.dtype() == DType::kString) {
    for (int64_t e = 0; e < t.num_elements(); ++e) {
      absl::StrAppend(&out, t.string_at(e).size(), "=", t.string_at(e), ";");
    }
  } else {
    out.append(static_cast<const char*>(t.raw_data()), t.byte_size());
  }
  return out;
}

// The frame's bytes, all slices in order.
inline std::string Flatten(const grpc::ByteBuffer& bb) {
  std::string out;
  for (const grpc::Slice& s : SlicesOf(bb)) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// `bytes` in one slice.
inline grpc::ByteBuffer FromString(const std::string& bytes) {
  grpc::Slice s(bytes);
  return grpc::ByteBuffer(&s, 1);
}

// Every step's numbers and every tensor equal.
inline void ExpectSameFrame(const StepFrame& a, const StepFrame& b) {
  ASSERT_EQ(a.steps.size(), b.steps.size());
  EXPECT_EQ(a.end_of_task, b.end_of_task);
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_EQ(a.steps[s].task_step, b.steps[s].task_step);
    EXPECT_EQ(a.steps[s].global_step, b.steps[s].global_step);
    EXPECT_EQ(a.steps[s].num_real_pieces, b.steps[s].num_real_pieces);
    ASSERT_EQ(a.steps[s].pieces.size(), b.steps[s].pieces.size());
    for (size_t p = 0; p < a.steps[s].pieces.size(); ++p) {
      ASSERT_EQ(a.steps[s].pieces[p].size(), b.steps[s].pieces[p].size());
      for (size_t i = 0; i < a.steps[s].pieces[p].size(); ++i) {
        EXPECT_TRUE(a.steps[s].pieces[p][i].Equals(b.steps[s].pieces[p][i]))
            << "step " << s << " piece " << p << " tensor " << i;
      }
    }
  }
}

}  // namespace sluice

#endif  // SLUICE_TESTS_WORKER_STEP_FRAME_TEST_UTIL_H_
