// IteratorCheckpoint's wire form and the job keys that say which sequence a checkpoint belongs
// to (client/service_job_options.h).
#include <string>

#include "client/service_job_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/distributed_dataset.h"
#include "sluice/service.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

TEST(IteratorCheckpointTest, RoundTripsThroughItsBytes) {
  IteratorCheckpoint c;
  c.job_key = "ds-0123456789abcdef:ranges:seed=7:shuffle=SHUFFLE_FULL:block=0:epochs=2";
  c.step = 1234;
  c.epoch = 1;
  c.step_in_epoch = 34;
  const std::string bytes = c.Serialize();
  EXPECT_EQ(bytes,
            "sluice-iterator/1 ds-0123456789abcdef:ranges:seed=7:shuffle=SHUFFLE_FULL:block=0:"
            "epochs=2 1234 1 34");
  absl::StatusOr<IteratorCheckpoint> back = IteratorCheckpoint::Parse(bytes + "\n");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, c);
}

TEST(IteratorCheckpointTest, RejectsWhatSerializeDidNotWrite) {
  for (const char* bad : {"", "sluice-iterator/1", "sluice-iterator/2 k 1 -1 -1",
                          "sluice-iterator/1 k one -1 -1", "sluice-iterator/1 k -5 -1 -1",
                          "sluice-iterator/1 k 1 -1 -1 extra", "garbage"}) {
    absl::StatusOr<IteratorCheckpoint> c = IteratorCheckpoint::Parse(bad);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_THAT(IteratorCheckpoint::Parse("nope").status().message(),
              HasSubstr("not an iterator checkpoint"));
}

ServiceOptions RangesOptions() {
  ServiceOptions o;
  o.sharding_policy = ServiceShardingPolicy::kRanges;
  o.order.seed = 42;
  o.order.shuffle = ServiceShuffle::kFull;
  o.order.num_epochs = 3;
  return o;
}

TEST(CheckpointJobKeyTest, DependsOnDatasetAndOrderOnly) {
  ServiceOptions a = RangesOptions();
  ServiceOptions b = RangesOptions();
  b.num_consumers = 4;  // a resumed job may change the layout and the workers
  b.num_tasks = 7;
  b.order.range_steps = 3;
  EXPECT_EQ(CheckpointJobKey(a, "ds-1"), CheckpointJobKey(b, "ds-1"));
  EXPECT_NE(CheckpointJobKey(a, "ds-1"), CheckpointJobKey(a, "ds-2"));
  b = RangesOptions();
  b.order.seed = 43;
  EXPECT_NE(CheckpointJobKey(a, "ds-1"), CheckpointJobKey(b, "ds-1"));
  b = RangesOptions();
  b.order.shuffle = ServiceShuffle::kBlock;
  EXPECT_NE(CheckpointJobKey(a, "ds-1"), CheckpointJobKey(b, "ds-1"));
  b = RangesOptions();
  b.sharding_policy = ServiceShardingPolicy::kData;
  EXPECT_NE(CheckpointJobKey(a, "ds-1"), CheckpointJobKey(b, "ds-1"));
}

TEST(CheckResumeTest, AcceptsItsOwnCheckpointAndNamesAMismatch) {
  ServiceOptions o = RangesOptions();
  EXPECT_TRUE(CheckResume(o, "ds-1").ok());  // nothing to resume
  IteratorCheckpoint c;
  c.job_key = CheckpointJobKey(o, "ds-1");
  c.step = 10;
  o.resume_from = c;
  EXPECT_TRUE(CheckResume(o, "ds-1").ok());
  absl::Status other = CheckResume(o, "ds-2");
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other.message(), HasSubstr("ds-1"));
  EXPECT_THAT(other.message(), HasSubstr("ds-2"));
  o.sharding_policy = ServiceShardingPolicy::kDynamic;
  EXPECT_THAT(CheckResume(o, "ds-1").message(), HasSubstr("kRanges or kData"));
  o.sharding_policy = ServiceShardingPolicy::kRanges;
  o.read_mode = ServiceReadMode::kIndependent;
  EXPECT_EQ(CheckResume(o, "ds-1").code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceJobNameTest, ResumedConsumersShareAJobPerCheckpoint) {
  ServiceOptions o = RangesOptions();
  o.job_name = "train";
  EXPECT_EQ(ServiceJobName(o), "train");
  IteratorCheckpoint c;
  c.job_key = CheckpointJobKey(o, "ds-1");
  c.step = 250;
  o.resume_from = c;
  EXPECT_EQ(ServiceJobName(o), "train@250");
  o.job_name = "";
  EXPECT_EQ(ServiceJobName(o), "");
}

TEST(JobOptionsProtoTest, CarriesTheOrderAndTheResumeStep) {
  ServiceOptions o = RangesOptions();
  o.order.range_steps = 5;
  IteratorCheckpoint c;
  c.step = 17;
  o.resume_from = c;
  proto::JobOptions jo = JobOptionsProto(o, "ds-1", 2);
  EXPECT_EQ(jo.sharding_policy(), proto::SHARDING_RANGES);
  EXPECT_EQ(jo.order().seed(), 42u);
  EXPECT_EQ(jo.order().shuffle(), proto::SHUFFLE_FULL);
  EXPECT_EQ(jo.order().num_epochs(), 3);
  EXPECT_EQ(jo.order().range_steps(), 5);
  EXPECT_EQ(jo.start_step(), 17);
  EXPECT_EQ(jo.replicas_per_consumer(), 2);
  o.sharding_policy = ServiceShardingPolicy::kData;
  EXPECT_FALSE(JobOptionsProto(o, "ds-1", 2).has_order());
}

}  // namespace
}  // namespace sluice
