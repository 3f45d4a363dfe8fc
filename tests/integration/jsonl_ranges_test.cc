// jsonl_dataset under SHARDING_RANGES through real worker processes (issue 31): the job runs
// ranges (no fallback to DATA: a global shuffle, which DATA refuses, is accepted), several
// workers read every line exactly once (files with blank and whitespace-only lines, CRLF, a
// last line without '\n', an empty file), a worker SIGKILLed mid-range loses and repeats
// nothing and the steps are in-process mode's, a consumer resumed from a checkpoint mid-range
// gets exactly the rest, and jsonl -> tokenize -> padded_batch under
// RANGES gives in-process mode's steps (and has a global order: it can be globally shuffled).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/data/executor.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "sluice/distributed_dataset.h"
#include "sluice/service.h"
#include "sluice/strategy.h"
#include "tests/core/iterator_test_util.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

constexpr uint32_t kSeed = 3131;
constexpr int64_t kBatch = 8;

// Three files of lines {"n": k, "text": ...}: blank, whitespace-only and CRLF lines mixed in,
// the first file's last line without '\n', the second file empty. The pipeline's source.
std::string WriteCorpus(const std::string& dir) {
  std::mt19937 rng(kSeed);
  std::vector<std::string> files;
  int64_t n = 0;
  for (int f = 0; f < 3; ++f) {
    files.push_back(absl::StrCat(dir, "/part-", f, ".jsonl"));
    std::ofstream out(files.back(), std::ios::binary);
    const int lines = f == 1 ? 0 : 2500;
    for (int k = 0; k < lines; ++k) {
      const uint32_t kind = rng() % 10;
      if (kind == 0) {
        out << "\n";
        continue;
      }
      if (kind == 1) {
        out << "  \t\r\n";
        continue;
      }
      out << "{\"n\": " << n++ << ", \"text\": \"" << std::string(rng() % 400, 'x') << "\"}";
      if (f == 0 && k == lines - 1) break;  // no '\n' after the last line
      out << (kind == 2 ? "\r\n" : "\n");
    }
  }
  std::string list;
  for (const std::string& f : files) absl::StrAppend(&list, list.empty() ? "" : ", ", "'", f, "'");
  return absl::StrCat("jsonl_dataset([", list, "], keys={'n': tf.int64, 'text': tf.string})");
}

// The n of every element of `batches`' steps, in order.
void AppendNs(const Element& batch, std::vector<int64_t>* ns) {
  const std::vector<int64_t> v = testing_util::Values(testing_util::DictLeaf(batch, "n"));
  ns->insert(ns->end(), v.begin(), v.end());
}

std::vector<int32_t> Ids(const Tensor& t) {
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.num_elements());
}

std::vector<Element> LocalSteps(const Dataset& ds) {
  auto steps = testing_util::RunDataset(ds);
  EXPECT_TRUE(steps.ok()) << steps.status();
  return steps.ok() ? *steps : std::vector<Element>{};
}

// The corpus (WriteCorpus) in `c`'s folder, batched; *want gets the n of every line in
// in-process mode's order, which must be 0, 1, 2, ... over 3000 lines (INTERNAL otherwise).
absl::StatusOr<Dataset> CorpusBatches(const ProcessCluster& c, std::vector<int64_t>* want) {
  auto ds = Dataset::Parse(absl::StrCat(WriteCorpus(c.temp_dir()), ".batch(", kBatch, ")"));
  if (!ds.ok()) return ds.status();
  for (const Element& e : LocalSteps(*ds)) AppendNs(e, want);
  if (want->size() < 3000) {
    return absl::InternalError(absl::StrCat("in-process mode gave ", want->size(), " lines"));
  }
  for (size_t i = 0; i < want->size(); ++i) {
    if ((*want)[i] != static_cast<int64_t>(i)) {
      return absl::InternalError(
          absl::StrCat("in-process mode's element ", i, " is ", (*want)[i]));
    }
  }
  return ds;
}

absl::StatusOr<DistributedIterator> RangesIterator(const ProcessCluster& c, const Dataset& ds,
                                                   const std::string& job,
                                                   ServiceShuffle shuffle,
                                                   std::optional<IteratorCheckpoint> resume = {}) {
  auto strategy = MirroredStrategy::Create({"CPU:0"});
  if (!strategy.ok()) return strategy.status();
  ServiceOptions options;
  options.coordinator_address = c.coordinator();
  options.job_name = job;
  options.sharding_policy = ServiceShardingPolicy::kRanges;
  options.order.shuffle = shuffle;
  options.order.seed = kSeed;
  options.order.range_steps = 4;
  options.receive_budget_bytes = 16 << 10;
  options.retry_deadline = absl::Seconds(90);
  options.resume_from = std::move(resume);
  auto dist = DistributeDatasetFromService(*strategy, ds, options);
  if (!dist.ok()) return dist.status();
  return dist->MakeIterator();
}

// Reads `it` to its end (OUT_OF_RANGE; at most `max_steps` steps), appending each step's n.
void ReadToEnd(ProcessCluster& c, DistributedIterator* it, int64_t max_steps,
               std::vector<int64_t>* ns) {
  for (int64_t s = 0; s < max_steps; ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (!x.ok()) {
      ASSERT_EQ(x.status().code(), absl::StatusCode::kOutOfRange) << x.status() << c.Logs();
      return;
    }
    AppendNs(x->values()[0], ns);
  }
  FAIL() << "no end after " << max_steps << " steps";
}

TEST(JsonlRangesTest, EveryLineOnceInLocalOrderWithAWorkerKilledMidRange) {
  std::cout << "seed " << kSeed << "\n";
  ProcessClusterOptions o;
  o.num_workers = 3;
  o.worker_timeout = absl::Seconds(2);  // the dead worker's ranges move quickly
  o.worker_buffer_bytes = 16 << 10;     // a few steps ahead at most: the kill lands mid-range
  auto started = ProcessCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  ProcessCluster& c = **started;
  std::vector<int64_t> want;
  auto ds = CorpusBatches(c, &want);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const int64_t steps = static_cast<int64_t>((want.size() + kBatch - 1) / kBatch);

  auto it = RangesIterator(c, *ds, "jsonl-ranges-kill", ServiceShuffle::kNone);
  ASSERT_TRUE(it.ok()) << it.status();
  std::vector<int64_t> got;
  for (int64_t s = 0; s < steps / 4; ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    ASSERT_TRUE(x.ok()) << x.status() << c.Logs();
    AppendNs(x->values()[0], &got);
  }
  ASSERT_TRUE(c.KillWorker(0).ok());
  ReadToEnd(c, &*it, steps + 10, &got);
  // No line lost or repeated, in in-process mode's order.
  ASSERT_EQ(got, want);

  // A global shuffle (refused by DATA, so this job runs ranges) on the two workers left: every
  // line once, in another order.
  auto shuffled = RangesIterator(c, *ds, "jsonl-ranges-shuffled", ServiceShuffle::kFull);
  ASSERT_TRUE(shuffled.ok()) << shuffled.status();
  std::vector<int64_t> mixed;
  ReadToEnd(c, &*shuffled, steps + 10, &mixed);
  EXPECT_NE(mixed, want);
  std::sort(mixed.begin(), mixed.end());
  EXPECT_EQ(mixed, want);
  EXPECT_TRUE(c.StopAll().ok()) << c.Logs();
}

TEST(JsonlRangesTest, ResumedFromACheckpointMidRangeTheRestComesExactlyOnce) {
  auto started = ProcessCluster::Start({.num_workers = 2});
  ASSERT_TRUE(started.ok()) << started.status();
  ProcessCluster& c = **started;
  std::vector<int64_t> want;
  auto ds = CorpusBatches(c, &want);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const int64_t steps = static_cast<int64_t>((want.size() + kBatch - 1) / kBatch);

  std::vector<int64_t> got;
  std::optional<IteratorCheckpoint> checkpoint;
  {
    auto it = RangesIterator(c, *ds, "jsonl-ranges-resume", ServiceShuffle::kNone);
    ASSERT_TRUE(it.ok()) << it.status();
    for (int s = 0; s < 10; ++s) {  // step 10 is inside range 2 (4 steps a range)
      absl::StatusOr<PerReplica<Element>> x = it->GetNext();
      ASSERT_TRUE(x.ok()) << x.status() << c.Logs();
      AppendNs(x->values()[0], &got);
    }
    absl::StatusOr<IteratorCheckpoint> saved = it->Checkpoint();
    ASSERT_TRUE(saved.ok()) << saved.status();
    checkpoint = *saved;
  }
  // As after a trainer restart: a new iterator from the checkpoint.
  auto resumed =
      RangesIterator(c, *ds, "jsonl-ranges-resume", ServiceShuffle::kNone, checkpoint);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ReadToEnd(c, &*resumed, steps + 10, &got);
  ASSERT_EQ(got, want);
  EXPECT_TRUE(c.StopAll().ok()) << c.Logs();
}

TEST(JsonlRangesTest, TokenizeThenPaddedBatchUnderRangesEqualsLocalMode) {
  auto started = ProcessCluster::Start({.num_workers = 2});
  ASSERT_TRUE(started.ok()) << started.status();
  ProcessCluster& c = **started;
  const std::string dir = c.temp_dir();
  // A model trained here (spm_train, Debian's sentencepiece), as tests/core/tokenize_test.cc.
  const std::vector<std::string> words = {"hello", "world", "sluice", "data", "pipeline",
                                          "token", "the", "quick", "brown", "fox"};
  {
    std::ofstream corpus(dir + "/corpus.txt");
    for (size_t i = 0; i < 2000; ++i) {
      corpus << words[i % words.size()] << " " << words[(i * 7) % words.size()] << " " << i % 97
             << "\n";
    }
  }
  const std::string train = absl::StrCat(
      "spm_train --input=", dir, "/corpus.txt --model_prefix=", dir,
      "/m --vocab_size=60 --hard_vocab_limit=false --model_type=unigram "
      "--character_coverage=1.0 --num_threads=1 > ", dir, "/train.log 2>&1");
  ASSERT_EQ(std::system(train.c_str()), 0) << "spm_train failed: see " << dir << "/train.log";
  const std::string file = dir + "/texts.jsonl";
  {
    std::mt19937 rng(kSeed);
    std::ofstream out(file, std::ios::binary);
    for (int d = 0; d < 1500; ++d) {
      out << "{\"text\": \"";
      const int n = static_cast<int>(rng() % 12);
      for (int w = 0; w < n; ++w) out << (w ? " " : "") << words[rng() % words.size()] << rng() % 50;
      out << "\"}" << (d % 7 == 0 ? "\r\n\n" : "\n");
    }
  }
  auto ds = Dataset::Parse(absl::StrCat("jsonl_dataset('", file, "', keys=['text']).map(tokenize('",
                                        dir, "/m.model', add_eos=True), key='text', "
                                        "num_parallel_calls=4).padded_batch(", kBatch, ")"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  const std::vector<Element> want = LocalSteps(*ds);
  ASSERT_EQ(want.size(), static_cast<size_t>((1500 + kBatch - 1) / kBatch));

  auto it = RangesIterator(c, *ds, "jsonl-ranges-tokenize", ServiceShuffle::kNone);
  ASSERT_TRUE(it.ok()) << it.status();
  for (size_t s = 0; s < want.size(); ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    ASSERT_TRUE(x.ok()) << "step " << s << ": " << x.status() << c.Logs();
    const Tensor& g = testing_util::DictLeaf(x->values()[0], "text");
    const Tensor& w = testing_util::DictLeaf(want[s], "text");
    ASSERT_EQ(g.shape().ToString(), w.shape().ToString()) << "step " << s;
    ASSERT_EQ(Ids(g), Ids(w)) << "step " << s;
  }
  absl::StatusOr<PerReplica<Element>> end = it->GetNext();
  EXPECT_EQ(end.status().code(), absl::StatusCode::kOutOfRange) << end.status();
  // The pipeline has a global order (a global shuffle, which a fallback to DATA refuses, runs).
  auto shuffled = RangesIterator(c, *ds, "jsonl-ranges-tokenize-shuffled", ServiceShuffle::kFull);
  ASSERT_TRUE(shuffled.ok()) << shuffled.status();
  EXPECT_TRUE(shuffled->GetNext().ok()) << c.Logs();
  EXPECT_TRUE(c.StopAll().ok()) << c.Logs();
}

}  // namespace
}  // namespace sluice
