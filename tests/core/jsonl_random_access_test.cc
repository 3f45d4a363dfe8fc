// jsonl_dataset through random access (RandomAccessSource, the line index): element i is the
// sequential iterator's element i, whatever order elements are asked in (blank and
// whitespace-only lines, CRLF, a last line without '\n', bad lines, lines across blocks and
// checkpoints, several files); a bad line is the same element error naming file and line; a
// 100 MB line is skipped without being held; a file changed under an open source is DATA_LOSS
// naming it; the index stays sparse; and a jsonl pipeline now has a global order (pack still
// has none).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/data/distribute/global_order.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/jsonl_line_index.h"
#include "core/data/ops/random_access_source.h"
#include "gtest/gtest.h"
#include "iterator_test_util.h"
#include "peak_rss.h"
#include "scoped_process_limits.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

using testing_util::DictLeaf;

constexpr uint32_t kSeed = 3131;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/jsonl_ra_", name);
}

// What one position holds: an element's (t, n) or an element error's message.
struct Item {
  bool error = false;
  std::string message;  // the error, without the op's label
  std::string t;
  int64_t n = 0;
};

Item FromElement(const Element& e) {
  return {false, "", DictLeaf(e, "t").string_at(0), DictLeaf(e, "n").data<int64_t>()[0]};
}

// The sequential iterator's items (element errors included).
std::vector<Item> Sequential(const std::string& expression) {
  std::vector<Item> items;
  auto ds = Dataset::Parse(expression);
  EXPECT_TRUE(ds.ok()) << ds.status();
  if (!ds.ok()) return items;
  auto it = MakeIterator(*ds);
  EXPECT_TRUE(it.ok()) << it.status();
  for (int i = 0; i < 1000000; ++i) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (IsElementError(s)) {
      // "source (jsonl_dataset): <file> line <n>: ..." -> "<file> line <n>: ..."
      const std::string m(s.message());
      items.push_back({true, m.substr(m.find(": ") + 2), "", 0});
      continue;
    }
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok() || end) break;
    items.push_back(FromElement(e));
  }
  return items;
}

Item RandomItem(RandomAccessSource& source, int64_t i) {
  absl::StatusOr<Element> e = source.Get(i);
  if (!e.ok()) {
    EXPECT_TRUE(IsElementError(e.status())) << "element " << i << ": " << e.status();
    return {true, std::string(e.status().message()), "", 0};
  }
  return FromElement(*e);
}

std::unique_ptr<RandomAccessSource> OpenSource(const std::string& expression) {
  auto ds = Dataset::Parse(expression);
  EXPECT_TRUE(ds.ok()) << ds.status();
  if (!ds.ok()) return nullptr;
  auto source = RandomAccessSource::Open(ds->def().source());
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? *std::move(source) : nullptr;
}

void ExpectSame(const Item& got, const Item& want, int64_t i) {
  ASSERT_EQ(got.error, want.error) << "element " << i << ": " << got.message << want.message;
  EXPECT_EQ(got.message, want.message) << "element " << i;
  EXPECT_EQ(got.t, want.t) << "element " << i;
  EXPECT_EQ(got.n, want.n) << "element " << i;
}

// A file of `lines` lines: most {"t": <text of 0..3000 bytes>, "n": k}, with blank and
// whitespace-only lines, CRLF endings, bad JSON and missing keys mixed in, and (when
// `newline_at_end` is false) a last line without '\n'.
void WriteMixedFile(const std::string& path, int lines, std::mt19937* rng, bool newline_at_end) {
  std::ofstream out(path, std::ios::binary);
  for (int k = 0; k < lines; ++k) {
    const uint32_t kind = (*rng)() % 20;
    std::string line;
    if (kind == 0) {
      line = "";
    } else if (kind == 1) {
      line = " \t \r";
    } else if (kind == 2) {
      line = "{\"t\": \"bad\", ";  // invalid JSON
    } else if (kind == 3) {
      line = "{\"t\": \"no n\"}";  // a missing key
    } else {
      const std::string text((*rng)() % 3000, static_cast<char>('a' + k % 26));
      line = absl::StrCat("{\"t\": \"", text, "\", \"n\": ", k, "}");
    }
    if (kind == 4) line += "\r";  // CRLF
    out << line;
    if (k + 1 < lines || newline_at_end) out << "\n";
  }
}

TEST(JsonlRandomAccessTest, EveryElementIsTheSequentialOnesInAnyOrder) {
  std::cout << "seed " << kSeed << "\n";
  std::mt19937 rng(kSeed);
  const std::vector<std::string> files = {TempPath("a.jsonl"), TempPath("empty.jsonl"),
                                          TempPath("b.jsonl"), TempPath("blank.jsonl")};
  WriteMixedFile(files[0], 3000, &rng, /*newline_at_end=*/false);
  WriteMixedFile(files[1], 0, &rng, true);
  WriteMixedFile(files[2], 2000, &rng, true);
  std::ofstream(files[3], std::ios::binary) << "\n  \n\r\n";
  std::string list;
  for (const std::string& f : files) absl::StrAppend(&list, list.empty() ? "" : ", ", "'", f, "'");
  const std::string expression =
      absl::StrCat("jsonl_dataset([", list, "], keys={'t': tf.string, 'n': tf.int64})");
  const std::vector<Item> want = Sequential(expression);
  ASSERT_GT(want.size(), 4000u);

  std::unique_ptr<RandomAccessSource> source = OpenSource(expression);
  ASSERT_NE(source, nullptr);
  ASSERT_EQ(source->size(), static_cast<int64_t>(want.size()));
  // In order (a range read with SHUFFLE_NONE) ...
  for (int64_t i = 0; i < source->size(); ++i) {
    ExpectSame(RandomItem(*source, i), want[static_cast<size_t>(i)], i);
  }
  // ... and in a seeded random order (SHUFFLE_FULL), through the same object.
  std::vector<int64_t> order(want.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t i : order) ExpectSame(RandomItem(*source, i), want[static_cast<size_t>(i)], i);
  // The last element of a.jsonl came from its last line, which has no '\n'.
  EXPECT_EQ(std::count_if(want.begin(), want.end(), [](const Item& x) { return x.n == 2999; }),
            1);
  for (const std::string& f : files) std::remove(f.c_str());
}

TEST(JsonlRandomAccessTest, HundredMegabyteLineIsAnErrorNamingItsLineAndIsNeverHeld) {
  const std::string path = TempPath("huge.jsonl");
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\"t\": \"first\", \"n\": 1}\n\n{\"t\": \"";
    const std::string chunk(1 << 20, 'a');
    for (int i = 0; i < 100; ++i) out << chunk;
    // The last line: 5 MB of spaces, over the limit but blank, so no element (in order too).
    out << "\", \"n\": 2}\r\n{\"t\": \"after\", \"n\": 3}\n" << std::string(5 << 20, ' ');
  }
  MemoryLimits limits = ProcessMemoryBudget().limits();
  limits.element_bytes = 4 << 20;
  ScopedProcessLimits scoped(limits);
  const int64_t rss_before = PeakRssBytes();
  const std::string expression =
      absl::StrCat("jsonl_dataset('", path, "', keys={'t': tf.string, 'n': tf.int64})");
  std::unique_ptr<RandomAccessSource> source = OpenSource(expression);
  ASSERT_NE(source, nullptr);
  ASSERT_EQ(source->size(), 3);
  for (int64_t i : {2, 1, 0, 1, 2}) {
    absl::StatusOr<Element> e = source->Get(i);
    if (i == 1) {
      ASSERT_TRUE(IsElementError(e.status())) << e.status();
      EXPECT_TRUE(absl::StrContains(
          e.status().message(),
          absl::StrCat(path, " line 3: the line is longer than the memory limit of one element, "
                             "4194304 bytes")))
          << e.status();
    } else {
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ(DictLeaf(*e, "t").string_at(0), i == 0 ? "first" : "after");
    }
  }
  // Neither the index nor the reads held the 100 MB line.
  EXPECT_LT(PeakRssBytes() - rss_before, 40 << 20);
  // The sequential iterator counts the same elements: the same error, the blank line skipped.
  const std::vector<Item> in_order = Sequential(expression);
  ASSERT_EQ(in_order.size(), 3u);
  ExpectSame(RandomItem(*source, 1), in_order[1], 1);
  EXPECT_EQ(in_order[2].t, "after");
  std::remove(path.c_str());
}

TEST(JsonlRandomAccessTest, FileChangedUnderAnOpenSourceIsDataLossNamingIt) {
  const std::string path = TempPath("changing.jsonl");
  auto write = [&](int first) {
    std::ofstream out(path, std::ios::binary);
    for (int k = first; k < 20000; ++k) out << "{\"t\": \"line\", \"n\": " << k << "}\n";
  };
  write(0);
  const std::string expression =
      absl::StrCat("jsonl_dataset('", path, "', keys={'t': tf.string, 'n': tf.int64})");
  std::unique_ptr<RandomAccessSource> source = OpenSource(expression);
  ASSERT_NE(source, nullptr);
  ASSERT_EQ(source->size(), 20000);
  // Lines now start elsewhere (one digit more at the front shifts every offset).
  write(-1);
  bool data_loss = false;
  for (int64_t i : {int64_t{15000}, int64_t{19999}, int64_t{7000}}) {
    absl::StatusOr<Element> e = source->Get(i);
    if (e.ok()) continue;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss) << e.status();
    EXPECT_TRUE(absl::StrContains(e.status().message(), path)) << e.status();
    data_loss = true;
  }
  EXPECT_TRUE(data_loss);
  // A source opened now indexes the file as it is.
  std::ofstream(path, std::ios::binary | std::ios::app) << "{\"t\": \"x\", \"n\": 7}\n";
  std::unique_ptr<RandomAccessSource> reopened = OpenSource(expression);
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->size(), 20002);
  std::remove(path.c_str());
}

TEST(JsonlRandomAccessTest, LineIndexIsSparseAndBuiltOnce) {
  const std::string path = TempPath("sparse.jsonl");
  {
    std::ofstream out(path, std::ios::binary);
    for (int k = 0; k < 100000; ++k) out << "{\"t\": \"x\", \"n\": " << k << "}\n";
  }
  absl::StatusOr<JsonlLineIndex> index = JsonlLineIndex::Build(path, 4096);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->num_elements(), 100000);
  const uint64_t size = index->file_stat().size;
  EXPECT_LE(index->checkpoints().size(), size / 4096 + 1);
  EXPECT_GE(index->checkpoints().size(), size / 4096 / 2);
  for (const JsonlLineIndex::Checkpoint& c : index->checkpoints()) {
    EXPECT_EQ(c.line, c.element + 1);  // no blank lines in this file
  }
  EXPECT_EQ(index->CheckpointBefore(0), 0u);
  EXPECT_EQ(index->CheckpointBefore(99999), index->checkpoints().size() - 1);
  EXPECT_EQ(JsonlLineIndex::Build(TempPath("missing.jsonl")).status().code(),
            absl::StatusCode::kNotFound);
  // A file that never ends is an error naming it, not an endless scan.
  absl::Status endless = JsonlLineIndex::Build("/dev/zero").status();
  EXPECT_EQ(endless.code(), absl::StatusCode::kAborted) << endless;
  EXPECT_TRUE(absl::StrContains(endless.message(), "/dev/zero")) << endless;
  std::remove(path.c_str());
}

TEST(JsonlRandomAccessTest, JsonlPipelinesHaveAGlobalOrderButPackDoesNot) {
  const std::string path = TempPath("plan.jsonl");
  {
    std::ofstream out(path, std::ios::binary);
    for (int k = 0; k < 103; ++k) out << "{\"t\": \"w" << k << "\", \"n\": " << k << "}\n\n";
  }
  auto ds = Dataset::Parse(
      absl::StrCat("jsonl_dataset('", path, "', keys={'t': tf.string, 'n': tf.int64}).batch(10)"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<GlobalOrderPlan> plan = PlanGlobalOrder(*ds);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_records, 103);
  EXPECT_EQ(plan->steps_per_epoch, 11);

  auto packed = Dataset::Parse(absl::StrCat(
      "jsonl_dataset('", path, "', keys={'n': [tf.int64]}).pack(8).batch(2)"));
  ASSERT_TRUE(packed.ok()) << packed.status();
  absl::Status no_order = PlanGlobalOrder(*packed).status();
  EXPECT_EQ(no_order.code(), absl::StatusCode::kFailedPrecondition) << no_order;
  EXPECT_TRUE(absl::StrContains(no_order.message(), "pack")) << no_order;
  std::remove(path.c_str());
}

TEST(JsonlRandomAccessTest, ABadLineInARangeIsAnElementErrorNamingFileAndLine) {
  const std::string path = TempPath("range_bad.jsonl");
  {
    std::ofstream out(path, std::ios::binary);
    for (int k = 0; k < 20; ++k) {
      out << (k == 12 ? std::string("{\"t\": oops}") : absl::StrCat("{\"t\": \"w\", \"n\": ", k, "}"))
          << "\n";
    }
  }
  auto ds = Dataset::Parse(
      absl::StrCat("jsonl_dataset('", path, "', keys={'t': tf.string, 'n': tf.int64}).batch(4)"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<GlobalOrderPlan> plan = PlanGlobalOrder(*ds);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Steps [2, 4): elements 8..15, line 13 among them.
  absl::StatusOr<Dataset> range = GlobalOrderRange(*ds, *plan, GlobalOrderOptions(), 0, 2, 4);
  ASSERT_TRUE(range.ok()) << range.status();
  auto it = MakeIterator(*range);
  ASSERT_TRUE(it.ok()) << it.status();
  Element e;
  bool end = false;
  ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
  EXPECT_EQ(testing_util::Values(DictLeaf(e, "n")), testing_util::Iota(4, 8));
  absl::Status bad = (*it)->GetNext(&e, &end);
  EXPECT_TRUE(IsElementError(bad)) << bad;
  EXPECT_TRUE(absl::StrContains(bad.message(), absl::StrCat(path, " line 13: invalid JSON")))
      << bad;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sluice
