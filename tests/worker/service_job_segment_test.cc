// One copy per step for co-located trainers of a shared job (core/rpc/job_shm_segment.h,
// docs/SERVICE.md "One copy per step"), end to end in one process: three trainers of a shared
// job read the same steps byte for byte (strings and numeric tensors) as three trainers over
// TCP; the worker writes each step into the job segment at most once however many trainers
// read it; a trainer keeping every tensor it got keeps their bytes while the others read on
// (steps that find no room go the ordinary way); the segment goes with the task.
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rpc/job_shm_segment.h"
#include "gtest/gtest.h"
#include "sluice/distributed_dataset.h"
#include "sluice/service.h"
#include "tests/worker/in_process_cluster.h"
#include "tests/worker/step_frame_test_util.h"
#include "worker/task_runner.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

constexpr int64_t kElements = 192;
constexpr int64_t kBatch = 4;
constexpr int64_t kSteps = kElements / kBatch;
constexpr int kTrainers = 3;

std::string Describe(const PerReplica<Element>& x) {
  std::string step;
  for (const Element& e : x.values()) {
    for (const Tensor& t : e.Flatten()) absl::StrAppend(&step, TensorBytesText(t), "|");
  }
  return step;
}

// (int64 index, float32 row of 300, an "image" string of ~3 KB) elements in batches of 4,
// repeated (a shared job's usual infinite dataset; the trainers read kSteps steps): the shape
// of the TFRecord parse pipeline's steps, strings and numeric tensors both.
Dataset ImagePipeline() {
  Tensor idx = Tensor::Allocate(DType::kInt64, Shape({kElements}));
  Tensor rows = Tensor::Allocate(DType::kFloat32, Shape({kElements, 300}));
  Tensor images = Tensor::Allocate(DType::kString, Shape({kElements}));
  for (int64_t i = 0; i < kElements; ++i) {
    idx.mutable_data<int64_t>()[i] = i;
    for (int64_t j = 0; j < 300; ++j) rows.mutable_data<float>()[i * 300 + j] = i * 0.25f + j;
    *images.mutable_string(i) = std::string(3000 + static_cast<size_t>(i % 97),
                                            static_cast<char>('a' + i % 26));
  }
  return Dataset::FromTensorSlices(Element::Tuple(
                                       {Element::Leaf(idx), Element::Leaf(rows),
                                        Element::Leaf(images)}))
      .Repeat()
      .Batch(kBatch);
}

struct TrainerRead {
  absl::Status status;
  std::vector<std::string> steps;    // described when received
  std::vector<std::string> at_end;   // trainer 0: its kept tensors, described after all ended
};

// Three trainers of one lossless shared job (each reads every step), on threads. Trainer 0
// keeps every value it receives until all have ended.
std::vector<TrainerRead> ReadShared(const std::string& coordinator, const std::string& job,
                                    bool shared_memory) {
  std::vector<TrainerRead> reads(kTrainers);
  std::vector<PerReplica<Element>> kept;
  std::vector<std::thread> threads;
  for (int t = 0; t < kTrainers; ++t) {
    threads.emplace_back([&, t] {
      ServiceOptions options;
      options.job_name = job;
      options.read_mode = ServiceReadMode::kIndependent;
      options.cross_trainer.enabled = true;
      options.cross_trainer.lossless = true;
      options.cross_trainer.expected_trainers = kTrainers;
      options.trainer_id = absl::StrCat("trainer-", t);
      options.shared_memory = shared_memory;
      options.receive_budget_bytes = 256 << 10;
      reads[t].status = ForEachStep(coordinator, ImagePipeline(), options, /*replicas=*/1,
                                    [&, t](int64_t, const PerReplica<Element>& x) {
                                      reads[t].steps.push_back(Describe(x));
                                      if (t == 0) kept.push_back(x);
                                    },
                                    /*max_steps=*/kSteps);
    });
  }
  for (std::thread& th : threads) th.join();
  for (const PerReplica<Element>& x : kept) reads[0].at_end.push_back(Describe(x));
  return reads;
}

void ConfigureSmallSegments(WorkerServerOptions* o) {
  // A window of a few steps and a job segment of 4 times that: trainer 0's kept tensors fill it,
  // so later steps find no room and go the ordinary way.
  o->cross_trainer_window_bytes = 128 << 10;
  o->service.shm_min_segment_bytes = 64 << 10;
  o->service.shm_max_segment_bytes = 1 << 20;
}

TEST(ServiceJobSegmentTest, ThreeTrainersReadOneCopyOfEachStepWithTheBytesOfTcp) {
  std::vector<TrainerRead> shm, tcp;
  const JobShmCounts before = ProcessJobShmCounts();
  {
    Cluster cluster(1, absl::Seconds(10), size_t{64} << 20, ConfigureSmallSegments);
    shm = ReadShared(cluster.address(), "shared-shm", /*shared_memory=*/true);
    const JobShmCounts after = ProcessJobShmCounts();
    const int64_t written = after.steps_written - before.steps_written;
    const int64_t placed = after.frames_placed - before.frames_placed;
    std::printf("job segment: %lld steps written, %lld frames placed, %lld found no room\n",
                static_cast<long long>(written), static_cast<long long>(placed),
                static_cast<long long>(after.no_room - before.no_room));
    // Each step is written at most once (of those the worker produced: the trainers read
    // kSteps, their streams may have sent a few more ahead); frames naming a region outnumber
    // the copies (trainers read one copy).
    int64_t produced = 0;
    for (const auto& runner : cluster.worker(0)->Tasks().runners) {
      produced += runner->buffer()->stats().steps_produced;
    }
    std::printf("the worker produced %lld steps\n", static_cast<long long>(produced));
    EXPECT_GT(written, 0);
    EXPECT_LE(written, produced);
    EXPECT_GT(placed, written);
    EXPECT_LE(placed, kTrainers * kSteps);
    tcp = ReadShared(cluster.address(), "shared-tcp", /*shared_memory=*/false);
    EXPECT_EQ(ProcessJobShmCounts().frames_placed, after.frames_placed) << "TCP placed nothing";
  }
  for (int t = 0; t < kTrainers; ++t) {
    ASSERT_TRUE(shm[t].status.ok()) << t << ": " << shm[t].status;
    ASSERT_TRUE(tcp[t].status.ok()) << t << ": " << tcp[t].status;
    ASSERT_EQ(shm[t].steps.size(), static_cast<size_t>(kSteps)) << t;
    EXPECT_TRUE(shm[t].steps == tcp[t].steps) << "trainer " << t << " read other bytes";
  }
  // Trainer 0's tensors, views of the job segment where placed, kept their bytes while the
  // others read on and later steps were written.
  ASSERT_EQ(shm[0].at_end.size(), shm[0].steps.size());
  EXPECT_TRUE(shm[0].at_end == shm[0].steps);
  // The segment went with the task and the trainers' tensors.
  EXPECT_EQ(ProcessJobShmCounts().segments_alive, before.segments_alive);
}

}  // namespace
}  // namespace sluice
