// The random differential test of SparseTensor / RaggedTensor pipelines against TensorFlow
// 2.15: seeded random pipelines (tools/golden/gen_composite_differential.py: sparse and ragged
// sources, parse_example with VarLenFeature / RaggedFeature on a TFRecord file this test writes,
// batch, unbatch, ragged_batch, take, skip, repeat, a final shuffle; from seed 121 also rebatch,
// padded_batch and bucket_by_sequence_length) and what TF gave for each
// (tests/testdata/conformance/composites_vs_tf.txt). Sluice must give the same element_spec and
// elements (sorted, after a final shuffle: its random stream is not TF's), and fail where TF
// fails. A failure prints the case's seed; the generator redraws that pipeline from it.
// kKnownDifferences lists, with the reason, the seeds where Sluice knowingly differs.
// SLUICE_DIFFERENTIAL_SEED=<seed> runs one case.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/data/executor.h"
#include "core/data/spec_inference.h"
#include "core/format/tensor_format.h"
#include "core/io/tfrecord_writer.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/golden_blocks.h"

namespace sluice {
namespace {

struct DifferentialCase {
  std::string seed, pipeline, spec, error, error_kind;
  bool multiset = false;
  std::vector<std::string> elements;
};

struct Goldens {
  std::vector<std::string> records;
  std::vector<DifferentialCase> cases;
};

Goldens ReadGoldens() {
  golden::File file = golden::ReadFile("tests/testdata/conformance/composites_vs_tf.txt");
  EXPECT_TRUE(file.read) << "run from the source root";
  Goldens g;
  if (!file.record_sets.empty()) g.records = file.record_sets.front().second;
  for (golden::Block& b : file.blocks) {
    g.cases.push_back({b.Field("case"), b.Field("pipeline"), b.Field("spec"), b.Field("error"),
                       b.Field("error_kind"), b.Field("order") == "multiset",
                       std::move(b.elements)});
  }
  return g;
}

// "" when Sluice's refusal `s` is of the kind of TF's exception `tf_kind` (TypeError,
// ValueError and InvalidArgumentError are bad input: INVALID_ARGUMENT; kinds not listed are not
// compared), else why not.
std::string SameKindOfError(const absl::Status& s, const std::string& tf_kind) {
  if (tf_kind != "TypeError" && tf_kind != "ValueError" && tf_kind != "InvalidArgumentError") {
    return "";
  }
  if (s.code() == absl::StatusCode::kInvalidArgument) return "";
  return absl::StrCat("TF's ", tf_kind, " is INVALID_ARGUMENT, Sluice gives ", s.ToString());
}

// What Sluice gives for `c`, compared with TF's; empty when they agree.
std::string Compare(const DifferentialCase& c, const std::string& expression) {
  absl::StatusOr<Dataset> d = Dataset::Parse(expression);
  absl::StatusOr<ElementSpec> spec =
      d.ok() ? d->element_spec() : absl::StatusOr<ElementSpec>(d.status());
  if (!spec.ok()) {
    if (!c.error.empty() && c.spec.empty()) {  // both refuse the pipeline
      return SameKindOfError(spec.status(), c.error_kind);
    }
    return absl::StrCat("Sluice refuses the pipeline: ", spec.status().ToString(),
                        c.error.empty() ? "" : "; TF failed later: " + c.error);
  }
  if (c.spec.empty()) return "TF refuses the pipeline (" + c.error + "), Sluice does not";
  const std::string got_spec = ElementSpecToString(*spec);
  if (got_spec != c.spec) return "element_spec:\n  Sluice " + got_spec + "\n  TF     " + c.spec;
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*d);
  absl::Status end = it.status();
  std::vector<std::string> got;
  for (int guard = 0; end.ok() && guard < 10000; ++guard) {
    Element e;
    bool done = false;
    end = (*it)->GetNext(&e, &done);
    if (!end.ok() || done) break;
    got.push_back(FormatElement(e));
  }
  if (c.multiset) std::sort(got.begin(), got.end());
  if (!c.error.empty() && end.ok()) return "TF fails (" + c.error + "), Sluice does not";
  if (c.error.empty() && !end.ok()) return "Sluice fails: " + end.ToString();
  if (!c.error.empty()) {
    const std::string kind = SameKindOfError(end, c.error_kind);
    if (!kind.empty()) return kind;
  }
  if (got != c.elements) {
    std::string why = absl::StrCat("elements: Sluice gives ", got.size(), ", TF ",
                                   c.elements.size());
    for (size_t i = 0; i < std::max(got.size(), c.elements.size()); ++i) {
      const std::string a = i < got.size() ? got[i] : "(none)";
      const std::string b = i < c.elements.size() ? c.elements[i] : "(none)";
      if (a != b) {
        absl::StrAppend(&why, "\n  first difference at ", i, ":\n  Sluice ", a, "\n  TF     ", b);
        break;
      }
    }
    return why;
  }
  return "";
}

// Where Sluice knowingly differs from TF 2.15, by seed: the test fails if one of these agrees
// with TF (the list must stay true) or if any other case differs.
struct KnownDifference {
  const char* seed;
  const char* why;
};
constexpr KnownDifference kKnownDifferences[] = {
    {"43", "TF 2.15 cannot batch() RaggedTensors that batch()/ragged_batch() made of ragged-rank-0 "
           "rows when their row counts differ ('Cannot batch tensors with different shapes in "
           "component 0'): it batches their dense encoding. Sluice batches them into a RaggedTensor "
           "of one more ragged dimension, as TF does when the counts agree."},
    {"99", "TF 2.15 prints an item of a ragged-rank-3 value holding only empty innermost rows as "
           "'[]' (numpy's np.array() of its rows loses them); Sluice prints the rows. The values "
           "agree."},
    {"135", "As seed 43: TF 2.15 cannot batch() the RaggedTensors ragged_batch() made of "
            "ragged-rank-0 rows when their row counts differ (a partial last batch)."},
    {"231", "Sluice's ragged_batch refuses a component with an unknown dimension after the first "
            "(here a batch of RaggedFeature outputs with a UniformRowLength: [None, None, 2]) "
            "when the pipeline is built (INVALID_ARGUMENT, docs/PIPELINES.md); TF gives it a "
            "higher ragged rank. Both give no element: TF fails at the first one (its batch(4) of "
            "rows of different lengths, also INVALID_ARGUMENT)."},
    {"278", "The sparse analogue of seed 43: TF 2.15 cannot batch() SparseTensors that batch() "
            "made when their row counts differ (it batches their encoding, one serialized row "
            "per row: 'Cannot batch tensors with different shapes in component 0. First element "
            "had shape [4,3] and element 1 had shape [1,3]'). Sluice batches them into a "
            "SparseTensor of one more dimension (dense_shape the max of each), as TF does when "
            "the counts agree (format goldens, batch_batch_sparse)."},
};

TEST(CompositeDifferentialTest, RandomPipelinesGiveWhatTensorFlowGives) {
  const Goldens g = ReadGoldens();
  ASSERT_GE(g.cases.size(), 100u);
  const std::string path = ::testing::TempDir() + "/composite_differential.tfrecord";
  {
    absl::StatusOr<std::unique_ptr<TFRecordWriter>> w = TFRecordWriter::Open(path);
    ASSERT_TRUE(w.ok()) << w.status();
    for (const std::string& r : g.records) ASSERT_TRUE((*w)->Write(r).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  const char* only = std::getenv("SLUICE_DIFFERENTIAL_SEED");
  int run = 0;
  int failures = 0;
  int known_differences = 0;
  for (const DifferentialCase& c : g.cases) {
    if (only != nullptr && *only != '\0' && c.seed != only) continue;
    ++run;
    const std::string expression =
        absl::StrReplaceAll(c.pipeline, {{"'{records}'", "'" + path + "'"}});
    const std::string why = Compare(c, expression);
    const KnownDifference* known = nullptr;
    for (const KnownDifference& k : kKnownDifferences) {
      if (c.seed == k.seed) known = &k;
    }
    if (known != nullptr) {
      ++known_differences;
      if (why.empty()) {
        ADD_FAILURE() << "seed " << c.seed << " now agrees with TF: drop it from "
                      << "kKnownDifferences (" << known->why << ")";
      } else {
        std::cout << "known difference, seed " << c.seed << ": " << known->why << "\n";
      }
    } else if (!why.empty()) {
      ++failures;
      ADD_FAILURE() << "seed " << c.seed << ": " << c.pipeline << "\n" << why;
    }
  }
  std::cout << "composite differential: " << run << " case(s) of seeds " << g.cases.front().seed
            << ".." << g.cases.back().seed << ", " << failures << " differ from TF 2.15, "
            << known_differences << " known difference(s)\n";
  EXPECT_GT(run, 0);
}

}  // namespace
}  // namespace sluice
