// The bulk data channel end to end in one process (core/rpc/bulk_channel.h): consumers with
// shared memory off take their large frames' bytes on a socket next to the gRPC stream; the
// same job read over the bulk channel and over gRPC alone gives the same steps, exactly once;
// a socket cut in the middle of a frame on every call loses and duplicates no step (the call is
// made again); a data port nobody listens on falls back to gRPC once, counted.
#include <string>
#include <vector>

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

  ServiceOptions off = Remote("bulk-off-consumer");
  off.bulk_data = false;
  Consumed grpc = Consume(cluster.address(), LargeSteps(), off, 2);
  ASSERT_TRUE(grpc.status.ok()) << grpc.status;
  EXPECT_EQ(ProcessBulkChannelCounts().frames_received, after.frames_received);
  ASSERT_EQ(bulk.steps.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(bulk.steps, grpc.steps);
  ExpectExactlyOnce({bulk}, kElements);
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

}  // namespace
}  // namespace sluice
