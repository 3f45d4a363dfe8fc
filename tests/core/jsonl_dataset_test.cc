// jsonl_dataset(filenames, keys): JSON values to tensors as jsonl_reader.h states, and hostile
// lines (bad JSON, missing keys, wrong types, deep nesting, huge numbers, invalid UTF-8, a
// 100 MB line under a small element limit) are element errors naming file and line that
// ignore_errors() skips, never a crash or unbounded memory.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/op_iterator.h"
#include "gtest/gtest.h"
#include "iterator_test_util.h"
#include "peak_rss.h"
#include "scoped_process_limits.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

using testing_util::DictLeaf;
using testing_util::RunDataset;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/jsonl_", name);
}

std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// Pulls every element, recording element errors' messages.
struct Pulled {
  std::vector<Element> elements;
  std::vector<std::string> errors;
  absl::Status final_status;
};

Pulled PullAll(const std::string& expression) {
  Pulled out;
  auto ds = Dataset::Parse(expression);
  if (!ds.ok()) {
    out.final_status = ds.status();
    return out;
  }
  auto it = MakeIterator(*ds);
  if (!it.ok()) {
    out.final_status = it.status();
    return out;
  }
  for (int i = 0; i < 1000; ++i) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (!s.ok() && IsElementError(s)) {
      out.errors.push_back(std::string(s.message()));
      continue;
    }
    out.final_status = s;
    if (!s.ok() || end) break;
    out.elements.push_back(std::move(e));
  }
  return out;
}

TEST(JsonlDatasetTest, TypesMapAsDocumented) {
  const std::string f = WriteFile(
      "types.jsonl",
      "{\"text\": \"h\\u00e9llo\\n\", \"n\": 7, \"big\": -9007199254740993, \"x\": 1.5, "
      "\"d\": 2, \"flag\": true, \"ids\": [1, 2, 3], \"w\": [0.5, 1], \"extra\": {\"a\": [1]}}\r\n"
      "\n   \n"
      "{\"text\": \"\", \"n\": -2147483648, \"big\": 0, \"x\": -0.0, \"d\": 1e300, "
      "\"flag\": false, \"ids\": [], \"w\": []}");
  Pulled p = PullAll(absl::StrCat(
      "jsonl_dataset('", f,
      "', keys={'text': tf.string, 'n': tf.int32, 'big': tf.int64, 'x': tf.float32, "
      "'d': tf.float64, 'flag': tf.bool, 'ids': [tf.int32], 'w': [tf.float32]})"));
  ASSERT_TRUE(p.final_status.ok()) << p.final_status;
  ASSERT_TRUE(p.errors.empty()) << p.errors[0];
  ASSERT_EQ(p.elements.size(), 2u);
  const Element& e = p.elements[0];
  EXPECT_EQ(DictLeaf(e, "text").string_at(0), "h\xc3\xa9llo\n");
  EXPECT_EQ(DictLeaf(e, "n").dtype(), DType::kInt32);
  EXPECT_EQ(DictLeaf(e, "n").data<int32_t>()[0], 7);
  EXPECT_EQ(DictLeaf(e, "big").data<int64_t>()[0], -9007199254740993LL);
  EXPECT_EQ(DictLeaf(e, "x").data<float>()[0], 1.5f);
  EXPECT_EQ(DictLeaf(e, "d").data<double>()[0], 2.0);
  EXPECT_TRUE(DictLeaf(e, "flag").data<bool>()[0]);
  EXPECT_EQ(DictLeaf(e, "ids").shape(), Shape({3}));
  EXPECT_EQ(DictLeaf(e, "ids").data<int32_t>()[2], 3);
  EXPECT_EQ(DictLeaf(e, "w").data<float>()[1], 1.0f);
  EXPECT_EQ(DictLeaf(p.elements[1], "n").data<int32_t>()[0], -2147483648);
  EXPECT_EQ(DictLeaf(p.elements[1], "d").data<double>()[0], 1e300);
  EXPECT_EQ(DictLeaf(p.elements[1], "ids").shape(), Shape({0}));
  EXPECT_EQ(e.keys(), (std::vector<std::string>{"text", "n", "big", "x", "d", "flag", "ids", "w"}));
}

TEST(JsonlDatasetTest, ListOfKeysMeansStringsAndSpecRoundTrips) {
  const std::string f = WriteFile("list.jsonl", "{\"a\": \"x\", \"b\": \"y\"}\n");
  auto ds = Dataset::Parse(absl::StrCat("jsonl_dataset(['", f, "'], keys=['b', 'a'])"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto spec = ds->element_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->keys(), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(spec->children()[0].leaf().dtype, DType::kString);
  auto again = Dataset::Parse(ds->ToExpression());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ToExpression(), ds->ToExpression());
  auto typed = Dataset::Parse(absl::StrCat("jsonl_dataset(['", f, "'], keys={'a': [tf.int64]})"));
  ASSERT_TRUE(typed.ok());
  auto typed_again = Dataset::Parse(typed->ToExpression());
  ASSERT_TRUE(typed_again.ok()) << typed->ToExpression() << ": " << typed_again.status();
  EXPECT_EQ(typed_again->element_spec()->children()[0].leaf().shape, Shape({kUnknownDim}));
}

TEST(JsonlDatasetTest, HostileLinesAreElementErrorsNamingFileAndLine) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string f = WriteFile(
      "hostile.jsonl",
      absl::StrCat("{\"t\": \"ok1\", \"n\": [1]}\n",                 // 1
                   "{\"t\": \"bad\", \"n\": [1]\n",                    // 2: invalid JSON
                   "{\"n\": [1]}\n",                                   // 3: missing key
                   "{\"t\": 5, \"n\": [1]}\n",                         // 4: wrong type
                   "{\"t\": \"x\", \"n\": [1, \"2\"]}\n",              // 5: wrong item type
                   "{\"t\": \"x\", \"n\": ", deep, "}\n",              // 6: deep nesting
                   "{\"t\": \"x\", \"n\": [123456789012345678901234567890]}\n",  // 7: huge
                   "{\"t\": \"x\", \"n\": [1e99999]}\n",               // 8: huge float
                   "{\"t\": \"\xff\xfe\", \"n\": [1]}\n",              // 9: invalid UTF-8
                   "[1, 2]\n",                                         // 10: not an object
                   "{\"t\": \"x\", \"n\": [[1]]}\n",                   // 11: nested array
                   "{\"t\": \"x\", \"n\": [3000000000]}\n",            // 12: int32 overflow
                   "{\"t\": \"ok2\", \"n\": [2]}"));                   // 13: no final newline
  Pulled p = PullAll(absl::StrCat("jsonl_dataset('", f, "', keys={'t': tf.string, 'n': [tf.int32]})"));
  ASSERT_TRUE(p.final_status.ok()) << p.final_status;
  ASSERT_EQ(p.elements.size(), 2u);
  EXPECT_EQ(DictLeaf(p.elements[0], "t").string_at(0), "ok1");
  EXPECT_EQ(DictLeaf(p.elements[1], "t").string_at(0), "ok2");
  ASSERT_EQ(p.errors.size(), 11u);
  const std::vector<std::string> expected = {
      "line 2: invalid JSON",
      "line 3: key 't' is missing",
      "line 4: key 't': expected string, got an integer",
      "line 5: key 'n': item 1: expected int32, got a string",
      "line 6: invalid JSON",
      "line 7: ",
      "line 8: invalid JSON",
      "line 9: invalid JSON",
      "line 10: expected a JSON object, got an array",
      "line 11: key 'n': item 0: expected int32, got an array",
      "line 12: key 'n': item 0: the integer 3000000000 does not fit in int32"};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NE(p.errors[i].find(absl::StrCat(f, " ", expected[i])), std::string::npos)
        << p.errors[i];
  }
  // ignore_errors() skips them.
  Pulled skipped = PullAll(absl::StrCat("jsonl_dataset('", f,
                                        "', keys={'t': tf.string, 'n': [tf.int32]}).ignore_errors()"));
  ASSERT_TRUE(skipped.final_status.ok()) << skipped.final_status;
  EXPECT_TRUE(skipped.errors.empty());
  EXPECT_EQ(skipped.elements.size(), 2u);
}

TEST(JsonlDatasetTest, HundredMegabyteLineUnderASmallBudgetIsSkippedWithoutBeingHeld) {
  const std::string path = TempPath("huge.jsonl");
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\"t\": \"first\"}\n{\"t\": \"";
    const std::string chunk(1 << 20, 'a');
    for (int i = 0; i < 100; ++i) out << chunk;
    out << "\"}\n{\"t\": \"after\"}\n";
  }
  MemoryLimits limits = ProcessMemoryBudget().limits();
  limits.element_bytes = 4 << 20;
  ScopedProcessLimits scoped(limits);
  const int64_t rss_before = PeakRssBytes();
  Pulled p = PullAll(absl::StrCat("jsonl_dataset('", path, "', keys=['t'])"));
  ASSERT_TRUE(p.final_status.ok()) << p.final_status;
  ASSERT_EQ(p.elements.size(), 2u);
  EXPECT_EQ(DictLeaf(p.elements[1], "t").string_at(0), "after");
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_NE(p.errors[0].find(absl::StrCat(path, " line 2: the line is longer than the memory "
                                          "limit of one element, 4194304 bytes")),
            std::string::npos)
      << p.errors[0];
  // The 100 MB line was never held: the peak grew by far less than it.
  EXPECT_LT(PeakRssBytes() - rss_before, 40 << 20);
  std::remove(path.c_str());
}

TEST(JsonlDatasetTest, MissingFileAndBadKeys) {
  Pulled p = PullAll("jsonl_dataset('/nonexistent/x.jsonl', keys=['t'])");
  EXPECT_EQ(p.final_status.code(), absl::StatusCode::kNotFound) << p.final_status;
  EXPECT_NE(p.final_status.message().find("/nonexistent/x.jsonl"), std::string::npos);
  for (const char* expr : {"jsonl_dataset('a', keys=[])", "jsonl_dataset('a', keys=['x', 'x'])",
                           "jsonl_dataset('a', keys={'x': tf.uint8})",
                           "jsonl_dataset('a', keys={'x': [tf.int32, tf.int64]})",
                           "jsonl_dataset('a', keys=5)"}) {
    auto ds = Dataset::Parse(expr);
    absl::Status s = ds.ok() ? ds->element_spec().status() : ds.status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << expr << ": " << s;
  }
}

TEST(JsonlDatasetTest, LinesAcrossBlockBoundariesAndFiles) {
  // Lines of varying lengths spanning the 1 MiB read blocks, over two files.
  std::string a, b;
  std::vector<std::string> want;
  for (int i = 0; i < 3000; ++i) {
    std::string s(static_cast<size_t>((i * 7919) % 1500), static_cast<char>('a' + i % 26));
    want.push_back(s);
    absl::StrAppend(i < 1500 ? &a : &b, "{\"t\": \"", s, "\"}\n");
  }
  const std::string fa = WriteFile("blocks_a.jsonl", a);
  const std::string fb = WriteFile("blocks_b.jsonl", b);
  auto ds = Dataset::Parse(absl::StrCat("jsonl_dataset(['", fa, "', '", fb, "'], keys=['t'])"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto rows = RunDataset(*ds);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(DictLeaf((*rows)[i], "t").string_at(0), want[i]) << "line " << i;
  }
}

}  // namespace
}  // namespace sluice
