// fixed_length_record_dataset(...).map(decode_raw(...)) through an in-process cluster whose
// consumer shares the worker's host: the fused source reads each record straight into the
// consumer's shared-memory ring (core/tensor/step_output_allocator.h, worker/step_placement.h),
// so that the worker's placement finds the steps there instead of copying them, and the steps
// are those of TCP (no placement) and of the file, byte for byte.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sluice/distributed_dataset.h"
#include "sluice/service.h"
#include "tests/core/record_test_util.h"
#include "tests/worker/in_process_cluster.h"
#include "tests/worker/step_frame_test_util.h"
#include "worker/step_placement.h"

namespace sluice {
namespace {

constexpr uint32_t kSeed = 28960;
constexpr int64_t kRecordBytes = 70000;
constexpr int kRecords = 60;

// Each step's one uint8 tensor as bytes (one replica: a step is one element); *status is the
// read's end (OK at the end of data).
std::vector<std::string> StepBytes(const std::string& coordinator, const Dataset& ds,
                                   ServiceOptions options, absl::Status* status) {
  std::vector<std::string> steps;
  *status = ForEachStep(coordinator, ds, std::move(options), /*replicas=*/1,
                        [&](int64_t, const PerReplica<Element>& x) {
                          steps.push_back(TensorBytesText(x.values().at(0).leaf()));
                        });
  return steps;
}

TEST(ServiceDecodedRecordsTest, RecordsReadStraightIntoTheRingGiveTheStepsOfTcp) {
  std::printf("seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  record_test::TempDir dir;
  const std::string path = dir.File("records.bin");
  std::string data(static_cast<size_t>(kRecordBytes * kRecords), '\0');
  for (char& c : data) c = static_cast<char>(rng() & 0xff);
  record_test::WriteWholeFile(path, data);
  absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat(
      "fixed_length_record_dataset(['", path, "'], ", kRecordBytes,
      ").map(decode_raw(tf.uint8))"));
  ASSERT_TRUE(ds.ok()) << ds.status();

  // A worker that keeps only a step or so ahead (8 KiB of buffer), so that most steps are
  // produced after the consumer mapped its ring.
  Cluster cluster(1, absl::Seconds(10), 8192);
  ServiceOptions options;
  options.job_name = "decoded-shm";
  options.receive_budget_bytes = 2 * kRecordBytes;
  const StepPlacementCounts before = ProcessStepPlacementCounts();
  absl::Status status;
  const std::vector<std::string> shm = StepBytes(cluster.address(), *ds, options, &status);
  ASSERT_TRUE(status.ok()) << status;
  const StepPlacementCounts after = ProcessStepPlacementCounts();
  const int64_t built = after.steps_built_in_ring - before.steps_built_in_ring;
  const int64_t copied = after.steps_copied_to_ring - before.steps_copied_to_ring;
  // Steps produced before the consumer mapped the ring, or when it had no room, are neither;
  // a step copied there is one built in ordinary memory for want of room at that moment.
  EXPECT_GT(built, 0);
  EXPECT_GT(built, copied) << "built " << built << ", copied " << copied;

  options.job_name = "decoded-tcp";
  options.shared_memory = false;
  const std::vector<std::string> tcp = StepBytes(cluster.address(), *ds, options, &status);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(shm.size(), static_cast<size_t>(kRecords));
  EXPECT_EQ(shm, tcp);
  // The first step is the first record itself.
  Tensor first = Tensor::Allocate(DType::kUInt8, Shape({kRecordBytes}));
  std::memcpy(first.mutable_raw_data(), data.data(), static_cast<size_t>(kRecordBytes));
  EXPECT_EQ(shm[0], TensorBytesText(first));
}

}  // namespace
}  // namespace sluice
