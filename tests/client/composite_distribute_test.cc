// SparseTensor and RaggedTensor elements across replicas (issue 31): what in-process mode gives
// equals TF's MirroredStrategy step by step and in its element_spec, both as TF prints them
// (tests/testdata/distribute/composites.txt, tools/golden/gen_composite_distribute_goldens.py).
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/format/tensor_format.h"
#include "gtest/gtest.h"
#include "sluice/per_replica_format.h"
#include "sluice/strategy.h"

namespace sluice {
namespace {

struct DistributeCase {
  std::string name;
  std::string pipeline;
  int64_t devices = 0;
  std::string policy;
  std::string spec;
  std::vector<std::string> steps;  // str(PerReplica) of each step
};

// tests/testdata/distribute/composites.txt (format: its generator's docstring).
std::vector<DistributeCase> ReadCases() {
  std::ifstream in("tests/testdata/distribute/composites.txt");
  EXPECT_TRUE(in.good()) << "cannot read tests/testdata/distribute/composites.txt";
  std::vector<DistributeCase> cases;
  DistributeCase c;
  std::vector<std::string> step;
  bool in_step = false;
  auto end_step = [&] {
    if (in_step) c.steps.push_back(absl::StrJoin(step, "\n"));
    step.clear();
    in_step = false;
  };
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "@case ")) {
      c = DistributeCase{line.substr(6), "", 0, "", "", {}};
    } else if (absl::StartsWith(line, "@pipeline ")) {
      c.pipeline = line.substr(10);
    } else if (absl::StartsWith(line, "@devices ")) {
      c.devices = std::stoll(line.substr(9));
    } else if (absl::StartsWith(line, "@policy ")) {
      c.policy = line.substr(8);
    } else if (absl::StartsWith(line, "@spec ")) {
      c.spec = line.substr(6);
    } else if (line == "@step") {
      end_step();
      in_step = true;
    } else if (line == "@end") {
      end_step();
      cases.push_back(std::move(c));
    } else if (in_step) {
      step.push_back(line);
    }
  }
  return cases;
}

absl::StatusOr<DistributedDataset> Distribute(const DistributeCase& c) {
  std::vector<std::string> devices;
  for (int64_t i = 0; i < c.devices; ++i) devices.push_back(absl::StrCat("CPU:", i));
  absl::StatusOr<MirroredStrategy> strategy = MirroredStrategy::Create(devices);
  if (!strategy.ok()) return strategy.status();
  absl::StatusOr<Dataset> dataset = Dataset::Parse(c.pipeline);
  if (!dataset.ok()) return dataset.status();
  InputOptions options;
  absl::StatusOr<AutoShardPolicy> policy = ParseAutoShardPolicy(c.policy);
  if (!policy.ok()) return policy.status();
  options.auto_shard_policy = *policy;
  return strategy->ExperimentalDistributeDataset(*dataset, options);
}

TEST(CompositeDistributeGoldenTest, EveryStepAndSpecIsTensorFlows) {
  const std::vector<DistributeCase> cases = ReadCases();
  ASSERT_GE(cases.size(), 20u);
  for (const DistributeCase& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.name, ": ", c.pipeline, " on ", c.devices, " replicas, ",
                              c.policy));
    absl::StatusOr<DistributedDataset> dist = Distribute(c);
    ASSERT_TRUE(dist.ok()) << dist.status();
    EXPECT_EQ(FormatPerReplicaSpecRepr(dist->element_spec(), dist->wrapping()), c.spec);
    absl::StatusOr<DistributedIterator> it = dist->MakeIterator();
    ASSERT_TRUE(it.ok()) << it.status();
    std::vector<std::string> got;
    for (size_t s = 0; s <= c.steps.size(); ++s) {  // one more: the end
      absl::StatusOr<PerReplica<Element>> x = it->GetNext();
      if (absl::IsOutOfRange(x.status())) break;
      ASSERT_TRUE(x.ok()) << "step " << s << ": " << x.status();
      got.push_back(FormatPerReplica(*x, it->wrapping()));
    }
    EXPECT_EQ(got, c.steps);
  }
}

// The pieces of every step, joined, are the input's batches: no row of a SparseTensor or
// RaggedTensor is lost or repeated by the cut, whatever the replica count.
TEST(CompositeDistributeTest, PiecesJoinedAreTheBatches) {
  const std::string ragged =
      "from_tensor_slices(tf.ragged.constant([[1], [2, 3], [], [4, 5, 6], [7], [8, 9], [10], "
      "[11, 12, 13, 14], [15]])).batch(4)";
  for (int64_t n = 1; n <= 5; ++n) {
    for (const std::string policy : {"AUTO", "OFF"}) {
      SCOPED_TRACE(absl::StrCat(n, " replicas, ", policy));
      DistributeCase c{"", ragged, n, policy, "", {}};
      absl::StatusOr<DistributedDataset> dist = Distribute(c);
      ASSERT_TRUE(dist.ok()) << dist.status();
      std::string joined;
      for (const PerReplica<Element>& x : *dist) {
        for (const Element& piece : x) {
          ASSERT_TRUE(piece.is_composite());
          std::string text = FormatElement(piece);  // <tf.RaggedTensor [[...], ...]>
          const size_t open = text.find("[[");
          if (open == std::string::npos) continue;  // an empty piece
          const size_t close = text.rfind("]]");
          if (!joined.empty()) joined += ", ";
          joined += text.substr(open + 1, close - open);
        }
      }
      EXPECT_EQ(joined, "[1], [2, 3], [], [4, 5, 6], [7], [8, 9], [10], [11, 12, 13, 14], [15]");
    }
  }
}

}  // namespace
}  // namespace sluice
