// Shared memory end to end in one process (core/rpc/shm_ring.h): a consumer and workers of an
// in-process cluster share the host, so streams negotiate the ring; the same pipeline read with
// shared memory on, off on the consumer, and off on the workers gives the same steps byte for
// byte, exactly once, and the rings are gone once the consumers are.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/rpc/shm_ring.h"
#include "core/rpc/shm_segment_pool.h"
#include "gtest/gtest.h"
#include "sluice/distributed_dataset.h"
#include "sluice/service.h"
#include "tests/worker/in_process_cluster.h"
#include "worker/step_placement.h"
#include "tests/worker/step_frame_test_util.h"

namespace sluice {
namespace {

// Every step as bytes: per replica, per leaf, dtype, shape and payload (numeric bytes or the
// strings with their lengths), so that two reads compare every byte.
struct Read {
  absl::Status status;
  std::vector<std::string> steps;
};

Read ReadAll(const std::string& coordinator, const Dataset& ds, ServiceOptions options) {
  Read out;
  out.status = ForEachStep(coordinator, ds, std::move(options), /*replicas=*/2,
                           [&](int64_t, const PerReplica<Element>& x) {
                             std::string step;
                             for (const Element& e : x.values()) {
                               for (const Tensor& t : e.Flatten()) {
                                 absl::StrAppend(&step, TensorBytesText(t), "|");
                               }
                             }
                             out.steps.push_back(std::move(step));
                           });
  return out;
}

// (int64 index, float32 row of 300 values, string) elements: numeric tensors above and below
// the zero-copy threshold, and strings, which stay inline.
Dataset MixedPipeline(int64_t n = 96, float base = 0) {
  Tensor idx = Tensor::Allocate(DType::kInt64, Shape({n}));
  Tensor rows = Tensor::Allocate(DType::kFloat32, Shape({n, 300}));
  Tensor words = Tensor::Allocate(DType::kString, Shape({n}));
  for (int64_t i = 0; i < n; ++i) {
    idx.mutable_data<int64_t>()[i] = i;
    for (int64_t j = 0; j < 300; ++j) rows.mutable_data<float>()[i * 300 + j] = base + i * 0.5f + j;
    *words.mutable_string(i) = std::string(static_cast<size_t>(i % 7), 'a' + i % 26);
  }
  return Dataset::FromTensorSlices(Element::Tuple(
                                       {Element::Leaf(idx), Element::Leaf(rows),
                                        Element::Leaf(words)}))
      .Batch(8);
}

TEST(ServiceSharedMemoryTest, SameStepsOverSharedMemoryAndTcp) {
  ShmRingCounts before = ProcessShmRingCounts();
  Read shm, tcp_consumer, tcp_worker;
  {
    Cluster cluster(2);
    ServiceOptions options;
    options.job_name = "shm-on";
    options.receive_budget_bytes = 16384;  // several frames: the first one only is inline
    shm = ReadAll(cluster.address(), MixedPipeline(), options);
    ASSERT_TRUE(shm.status.ok()) << shm.status;
    ShmRingCounts after_shm = ProcessShmRingCounts();
    // Every frame that carried numeric bytes went through a ring, both ways counted.
    EXPECT_GT(after_shm.frames_read - before.frames_read, 0);
    EXPECT_EQ(after_shm.frames_read - before.frames_read,
              after_shm.frames_written - before.frames_written);

    options.job_name = "shm-off-consumer";
    options.shared_memory = false;
    ShmRingCounts b2 = ProcessShmRingCounts();
    tcp_consumer = ReadAll(cluster.address(), MixedPipeline(), options);
    ASSERT_TRUE(tcp_consumer.status.ok()) << tcp_consumer.status;
    EXPECT_EQ(ProcessShmRingCounts().frames_read, b2.frames_read);
    EXPECT_EQ(ProcessShmRingCounts().frames_written, b2.frames_written);
  }
  {
    // The workers have it off: a consumer that offers still gets TCP.
    Cluster cluster(2, absl::Seconds(10), size_t{64} << 20,
                    [](WorkerServerOptions* o) { o->service.shared_memory = false; });
    ServiceOptions options;
    options.job_name = "shm-off-worker";
    options.receive_budget_bytes = 16384;
    ShmRingCounts b3 = ProcessShmRingCounts();
    tcp_worker = ReadAll(cluster.address(), MixedPipeline(), options);
    ASSERT_TRUE(tcp_worker.status.ok()) << tcp_worker.status;
    EXPECT_EQ(ProcessShmRingCounts().frames_read, b3.frames_read);
  }
  // 96 elements, batch 8: 12 steps, each of both replicas; the same bytes every way.
  ASSERT_EQ(shm.steps.size(), 12u);
  EXPECT_EQ(shm.steps, tcp_consumer.steps);
  EXPECT_EQ(shm.steps, tcp_worker.steps);
  // No ring outlives its stream: every segment is unmapped once the consumers and workers are.
  EXPECT_EQ(ProcessShmRingCounts().writers_alive, 0);
  EXPECT_EQ(ProcessShmRingCounts().readers_alive, 0);
}

// A worker that keeps only a few steps ahead (8 KiB of buffer) builds most of a long job's steps
// in the consumer's ring once it mapped it (worker/step_placement.h): those frames go as their
// headers alone, and every step is the same, byte for byte, as over TCP.
TEST(ServiceSharedMemoryTest, StepsBuiltInTheRingGiveTheSameStepsAsTcp) {
  Cluster cluster(1, absl::Seconds(10), 8192);
  ServiceOptions options;
  options.job_name = "shm-direct";
  options.receive_budget_bytes = 16384;
  const ShmRingCounts before = ProcessShmRingCounts();
  Read shm = ReadAll(cluster.address(), MixedPipeline(2000), options);
  ASSERT_TRUE(shm.status.ok()) << shm.status;
  const ShmRingCounts after = ProcessShmRingCounts();
  EXPECT_GT(after.frames_in_place - before.frames_in_place, 0);
  options.job_name = "tcp-direct";
  options.shared_memory = false;
  Read tcp = ReadAll(cluster.address(), MixedPipeline(2000), options);
  ASSERT_TRUE(tcp.status.ok()) << tcp.status;
  ASSERT_EQ(shm.steps.size(), 250u);
  EXPECT_EQ(shm.steps, tcp.steps);
}

// A stream that ends cleanly (the consumer read the end) copies none of the steps placed in
// its consumer's ring back out of it: the consumer has them all, so the worker drops what it
// kept for a reconnect before it stops placing steps (worker/step_placement.h, Unplaced).
// Copied out, they were up to a window of each stream's bytes written again into fresh memory
// (bench/RESULTS.md, shmbig). Several jobs: the copy raced the end's confirmation.
TEST(ServiceSharedMemoryTest, AStreamThatEndsCleanlyCopiesNoStepOutOfTheRing) {
  Cluster cluster(1, absl::Seconds(10), 8192);
  ServiceOptions options;
  options.receive_budget_bytes = 65536;
  const StepPlacementCounts before = ProcessStepPlacementCounts();
  const int64_t writers = ProcessShmRingCounts().writers_alive;
  for (int job = 0; job < 4; ++job) {
    options.job_name = absl::StrCat("shm-clean-end-", job);
    Read shm = ReadAll(cluster.address(), MixedPipeline(400), options);
    ASSERT_TRUE(shm.status.ok()) << shm.status;
    ASSERT_EQ(shm.steps.size(), 50u);
  }
  // Each stream's placement is let go on the worker's pool after the stream ends (it holds the
  // stream's ring writer): wait for that, bounded.
  for (int i = 0; i < 3000 && ProcessShmRingCounts().writers_alive > writers; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(ProcessShmRingCounts().writers_alive, writers);
  const StepPlacementCounts after = ProcessStepPlacementCounts();
  EXPECT_GT(after.steps_copied_to_ring - before.steps_copied_to_ring, 0) << "nothing placed";
  EXPECT_EQ(after.steps_copied_out - before.steps_copied_out, 0);
}

// Steps of 1.2 MiB and more with strings, through a worker whose rings are 1 MiB: no step fits
// the ring (each goes over TCP, built in ordinary memory), and the steps are those of TCP.
TEST(ServiceSharedMemoryTest, StepsLargerThanTheRingGiveTheSameStepsAsTcp) {
  const int64_t n = 24, row = 100000;  // float32 rows of 400 KB, batch 3: 1.2 MB a step
  Tensor rows = Tensor::Allocate(DType::kFloat32, Shape({n, row}));
  Tensor words = Tensor::Allocate(DType::kString, Shape({n}));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < row; ++j) rows.mutable_data<float>()[i * row + j] = i + j * 1e-3f;
    *words.mutable_string(i) = std::string(static_cast<size_t>(i % 5), 'a' + i % 26);
  }
  const Dataset ds =
      Dataset::FromTensorSlices(Element::Tuple({Element::Leaf(rows), Element::Leaf(words)}))
          .Batch(3);
  Cluster cluster(1, absl::Seconds(10), size_t{64} << 20, [](WorkerServerOptions* o) {
    o->service.shm_min_segment_bytes = size_t{1} << 20;
    o->service.shm_max_segment_bytes = size_t{1} << 20;
  });
  ServiceOptions options;
  options.job_name = "shm-big";
  const ShmRingCounts before = ProcessShmRingCounts();
  Read shm = ReadAll(cluster.address(), ds, options);
  ASSERT_TRUE(shm.status.ok()) << shm.status;
  EXPECT_EQ(ProcessShmRingCounts().frames_written, before.frames_written);  // none fit
  options.job_name = "tcp-big";
  options.shared_memory = false;
  Read tcp = ReadAll(cluster.address(), ds, options);
  ASSERT_TRUE(tcp.status.ok()) << tcp.status;
  ASSERT_EQ(shm.steps.size(), 8u);
  EXPECT_EQ(shm.steps, tcp.steps);
}

// A first step larger than the frame offering the segment may carry (64 KiB) is not sent
// with the offer, inline: the offer goes alone and every step, the first included, goes
// through the ring once the consumer mapped it. Inline, the first step of a 16 MiB-step
// stream cost ~10 ms of CPU (bench/RESULTS.md, shmstart). Steps of 1.2 MB go one to a frame.
TEST(ServiceSharedMemoryTest, AFirstStepLargerThanTheOfferMayCarryGoesThroughTheRing) {
  const int64_t n = 24, row = 100000;  // float32 rows of 400 KB, batch 3: 1.2 MB a step
  Tensor rows = Tensor::Allocate(DType::kFloat32, Shape({n, row}));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < row; ++j) rows.mutable_data<float>()[i * row + j] = i + j * 1e-3f;
  }
  const Dataset ds = Dataset::FromTensorSlices(Element::Leaf(rows)).Batch(3);
  Cluster cluster(1);
  ServiceOptions options;
  options.job_name = "shm-first-step";
  const ShmRingCounts before = ProcessShmRingCounts();
  Read shm = ReadAll(cluster.address(), ds, options);
  ASSERT_TRUE(shm.status.ok()) << shm.status;
  const ShmRingCounts after = ProcessShmRingCounts();
  ASSERT_EQ(shm.steps.size(), 8u);
  EXPECT_EQ(after.frames_read - before.frames_read, 8) << "a step went inline";
  options.job_name = "tcp-first-step";
  options.shared_memory = false;
  Read tcp = ReadAll(cluster.address(), ds, options);
  ASSERT_TRUE(tcp.status.ok()) << tcp.status;
  EXPECT_EQ(shm.steps, tcp.steps);
}

TEST(ServiceSharedMemoryTest, ExactlyOnceOverSharedMemoryWithSeveralConsumers) {
  Cluster cluster(3);
  ServiceOptions options;
  options.job_name = "shm-exactly-once";
  options.num_consumers = 2;
  const ShmRingCounts before = ProcessShmRingCounts();
  std::vector<Consumed> results =
      ConsumeAll(cluster.address(), Dataset::Range(4000).Batch(16), options, 2, 2);
  for (const Consumed& c : results) ASSERT_TRUE(c.status.ok()) << c.status;
  ExpectExactlyOnce(results, 4000);
  EXPECT_GT(ProcessShmRingCounts().frames_read - before.frames_read, 0);
}

// Small steps go several to a frame (one header, one ring region per frame): a job whose last
// batch is partial (8 x 203 + 5 elements) gives every step once, in order, as over TCP, with
// fewer ring frames than steps, each written once and read once.
TEST(ServiceSharedMemoryTest, BatchedFramesWithAPartialLastBatchGiveEveryStepOnce) {
  constexpr int64_t kElements = 8 * 203 + 5;
  Cluster cluster(1);
  ServiceOptions options;
  options.job_name = "shm-batched";
  options.receive_budget_bytes = 65536;  // room for several ~10 KB steps a frame
  const ShmRingCounts before = ProcessShmRingCounts();
  Read shm = ReadAll(cluster.address(), MixedPipeline(kElements), options);
  ASSERT_TRUE(shm.status.ok()) << shm.status;
  const ShmRingCounts after = ProcessShmRingCounts();
  options.job_name = "tcp-batched";
  options.shared_memory = false;
  Read tcp = ReadAll(cluster.address(), MixedPipeline(kElements), options);
  ASSERT_TRUE(tcp.status.ok()) << tcp.status;
  ASSERT_EQ(shm.steps.size(), 204u);  // 203 batches of 8 and one of 5
  EXPECT_EQ(shm.steps, tcp.steps);
  const int64_t frames = after.frames_read - before.frames_read;
  EXPECT_GT(frames, 0);
  EXPECT_LT(frames, static_cast<int64_t>(shm.steps.size()));
  EXPECT_EQ(frames, after.frames_written - before.frames_written);
}

// A consumer with default options (the 64 MiB receive budget) on the workers' host reads its
// steps through the ring. The worker waits for the answer to its offer; a credit raise the
// consumer sent while waiting for its first step (after 1 ms) used to count as that answer, and
// the whole first window (here the whole job) went inline: every job, as the raise crosses the
// offer each time. A job can still go inline by design when the worker built all of its steps
// before the consumer mapped the segment (a frame mixing steps built before the mapping with
// steps built in the ring goes inline, worker/step_placement.h): under a loaded CI machine one
// job in 20 did. So 20 jobs are read and most of them (at least 10) must take the ring.
TEST(ServiceSharedMemoryTest, DefaultOptionsTakeTheRing) {
  constexpr int64_t kElements = 8 * 203 + 5;
  constexpr int kJobs = 20;
  Cluster cluster(1);
  int jobs_through_the_ring = 0;
  for (int job = 0; job < kJobs; ++job) {
    ServiceOptions options;
    options.job_name = absl::StrCat("shm-default-", job);
    const ShmRingCounts before = ProcessShmRingCounts();
    Read shm = ReadAll(cluster.address(), MixedPipeline(kElements), options);
    ASSERT_TRUE(shm.status.ok()) << shm.status;
    const ShmRingCounts after = ProcessShmRingCounts();
    ASSERT_EQ(shm.steps.size(), 204u);
    const int64_t frames = after.frames_read - before.frames_read;
    EXPECT_EQ(frames, after.frames_written - before.frames_written) << "job " << job;
    if (frames > 0) ++jobs_through_the_ring;
  }
  EXPECT_GE(jobs_through_the_ring, kJobs / 2)
      << jobs_through_the_ring << " of " << kJobs << " jobs took the ring; the rest went inline";
}

// Warm segments (core/rpc/shm_segment_pool.h): a consumer process's next job gets the segment
// of its earlier one back, pages allocated, but never while a tensor of the earlier job views
// it: a trainer that kept job 1's steps (views of the segment) reads job 2 through a fresh
// segment and its kept tensors are unchanged; once it dropped them, job 3 reuses a segment.
// Every job's steps are byte for byte what TCP gives.
TEST(ServiceSharedMemoryTest, ANextJobReusesAWarmSegmentButNeverOneATensorViews) {
  Cluster cluster(1);
  ServiceOptions options;
  options.receive_budget_bytes = 65536;
  auto read_kept = [&](const std::string& job, float base, std::vector<Element>* kept) {
    options.job_name = job;
    Read out;
    out.status = ForEachStep(cluster.address(), MixedPipeline(96, base), options, 2,
                             [&](int64_t, const PerReplica<Element>& x) {
                               std::string step;
                               for (const Element& e : x.values()) {
                                 for (const Tensor& t : e.Flatten()) {
                                   absl::StrAppend(&step, TensorBytesText(t), "|");
                                 }
                                 if (kept != nullptr) kept->push_back(e);
                               }
                               out.steps.push_back(std::move(step));
                             });
    return out;
  };
  auto describe_kept = [](const std::vector<Element>& kept) {
    std::string out;
    for (const Element& e : kept) {
      for (const Tensor& t : e.Flatten()) absl::StrAppend(&out, TensorBytesText(t), "|");
    }
    return out;
  };
  ServiceOptions tcp = options;
  tcp.shared_memory = false;
  tcp.job_name = "warm-tcp-2";
  Read tcp2 = ReadAll(cluster.address(), MixedPipeline(96, 1000), tcp);
  ASSERT_TRUE(tcp2.status.ok()) << tcp2.status;

  std::vector<Element> kept;
  const ShmRingCounts rings0 = ProcessShmRingCounts();
  Read job1 = read_kept("warm-1", 0, &kept);
  ASSERT_TRUE(job1.status.ok()) << job1.status;
  ASSERT_GT(ProcessShmRingCounts().frames_read, rings0.frames_read) << "job 1 took no ring";
  const std::string kept_before = describe_kept(kept);

  const ShmPoolCounts pool1 = ProcessShmPoolCounts();
  const ShmRingCounts rings1 = ProcessShmRingCounts();
  Read job2 = read_kept("warm-2", 1000, nullptr);
  ASSERT_TRUE(job2.status.ok()) << job2.status;
  EXPECT_GT(ProcessShmRingCounts().frames_read, rings1.frames_read) << "job 2 took no ring";
  EXPECT_EQ(job2.steps, tcp2.steps);
  EXPECT_EQ(ProcessShmPoolCounts().segments_reused, pool1.segments_reused)
      << "job 2 got the segment job 1's kept tensors view";
  EXPECT_TRUE(describe_kept(kept) == kept_before) << "job 2 wrote over job 1's kept tensors";

  kept.clear();
  // Job 2's segment returns to the worker's pool when its stream's last reference goes, which
  // may be just after the consumer saw the end: a few jobs, each taking a warm segment if one
  // is there; job 1's is (its stream ended a whole job earlier).
  const ShmPoolCounts pool2 = ProcessShmPoolCounts();
  for (int job = 3; job < 6; ++job) {
    Read next = read_kept(absl::StrCat("warm-", job), 1000, nullptr);
    ASSERT_TRUE(next.status.ok()) << next.status;
    EXPECT_EQ(next.steps, tcp2.steps) << "job " << job;
  }
  EXPECT_GE(ProcessShmPoolCounts().segments_reused - pool2.segments_reused, 1)
      << "no job reused a warm segment";
}

}  // namespace
}  // namespace sluice
