#include "core/data/distribute/auto_shard.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/data/executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Every element of `ds`, each flattened to its first leaf's int64 values.
std::vector<std::vector<int64_t>> Int64Pieces(const Dataset& ds, int limit = 10000) {
  std::vector<std::vector<int64_t>> out;
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(ds);
  EXPECT_TRUE(it.ok()) << it.status();
  if (!it.ok()) return out;
  for (int i = 0; i < limit; ++i) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok() || end) break;
    const Tensor t = e.Flatten()[0];
    out.emplace_back(t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
  }
  return out;
}

std::vector<std::string> StringPieceValues(const Dataset& ds) {
  std::vector<std::string> out;
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(ds);
  EXPECT_TRUE(it.ok()) << it.status();
  if (!it.ok()) return out;
  for (int i = 0; i < 10000; ++i) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok() || end) break;
    const Tensor t = e.Flatten()[0];
    for (int64_t j = 0; j < t.num_elements(); ++j) out.push_back(t.string_at(j));
  }
  return out;
}

// Writes text files f0.txt ... into a fresh directory; file i holds lines "i-0", "i-1", ...
std::vector<std::string> WriteFiles(const std::string& tag, const std::vector<int>& lines) {
  std::string dir = ::testing::TempDir() + "/sluice_auto_shard_" + tag;
  std::string mk = "mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(mk.c_str()), 0);
  std::vector<std::string> names;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string name = dir + "/f" + std::to_string(i) + ".txt";
    std::ofstream f(name);
    for (int j = 0; j < lines[i]; ++j) f << i << "-" << j << "\n";
    names.push_back(name);
  }
  return names;
}

TEST(AutoShardPolicyTest, ParsesNamesInAnyCaseAndRoundTrips) {
  for (AutoShardPolicy p : {AutoShardPolicy::kOff, AutoShardPolicy::kAuto, AutoShardPolicy::kFile,
                            AutoShardPolicy::kData, AutoShardPolicy::kHint}) {
    absl::StatusOr<AutoShardPolicy> parsed = ParseAutoShardPolicy(AutoShardPolicyName(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(*ParseAutoShardPolicy("data"), AutoShardPolicy::kData);
  EXPECT_EQ(static_cast<int>(AutoShardPolicy::kOff), -1);
  EXPECT_EQ(static_cast<int>(AutoShardPolicy::kHint), 3);
  absl::StatusOr<AutoShardPolicy> bad = ParseAutoShardPolicy("dynamic");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("dynamic"));
}

TEST(AutoShardTest, ReadsFilesOnlyForFileSources) {
  EXPECT_TRUE(ReadsFiles(Dataset::TextLine({"a.txt"}).Batch(2)));
  EXPECT_FALSE(ReadsFiles(Dataset::Range(10).Batch(2)));
}

TEST(AutoShardTest, ShardByFileKeepsEveryNthFile) {
  Dataset ds = Dataset::TextLine({"a", "b", "c", "d", "e"}).Batch(2);
  absl::StatusOr<Dataset> w1 = ShardByFile(ds, 2, 1);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_THAT(w1->def().source().text_line().filenames(), ElementsAre("b", "d"));
  absl::StatusOr<Dataset> w0 = ShardByFile(ds, 2, 0);
  ASSERT_TRUE(w0.ok());
  EXPECT_THAT(w0->def().source().text_line().filenames(), ElementsAre("a", "c", "e"));
  EXPECT_EQ(w0->def().ops_size(), 1);  // the batch is kept
}

TEST(AutoShardTest, EveryFileReaderIsShardable) {
  proto::DatasetDef def;
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  for (const char* f : {"a.tfrecord", "b.tfrecord", "c.tfrecord"}) {
    def.mutable_source()->mutable_tf_record()->add_filenames(f);
  }
  def.add_ops()->mutable_batch()->set_batch_size(2);
  absl::StatusOr<Dataset> ds = Dataset::FromDef(def);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE(ReadsFiles(*ds));
  absl::StatusOr<Dataset> w1 = ShardByFile(*ds, 2, 1);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_THAT(w1->def().source().tf_record().filenames(), ElementsAre("b.tfrecord"));
  EXPECT_THAT(ShardByFile(*ds, 4, 0).status().message(),
              HasSubstr("the dataset only has 3 file(s), which is not enough for the required 4 "
                        "shards/workers"));
  // A source restricted to a record range cannot be split by file.
  def.mutable_source()->mutable_tf_record()->mutable_record_range()->set_count(5);
  absl::StatusOr<Dataset> ranged = Dataset::FromDef(def);
  ASSERT_TRUE(ranged.ok()) << ranged.status();
  EXPECT_EQ(ShardByFile(*ranged, 2, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AutoShardTest, ShardByFileWithTooFewFilesGivesTfsError) {
  absl::StatusOr<Dataset> r = ShardByFile(Dataset::TextLine({"only.txt"}), 2, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("Could not apply FILE based sharding: the dataset only has 1 file(s), "
                        "which is not enough for the required 2 shards/workers."));
  EXPECT_THAT(r.status().message(), HasSubstr("either DATA or OFF"));
}

TEST(AutoShardTest, ShardByFileRejectsNonFileSources) {
  absl::StatusOr<Dataset> r = ShardByFile(Dataset::Range(10), 2, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("range"));
}

TEST(AutoShardTest, ReplaceShardHintsSetsWorkerShard) {
  Dataset ds = Dataset::Range(12).ShardHint().Shard(2, 1).Batch(2);
  Dataset replaced = ReplaceShardHints(ds, 3, 2);
  const proto::ShardOp& hint = replaced.def().ops(0).shard();
  EXPECT_EQ(hint.num_shards(), 3);
  EXPECT_EQ(hint.index(), 2);
  EXPECT_FALSE(hint.num_shards_is_hint());
  EXPECT_FALSE(hint.index_is_hint());
  const proto::ShardOp& plain = replaced.def().ops(1).shard();
  EXPECT_EQ(plain.num_shards(), 2);
  EXPECT_EQ(plain.index(), 1);
  // range(12).shard(3, 2) = 2, 5, 8, 11; then shard(2, 1) = 5, 11.
  EXPECT_THAT(Int64Pieces(replaced), ElementsAre(ElementsAre(5, 11)));
}

TEST(DistributeForWorkerTest, DataShardingMatchesTfSemanticsExample) {
  // TF_SEMANTICS.md: [0..11], 2 workers, global batch 4.
  Dataset ds = Dataset::Range(12).Batch(4);
  absl::StatusOr<Dataset> w0 = DistributeForWorker(ds, AutoShardPolicy::kData, 2, 0, 2);
  absl::StatusOr<Dataset> w1 = DistributeForWorker(ds, AutoShardPolicy::kData, 2, 1, 2);
  ASSERT_TRUE(w0.ok()) << w0.status();
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_THAT(Int64Pieces(*w0), ElementsAre(ElementsAre(0, 1), ElementsAre(4, 5),
                                           ElementsAre(8, 9)));
  EXPECT_THAT(Int64Pieces(*w1), ElementsAre(ElementsAre(2, 3), ElementsAre(6, 7),
                                           ElementsAre(10, 11)));
}

TEST(DistributeForWorkerTest, OneWorkerAutoUsesLegacySplitAsTfDoes) {
  // TF 2.15: range(8).batch(4) over 3 replicas gives [0,1],[2,3],[] (AUTO/DATA) but
  // [0,1],[2],[3] with OFF (tests/testdata/distribute/range8_b4_r3_*).
  Dataset ds = Dataset::Range(8).Batch(4);
  absl::StatusOr<Dataset> automatic = DistributeForWorker(ds, AutoShardPolicy::kAuto, 1, 0, 3);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_THAT(Int64Pieces(*automatic),
              ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3), ElementsAre(),
                          ElementsAre(4, 5), ElementsAre(6, 7), ElementsAre()));
  absl::StatusOr<Dataset> off = DistributeForWorker(ds, AutoShardPolicy::kOff, 1, 0, 3);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_THAT(Int64Pieces(*off), ElementsAre(ElementsAre(0, 1), ElementsAre(2), ElementsAre(3),
                                            ElementsAre(4, 5), ElementsAre(6), ElementsAre(7)));
  // FILE with one worker is skipped entirely, so it keeps the new-style rebatch.
  absl::StatusOr<Dataset> file = DistributeForWorker(ds, AutoShardPolicy::kFile, 1, 0, 3);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(Int64Pieces(*file), Int64Pieces(*off));
}

TEST(DistributeForWorkerTest, OneReplicaLeavesTheDatasetAlone) {
  Dataset ds = Dataset::Range(5);  // not batched: fine with one replica, as in TF
  absl::StatusOr<Dataset> out = DistributeForWorker(ds, AutoShardPolicy::kAuto, 1, 0, 1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->Fingerprint(), ds.Fingerprint());
}

TEST(DistributeForWorkerTest, OffRebatchesWithEachWorkersSizes) {
  // B=7, W=2, R=2: worker 0 [2,2,2,1], worker 1 [2,1,2,2]; OFF: every worker reads everything.
  Dataset ds = Dataset::Range(7).Batch(7);
  absl::StatusOr<Dataset> w0 = DistributeForWorker(ds, AutoShardPolicy::kOff, 2, 0, 4);
  absl::StatusOr<Dataset> w1 = DistributeForWorker(ds, AutoShardPolicy::kOff, 2, 1, 4);
  ASSERT_TRUE(w0.ok() && w1.ok());
  EXPECT_THAT(Int64Pieces(*w0), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3),
                                           ElementsAre(4, 5), ElementsAre(6)));
  EXPECT_THAT(Int64Pieces(*w1), ElementsAre(ElementsAre(0, 1), ElementsAre(2),
                                           ElementsAre(3, 4), ElementsAre(5, 6)));
}

TEST(DistributeForWorkerTest, FileShardingSplitsFilesAcrossWorkers) {
  std::vector<std::string> files = WriteFiles("file_split", {3, 2, 4});
  Dataset ds = Dataset::TextLine(files).Batch(2);
  for (AutoShardPolicy policy : {AutoShardPolicy::kFile, AutoShardPolicy::kAuto}) {
    absl::StatusOr<Dataset> w0 = DistributeForWorker(ds, policy, 2, 0, 2);
    absl::StatusOr<Dataset> w1 = DistributeForWorker(ds, policy, 2, 1, 2);
    ASSERT_TRUE(w0.ok()) << w0.status();
    ASSERT_TRUE(w1.ok()) << w1.status();
    EXPECT_THAT(StringPieceValues(*w0), ElementsAre("0-0", "0-1", "0-2", "2-0", "2-1", "2-2",
                                                    "2-3"));
    EXPECT_THAT(StringPieceValues(*w1), ElementsAre("1-0", "1-1"));
  }
}

TEST(DistributeForWorkerTest, FileAndAutoWithTooFewFilesFail) {
  std::vector<std::string> files = WriteFiles("too_few", {4});
  Dataset ds = Dataset::TextLine(files).Batch(2);
  for (AutoShardPolicy policy : {AutoShardPolicy::kFile, AutoShardPolicy::kAuto}) {
    absl::StatusOr<Dataset> r = DistributeForWorker(ds, policy, 2, 1, 2);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(),
                HasSubstr("the dataset only has 1 file(s), which is not enough for the required "
                          "2 shards/workers"));
  }
  // DATA and OFF are the documented way out.
  EXPECT_TRUE(DistributeForWorker(ds, AutoShardPolicy::kData, 2, 1, 2).ok());
  EXPECT_TRUE(DistributeForWorker(ds, AutoShardPolicy::kOff, 2, 1, 2).ok());
}

TEST(DistributeForWorkerTest, FileOnNonFileSourceFails) {
  absl::StatusOr<Dataset> r =
      DistributeForWorker(Dataset::Range(8).Batch(2), AutoShardPolicy::kFile, 2, 0, 2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("Could not apply FILE based sharding"));
}

TEST(DistributeForWorkerTest, HintReplacesPlaceholders) {
  Dataset ds = Dataset::Range(12).ShardHint().Batch(2);
  absl::StatusOr<Dataset> w1 = DistributeForWorker(ds, AutoShardPolicy::kHint, 3, 1, 3);
  ASSERT_TRUE(w1.ok()) << w1.status();
  // shard(3, 1) = 1, 4, 7, 10; batch(2) with worker sizes for B=2, N=3, w=1: [1, 0, 1].
  std::vector<int64_t> all;
  for (const auto& piece : Int64Pieces(*w1)) all.insert(all.end(), piece.begin(), piece.end());
  EXPECT_THAT(all, ElementsAre(1, 4, 7, 10));
}

TEST(DistributeForWorkerTest, Errors) {
  Dataset batched = Dataset::Range(8).Batch(4);
  absl::StatusOr<Dataset> uneven = DistributeForWorker(batched, AutoShardPolicy::kAuto, 2, 0, 3);
  EXPECT_EQ(uneven.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(uneven.status().message(),
              HasSubstr("tf.distribute expects every worker to have the same number of replicas"));
  absl::StatusOr<Dataset> unbatched =
      DistributeForWorker(Dataset::Range(8), AutoShardPolicy::kAuto, 1, 0, 2);
  EXPECT_EQ(unbatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unbatched.status().message(),
              HasSubstr("Call the `batch` method on the input Dataset in order to be able to "
                        "split your input across 2 replicas"));
  EXPECT_EQ(DistributeForWorker(batched, AutoShardPolicy::kAuto, 2, 2, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DistributeForWorker(batched.Batch(0), AutoShardPolicy::kAuto, 1, 0, 2)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Exactly once: with DATA (and AUTO on a non-file source) every element of a finite dataset
// reaches exactly one worker; with OFF every worker sees every element once.
TEST(DistributeForWorkerTest, ExactlyOnceAcrossWorkers) {
  for (int64_t n : {0, 1, 7, 12, 23}) {
    for (int64_t b : {1, 3, 4, 8}) {
      for (int64_t w_count : {1, 2, 3}) {
        for (int64_t r : {1, 2, 3}) {
          for (bool drop : {false, true}) {
            Dataset ds = Dataset::Range(n).Batch(b, drop);
            std::map<int64_t, int> seen;
            for (int64_t w = 0; w < w_count; ++w) {
              absl::StatusOr<Dataset> piece_ds =
                  DistributeForWorker(ds, AutoShardPolicy::kData, w_count, w, w_count * r);
              ASSERT_TRUE(piece_ds.ok()) << piece_ds.status();
              for (const auto& piece : Int64Pieces(*piece_ds)) {
                for (int64_t v : piece) ++seen[v];
              }
              std::map<int64_t, int> own;
              absl::StatusOr<Dataset> off =
                  DistributeForWorker(ds, AutoShardPolicy::kOff, w_count, w, w_count * r);
              ASSERT_TRUE(off.ok()) << off.status();
              for (const auto& piece : Int64Pieces(*off)) {
                for (int64_t v : piece) ++own[v];
              }
              int64_t expected = drop ? (n / b) * b : n;
              EXPECT_EQ(static_cast<int64_t>(own.size()), expected);
              for (const auto& [v, count] : own) EXPECT_EQ(count, 1) << "OFF value " << v;
            }
            int64_t expected = drop ? (n / b) * b : n;
            ASSERT_EQ(static_cast<int64_t>(seen.size()), expected)
                << "n=" << n << " B=" << b << " W=" << w_count << " R=" << r;
            for (const auto& [v, count] : seen) {
              EXPECT_EQ(count, 1) << "value " << v << " n=" << n << " B=" << b
                                  << " W=" << w_count << " R=" << r;
              EXPECT_LT(v, expected);
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace sluice
