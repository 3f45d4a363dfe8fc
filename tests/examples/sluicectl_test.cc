// sluicectl end to end: the binary run as a user runs it. `run` and `element-spec` print the
// seed's blocks (tf format) and the JSON lines the CLI documents; errors have the documented
// exit codes (1 library error, 2 usage error) and messages.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kSeedIterPipeline[] = "from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)";
constexpr char kSeedSpecPipeline[] = "from_tensors(([1.],[2])).repeat(100).batch(16)";

SubprocessResult Sluicectl(std::vector<std::string> args) {
  args.insert(args.begin(), BuildPath("bin/sluicectl"));
  absl::StatusOr<SubprocessResult> r = RunSubprocess(args);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SubprocessResult{};
}

std::string Golden(const std::string& name) {
  absl::StatusOr<std::string> g = ReadFileToString(SourcePath("tests/testdata/seed/" + name));
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : "";
}

TEST(SluicectlRunTest, TfFormatPrintsTheSeedIterBlock) {
  SubprocessResult r = Sluicectl({"run", std::string("--pipeline=") + kSeedIterPipeline,
                                  "--devices=GPU:0,GPU:1", "--steps=1"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_EQ(r.stdout_text, Golden("seed_iter.txt"));
}

TEST(SluicectlRunTest, TfFormatSeparatesStepsAsPythonPrintDoes) {
  // `for x in dist: print(x)`: each value followed by a newline, nothing in between.
  SubprocessResult r = Sluicectl({"run", std::string("--pipeline=") + kSeedIterPipeline,
                                  "--devices=GPU:0,GPU:1", "--steps=3", "--format=tf"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe() << "\n" << r.stderr_text;
  const std::string block = Golden("seed_iter.txt");
  EXPECT_EQ(r.stdout_text, block + block + block);
}

TEST(SluicectlRunTest, JsonFormatPrintsOneLinePerStep) {
  SubprocessResult r = Sluicectl({"run", std::string("--pipeline=") + kSeedIterPipeline,
                                  "--devices=GPU:0,GPU:1", "--steps=2", "--format=json"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_EQ(r.stdout_text,
            "{\"step\": 0, \"per_replica\": [{\"dtype\": \"int32\", \"shape\": [2], "
            "\"values\": [1, 2]}, {\"dtype\": \"int32\", \"shape\": [2], \"values\": [3, 4]}]}\n"
            "{\"step\": 1, \"per_replica\": [{\"dtype\": \"int32\", \"shape\": [2], "
            "\"values\": [1, 2]}, {\"dtype\": \"int32\", \"shape\": [2], \"values\": [3, 4]}]}\n");
}

TEST(SluicectlRunTest, RunsAFinitePipelineToTheEndIncludingThePartialStep) {
  // TF (2.15) prints exactly this for range(5).batch(4) on two replicas: the partial last
  // step gives replica 1 a size-0 batch.
  SubprocessResult r =
      Sluicectl({"run", "--pipeline=range(5).batch(4)", "--devices=GPU:0,GPU:1"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_EQ(r.stdout_text,
            "PerReplica:{\n"
            "  0: tf.Tensor([0 1], shape=(2,), dtype=int64),\n"
            "  1: tf.Tensor([2 3], shape=(2,), dtype=int64)\n"
            "}\n"
            "PerReplica:{\n"
            "  0: tf.Tensor([4], shape=(1,), dtype=int64),\n"
            "  1: tf.Tensor([], shape=(0,), dtype=int64)\n"
            "}\n");
}

TEST(SluicectlRunTest, PartialLastBatchIsSplitAsTfSplitsIt) {
  // TF (2.15): range(10).batch(4) on two replicas ends with [8] and [9].
  SubprocessResult r = Sluicectl(
      {"run", "--pipeline=range(10).batch(4)", "--devices=GPU:0,GPU:1", "--format=json"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_EQ(r.stdout_text,
            "{\"step\": 0, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [2], "
            "\"values\": [0, 1]}, {\"dtype\": \"int64\", \"shape\": [2], \"values\": [2, 3]}]}\n"
            "{\"step\": 1, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [2], "
            "\"values\": [4, 5]}, {\"dtype\": \"int64\", \"shape\": [2], \"values\": [6, 7]}]}\n"
            "{\"step\": 2, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [1], "
            "\"values\": [8]}, {\"dtype\": \"int64\", \"shape\": [1], \"values\": [9]}]}\n");
}

TEST(SluicectlRunTest, StepsBoundsAFinitePipelineToo) {
  SubprocessResult r = Sluicectl(
      {"run", "--pipeline=range(8).batch(4)", "--devices=GPU:0,GPU:1", "--steps=1"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_EQ(r.stdout_text,
            "PerReplica:{\n"
            "  0: tf.Tensor([0 1], shape=(2,), dtype=int64),\n"
            "  1: tf.Tensor([2 3], shape=(2,), dtype=int64)\n"
            "}\n");
}

TEST(SluicectlRunTest, DataShardingAcrossInputWorkers) {
  // TF_SEMANTICS.md: range(12) in global batches of 4, 2 workers with one replica each, DATA:
  // worker 1 gets [2,3], [6,7], [10,11].
  SubprocessResult r = Sluicectl({"run", "--pipeline=range(12).batch(4)", "--devices=GPU:0",
                                  "--num_workers=2", "--worker_index=1",
                                  "--auto_shard_policy=DATA", "--format=json"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_EQ(r.stdout_text,
            "{\"step\": 0, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [2], "
            "\"values\": [2, 3]}]}\n"
            "{\"step\": 1, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [2], "
            "\"values\": [6, 7]}]}\n"
            "{\"step\": 2, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [2], "
            "\"values\": [10, 11]}]}\n");
}

TEST(SluicectlRunTest, InfinitePipelineWithoutStepsIsRefused) {
  SubprocessResult r = Sluicectl({"run", std::string("--pipeline=") + kSeedIterPipeline,
                                  "--devices=GPU:0,GPU:1"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_EQ(r.stdout_text, "");
  EXPECT_THAT(r.stderr_text, HasSubstr("sluicectl: "));
  EXPECT_THAT(r.stderr_text, HasSubstr("infinite"));
  EXPECT_THAT(r.stderr_text, HasSubstr("--steps"));
}

TEST(SluicectlRunTest, MalformedPipelineNamesTheColumn) {
  SubprocessResult r =
      Sluicectl({"run", "--pipeline=range(8).batch(4", "--devices=GPU:0,GPU:1"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_EQ(r.stdout_text, "");
  EXPECT_THAT(r.stderr_text, HasSubstr("sluicectl: "));
  EXPECT_THAT(r.stderr_text, HasSubstr("column"));
}

TEST(SluicectlRunTest, UnbatchedPipelineGivesTfsError) {
  SubprocessResult r = Sluicectl({"run", "--pipeline=range(8)", "--devices=GPU:0,GPU:1"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_THAT(r.stderr_text, HasSubstr("batch"));
}

TEST(SluicectlElementSpecTest, TfFormatPrintsTheSeedBlock) {
  SubprocessResult r = Sluicectl({"element-spec", std::string("--pipeline=") + kSeedSpecPipeline,
                                  "--devices=GPU:0,GPU:1"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_EQ(r.stdout_text, Golden("seed_element_spec.txt"));
}

TEST(SluicectlElementSpecTest, JsonFormatForASingleTensor) {
  SubprocessResult r =
      Sluicectl({"element-spec", "--pipeline=from_tensors([2.]).repeat(100).batch(4)",
                 "--devices=GPU:0,GPU:1", "--format=json"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_EQ(r.stdout_text,
            "{\"per_replica\": [{\"dtype\": \"float32\", \"shape\": [null, 1]}, "
            "{\"dtype\": \"float32\", \"shape\": [null, 1]}]}\n");
}

TEST(SluicectlUsageTest, UnknownFlagExits2) {
  SubprocessResult r = Sluicectl({"run", "--pipelin=range(8).batch(4)"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_EQ(r.stdout_text, "");
  EXPECT_THAT(r.stderr_text, HasSubstr("--pipelin"));
}

TEST(SluicectlUsageTest, FlagOfAnotherCommandExits2) {
  SubprocessResult r =
      Sluicectl({"element-spec", "--pipeline=range(8).batch(4)", "--steps=3"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_THAT(r.stderr_text, HasSubstr("--steps"));
}

TEST(SluicectlUsageTest, BadFlagValuesExit2) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"run", "--pipeline=range(8).batch(4)", "--steps=many"},
           {"run", "--pipeline=range(8).batch(4)", "--format=xml"},
           {"run", "--pipeline=range(8).batch(4)", "--auto_shard_policy=SOMETIMES"},
           {"run", "--pipeline=range(8).batch(4)", "--num_workers=2", "--worker_index=2"},
           {"run", "--pipeline=range(8).batch(4)", "--steps"},
           {"run"},
           {"run", "--pipeline=range(8).batch(4)", "extra"},
       }) {
    SubprocessResult r = Sluicectl(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.Describe() << "\n" << r.stderr_text;
    EXPECT_THAT(r.stderr_text, StartsWith("sluicectl run: ")) << args.back();
  }
}

TEST(SluicectlUsageTest, UnknownCommandExits2) {
  SubprocessResult r = Sluicectl({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_THAT(r.stderr_text, HasSubstr("frobnicate"));
}

TEST(SluicectlUsageTest, HelpAndNoArgumentsPrintUsage) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{}, {"help"}, {"--help"}}) {
    SubprocessResult r = Sluicectl(args);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    EXPECT_THAT(r.stdout_text, HasSubstr("Usage: sluicectl <command>"));
    EXPECT_THAT(r.stdout_text, HasSubstr("  run --pipeline="));
    EXPECT_THAT(r.stdout_text, HasSubstr("  element-spec --pipeline="));
  }
  SubprocessResult r = Sluicectl({"help", "run"});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_THAT(r.stdout_text, HasSubstr("--auto_shard_policy"));
  r = Sluicectl({"run", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_THAT(r.stdout_text, HasSubstr("--steps"));
}

}  // namespace
}  // namespace sluice
