// webdataset_dataset: tar shards written by Python's tarfile (tools/golden/
// gen_webdataset_fixtures.py; PAX, GNU and ustar formats, long names, a folder entry, a file
// without extension) read as one dict per sample, keys inferred or given, fields not asked for
// skipped; list_files + interleave; FILE sharding (a shard is a file); shards through a
// non-local file system; expression round trip; errors: missing field, corrupt or truncated
// archive, not an archive.
#include "core/data/ops/webdataset_reader.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/data/distribute/auto_shard.h"
#include "sluice/dataset.h"
#include "core/io/file_system.h"
#include "core/data/memory_budget.h"
#include "core/data/spec_inference.h"
#include "gtest/gtest.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/memory_file_system.h"
#include "tests/core/record_test_util.h"
#include "tests/core/crafted_tar.h"

namespace sluice {
namespace {

using record_test::ReadWholeFile;
using record_test::TempDir;
using record_test::WriteWholeFile;
using testing_util::RunDataset;

const std::string kDir = "tests/testdata/webdataset/";
const std::string kLong = "train/" + std::string(60, 'd') + "/" + std::string(50, 'e');

std::string Jpg(int n) {
  std::string s;
  for (int i = 0; i < 700 + n; ++i) s.push_back(static_cast<char>((n * 37 + i) % 256));
  return s;
}

// '__key__' and each field of element `e`.
std::map<std::string, std::string> Fields(const Element& e) {
  std::map<std::string, std::string> out;
  EXPECT_EQ(e.kind(), NestKind::kDict);
  for (size_t i = 0; i < e.keys().size(); ++i) {
    out[e.keys()[i]] = e.children()[i].leaf().string_at(0);
  }
  return out;
}

absl::StatusOr<std::vector<Element>> RunExpr(const std::string& expression) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  if (!ds.ok()) return ds.status();
  return RunDataset(*ds);
}

TEST(WebDatasetTest, OneDictPerSampleWithTheFirstSamplesKeys) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(
      absl::StrCat("webdataset_dataset(['", kDir, "shard-000.tar', '", kDir, "shard-001.tar'])"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<ElementSpec> spec = ds->element_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->keys(), (std::vector<std::string>{"__key__", "cls", "jpg", "json"}));
  absl::StatusOr<std::vector<Element>> got = RunDataset(*ds);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<std::pair<std::string, int>> want = {
      {"train/n0000", 0}, {"train/n0001", 1}, {"train/n0002", 2}, {kLong + "/n0100", 100},
      {"train/n0003", 3}, {kLong + "/n0004", 4}};
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& [key, n] = want[i];
    std::map<std::string, std::string> f = Fields((*got)[i]);
    EXPECT_EQ(f["__key__"], key) << i;
    EXPECT_EQ(f["cls"], std::to_string(n % 10)) << key;
    EXPECT_EQ(f["json"], absl::StrCat("{\"n\": ", n, "}")) << key;
    EXPECT_EQ(f["jpg"], Jpg(n)) << key;
  }
  absl::StatusOr<Dataset> again = Dataset::Parse(ds->ToExpression());
  ASSERT_TRUE(again.ok()) << ds->ToExpression() << ": " << again.status();
  EXPECT_EQ(again->Fingerprint(), ds->Fingerprint());
}

TEST(WebDatasetTest, GivenKeysOnlyAndTheRestSkipped) {
  absl::StatusOr<std::vector<Element>> got =
      RunExpr(absl::StrCat("webdataset_dataset('", kDir, "shard-001.tar', keys=['cls'])"));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ(Fields((*got)[0]), (std::map<std::string, std::string>{{"__key__", "train/n0003"},
                                                                    {"cls", "3"}}));
  EXPECT_EQ(Fields((*got)[1])["cls"], "4");
}

TEST(WebDatasetTest, ListFilesAndInterleave) {
  absl::StatusOr<std::vector<Element>> got = RunExpr(absl::StrCat(
      "list_files('", kDir, "shard-*.tar').interleave(lambda f: webdataset_dataset(f, "
      "keys=['cls', 'jpg']), cycle_length=2)"));
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<std::string> cls;
  for (const Element& e : *got) cls.push_back(Fields(e)["cls"]);
  // One sample from each shard in turn: 0, 3, 1, 4, 2, then shard-000's last (n0100).
  EXPECT_EQ(cls, (std::vector<std::string>{"0", "3", "1", "4", "2", "0"}));
}

TEST(WebDatasetTest, FileShardingSplitsByShard) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat(
      "webdataset_dataset(['", kDir, "shard-000.tar', '", kDir, "shard-001.tar'], keys=['cls'])"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE(ReadsFiles(*ds));
  std::multiset<std::string> keys;
  std::vector<size_t> sizes;
  for (int64_t index = 0; index < 2; ++index) {
    absl::StatusOr<Dataset> shard = ShardByFile(*ds, 2, index);
    ASSERT_TRUE(shard.ok()) << shard.status();
    absl::StatusOr<std::vector<Element>> got = RunDataset(*shard);
    ASSERT_TRUE(got.ok()) << got.status();
    sizes.push_back(got->size());
    for (const Element& e : *got) keys.insert(Fields(e)["__key__"]);
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{4, 2}));
  EXPECT_EQ(keys.size(), 6u);
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 6u);
  EXPECT_FALSE(ShardByFile(*ds, 3, 0).ok());  // fewer shards than workers: TF's error
}

TEST(WebDatasetTest, ShardsThroughAnotherFileSystem) {
  auto mem = std::make_shared<testing_util::MemoryFileSystem>();
  mem->Put("mem://bucket/shard-000.tar", ReadWholeFile(kDir + "shard-000.tar"));
  RegisterFileSystem("mem", mem);
  absl::StatusOr<std::vector<Element>> got =
      RunExpr("webdataset_dataset('mem://bucket/shard-000.tar')");
  RegisterFileSystem("mem", std::make_shared<testing_util::MemoryFileSystem>());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 4u);
  EXPECT_EQ(Fields((*got)[3])["jpg"], Jpg(100));
  EXPECT_GT(mem->opens(), 0);
}

TEST(WebDatasetTest, MissingFieldNamesShardSampleAndWhatItHas) {
  absl::StatusOr<std::vector<Element>> got =
      RunExpr(absl::StrCat("webdataset_dataset('", kDir, "no-cls.tar')"));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& part : {std::string("no-cls.tar"), std::string("train/n0009"),
                                  std::string("'cls'"), std::string("jpg, json")}) {
    EXPECT_TRUE(absl::StrContains(got.status().message(), part)) << part << ": " << got.status();
  }
}

TEST(WebDatasetTest, CorruptTruncatedAndNonArchivesAreDataLoss) {
  TempDir dir;
  std::string bytes = ReadWholeFile(kDir + "shard-001.tar");
  // The second member's header starts after the first (703 bytes -> 1024) and its 512 header.
  std::string corrupt = bytes;
  corrupt[512 + 1024 + 10] ^= 0x20;
  WriteWholeFile(dir.File("corrupt.tar"), corrupt);
  WriteWholeFile(dir.File("truncated.tar"), bytes.substr(0, 512 + 300));
  WriteWholeFile(dir.File("text.tar"), std::string(2000, 'x'));
  struct Case {
    std::string file;
    std::string says;
  };
  for (const Case& c : {Case{"corrupt.tar", "byte offset 1536"}, Case{"truncated.tar", "ends at"},
                        Case{"text.tar", "not a tar archive"}}) {
    absl::StatusOr<std::vector<Element>> got = RunExpr(absl::StrCat(
        "webdataset_dataset('", dir.File(c.file), "', keys=['jpg'])"));
    ASSERT_FALSE(got.ok()) << c.file;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), c.file)) << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), c.says)) << got.status();
  }
}

// Member headers are claims (issue 25): over the element limit a wanted member is
// RESOURCE_EXHAUSTED before it is read; under it, a claim the shard does not hold is DATA_LOSS
// where the shard ends, not an allocation of the claim.
TEST(WebDatasetTest, AMemberHeaderClaimingMoreThanTheShardHoldsIsNeverAllocated) {
  const MemoryLimits saved = ProcessMemoryBudget().limits();
  ProcessMemoryBudget().SetLimits({.process_bytes = int64_t{256} << 20, .element_bytes = 4 << 20});
  TempDir dir;
  WriteWholeFile(dir.File("over.tar"), crafted::TarEntry("s/n1.cls", '0', "1") +
                                           crafted::TarHeader("s/n1.jpg", '0', uint64_t{1} << 31) +
                                           std::string(100, 'x'));
  WriteWholeFile(dir.File("short.tar"), crafted::TarEntry("s/n1.cls", '0', "1") +
                                            crafted::TarHeader("s/n1.jpg", '0', 1 << 20) +
                                            std::string(100, 'x'));
  absl::StatusOr<std::vector<Element>> got =
      RunExpr(absl::StrCat("webdataset_dataset('", dir.File("over.tar"), "')"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(),
                                "tar member 's/n1.jpg' of " + dir.File("over.tar") +
                                    " at byte offset 1536 claims 2147483648 bytes, more than "
                                    "the limit of 4194304 bytes"))
      << got.status();
  got = RunExpr(absl::StrCat("webdataset_dataset('", dir.File("short.tar"), "')"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "it ends at byte 1636, inside member "
                                                        "'s/n1.jpg'"))
      << got.status();
  // A field not asked for is skipped, whatever it claims.
  got = RunExpr(absl::StrCat("webdataset_dataset('", dir.File("over.tar"), "', keys=['cls'])"));
  EXPECT_FALSE(got.ok());
  EXPECT_NE(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  ProcessMemoryBudget().SetLimits(saved);
}

TEST(WebDatasetTest, BadArguments) {
  for (const std::string& expr :
       {absl::StrCat("webdataset_dataset('", kDir, "shard-000.tar', keys=['__key__'])"),
        absl::StrCat("webdataset_dataset('", kDir, "shard-000.tar', keys=['a', 'a'])"),
        absl::StrCat("webdataset_dataset('", kDir, "shard-000.tar', keys='jpg')"),
        std::string("list_files('x/*.tar').interleave(lambda f: webdataset_dataset(f))")}) {
    absl::StatusOr<Dataset> ds = Dataset::Parse(expr);
    absl::Status s = ds.ok() ? ds->element_spec().status() : ds.status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << expr << ": " << s;
  }
  absl::StatusOr<Dataset> missing = Dataset::Parse("webdataset_dataset('/nonexistent/a.tar')");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
}

}  // namespace
}  // namespace sluice
