// TarReader on archives crafted byte by byte: headers that lie about their sizes, and GNU
// long-name and pax headers in front of entries that are not returned (issue 25: a member
// claiming 2 GiB was allocated before a byte was read; a long name given to a directory named
// the next file).
#include "core/io/tar_reader.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/io/input_stream.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/crafted_tar.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

constexpr char kArchive[] = "crafted.tar";

using crafted::kTarEnd;
using crafted::PaxRecord;

std::string Header(const std::string& name, char type, uint64_t size) {
  return crafted::TarHeader(name, type, size);
}
std::string Blocks(const std::string& data) { return crafted::TarBlocks(data); }
std::string Entry(const std::string& name, char type, const std::string& data) {
  return crafted::TarEntry(name, type, data);
}

TarReader Reader(const std::string& bytes, TarReaderOptions options = {}) {
  return TarReader(NewStringStream(kArchive, bytes), options);
}

// Every regular file: name and data, or the first error.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadAll(const std::string& bytes) {
  TarReader tar = Reader(bytes);
  std::vector<std::pair<std::string, std::string>> out;
  for (int i = 0; i < 100; ++i) {
    TarMember m;
    absl::Status s = tar.Next(&m);
    if (absl::IsOutOfRange(s)) return out;
    if (!s.ok()) return s;
    std::string data;
    if (absl::Status r = tar.ReadData(&data); !r.ok()) return r;
    out.emplace_back(m.name, data);
  }
  return absl::FailedPreconditionError("more than 100 members");
}

using Files = std::vector<std::pair<std::string, std::string>>;

TEST(TarReaderTest, ReadsRegularFilesAndPassesOverTheRest) {
  auto files = ReadAll(Entry("a.txt", '0', "hello") + Entry("dir/", '5', "") +
                       Entry("link", '2', "") + Entry("b.txt", '\0', "world!") + kTarEnd);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, (Files{{"a.txt", "hello"}, {"b.txt", "world!"}}));
}

TEST(TarReaderTest, AMemberClaimingMoreThanTheArchiveHoldsIsDataLossNotAnAllocation) {
  // 2 GiB and 1 TiB claimed over 100 real bytes, under limits that allow them: the reader reads
  // what is there and reports where the archive ends (it used to allocate the claim first).
  for (uint64_t claim : {uint64_t{1} << 31, uint64_t{1} << 40}) {
    SCOPED_TRACE(claim);
    TarReader tar = Reader(Header("big.bin", '0', claim) + std::string(100, 'x'),
                           {.max_member_bytes = uint64_t{1} << 41});
    TarMember m;
    ASSERT_TRUE(tar.Next(&m).ok());
    EXPECT_EQ(m.size, claim);
    std::string data;
    absl::Status s = tar.ReadData(&data);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(s.message(),
              "truncated tar archive crafted.tar: it ends at byte 612, inside member 'big.bin'");
    EXPECT_LT(data.capacity(), size_t{4} << 20);
  }
}

TEST(TarReaderTest, AMemberOverTheLimitIsResourceExhaustedBeforeItIsRead) {
  TarReader tar =
      Reader(Entry("a.bin", '0', std::string(3000, 'a')) + Entry("b.bin", '0', "small") + kTarEnd,
             {.max_member_bytes = 2048});
  TarMember m;
  ASSERT_TRUE(tar.Next(&m).ok());
  std::string data;
  absl::Status s = tar.ReadData(&data);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(s.message(),
            "tar member 'a.bin' of crafted.tar at byte offset 512 claims 3000 bytes, more than "
            "the limit of 2048 bytes for one member");
  // The member is skipped, not read; the next one is fine.
  ASSERT_TRUE(tar.Next(&m).ok());
  EXPECT_EQ(m.name, "b.bin");
  ASSERT_TRUE(tar.ReadData(&data).ok());
  EXPECT_EQ(data, "small");
}

TEST(TarReaderTest, LongNamesAndPaxHeadersOfSkippedEntriesDoNotNameTheNextFile) {
  const std::string long_dir = std::string(120, 'd') + "/";
  struct Case {
    std::string what;
    std::string archive;
    Files want;
  };
  const Case cases[] = {
      {"GNU long name, directory",
       Entry("././@LongLink", 'L', long_dir) + Entry("ddd/", '5', "") + Entry("b.txt", '0', "b") +
           kTarEnd,
       {{"b.txt", "b"}}},
      {"pax path, directory",
       Entry("PaxHeaders/d", 'x', PaxRecord("path", long_dir)) + Entry("ddd/", '5', "") +
           Entry("b.txt", '0', "b") + kTarEnd,
       {{"b.txt", "b"}}},
      {"pax path and linkpath, symlink",
       Entry("PaxHeaders/l", 'x', PaxRecord("path", "l") + PaxRecord("linkpath", "target")) +
           Entry("l", '2', "") + Entry("c.txt", '0', "cc") + kTarEnd,
       {{"c.txt", "cc"}}},
      {"pax global header (not applied)",
       Entry("pax_global_header", 'g', PaxRecord("path", "global")) + Entry("d.txt", '0', "d") +
           Entry("e.txt", '0', "e") + kTarEnd,
       {{"d.txt", "d"}, {"e.txt", "e"}}},
      {"GNU long link name",
       Entry("././@LongLink", 'K', std::string(150, 't')) + Entry("l", '2', "") +
           Entry("f.txt", '0', "f") + kTarEnd,
       {{"f.txt", "f"}}},
      // What the headers are for still works: they name (and size) the entry right after.
      {"long name and pax of a file",
       Entry("././@LongLink", 'L', long_dir + "x.txt") + Entry("x.txt", '0', "x") +
           Entry("PaxHeaders/y", 'x', PaxRecord("path", "pax/y.txt") + PaxRecord("size", "3")) +
           Header("y.txt", '0', 0) + Blocks("yyy") + Entry("z.txt", '0', "z") + kTarEnd,
       {{long_dir + "x.txt", "x"}, {"pax/y.txt", "yyy"}, {"z.txt", "z"}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto files = ReadAll(c.archive);
    ASSERT_TRUE(files.ok()) << files.status();
    EXPECT_EQ(*files, c.want);
  }
}

TEST(TarReaderTest, ImpossibleHeadersAreDataLossNamingTheOffset) {
  {
    // A size near 2^64 would make the skip wrap backwards (and the reader loop).
    auto files = ReadAll(Entry("a", '0', "a") + Header("huge", '0', ~uint64_t{0} >> 1) + kTarEnd);
    EXPECT_EQ(files.status().code(), absl::StatusCode::kDataLoss) << files.status();
    EXPECT_THAT(std::string(files.status().message()),
                HasSubstr("corrupt tar header at byte offset 1024 of crafted.tar"));
  }
  {
    // A long-name header of 2 MiB is not a name.
    auto files = ReadAll(Header("././@LongLink", 'L', 2 << 20) + std::string(4096, 'n'));
    EXPECT_EQ(files.status().code(), absl::StatusCode::kDataLoss) << files.status();
    EXPECT_THAT(std::string(files.status().message()),
                HasSubstr("a GNU long-name header of 2097152 bytes"));
  }
  {
    auto files = ReadAll(Entry("a", '0', "abc").substr(0, 514));
    EXPECT_EQ(files.status().code(), absl::StatusCode::kDataLoss) << files.status();
    EXPECT_THAT(std::string(files.status().message()), HasSubstr("it ends at byte 514"));
  }
}

}  // namespace
}  // namespace sluice
