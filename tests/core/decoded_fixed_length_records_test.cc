// fixed_length_record_dataset fused with the map(decode_raw) after it
// (core/data/ops/fixed_length_record_op.cc): the same elements, errors and specs as the two ops
// run apart (ExecutorOptions::fuse_maps = false), and the decoded tensors built in the step's
// place (core/tensor/step_output_allocator.h) only when they end the pipeline as they are.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "core/data/executor.h"
#include "core/data/iterator.h"
#include "core/data/op_iterator.h"
#include "core/tensor/host_memory.h"
#include "core/tensor/step_output_allocator.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/random_record_files.h"
#include "tests/core/record_test_util.h"
#include "tests/core/scoped_process_limits.h"

namespace sluice {
namespace {

using record_test::Fixture;
using record_test::RandomBytes;
using record_test::TempDir;
using record_test::WriteGzip;
using record_test::WriteWholeFile;

constexpr uint32_t kSeed = 1205;

std::unique_ptr<Iterator> Build(const std::string& expression, bool fuse) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  EXPECT_TRUE(ds.ok()) << ds.status();
  if (!ds.ok()) return nullptr;
  ExecutorOptions options;
  options.fuse_maps = fuse;
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds, options);
  EXPECT_TRUE(it.ok()) << it.status();
  return it.ok() ? *std::move(it) : nullptr;
}

// Each output of `it` described (dtype, shape, bytes in hex, or the error), then "end"; at
// most `limit`; iteration goes on after element errors.
std::vector<std::string> DrainIterator(Iterator* it, int limit = 200) {
  std::vector<std::string> out;
  for (int i = 0; i < limit; ++i) {
    Element e;
    bool end = false;
    absl::Status s = it->GetNext(&e, &end);
    if (!s.ok()) {
      out.push_back(absl::StrCat("error ", absl::StatusCodeToString(s.code()), ": ", s.message(),
                                 IsElementError(s) ? " (element)" : ""));
      if (!IsElementError(s)) return out;
      continue;
    }
    if (end) {
      out.push_back("end");
      return out;
    }
    const Tensor& t = e.leaf();
    out.push_back(absl::StrCat(DTypeName(t.dtype()), " ", t.shape().ToString(), " ",
                               absl::BytesToHexString(absl::string_view(
                                   static_cast<const char*>(t.raw_data()), t.byte_size()))));
  }
  return out;
}

// DrainIterator of the expression's iterator.
std::vector<std::string> Drain(const std::string& expression, bool fuse, int limit = 200) {
  std::unique_ptr<Iterator> it = Build(expression, fuse);
  if (it == nullptr) return {};
  return DrainIterator(it.get(), limit);
}

class DecodedFixedLengthRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override { std::printf("seed %u\n", kSeed); }

  // A file of a header, `records` random records and a footer; its path.
  std::string File(const std::string& name, size_t record_bytes, size_t records, size_t header,
                   size_t footer, bool gzip = false) {
    std::string data = RandomBytes(header + record_bytes * records + footer, &rng_);
    const std::string path = dir_.File(name);
    if (gzip) {
      WriteGzip(path, data);
    } else {
      WriteWholeFile(path, data);
    }
    return path;
  }

  void ExpectSameAsApart(const std::string& expression) {
    SCOPED_TRACE(expression);
    std::vector<std::string> apart = Drain(expression, false);
    ASSERT_FALSE(apart.empty());
    EXPECT_EQ(Drain(expression, true), apart);
  }

  std::mt19937 rng_{kSeed};
  TempDir dir_;
};

TEST_F(DecodedFixedLengthRecordsTest, SameElementsAsDecodeRawApart) {
  const std::string a = File("a.bin", 70000, 3, 5, 7);
  const std::string b = File("b.bin", 70000, 2, 5, 7);
  const std::string small = File("small.bin", 24, 10, 3, 2);
  const std::string gz = File("c.bin.gz", 40000, 3, 1, 4, /*gzip=*/true);
  // Two files of 70000-byte records (read straight into the tensors), and files of small
  // records (through the reader's buffer), a compressed one and TF's fixture.
  const std::string two = absl::StrCat("fixed_length_record_dataset(['", a, "', '", b,
                                       "'], 70000, header_bytes=5, footer_bytes=7");
  const std::string small24 = absl::StrCat("fixed_length_record_dataset(['", small,
                                           "'], 24, header_bytes=3, footer_bytes=2)");
  for (const std::string& e : {
           two + ").repeat(2).map(decode_raw(tf.uint8))",
           two + ").map(decode_raw(tf.int16))",
           two + ").skip(1).take(3).map(decode_raw(tf.int32, little_endian=False))",
           two + ", start_record=2, num_records=2).map(decode_raw(tf.float64, "
                 "little_endian=False)).repeat(2)",
           small24 + ".shard(2, 1).map(decode_raw(tf.int64, little_endian=False))",
           small24 + ".map(decode_raw(tf.float32)).batch(3)",
           absl::StrCat("fixed_length_record_dataset(['", gz,
                        "'], 40000, header_bytes=1, footer_bytes=4, compression_type='GZIP')"
                        ".map(decode_raw(tf.uint16, little_endian=False))"),
           absl::StrCat("fixed_length_record_dataset(['", Fixture("fixed.bin"),
                        "'], 4, header_bytes=3, footer_bytes=2).map(decode_raw(tf.int32))"),
       }) {
    ExpectSameAsApart(e);
  }
  // The decoded elements are the records' bytes, as TF's decode_raw gives them: uint8 of the
  // record itself; a big-endian int16 swapped into the host's order.
  std::vector<std::string> u8 = Drain(small24 + ".map(decode_raw(tf.uint8))", true);
  const std::string data = record_test::ReadWholeFile(small);
  ASSERT_EQ(u8.size(), 11u);
  EXPECT_EQ(u8[0], "uint8 (24,) " + absl::BytesToHexString(data.substr(3, 24)));
  EXPECT_EQ(u8[10], "end");
  std::vector<std::string> be =
      Drain(small24 + ".map(decode_raw(tf.int16, little_endian=False))", true);
  std::string swapped = data.substr(3, 24);
  for (size_t i = 0; i < swapped.size(); i += 2) std::swap(swapped[i], swapped[i + 1]);
  EXPECT_EQ(be[0], "int16 (12,) " + absl::BytesToHexString(swapped));
}

TEST_F(DecodedFixedLengthRecordsTest, SpecIsDecodeRawsOwn) {
  const std::string a = File("a.bin", 64, 2, 0, 0);
  absl::StatusOr<Dataset> ds = Dataset::Parse(
      absl::StrCat("fixed_length_record_dataset(['", a, "'], 64).repeat().map(decode_raw(tf.int32))"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<ElementSpec> spec = ds->element_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->leaf().dtype, DType::kInt32);
  EXPECT_EQ(spec->leaf().shape, Shape({kUnknownDim}));  // TF's: [None]
}

TEST_F(DecodedFixedLengthRecordsTest, ARecordShorterThanRecordBytesIsTheSourcesError) {
  // Uncompressed: a body that is not a whole number of records fails at the file's open, before
  // any record; compressed: DATA_LOSS after the whole records. As apart, named by the source.
  const std::string partial = Fixture("fixed_partial.bin");
  const std::string gz = File("short.bin.gz", 1, 4 * 20000 + 6000, 0, 0, /*gzip=*/true);
  const std::string whole = File("tiny.bin", 10, 1, 0, 0);
  for (const std::string& e : {
           absl::StrCat("fixed_length_record_dataset(['", partial,
                        "'], 4, header_bytes=3, footer_bytes=2).map(decode_raw(tf.uint8))"),
           absl::StrCat("fixed_length_record_dataset(['", gz,
                        "'], 20000, compression_type='GZIP').map(decode_raw(tf.uint8))"),
           absl::StrCat("fixed_length_record_dataset(['", whole,
                        "'], 20000).repeat(3).map(decode_raw(tf.uint8))"),
       }) {
    ExpectSameAsApart(e);
  }
  std::vector<std::string> out = Drain(
      absl::StrCat("fixed_length_record_dataset(['", gz,
                   "'], 20000, compression_type='GZIP').map(decode_raw(tf.uint8))"),
      true);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_TRUE(absl::StartsWith(out[4], "error DATA_LOSS: source (fixed_length_record_dataset): "))
      << out[4];
  EXPECT_TRUE(absl::StrContains(out[4], "has body length 86000 bytes")) << out[4];
}

TEST_F(DecodedFixedLengthRecordsTest, ARecordNotAMultipleOfTheDTypeIsDecodeRawsElementError) {
  const std::string a = File("a.bin", 6, 3, 0, 0);
  const std::string e = absl::StrCat("fixed_length_record_dataset(['", a,
                                     "'], 6).map(decode_raw(tf.int32))");
  ExpectSameAsApart(e);
  std::vector<std::string> out = Drain(e, true);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(absl::StrContains(out[0], "Input to DecodeRaw has length 6 that is not a multiple "
                                        "of 4")) << out[0];
  EXPECT_TRUE(absl::StrContains(out[0], "(element)")) << out[0];
}

// The decoded tensor refused by the memory budget: the map's element error, named as apart,
// and the next GetNext gives the next record.
TEST_F(DecodedFixedLengthRecordsTest, ARefusedTensorIsTheMapsElementErrorAndTheNextRecordFollows) {
  const std::string big = File("big.bin", 70000, 3, 0, 0);
  const std::string small = File("small.bin", 4096, 3, 0, 0);
  const std::string gz = File("c.bin.gz", 4096, 3, 0, 0, /*gzip=*/true);
  for (const auto& [file, bytes, compression] :
       {std::tuple<std::string, int, std::string>{big, 70000, ""}, {small, 4096, ""},
        {gz, 4096, ", compression_type='GZIP'"}}) {
    const std::string e = absl::StrCat("fixed_length_record_dataset(['", file, "'], ", bytes,
                                       compression, ").map(decode_raw(tf.uint8))");
    SCOPED_TRACE(e);
    std::vector<std::string> records = Drain(e, false);
    ASSERT_EQ(records.size(), 4u);
    for (bool fuse : {false, true}) {
      std::unique_ptr<Iterator> it = Build(e, fuse);
      ASSERT_NE(it, nullptr);
      Element first;
      bool end = false;
      absl::Status refused;
      {
        const MemoryLimits limits = ProcessMemoryBudget().limits();
        ScopedProcessLimits tight({.process_bytes = ProcessMemoryBudget().in_use() + bytes / 2,
                                   .element_bytes = limits.element_bytes});
        refused = it->GetNext(&first, &end);
      }
      EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
      EXPECT_TRUE(IsElementError(refused)) << refused;
      EXPECT_TRUE(absl::StartsWith(
          refused.message(), "op 1 (map): decode_raw(tf.uint8) (string []): its output: a "))
          << refused;
      std::vector<std::string> rest;
      for (int i = 0; i < 10 && !end; ++i) {
        Element next;
        absl::Status s = it->GetNext(&next, &end);
        ASSERT_TRUE(s.ok()) << s;
        if (!end) {
          rest.push_back(absl::StrCat(DTypeName(next.leaf().dtype()), " ",
                                      next.leaf().shape().ToString(), " ",
                                      absl::BytesToHexString(absl::string_view(
                                          static_cast<const char*>(next.leaf().raw_data()),
                                          next.leaf().byte_size()))));
        }
      }
      EXPECT_EQ(rest, std::vector<std::string>(records.begin() + 1, records.end() - 1))
          << "fuse " << fuse;
    }
  }
}

// A StepOutputAllocator that hands out host buffers and remembers them (or, without room,
// nothing).
class FakeStepPlace : public StepOutputAllocator {
 public:
  explicit FakeStepPlace(bool room) : room_(room) {}
  std::shared_ptr<TensorBuffer> AllocateStepOutput(size_t bytes) const override {
    ++calls_;
    if (!room_) return nullptr;
    given_.push_back(TensorBuffer::AllocateHost(bytes));
    return given_.back();
  }
  int calls() const { return calls_; }
  bool Gave(const Tensor& t) const {
    for (const auto& b : given_) {
      if (t.buffer() == b) return true;
    }
    return false;
  }

 private:
  const bool room_;
  mutable int calls_ = 0;
  mutable std::vector<std::shared_ptr<TensorBuffer>> given_;
};

// As Drain, every decoded tensor refused: the memory budget's process limit set half a record
// above what the process holds once the iterator is built. Each refusal's message is cut
// before ", but N ... are in use": apart, the record's string is held while the map allocates.
std::vector<std::string> DrainRefused(const std::string& expression, bool fuse,
                                      int64_t record_bytes) {
  std::unique_ptr<Iterator> it = Build(expression, fuse);
  if (it == nullptr) return {};
  const MemoryLimits limits = ProcessMemoryBudget().limits();
  ScopedProcessLimits tight({.process_bytes = ProcessMemoryBudget().in_use() + record_bytes / 2,
                             .element_bytes = limits.element_bytes});
  std::vector<std::string> out = DrainIterator(it.get());
  for (std::string& o : out) o = o.substr(0, o.find(", but "));
  return out;
}

// Records a skip() or shard() between the source and the map drops are never decoded, as apart,
// where the map never sees them: under a budget that refuses every decoded tensor the fused
// pipeline fails on exactly the records apart fails on (a record decoded only to be dropped
// would be one more element error), and no skipped record takes a step buffer. A skip() after
// the map drops decoded records, as apart (apart its map fails on them too).
TEST_F(DecodedFixedLengthRecordsTest, RecordsSkippedBeforeTheMapAreNotDecoded) {
  const std::string big = File("big.bin", 70000, 7, 0, 0);       // read straight in
  const std::string small = File("small.bin", 4096, 7, 0, 0);    // through the buffer
  const std::string gz = File("c.bin.gz", 4096, 7, 0, 0, true);  // decompressed
  const std::string map = ".map(decode_raw(tf.uint8))";
  for (const auto& [file, bytes, compression] :
       {std::tuple<std::string, int, std::string>{big, 70000, ""}, {small, 4096, ""},
        {gz, 4096, ", compression_type='GZIP'"}}) {
    const std::string head = absl::StrCat("fixed_length_record_dataset(['", file, "'], ", bytes,
                                          compression, ")");
    for (const std::string& e : {
             head + ".skip(2)" + map,
             head + ".shard(3, 1)" + map,
             head + ".shard(2, 0)" + map,
             head + ".skip(1).shard(2, 1)" + map,
             head + ".shard(2, 1).skip(1)" + map,
             head + ".repeat(2).skip(9)" + map,
             head + ".take(5).skip(3)" + map,
             head + ".skip(-1)" + map,
             head + ".skip(1)" + map + ".skip(2)",
             head + ".shard(2, 0)" + map + ".shard(2, 1)",
             head + map + ".skip(3)",
         }) {
      SCOPED_TRACE(e);
      const std::vector<std::string> apart = DrainRefused(e, false, bytes);
      ASSERT_FALSE(apart.empty());
      EXPECT_EQ(apart.back(), "end");
      EXPECT_EQ(DrainRefused(e, true, bytes), apart);
      EXPECT_EQ(Drain(e, true), Drain(e, false));  // and the same elements when none is refused
    }
  }
  // Only the records kept are decoded: one step buffer per element handed out.
  const std::string head = absl::StrCat("fixed_length_record_dataset(['", big, "'], 70000)");
  for (const auto& [e, elements] : {std::pair<std::string, int>{head + ".skip(2)" + map, 5},
                                    {head + ".shard(3, 1)" + map, 2},
                                    {head + ".repeat(2).skip(9)" + map, 5}}) {
    SCOPED_TRACE(e);
    FakeStepPlace place(/*room=*/true);
    std::unique_ptr<Iterator> it = Build(e, true);
    ASSERT_NE(it, nullptr);
    int got = 0;
    bool end = false;
    for (int i = 0; i < 20 && !end; ++i) {
      Element element;
      StepOutputAllocator::Scope scope(&place);
      absl::Status s = it->GetNext(&element, &end);
      ASSERT_TRUE(s.ok()) << s;
      if (!end) ++got;
    }
    EXPECT_EQ(got, elements);
    EXPECT_EQ(place.calls(), elements);
  }
}

TEST_F(DecodedFixedLengthRecordsTest, BuiltInTheStepsPlaceOnlyWhenTheyEndThePipeline) {
  const std::string a = File("a.bin", 70000, 3, 0, 0);
  const std::string head = absl::StrCat("fixed_length_record_dataset(['", a, "'], 70000)");
  struct Case {
    std::string expression;
    bool to_step;
  };
  for (const Case& c : {
           Case{head + ".repeat().map(decode_raw(tf.uint8)).take(5)", true},
           Case{head + ".map(decode_raw(tf.int16)).repeat(2)", true},
           Case{head + ".repeat().map(decode_raw(tf.uint8)).batch(2).take(2)", false},
           Case{head + ".map(decode_raw(tf.uint8)).prefetch(2)", false},
       }) {
    SCOPED_TRACE(c.expression);
    const std::vector<std::string> apart = Drain(c.expression, false);
    for (bool room : {true, false}) {
      FakeStepPlace place(room);
      std::unique_ptr<Iterator> it = Build(c.expression, true);
      ASSERT_NE(it, nullptr);
      std::vector<std::string> got;
      int in_place = 0;
      bool end = false;
      for (int i = 0; i < 20 && !end; ++i) {
        Element e;
        absl::Status s;
        {
          StepOutputAllocator::Scope scope(&place);  // as the worker's, around each step
          s = it->GetNext(&e, &end);
        }
        ASSERT_TRUE(s.ok()) << s;
        if (end) break;
        in_place += place.Gave(e.leaf()) ? 1 : 0;
        got.push_back(absl::BytesToHexString(absl::string_view(
            static_cast<const char*>(e.leaf().raw_data()), e.leaf().byte_size())));
      }
      ASSERT_EQ(got.size() + 1, apart.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(absl::EndsWith(apart[i], got[i])) << i;
      }
      if (c.to_step && room) {
        EXPECT_EQ(in_place, static_cast<int>(got.size()));  // every element, none copied
      } else {
        EXPECT_EQ(in_place, 0);
      }
      if (!c.to_step) {
        EXPECT_EQ(place.calls(), 0);
      }
    }
  }
}

}  // namespace
}  // namespace sluice
