// sluicectl takes --coordinator, --consumer_index and --num_consumers from a cluster spec
// (--cluster_spec=FILE, SLUICE_CLUSTER, TF_CONFIG, SLUICE_COORDINATOR, Slurm's environment) when
// the command line does not give them, says where they came from, and rejects a bad spec naming
// the source and key. The coordinator named here (127.0.0.1:1) refuses connections, so a
// command that reaches it fails at once, after printing the resolved configuration.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kUnreachable[] = "127.0.0.1:1";

// Runs sluicectl with `env` added to a cleared cluster environment.
SubprocessResult Sluicectl(std::vector<std::string> args, std::vector<std::string> env) {
  args.insert(args.begin(), BuildPath("bin/sluicectl"));
  // Unset (empty counts as unset) whatever the test runner's environment holds.
  std::vector<std::string> full = env;
  for (const char* name : {"TF_CONFIG", "SLUICE_CLUSTER", "SLUICE_COORDINATOR",
                           "SLUICE_CONSUMER_INDEX", "SLUICE_NUM_CONSUMERS", "SLURM_PROCID",
                           "SLURM_NTASKS", "JOB_COMPLETION_INDEX"}) {
    const std::string prefix = std::string(name) + "=";
    bool given = false;
    for (const std::string& e : env) given = given || e.rfind(prefix, 0) == 0;
    if (!given) full.push_back(prefix);
  }
  SubprocessOptions options;
  options.env = full;
  options.timeout = absl::Seconds(60);
  absl::StatusOr<SubprocessResult> r = RunSubprocess(args, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SubprocessResult{};
}

TEST(SluicectlClusterSpecTest, BadTfConfigIsAnErrorNamingSourceAndKey) {
  SubprocessResult r = Sluicectl(
      {"run", "--pipeline=range(4)", "--devices=CPU:0"},
      {R"(TF_CONFIG={"cluster": {"coordinator": ["127.0.0.1:1"], "trainer": ["a:1", "b:1"]},
                     "task": {"type": "trainer", "index": 3}})"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("TF_CONFIG: task.index 3 out of range for 2 trainers"));
}

TEST(SluicectlClusterSpecTest, CoordinatorFromSluiceCluster) {
  SubprocessResult r = Sluicectl(
      {"status", "--retry_deadline=0s"},
      {std::string("SLUICE_CLUSTER={\"cluster\": {\"coordinator\": [\"") + kUnreachable +
       "\"]}}"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("cluster spec: coordinator 127.0.0.1:1 (SLUICE_CLUSTER)"));
  EXPECT_THAT(r.stderr_text, HasSubstr("GetStatus on coordinator 127.0.0.1:1"));
}

TEST(SluicectlClusterSpecTest, ExplicitEmptyCoordinatorFlagWinsAndRunsLocally) {
  SubprocessResult r = Sluicectl(
      {"run", "--coordinator=", "--pipeline=range(4).batch(2)", "--devices=CPU:0",
       "--format=json"},
      {std::string("SLUICE_COORDINATOR=") + kUnreachable});
  EXPECT_EQ(r.exit_code, 0) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_THAT(r.stdout_text, HasSubstr("\"values\": [0, 1]"));
  EXPECT_THAT(r.stderr_text, Not(HasSubstr("cluster spec")));
}

TEST(SluicectlClusterSpecTest, SpecFileGivesCoordinatorAndConsumer) {
  const std::string path = ::testing::TempDir() + "/sluicectl_cluster_spec_test.json";
  {
    std::ofstream out(path);
    out << R"({"cluster": {"coordinator": ["127.0.0.1:1"], "trainer": ["t0:1", "t1:1", "t2:1"]},
               "task": {"type": "trainer", "index": 2}})";
  }
  SubprocessResult r = Sluicectl({"run", "--cluster_spec=" + path, "--pipeline=range(4)",
                                  "--devices=CPU:0", "--retry_deadline=0s"},
                                 {"SLURM_PROCID=0", "SLURM_NTASKS=5"});  // the file wins
  std::remove(path.c_str());
  EXPECT_EQ(r.exit_code, 1) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("cluster spec: coordinator 127.0.0.1:1 (--cluster_spec=" +
                                       path + "); trainer 2 (--cluster_spec=" + path +
                                       ") of 3"));
  EXPECT_THAT(r.stderr_text, HasSubstr("RegisterDataset on coordinator 127.0.0.1:1"));
}

TEST(SluicectlClusterSpecTest, SlurmEnvironmentGivesTheConsumer) {
  SubprocessResult r = Sluicectl(
      {"run", "--pipeline=range(4)", "--devices=CPU:0", "--retry_deadline=0s"},
      {std::string("SLUICE_COORDINATOR=") + kUnreachable, "SLURM_PROCID=1", "SLURM_NTASKS=2"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_THAT(r.stderr_text,
              HasSubstr("cluster spec: coordinator 127.0.0.1:1 (SLUICE_COORDINATOR); trainer 1 "
                        "(SLURM_PROCID/SLURM_NTASKS) of 2 (SLURM_PROCID/SLURM_NTASKS)"));
}

TEST(SluicectlClusterSpecTest, ElementSpecTakesTheConsumerCount) {
  // element-spec has --num_consumers but no --consumer_index.
  SubprocessResult r = Sluicectl(
      {"element-spec", "--pipeline=range(4).batch(2)", "--devices=CPU:0", "--retry_deadline=0s"},
      {std::string("SLUICE_COORDINATOR=") + kUnreachable, "SLURM_PROCID=1", "SLURM_NTASKS=2"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("of 2 (SLURM_PROCID/SLURM_NTASKS)"));
  EXPECT_THAT(r.stderr_text, HasSubstr("on coordinator 127.0.0.1:1"));
}

TEST(SluicectlClusterSpecTest, MissingSpecFileNamesIt) {
  SubprocessResult r = Sluicectl(
      {"status", "--cluster_spec=/nonexistent-sluice/cluster.json"}, {});
  EXPECT_EQ(r.exit_code, 1) << r.Describe() << "\n" << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("/nonexistent-sluice/cluster.json"));
}

}  // namespace
}  // namespace sluice
