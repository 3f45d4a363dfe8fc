// sluicectl gen, inspect and index (tools/sluicectl/gen.cc, inspect.cc, index.cc), run as a user runs them.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/data/ops/example_parser.h"
#include "core/io/tfrecord_reader.h"
#include "gtest/gtest.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"

namespace sluice {
namespace {

SubprocessResult Sluicectl(std::vector<std::string> args) {
  args.insert(args.begin(), BuildPath("bin/sluicectl"));
  absl::StatusOr<SubprocessResult> r = RunSubprocess(args);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SubprocessResult{};
}

class SluicectlRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "sluicectl_records_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Gen(const std::string& out, const std::string& seed) {
    SubprocessResult r = Sluicectl({"gen", "--format=tfrecord", "--out=" + out, "--num_files=3",
                                    "--records_per_file=5", "--image_bytes=64",
                                    "--num_classes=4", "--seed=" + seed});
    EXPECT_EQ(r.exit_code, 0) << r.Describe() << r.stderr_text;
    return r.stdout_text;
  }
  std::string dir_;
};

std::string Contents(const std::string& path) {
  absl::StatusOr<std::string> s = ReadFileToString(path);
  return s.ok() ? *s : "";
}

TEST_F(SluicectlRecordsTest, GenWritesDeterministicParseableExamples) {
  std::string out = Gen(dir_ + "/a", "7");
  EXPECT_TRUE(absl::StrContains(out, "wrote 3 files, 15 Examples")) << out;
  Gen(dir_ + "/b", "7");
  Gen(dir_ + "/c", "8");
  const std::string f0 = "/data-00000-of-00003.tfrecord";
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/a" + f0));
  EXPECT_EQ(Contents(dir_ + "/a" + f0), Contents(dir_ + "/b" + f0));
  EXPECT_NE(Contents(dir_ + "/a" + f0), Contents(dir_ + "/c" + f0));

  size_t pos = 0;
  auto fn = ExampleParser::ParseFeatureSpec(
      "{'image': FixedLenFeature([], tf.string), 'label': FixedLenFeature([], tf.int64)}", &pos);
  ASSERT_TRUE(fn.ok());
  auto parser = ExampleParser::Create(*fn);
  ASSERT_TRUE(parser.ok());
  int records = 0;
  for (int f = 0; f < 3; ++f) {
    auto r = TFRecordReader::Open(dir_ + "/a/data-0000" + std::to_string(f) + "-of-00003.tfrecord");
    ASSERT_TRUE(r.ok()) << r.status();
    std::string rec;
    while ((*r)->ReadRecord(&rec).ok()) {
      auto e = parser->ParseSingle(rec);
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ(e->children()[0].leaf().string_at(0).size(), 64u);
      int64_t label = e->children()[1].leaf().data<int64_t>()[0];
      EXPECT_GE(label, 0);
      EXPECT_LT(label, 4);
      ++records;
    }
  }
  EXPECT_EQ(records, 15);
}

TEST_F(SluicectlRecordsTest, InspectAndIndex) {
  Gen(dir_, "1");
  const std::string file = dir_ + "/data-00001-of-00003.tfrecord";
  SubprocessResult inspect = Sluicectl({"inspect", file, "--limit=2"});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.stderr_text;
  EXPECT_TRUE(absl::StrContains(inspect.stdout_text, "record 0 at byte 0: ")) << inspect.stdout_text;
  EXPECT_TRUE(absl::StrContains(inspect.stdout_text, "'label': int64_list[1] "));
  EXPECT_TRUE(absl::StrContains(inspect.stdout_text, "'image': bytes_list[1] "));
  EXPECT_TRUE(absl::StrContains(inspect.stdout_text, "2 records shown"));

  SubprocessResult first = Sluicectl({"index", file});
  ASSERT_EQ(first.exit_code, 0) << first.stderr_text;
  EXPECT_EQ(first.stdout_text,
            file + ": 5 records, index " + file + ".sluice-idx (built)\n");
  SubprocessResult second = Sluicectl({"index", file});
  EXPECT_TRUE(absl::StrContains(second.stdout_text, "(up to date)")) << second.stdout_text;

  SubprocessResult missing = Sluicectl({"inspect", dir_ + "/nope.tfrecord"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(missing.stderr_text, dir_ + "/nope.tfrecord"));
  SubprocessResult usage = Sluicectl({"gen", "--out=" + dir_});
  EXPECT_EQ(usage.exit_code, 2) << usage.stderr_text;
}

}  // namespace
}  // namespace sluice
