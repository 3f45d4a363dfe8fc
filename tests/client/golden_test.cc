// Runs every case of tests/testdata/distribute/index.json (written by TensorFlow 2.15 through
// tools/golden/gen_distribute_goldens.py) through MirroredStrategy and compares the per-replica
// values of every step and the element_spec with TF's, structurally, in the form TF gives them:
// PerReplica values and PerReplicaSpecs, or the plain element and TensorSpecs where TF does not
// wrap (one device on one worker), so the dataset's wrapping() is checked too. index.json says
// which oracle produced each case (TF's MirroredStrategy, TF's MultiWorkerMirroredStrategy in
// one process per worker, or, for several replicas per worker, input_lib's replay).
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/format/json_format.h"
#include "core/util/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/strategy.h"

namespace sluice {
namespace {

const char kDir[] = "tests/testdata/distribute/";

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// Field accessors with defaults, for the index's case objects.
std::string Str(const JsonValue& c, const char* key, const std::string& fallback = "") {
  const JsonValue* v = c.Find(key);
  return v != nullptr && v->is_string() ? v->string_value() : fallback;
}
int64_t Int(const JsonValue& c, const char* key, int64_t fallback = 0) {
  const JsonValue* v = c.Find(key);
  return v != nullptr && v->int_value().has_value() ? *v->int_value() : fallback;
}

std::vector<JsonValue> LoadCases() {
  std::string text;
  if (!ReadFile(std::string(kDir) + "index.json", &text)) {
    ADD_FAILURE() << "cannot read " << kDir << "index.json";
    return {};
  }
  absl::StatusOr<JsonValue> index = ParseJson(text);
  if (!index.ok()) {
    ADD_FAILURE() << index.status();
    return {};
  }
  const JsonValue* cases = index->Find("cases");
  return cases == nullptr ? std::vector<JsonValue>() : cases->items();
}

// The distributed dataset for a case, or its error.
absl::StatusOr<DistributedDataset> Build(const JsonValue& c) {
  std::vector<std::string> devices;
  for (int64_t i = 0; i < Int(c, "devices"); ++i) devices.push_back("CPU:" + std::to_string(i));
  absl::StatusOr<MirroredStrategy> strategy = MirroredStrategy::Create(
      devices, InputWorkerLayout{Int(c, "num_workers", 1), Int(c, "worker_index")});
  if (!strategy.ok()) return strategy.status();
  absl::StatusOr<Dataset> ds = Dataset::Parse(Str(c, "expression"));
  if (!ds.ok()) return ds.status();
  InputOptions options;
  absl::StatusOr<AutoShardPolicy> policy = ParseAutoShardPolicy(Str(c, "policy", "AUTO"));
  if (!policy.ok()) return policy.status();
  options.auto_shard_policy = *policy;
  if (Str(c, "replication_mode") == "PER_REPLICA") {
    options.experimental_replication_mode = InputReplicationMode::kPerReplica;
  }
  if (Str(c, "api") == "from_function") {
    Dataset fixed = *ds;
    return strategy->DistributeDatasetsFromFunction(
        [fixed](const InputContext&) -> absl::StatusOr<Dataset> { return fixed; }, options);
  }
  return strategy->ExperimentalDistributeDataset(*ds, options);
}

TEST(DistributeGoldenTest, EveryCaseMatchesTensorFlow) {
  std::vector<JsonValue> cases = LoadCases();
  ASSERT_GE(cases.size(), 40u);
  for (const JsonValue& c : cases) {
    const std::string name = Str(c, "name");
    SCOPED_TRACE(name + ": " + Str(c, "expression"));
    absl::StatusOr<DistributedDataset> dist = Build(c);
    if (c.Find("error_contains") != nullptr) {
      absl::Status status = dist.status();
      if (dist.ok()) {  // TF fails at the first step; Sluice may fail earlier
        absl::StatusOr<DistributedIterator> it = dist->MakeIterator();
        status = it.ok() ? it->GetNext().status() : it.status();
      }
      EXPECT_THAT(std::string(status.message()),
                  ::testing::HasSubstr(Str(c, "error_contains")));
      continue;
    }
    ASSERT_TRUE(dist.ok()) << dist.status();

    // element_spec, in `sluicectl element-spec --format=json`'s format.
    std::string text;
    ASSERT_TRUE(ReadFile(kDir + name + ".spec.json", &text));
    absl::StatusOr<JsonValue> want_spec = ParseJson(text);
    ASSERT_TRUE(want_spec.ok()) << want_spec.status();
    absl::StatusOr<JsonValue> got_spec =
        ParseJson(FormatElementSpecJson(dist->element_spec(), dist->wrapping()));
    ASSERT_TRUE(got_spec.ok()) << got_spec.status();
    EXPECT_EQ(*got_spec, *want_spec);

    // Every step, in `sluicectl run --format=json`'s format.
    ASSERT_TRUE(ReadFile(kDir + name + ".jsonl", &text));
    std::vector<JsonValue> steps;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      absl::StatusOr<JsonValue> step = ParseJson(line);
      ASSERT_TRUE(step.ok()) << step.status() << ": " << line;
      steps.push_back(*std::move(step));
    }
    absl::StatusOr<DistributedIterator> it = dist->MakeIterator();
    ASSERT_TRUE(it.ok()) << it.status();
    for (size_t s = 0; s < steps.size(); ++s) {
      absl::StatusOr<PerReplica<Element>> x = it->GetNext();
      ASSERT_TRUE(x.ok()) << "step " << s << ": " << x.status();
      absl::StatusOr<JsonValue> got =
          ParseJson(FormatRunStepJson(static_cast<int64_t>(s), *x, it->wrapping()));
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, steps[s]) << "step " << s;
    }
    if (static_cast<int64_t>(steps.size()) < Int(c, "max_steps")) {
      absl::StatusOr<PerReplica<Element>> x = it->GetNext();
      EXPECT_TRUE(absl::IsOutOfRange(x.status()))
          << "TF ends after " << steps.size() << " steps; Sluice goes on: " << x.status();
    }
  }
}

}  // namespace
}  // namespace sluice
