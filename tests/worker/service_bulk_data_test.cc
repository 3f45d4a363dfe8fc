// The bulk data channel end to end in one process (core/rpc/bulk_channel.h): consumers with
// shared memory off take their large frames' bytes on a socket next to the gRPC stream; the
// same job read over the bulk channel and over gRPC alone gives the same steps, exactly once;
// a socket cut in the middle of a frame on every call loses and duplicates no step (the call is
// made again); a data port nobody listens on falls back to gRPC once, counted; a worker that
// stalls between a frame's header and its bytes delays no other stream of the consumer's
// process, and its own stream is made again once, after the receive timeout.
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/obs/metrics.h"
#include "core/rpc/bulk_channel.h"
#include "gtest/gtest.h"
#include "sluice/service.h"
#include "tests/worker/in_process_cluster.h"

namespace sluice {
namespace {

// range(n) in 60 steps of 16384 int64 (two replicas of 64 KiB each: a frame per step once the
// first frame, which carries the offer and what the first credit allows, is out).
constexpr int64_t kSteps = 60;
constexpr int64_t kElements = 16384 * kSteps;
Dataset LargeSteps() { return Dataset::Range(kElements).Batch(16384); }

ServiceOptions Remote(const std::string& name) {
  ServiceOptions options;
  options.job_name = name;
  options.shared_memory = false;  // as a consumer on another host
  options.bulk_data = true;       // the default
  return options;
}

// sluice_client_bulk_failures_total of this process (0 before the first failure).
int64_t BulkFailures() {
  for (absl::string_view line : absl::StrSplit(MetricsRegistry::Default().Scrape(), '\n')) {
    int64_t n = 0;
    if (absl::ConsumePrefix(&line, "sluice_client_bulk_failures_total ") &&
        absl::SimpleAtoi(line, &n)) {
      return n;
    }
  }
  return 0;
}

TEST(ServiceBulkDataTest, SameStepsOverTheBulkChannelAndGrpc) {
  Cluster cluster(2);
  const BulkChannelCounts before = ProcessBulkChannelCounts();
  Consumed bulk = Consume(cluster.address(), LargeSteps(), Remote("bulk-on"), 2);
  ASSERT_TRUE(bulk.status.ok()) << bulk.status;
  const BulkChannelCounts after = ProcessBulkChannelCounts();
  // Every frame after each stream's first went over the bulk socket, both ends counted: most
  // of the bytes.
  EXPECT_EQ(after.frames_received - before.frames_received,
            after.frames_sent - before.frames_sent);
  EXPECT_EQ(after.bytes_received - before.bytes_received, after.bytes_sent - before.bytes_sent);
  EXPECT_GT(after.bytes_received - before.bytes_received, kElements * 8 / 2);
  // Their headers too (BulkAccept.inband_headers, the default on both ends).
  EXPECT_GE(after.inband_frames_received - before.inband_frames_received,
            after.frames_received - before.frames_received);

  ServiceOptions off = Remote("bulk-off-consumer");
  off.bulk_data = false;
  Consumed grpc = Consume(cluster.address(), LargeSteps(), off, 2);
  ASSERT_TRUE(grpc.status.ok()) << grpc.status;
  EXPECT_EQ(ProcessBulkChannelCounts().frames_received, after.frames_received);
  ASSERT_EQ(bulk.steps.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(bulk.steps, grpc.steps);
  ExpectExactlyOnce({bulk}, kElements);
}

// A consumer that does not ask for in-band headers (one built before them) keeps its frames'
// headers on gRPC and their numeric bytes on the socket, and reads the same steps.
TEST(ServiceBulkDataTest, ConsumersWithoutInbandHeadersKeepHeadersOnGrpc) {
  Cluster cluster(2);
  const BulkChannelCounts before = ProcessBulkChannelCounts();
  setenv("SLUICE_BULK_INBAND", "0", 1);
  Consumed read = Consume(cluster.address(), LargeSteps(), Remote("bulk-headers-on-grpc"), 2);
  unsetenv("SLUICE_BULK_INBAND");
  ASSERT_TRUE(read.status.ok()) << read.status;
  const BulkChannelCounts after = ProcessBulkChannelCounts();
  EXPECT_GT(after.frames_received - before.frames_received, 0);
  EXPECT_EQ(after.inband_frames_received, before.inband_frames_received);
  ASSERT_EQ(read.steps.size(), static_cast<size_t>(kSteps));
  ExpectExactlyOnce({read}, kElements);
}

TEST(ServiceBulkDataTest, WorkersWithTheChannelOffServeOverGrpc) {
  Cluster cluster(2, absl::Seconds(10), size_t{64} << 20,
                  [](WorkerServerOptions* o) { o->service.bulk_data = false; });
  EXPECT_EQ(cluster.worker(0)->data_port(), 0);
  const BulkChannelCounts before = ProcessBulkChannelCounts();
  Consumed read = Consume(cluster.address(), LargeSteps(), Remote("bulk-off-worker"), 2);
  ASSERT_TRUE(read.status.ok()) << read.status;
  EXPECT_EQ(ProcessBulkChannelCounts().frames_received, before.frames_received);
  ExpectExactlyOnce({read}, kElements);
}

// Every call's socket is cut 1.4 MB in, in the middle of its second frame on the socket (a
// frame of 7 steps is 896 KiB): each call delivers its first frame (inline) and one on the
// socket, and breaks; the consumer calls again from the step it has, and every element
// arrives once.
TEST(ServiceBulkDataTest, ASocketCutMidFrameLosesAndDuplicatesNothing) {
  Cluster cluster(1, absl::Seconds(10), size_t{64} << 20, [](WorkerServerOptions* o) {
    o->service.TEST_bulk_cut_after_bytes = 1400000;
    o->service.bulk_max_frame_bytes = size_t{1} << 20;  // the frames of 7 steps above
  });
  const BulkChannelCounts before = ProcessBulkChannelCounts();
  ServiceOptions options = Remote("bulk-cut");
  options.retry_deadline = absl::Seconds(120);  // broken calls, each retried with backoff
  Consumed read = Consume(cluster.address(), LargeSteps(), options, 2);
  ASSERT_TRUE(read.status.ok()) << read.status;
  ASSERT_EQ(read.steps.size(), static_cast<size_t>(kSteps));
  ExpectExactlyOnce({read}, kElements);
  // Frames came over the bulk channel, one on each of several calls.
  EXPECT_GE(ProcessBulkChannelCounts().frames_received - before.frames_received, 2);
  EXPECT_NE(MetricsRegistry::Default().Scrape().find("sluice_client_bulk_failures_total"),
            std::string::npos);
}

TEST(ServiceBulkDataTest, AnUnreachableDataPortFallsBackToGrpcOnce) {
  Cluster cluster(1, absl::Seconds(10), size_t{64} << 20, [](WorkerServerOptions* o) {
    // Bind the data port on an address consumers cannot reach through 127.0.0.1: the consumer
    // dials the worker's host (127.0.0.1) and is refused.
    o->service.data_host = "127.0.0.2";
  });
  const BulkChannelCounts before = ProcessBulkChannelCounts();
  Consumed read = Consume(cluster.address(), LargeSteps(), Remote("bulk-unreachable"), 2);
  ASSERT_TRUE(read.status.ok()) << read.status;
  ExpectExactlyOnce({read}, kElements);
  EXPECT_EQ(ProcessBulkChannelCounts().frames_received, before.frames_received);
  const std::string scrape = MetricsRegistry::Default().Scrape();
  EXPECT_NE(scrape.find("sluice_client_bulk_fallbacks_total 1"), std::string::npos) << scrape;
}

// The worker's first kStalled streams to take the bulk channel (one per job, each job read
// by a thread of this process) write 200000 bytes on it (inside their first frame there: 2 x
// 128 KiB a step) and then stall with the socket open, as a worker stopped between a frame's
// header and its bytes, within a credit window that keeps it from reaching the job's end.
// More streams stall than gRPC has callback threads to spare, so a receive on those threads
// would hold them all. The process reads another job from the same worker to its end while
// those streams are still stalled (each one's receive is on its own thread); each stalled
// stream fails once bulk_receive_timeout passes, its call is made again exactly once, and
// every job delivers every element once.
TEST(ServiceBulkDataTest, StalledWorkerStreamsDelayNoOtherStream) {
  constexpr int kStalled = 8;
  auto stalls = std::make_shared<std::atomic<int>>(kStalled);
  Cluster cluster(1, absl::Seconds(10), size_t{256} << 20, [stalls](WorkerServerOptions* o) {
    o->service.TEST_bulk_stalls = stalls;
    o->service.TEST_bulk_stall_after_bytes = 200000;
  });
  const int64_t failures_before = BulkFailures();
  std::vector<Consumed> stalled(kStalled);
  std::vector<std::thread> stalled_readers;
  for (int j = 0; j < kStalled; ++j) {
    stalled_readers.emplace_back([&, j] {
      ServiceOptions options = Remote(absl::StrCat("bulk-stalled-", j));
      // Long enough for the other job to be read many times over on a loaded machine (it
      // takes well under a second), short enough for a test. (A receive that got part of a
      // frame fails within twice this: core/rpc/bulk_channel.h.)
      options.bulk_receive_timeout = absl::Seconds(8);
      options.retry_deadline = absl::Seconds(120);
      // A window of about half the job: the worker cannot send the end (and close the stream
      // after close_grace) while its bytes stall; only the consumer's receive timeout ends it.
      options.receive_budget_bytes = int64_t{4} << 20;
      stalled[j] = Consume(cluster.address(), LargeSteps(), options, 2);
    });
  }
  // Bounded wait for the stalls: the jobs' first frames (a connect, a few MiB) take far less.
  const absl::Time until = absl::Now() + absl::Seconds(60);
  while (ProcessBulkChannelCounts().senders_stalled < kStalled && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(ProcessBulkChannelCounts().senders_stalled, kStalled)
      << "the worker's first bulk senders did not all stall";

  Consumed beside = Consume(cluster.address(), LargeSteps(), Remote("bulk-beside"), 2);
  // Read to its end while the other streams still wait for their bytes: not delayed by them.
  const int64_t stalled_at_end = ProcessBulkChannelCounts().senders_stalled;
  const int64_t failures_at_end = BulkFailures() - failures_before;
  ASSERT_TRUE(beside.status.ok()) << beside.status;
  EXPECT_EQ(beside.steps.size(), static_cast<size_t>(kSteps));
  ExpectExactlyOnce({beside}, kElements);
  EXPECT_EQ(stalled_at_end, kStalled) << "the other job ended only after a stall did";
  EXPECT_EQ(failures_at_end, 0) << "the other job ended only after a stalled stream failed";

  for (std::thread& t : stalled_readers) t.join();
  for (const Consumed& c : stalled) {
    ASSERT_TRUE(c.status.ok()) << c.status;
    EXPECT_EQ(c.steps.size(), static_cast<size_t>(kSteps));
    ExpectExactlyOnce({c}, kElements);
  }
  // Each stalled stream failed once (its receive timed out) and its call was made again once.
  EXPECT_EQ(BulkFailures() - failures_before, kStalled);
  EXPECT_EQ(ProcessBulkChannelCounts().senders_stalled, 0);
}

}  // namespace
}  // namespace sluice
