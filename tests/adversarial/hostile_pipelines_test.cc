// The adversarial suite's own parts: the generator is reproducible from its seed (a failure
// report names a case that can be rerun), and the tar bombs are archives the reader accepts up
// to the lie in a size field (so the suite reaches the allocation, not a checksum error). Only
// header parsing here: nothing reads the claimed sizes.
#include "tests/adversarial/hostile_pipelines.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/io/input_stream.h"
#include "core/io/tar_reader.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

std::string MakeTempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp",
                                   "/sluice-hostile-XXXXXX");
  return mkdtemp(templ.data()) != nullptr ? templ : "";
}

TEST(HostilePipelinesTest, TheSameSeedGivesTheSameCases) {
  HostileFiles files;
  files.tar_bombs = {"/d/bomb-0.tar", "/d/bomb-1.tar"};
  files.text_file = "/d/lines.txt";
  std::set<std::string> families;
  int differ = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const HostileCase a = GenerateHostileCase(25, i, files);
    const HostileCase b = GenerateHostileCase(25, i, files);
    EXPECT_EQ(a.pipeline, b.pipeline) << i;
    EXPECT_EQ(a.names, b.names) << i;
    EXPECT_FALSE(a.names.empty()) << a.Describe();
    EXPECT_TRUE(a.valid || !a.codes.empty()) << a.Describe();
    if (GenerateHostileCase(26, i, files).pipeline != a.pipeline) ++differ;
    families.insert(a.family);
  }
  EXPECT_GT(differ, 100);
  EXPECT_EQ(families, (std::set<std::string>{"batch", "shape", "nesting", "buffer", "image_bomb",
                                             "tar_bomb", "literal", "overflow"}));
}

TEST(HostilePipelinesTest, BytesLiteralEscapesWhatPythonNeeds) {
  EXPECT_EQ(BytesLiteral(std::string("a'\\\x89\n\0", 6)), "b'a\\x27\\x5c\\x89\\x0a\\x00'");
  EXPECT_TRUE(absl::StartsWith(PngBomb(60000, 60000), "\x89PNG\r\n\x1a\n"));
  EXPECT_TRUE(absl::StartsWith(JpegBomb(60000, 60000), "\xff\xd8\xff\xdb"));
}

TEST(HostilePipelinesTest, TarBombsPassTheHeaderChecksAndClaimTheirSizes) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  absl::StatusOr<HostileFiles> files = WriteHostileFiles(dir);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->tar_bombs.size(), 5u);
  auto open = [&](int i) {
    absl::StatusOr<std::unique_ptr<InputStream>> in = OpenFileStream(files->tar_bombs[i]);
    EXPECT_TRUE(in.ok()) << in.status();
    return std::make_unique<TarReader>(*std::move(in));
  };
  TarMember m;
  {
    auto reader = open(0);
    ASSERT_TRUE(reader->Next(&m).ok());
    EXPECT_EQ(m.name, "s0.cls");
    EXPECT_EQ(m.size, 1u);
    ASSERT_TRUE(reader->Next(&m).ok());
    EXPECT_EQ(m.name, "s0.jpg");
    EXPECT_EQ(m.size, uint64_t{1} << 31);
  }
  {
    auto reader = open(1);
    ASSERT_TRUE(reader->Next(&m).ok());
    EXPECT_EQ(m.size, uint64_t{1} << 40);
  }
  {
    auto reader = open(4);  // the pax header's size record overrides the member's 0
    absl::Status s = reader->Next(&m);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(m.name, "s0.jpg");
    EXPECT_EQ(m.size, uint64_t{1} << 40);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace
}  // namespace sluice
