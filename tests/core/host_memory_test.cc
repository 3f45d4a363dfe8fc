// The allocator that can say no (sluice/tensor.h Try* factories, core/tensor/host_memory.h):
// per-allocation and per-process limits refused with RESOURCE_EXHAUSTED naming the op, the
// size and the limit before anything is allocated; byte sizes checked for overflow; every
// charged byte given back when the last tensor sharing the storage goes.
#include "core/tensor/host_memory.h"

#include <sys/resource.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/rpc/step_frame.h"
#include "core/tensor/uninitialized_tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/tensor.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

// Sets the process's limits for one test and restores them; the test starts from what is in
// use now (a test binary may hold tensors of its own).
class HostMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = ProcessMemoryBudget().limits();
    base_ = ProcessMemoryBudget().in_use();
    ProcessMemoryBudget().SetLimits({.process_bytes = base_ + (int64_t{64} << 20),
                                     .element_bytes = int64_t{16} << 20});
  }
  void TearDown() override { ProcessMemoryBudget().SetLimits(saved_); }

  int64_t used() const { return ProcessMemoryBudget().in_use() - base_; }

  MemoryLimits saved_;
  int64_t base_ = 0;
};

TEST_F(HostMemoryTest, ATensorIsChargedWhileItsStorageLivesAndGivenBackAfter) {
  {
    absl::StatusOr<Tensor> t = Tensor::TryAllocate(DType::kFloat32, Shape({1000}), "op 1 (map)");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(used(), 4032);  // 4000 bytes rounded up to the 64-byte alignment
    EXPECT_EQ(t->data<float>()[999], 0.0f);  // zero-filled
    // Views and copies share the storage: charged once, held until the last one goes.
    Tensor view = t->Slice(10, 20);
    *t = Tensor();
    EXPECT_EQ(used(), 4032);
    Tensor copy = view;
    view = Tensor();
    EXPECT_EQ(used(), 4032);
  }
  EXPECT_EQ(used(), 0);
  // The infallible path counts too (it cannot refuse).
  { Tensor small = Tensor::Allocate(DType::kInt64, Shape({3})); EXPECT_EQ(used(), 64); }
  EXPECT_EQ(used(), 0);
}

TEST_F(HostMemoryTest, OneAllocationOverTheElementLimitIsRefusedNamingTheOpAndTheSize) {
  absl::StatusOr<Tensor> t =
      Tensor::TryAllocate(DType::kInt64, Shape({10000000000}), "source (range)");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t.status().message(),
            "source (range): a tensor of shape (10000000000,) and dtype int64 needs 80000000000 "
            "bytes, more than the memory limit of one element, 16777216 bytes "
            "(--max_element_bytes)");
  EXPECT_EQ(used(), 0);
  // Exactly at the limit is fine.
  EXPECT_TRUE(Tensor::TryAllocate(DType::kUInt8, Shape({16 << 20}), "x").ok());
  EXPECT_EQ(used(), 0);
}

TEST_F(HostMemoryTest, TheProcessLimitCountsEveryLiveTensor) {
  std::vector<Tensor> held;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<Tensor> t =
        Tensor::TryAllocate(DType::kUInt8, Shape({16 << 20}), "op 3 (cache)");
    ASSERT_TRUE(t.ok()) << t.status();
    held.push_back(*std::move(t));
  }
  EXPECT_EQ(used(), int64_t{64} << 20);
  absl::StatusOr<Tensor> more = Tensor::TryAllocate(DType::kUInt8, Shape({1}), "op 3 (cache)");
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(more.status().message()),
              HasSubstr("op 3 (cache): a tensor of shape (1,) and dtype uint8 needs 64 bytes, "
                        "but "));
  EXPECT_THAT(std::string(more.status().message()),
              HasSubstr(" of the process's memory limit of "));
  EXPECT_THAT(std::string(more.status().message()), HasSubstr("(--memory_limit)"));
  EXPECT_EQ(used(), int64_t{64} << 20);  // the refusal charged nothing
  held.pop_back();
  EXPECT_TRUE(Tensor::TryAllocate(DType::kUInt8, Shape({1}), "op 3 (cache)").ok());
  held.clear();
  EXPECT_EQ(used(), 0);
}

TEST_F(HostMemoryTest, SizesThatOverflowAreRefusedNotWrapped) {
  // 2^40 x 2^40 elements: the count alone overflows 64 bits (and would wrap to 0).
  absl::StatusOr<Tensor> t = Tensor::TryAllocate(
      DType::kFloat32, Shape({int64_t{1} << 40, int64_t{1} << 40}), "reshape([...])");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("needs more than 2^63 bytes"));
  // The count fits, its bytes do not.
  t = Tensor::TryAllocate(DType::kFloat64, Shape({int64_t{1} << 61}), "x");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("needs more than 2^63 bytes"));
  // An unknown (negative) dimension is bad input.
  t = Tensor::TryAllocate(DType::kFloat32, Shape({-1, 3}), "x");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::TryAllocate(DType::kInvalid, Shape({1}), "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::shared_ptr<TensorBuffer>> b =
      TensorBuffer::TryAllocateHost(~size_t{0} - 3, "step frame");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(used(), 0);
}

TEST_F(HostMemoryTest, StringsAreChargedWithTheirCharacters) {
  const int64_t object = static_cast<int64_t>(sizeof(std::string));
  {
    absl::StatusOr<Tensor> t = Tensor::TryFromStrings({std::string(1000, 'a'), "bc"},
                                                      Shape({2}), "source (text_line_dataset)");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(used(), 2 * object + 1002);
    // The batch of two copies of it: charged for its own strings, before they are copied.
    const Tensor parts[] = {*t, *t};
    absl::StatusOr<Tensor> stacked = Tensor::Stack(parts, "op 1 (batch)");
    ASSERT_TRUE(stacked.ok()) << stacked.status();
    EXPECT_EQ(used(), 2 * (2 * object + 1002) + 2 * object + 1002);
  }
  EXPECT_EQ(used(), 0);
  // Too many characters for one element: refused, nothing kept.
  absl::StatusOr<Tensor> big =
      Tensor::TryFromStrings({std::string(17 << 20, 'x')}, Shape({1}), "a tensor proto");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(big.status().message()),
              HasSubstr("a tensor proto: a tensor of shape (1,) and dtype string needs"));
  EXPECT_EQ(used(), 0);
  // Empty strings to be filled, charged for what they will hold.
  {
    absl::StatusOr<Tensor> s = Tensor::TryAllocateStrings(Shape({3}), 30, "step frame");
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(used(), 3 * object + 30);
  }
  EXPECT_EQ(used(), 0);
}

TEST_F(HostMemoryTest, StackAndConcatRefuseAResultOverTheLimitNamingTheOp) {
  const Tensor part = *Tensor::TryAllocate(DType::kFloat64, Shape({1 << 20}), "x");  // 8 MiB
  const Tensor parts[] = {part, part, part};
  absl::StatusOr<Tensor> s = Tensor::Stack(parts, "op 2 (batch)");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("op 2 (batch): a tensor of shape (3, 1048576) and dtype float64 needs "
                        "25165824 bytes, more than the memory limit of one element"));
  s = Tensor::Concat(parts, "op 4 (rebatch)");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("op 4 (rebatch): "));
  s = Tensor::ConcatConsuming({part, part, part}, "op 2 (batch)");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  // Two fit.
  EXPECT_TRUE(Tensor::Concat(std::span<const Tensor>(parts, 2), "op 2 (batch)").ok());
  EXPECT_EQ(used(), 8 << 20);  // `part` alone
}

TEST_F(HostMemoryTest, HostBuffersAreChargedAndRefused) {
  {
    absl::StatusOr<std::shared_ptr<TensorBuffer>> b = TensorBuffer::TryAllocateHost(100, "npy");
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->size(), 100u);
    EXPECT_EQ(used(), 128);
  }
  EXPECT_EQ(used(), 0);
  absl::StatusOr<std::shared_ptr<TensorBuffer>> b =
      TensorBuffer::TryAllocateHost(size_t{1} << 30, "npy_dataset");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(),
            "npy_dataset: a host buffer needs 1073741824 bytes, more than the memory limit of one "
            "element, 16777216 bytes (--max_element_bytes)");
}

// The frame decoder's buffers (core/rpc/step_frame.h AllocateUninitializedHost) are the tensor
// library's uninitialized ones: charged like a tensor's, refused over the limits, and a size a
// hostile frame header could claim near 2^64 is refused instead of wrapping to a small charge.
TEST_F(HostMemoryTest, UninitializedBuffersAreChargedAndRefusedNotWrapped) {
  {
    absl::StatusOr<std::shared_ptr<TensorBuffer>> b =
        TryAllocateUninitializedBuffer(4000, "op 1 (map)", "a buffer");
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->size(), 4000u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*b)->data()) % TensorBuffer::kAlignment, 0u);
    EXPECT_EQ(used(), 4032);
    std::shared_ptr<TensorBuffer> frame = AllocateUninitializedHost(0);
    ASSERT_NE(frame, nullptr);
    EXPECT_EQ(used(), 4032 + 64);  // one alignment unit for nothing
  }
  EXPECT_EQ(used(), 0);
  absl::StatusOr<std::shared_ptr<TensorBuffer>> big =
      TryAllocateUninitializedBuffer(size_t{32} << 20, "op 2 (batch)", "a batch");
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("op 2 (batch): a batch needs"));
  EXPECT_EQ(AllocateUninitializedHost(size_t{32} << 20), nullptr);  // over --max_element_bytes
  for (size_t bytes : {~size_t{0}, ~size_t{0} - 63, size_t{1} << 63}) {
    absl::StatusOr<std::shared_ptr<TensorBuffer>> huge =
        TryAllocateUninitializedBuffer(bytes, "step frame", "a frame's tensors");
    EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << bytes;
    EXPECT_THAT(std::string(huge.status().message()), HasSubstr("needs more than 2^63 bytes"));
    EXPECT_EQ(AllocateUninitializedHost(bytes), nullptr) << bytes;
  }
  EXPECT_EQ(used(), 0);
}

TEST(DefaultMemoryLimitsTest, TheAddressSpaceLimitCountsLikeTheCgroupsAndTheMachines) {
  const MemoryLimits unlimited = DefaultMemoryLimits();
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
  // Half of what the machine allows: the defaults follow it. Only the soft limit changes, and
  // only for the one call (nothing is allocated meanwhile but a few bytes of file reading).
  const int64_t half = unlimited.process_bytes / 3 * 4 / 2;
  if (saved.rlim_max != RLIM_INFINITY && static_cast<int64_t>(saved.rlim_max) < half) {
    GTEST_SKIP() << "the hard RLIMIT_AS is already below half the machine";
  }
  struct rlimit lowered = saved;
  lowered.rlim_cur = static_cast<rlim_t>(half);
  ASSERT_EQ(setrlimit(RLIMIT_AS, &lowered), 0);
  const MemoryLimits limited = DefaultMemoryLimits();
  ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);
  EXPECT_EQ(limited.process_bytes, half / 4 * 3);
  EXPECT_EQ(limited.element_bytes, limited.process_bytes / 4);
  EXPECT_LT(limited.process_bytes, unlimited.process_bytes);
}

}  // namespace
}  // namespace sluice
