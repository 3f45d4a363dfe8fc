// ResolveClusterConfig / ParseClusterSpec (sluice/cluster_spec.h): the TF_CONFIG-style spec,
// Slurm and Kubernetes environment, the precedence between sources, and error messages that
// name the source and the key.
#include "sluice/cluster_spec.h"

#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

// Sources with a fake environment and filesystem.
struct FakeSources {
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> files;
  ClusterSpecSources sources;

  FakeSources() {
    sources.getenv = [this](const std::string& name) -> std::optional<std::string> {
      auto it = env.find(name);
      if (it == env.end()) return std::nullopt;
      return it->second;
    };
    sources.read_file = [this](const std::string& path) -> absl::StatusOr<std::string> {
      auto it = files.find(path);
      if (it == files.end()) return absl::NotFoundError("cannot open cluster spec file " + path);
      return it->second;
    };
  }
  absl::StatusOr<ClusterConfig> Resolve() const { return ResolveClusterConfig(sources); }
};

constexpr char kSluiceSpec[] = R"({
  "cluster": {"coordinator": ["coord:5000"], "worker": ["in-0:5001", "in-1:5001"],
              "trainer": ["gpu-0:2222", "gpu-1:2222"]},
  "task": {"type": "trainer", "index": 1}})";

TEST(ClusterSpecTest, DefaultsAreTheLaptop) {
  FakeSources f;
  absl::StatusOr<ClusterConfig> c = f.Resolve();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_address, "");
  EXPECT_EQ(c->consumer_index, 0);
  EXPECT_EQ(c->num_consumers, 1);
  EXPECT_EQ(c->role, "trainer");
  EXPECT_EQ(c->coordinator_source, "default");
}

TEST(ClusterSpecTest, TfConfigWithTrainers) {
  FakeSources f;
  f.env["TF_CONFIG"] = kSluiceSpec;
  absl::StatusOr<ClusterConfig> c = f.Resolve();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_address, "coord:5000");
  EXPECT_EQ(c->consumer_index, 1);
  EXPECT_EQ(c->num_consumers, 2);
  EXPECT_EQ(c->role, "trainer");
  EXPECT_EQ(c->coordinator_source, "TF_CONFIG");
  EXPECT_EQ(c->consumer_index_source, "TF_CONFIG");

  absl::StatusOr<ParsedClusterSpec> p = ParseClusterSpec(kSluiceSpec, "x");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->input_workers, ::testing::ElementsAre("in-0:5001", "in-1:5001"));
  EXPECT_THAT(p->trainers, ::testing::ElementsAre("gpu-0:2222", "gpu-1:2222"));
}

TEST(ClusterSpecTest, TensorFlowStyleChiefAndWorkers) {
  // No "trainer" key: chief is consumer 0, worker i is consumer i + 1.
  FakeSources f;
  f.env["TF_CONFIG"] = R"({"cluster": {"coordinator": "coord:5000", "chief": ["c:1"],
                                       "worker": ["w0:1", "w1:1"], "ps": ["p:1"]},
                           "task": {"type": "worker", "index": 1}})";
  absl::StatusOr<ClusterConfig> c = f.Resolve();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_address, "coord:5000");
  EXPECT_EQ(c->consumer_index, 2);
  EXPECT_EQ(c->num_consumers, 3);

  f.env["TF_CONFIG"] = R"({"cluster": {"chief": ["c:1"], "worker": ["w0:1"]},
                           "task": {"type": "chief"}})";
  c = f.Resolve();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_address, "");  // a pure TensorFlow TF_CONFIG names no coordinator
  EXPECT_EQ(c->consumer_index, 0);
  EXPECT_EQ(c->num_consumers, 2);
}

TEST(ClusterSpecTest, NonTrainerRoleGivesOnlyTheCoordinator) {
  FakeSources f;
  f.env["SLUICE_CLUSTER"] = R"({"cluster": {"coordinator": ["coord:5000"], "worker": ["a:1"],
                                            "trainer": ["t:1", "t:2"]},
                                "task": {"type": "worker", "index": 0}})";
  absl::StatusOr<ClusterConfig> c = f.Resolve();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->role, "worker");
  EXPECT_EQ(c->coordinator_address, "coord:5000");
  EXPECT_EQ(c->consumer_index_source, "default");
}

TEST(ClusterSpecTest, IndexOutOfRangeNamesSourceAndKey) {
  FakeSources f;
  f.env["TF_CONFIG"] = R"({"cluster": {"coordinator": ["c:1"], "trainer": ["a:1", "b:1"]},
                           "task": {"type": "trainer", "index": 3}})";
  absl::StatusOr<ClusterConfig> c = f.Resolve();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("TF_CONFIG: task.index 3 out of range for 2 trainers"));
}

TEST(ClusterSpecTest, MalformedSpecsAreRejectedNamingTheKey) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {"not json", "SLUICE_CLUSTER: "},
      {"[1]", "must be a JSON object"},
      {R"({"cluster": []})", "cluster must be an object"},
      {R"({"cluster": {"coordinator": ["a:1", "b:1"]}})",
       "cluster.coordinator must hold exactly one address, has 2"},
      {R"({"cluster": {"coordinator": [5]}})", "cluster.coordinator[0] must be a string"},
      {R"({"cluster": {"trainer": "t:1"}})", "cluster.trainer must be a list"},
      {R"({"cluster": {"trainer": ["t:1"]}, "task": {"index": 0}})",
       "task.type must be a non-empty string"},
      {R"({"cluster": {"trainer": ["t:1"]}, "task": {"type": "trainer", "index": -1}})",
       "task.index must be a non-negative integer"},
      {R"({"cluster": {"trainer": ["t:1"]}, "task": {"type": "trainer", "index": "0"}})",
       "task.index must be a non-negative integer"},
      {R"({"cluster": {"trainer": ["t:1"]}, "task": {"type": "ps"}})",
       "task.type 'ps' names no entry of cluster"},
      {R"({"cluster": {"chief": ["a:1", "b:1"]}})", "cluster.chief must hold at most one"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "chief"}})",
       "task.type 'chief' but cluster.chief is missing or empty"},
  };
  for (const Case& c : cases) {
    FakeSources f;
    f.env["SLUICE_CLUSTER"] = c.json;
    absl::StatusOr<ClusterConfig> r = f.Resolve();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.json;
    EXPECT_THAT(r.status().message(), HasSubstr("SLUICE_CLUSTER")) << c.json;
  }
}

TEST(ClusterSpecTest, SlurmEnvironment) {
  FakeSources f;
  f.env["SLURM_PROCID"] = "2";
  f.env["SLURM_NTASKS"] = "4";
  f.env["SLUICE_COORDINATOR"] = "node1:5000";
  absl::StatusOr<ClusterConfig> c = f.Resolve();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_address, "node1:5000");
  EXPECT_EQ(c->coordinator_source, "SLUICE_COORDINATOR");
  EXPECT_EQ(c->consumer_index, 2);
  EXPECT_EQ(c->num_consumers, 4);
  EXPECT_EQ(c->consumer_index_source, "SLURM_PROCID/SLURM_NTASKS");

  f.env["SLURM_PROCID"] = "two";
  c = f.Resolve();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("SLURM_PROCID: 'two' is not an integer"));
}

TEST(ClusterSpecTest, KubernetesIndexedJob) {
  FakeSources f;
  f.env["JOB_COMPLETION_INDEX"] = "1";
  f.env["SLUICE_NUM_CONSUMERS"] = "3";
  f.env["SLUICE_COORDINATOR"] = "sluice-coordinator.sluice.svc.cluster.local:5000";
  absl::StatusOr<ClusterConfig> c = f.Resolve();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->consumer_index, 1);
  EXPECT_EQ(c->num_consumers, 3);
  EXPECT_EQ(c->consumer_index_source, "JOB_COMPLETION_INDEX");

  // Without the count the index is out of range for the default of one consumer.
  f.env.erase("SLUICE_NUM_CONSUMERS");
  c = f.Resolve();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("JOB_COMPLETION_INDEX: consumer index 1 out of range for 1 consumers "
                        "(from default)"));
}

TEST(ClusterSpecTest, Precedence) {
  // Flags > file > SLUICE_CLUSTER > TF_CONFIG > SLUICE_* env > Slurm > Kubernetes.
  FakeSources f;
  f.env["JOB_COMPLETION_INDEX"] = "0";
  f.env["SLURM_PROCID"] = "1";
  f.env["SLURM_NTASKS"] = "5";
  f.env["SLUICE_COORDINATOR"] = "env:1";
  f.env["TF_CONFIG"] =
      R"({"cluster": {"coordinator": ["tf:1"], "trainer": ["a", "b", "c"]},
          "task": {"type": "trainer", "index": 2}})";
  absl::StatusOr<ClusterConfig> c = f.Resolve();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_address, "tf:1");
  EXPECT_EQ(c->consumer_index, 2);
  EXPECT_EQ(c->num_consumers, 3);

  // SLUICE_CLUSTER hides TF_CONFIG entirely (even a broken one).
  f.env["TF_CONFIG"] = "broken";
  f.env["SLUICE_CLUSTER"] = R"({"cluster": {"coordinator": ["sc:1"]}})";
  c = f.Resolve();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_address, "sc:1");
  EXPECT_EQ(c->coordinator_source, "SLUICE_CLUSTER");
  // No task in the spec: the index comes from Slurm.
  EXPECT_EQ(c->consumer_index, 1);
  EXPECT_EQ(c->num_consumers, 5);

  f.files["/etc/cluster.json"] = kSluiceSpec;
  f.sources.spec_file = "/etc/cluster.json";
  c = f.Resolve();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_address, "coord:5000");
  EXPECT_EQ(c->coordinator_source, "--cluster_spec=/etc/cluster.json");
  EXPECT_EQ(c->consumer_index, 1);
  EXPECT_EQ(c->num_consumers, 2);

  f.sources.flag_coordinator = "flag:1";
  f.sources.flag_consumer_index = 0;
  c = f.Resolve();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_address, "flag:1");
  EXPECT_EQ(c->coordinator_source, "--coordinator");
  EXPECT_EQ(c->consumer_index, 0);
  EXPECT_EQ(c->consumer_index_source, "--consumer_index");
  EXPECT_EQ(c->num_consumers, 2);  // still from the file

  // A flag that contradicts the file is checked against it, naming both.
  f.sources.flag_consumer_index = 7;
  c = f.Resolve();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("--consumer_index: consumer index 7 out of range for 2 consumers (from "
                        "--cluster_spec=/etc/cluster.json)"));
}

TEST(ClusterSpecTest, MissingSpecFileIsNotFound) {
  FakeSources f;
  f.sources.spec_file = "/nope.json";
  absl::StatusOr<ClusterConfig> c = f.Resolve();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("/nope.json"));
}

TEST(ClusterSpecTest, FromProcessReadsRealFiles) {
  ClusterSpecSources s = ClusterSpecSources::FromProcess();
  s.spec_file = "/nonexistent-sluice-dir/cluster.json";
  absl::StatusOr<ClusterConfig> c = ResolveClusterConfig(s);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("/nonexistent-sluice-dir/cluster.json"));
}

}  // namespace
}  // namespace sluice
