// Wire compression end to end (docs/SERVICE.md, "Wire compression"): a job with
// ServiceOptions::compression reads the same steps, exactly once, as one without; its frames
// travel compressed when forced on loopback, and raw on loopback when not forced (the worker
// decides per stream from the consumer's address). The in-process cluster shares this process,
// so the process's codec totals (core/rpc/wire_compression.h) show what went over the wire.
#include <string>
#include <vector>

#include "core/rpc/wire_compression.h"
#include "gtest/gtest.h"
#include "tests/worker/in_process_cluster.h"

namespace sluice {
namespace {

// 20,000 int64 in steps of 512 elements (4 KiB a step): small integers, which shrink.
constexpr int64_t kElements = 20000;

Dataset Data() { return Dataset::Range(kElements).Batch(512); }

ServiceOptions Options(ServiceCompression compression, bool force, const std::string& job) {
  ServiceOptions o;
  o.job_name = job;
  o.num_consumers = 2;
  o.compression = compression;
  o.force_compression = force;
  return o;
}

TEST(ServiceCompressionTest, ForcedCompressionDeliversTheSameStepsExactlyOnce) {
  Cluster cluster(1);  // one worker: the steps' order is fixed, so runs compare step by step
  const std::vector<Consumed> plain = ConsumeAll(
      cluster.address(), Data(), Options(ServiceCompression::kNone, false, "plain"), 2, 2);
  ExpectExactlyOnce(plain, kElements);
  for (ServiceCompression c : {ServiceCompression::kLz4, ServiceCompression::kZstd}) {
    const std::string job = c == ServiceCompression::kLz4 ? "lz4" : "zstd";
    const WireCodecTotals before = DecompressionTotals();
    const WireCodecTotals sent_before = CompressionTotals();
    const std::vector<Consumed> got =
        ConsumeAll(cluster.address(), Data(), Options(c, true, job), 2, 2);
    ExpectExactlyOnce(got, kElements);
    ASSERT_EQ(got.size(), plain.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(got[i].status.ok()) << job << ": " << got[i].status;
      EXPECT_EQ(got[i].steps, plain[i].steps) << job << " consumer " << i;
    }
    const WireCodecTotals after = DecompressionTotals();
    const WireCodecTotals sent_after = CompressionTotals();
    EXPECT_GT(after.frames, before.frames) << job;
    EXPECT_EQ(after.frames - before.frames, sent_after.frames - sent_before.frames) << job;
    const uint64_t raw = after.raw_bytes - before.raw_bytes;
    const uint64_t wire = after.wire_bytes - before.wire_bytes;
    // Every element's bytes went compressed (a frame that does not shrink goes raw and is
    // not counted), and they shrank.
    EXPECT_EQ(raw, static_cast<uint64_t>(kElements) * 8) << job;
    EXPECT_LT(wire, raw) << job;
  }
}

TEST(ServiceCompressionTest, OnLoopbackAJobsCompressionIsNotUsedUnlessForced) {
  Cluster cluster(2);
  const WireCodecTotals before = DecompressionTotals();
  const WireCodecTotals sent_before = CompressionTotals();
  const std::vector<Consumed> got = ConsumeAll(
      cluster.address(), Data(), Options(ServiceCompression::kLz4, false, "loopback"), 2, 1);
  ExpectExactlyOnce(got, kElements);
  EXPECT_EQ(DecompressionTotals().frames, before.frames);
  EXPECT_EQ(CompressionTotals().frames, sent_before.frames);
}

}  // namespace
}  // namespace sluice
