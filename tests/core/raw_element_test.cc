// Raw element records (core/tensor/raw_element.h), the record format of snapshot chunks of
// format version 2: every dtype and nesting reads back equal; the documented byte layout; and
// hostile records (every truncation, sizes that claim more than the record holds, a bad dtype
// or bool, trailing bytes, another spec, a budget that refuses) give a clean error before any
// allocation, never a crash.
#include "core/tensor/raw_element.h"

#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/tensor/host_memory.h"
#include "core/tensor/proto_convert.h"
#include "gtest/gtest.h"
#include "tests/seeded_rng.h"

namespace sluice {
namespace {

// Equal values, structure, dtypes and shapes (compared through the proto form).
void ExpectSameElement(const Element& a, const Element& b) {
  EXPECT_EQ(ElementToProto(a).SerializeAsString(), ElementToProto(b).SerializeAsString());
}

Element Mixed() {
  Tensor f = Tensor::Allocate(DType::kFloat32, Shape({2, 3}));
  for (int i = 0; i < 6; ++i) f.mutable_data<float>()[i] = 0.5f * i - 1;
  Tensor b = Tensor::Allocate(DType::kBool, Shape({3}));
  b.mutable_data<uint8_t>()[1] = 1;
  Tensor u16 = Tensor::Allocate(DType::kUInt16, Shape({5}));  // 10 bytes: padded to 16
  for (int i = 0; i < 5; ++i) u16.mutable_data<uint16_t>()[i] = static_cast<uint16_t>(1000 * i);
  Tensor s = Tensor::FromStrings({"", "ab", std::string("\0x\0", 3), std::string(300, 'z')},
                                 Shape({2, 2}));
  return Element::Dict({{"image", Element::Leaf(s)},
                        {"pair", Element::Tuple({Element::Leaf(f), Element::Leaf(b)})},
                        {"label", Element::Leaf(Tensor::Scalar<int64_t>(-7))},
                        {"short", Element::Leaf(u16)},
                        {"empty", Element::Leaf(Tensor::Allocate(DType::kInt32, Shape({0, 4})))}});
}

TEST(RawElementTest, EveryDtypeAndNestingReadsBackEqual) {
  const Element e = Mixed();
  std::string record = "stale bytes of a longer previous record, which must not survive at all";
  SerializeRawElement(e, &record);
  EXPECT_EQ(record.size() % 8, 0u);
  absl::StatusOr<Element> back = ParseRawElement(record, SpecOf(e), "test");
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameElement(*back, e);
  // A spec with unknown dimensions reads the same record.
  ElementSpec loose = SpecOf(e).Map([](const TensorSpec& s) {
    std::vector<int64_t> dims(s.shape.dims().size(), -1);
    return TensorSpec{s.dtype, Shape(dims)};
  });
  back = ParseRawElement(record, loose, "test");
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameElement(*back, e);
  // Slices of a bigger tensor are written from their own rows.
  Tensor rows = Tensor::Allocate(DType::kInt64, Shape({4}));
  for (int i = 0; i < 4; ++i) rows.mutable_data<int64_t>()[i] = 10 + i;
  const Element slice = Element::Leaf(rows.Slice(1, 3));
  SerializeRawElement(slice, &record);
  back = ParseRawElement(record, SpecOf(slice), "test");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->leaf().data<int64_t>()[0], 11);
  EXPECT_EQ(back->leaf().data<int64_t>()[1], 12);
}

TEST(RawElementTest, LayoutIsTheDocumentedOne) {
  // The header's example: {'image': string (2,) "ab","c", 'label': int64 (2,)}.
  Tensor label = Tensor::Allocate(DType::kInt64, Shape({2}));
  label.mutable_data<int64_t>()[0] = 5;
  label.mutable_data<int64_t>()[1] = 6;
  const Element e = Element::Dict({{"label", Element::Leaf(label)},
                                   {"image", Element::Leaf(Tensor::FromStrings({"ab", "c"},
                                                                               Shape({2})))}});
  std::string record;
  SerializeRawElement(e, &record);
  std::vector<uint64_t> words(record.size() / 8);
  std::memcpy(words.data(), record.data(), record.size());
  const uint64_t string_header = 14 | uint64_t{1} << 32;  // dtype string, rank 1
  const uint64_t int64_header = 5 | uint64_t{1} << 32;
  uint64_t abc = 0;
  std::memcpy(&abc, "abc", 3);
  EXPECT_EQ(words, (std::vector<uint64_t>{2, string_header, 2, int64_header, 2, 2, 1, abc, 5, 6}));
}

// Overwrites the 8 bytes at word `i` of a copy of `record`.
std::string WithWord(std::string record, size_t i, uint64_t v) {
  std::memcpy(record.data() + 8 * i, &v, 8);
  return record;
}

void ExpectCode(const absl::StatusOr<Element>& got, absl::StatusCode code, const std::string& what) {
  EXPECT_EQ(got.status().code(), code) << what << ": " << got.status();
}

TEST(RawElementTest, HostileSizesAreDataLossBeforeAnyAllocation) {
  Tensor label = Tensor::Allocate(DType::kInt64, Shape({2}));
  const Element e = Element::Tuple({Element::Leaf(Tensor::FromStrings({"ab", "c"}, Shape({2}))),
                                    Element::Leaf(label)});
  // Unknown dimensions everywhere: the record's own dims are all that bounds the sizes.
  const ElementSpec loose = ElementSpec::Tuple(
      {ElementSpec::Leaf(TensorSpec{DType::kString, Shape({-1})}),
       ElementSpec::Leaf(TensorSpec{DType::kInt64, Shape({-1})})});
  std::string record;
  SerializeRawElement(e, &record);
  ASSERT_TRUE(ParseRawElement(record, loose, "t").ok());
  const int64_t in_use = ProcessMemoryBudget().in_use();

  // Every truncation, and every extension, of a valid record.
  for (size_t n = 0; n < record.size(); ++n) {
    ExpectCode(ParseRawElement(record.substr(0, n), loose, "t"), absl::StatusCode::kDataLoss,
               "truncated to " + std::to_string(n));
  }
  ExpectCode(ParseRawElement(record + std::string(8, '\0'), loose, "t"),
             absl::StatusCode::kDataLoss, "trailing bytes");
  // Words of the layout: 0 count | 1 string header | 2 its dim | 3 int64 header | 4 its dim |
  // 5, 6 string lengths | 7 chars | 8, 9 int64s.
  ExpectCode(ParseRawElement(WithWord(record, 2, uint64_t{1} << 62), loose, "t"),
             absl::StatusCode::kDataLoss, "2^62 strings");
  ExpectCode(ParseRawElement(WithWord(record, 4, uint64_t{1} << 61), loose, "t"),
             absl::StatusCode::kDataLoss, "2^61 int64s (bytes overflow 64 bits)");
  ExpectCode(ParseRawElement(WithWord(record, 4, ~uint64_t{0}), loose, "t"),
             absl::StatusCode::kDataLoss, "a negative dimension");
  ExpectCode(ParseRawElement(WithWord(record, 5, ~uint64_t{0}), loose, "t"),
             absl::StatusCode::kDataLoss, "a string of 2^64-1 bytes");
  ExpectCode(ParseRawElement(WithWord(record, 6, uint64_t{1} << 63), loose, "t"),
             absl::StatusCode::kDataLoss, "lengths adding up past the record");
  ExpectCode(ParseRawElement(WithWord(record, 1, 14 | uint64_t{1} << 40), loose, "t"),
             absl::StatusCode::kDataLoss, "rank 256");
  ExpectCode(ParseRawElement(WithWord(record, 1, 99 | uint64_t{1} << 32), loose, "t"),
             absl::StatusCode::kDataLoss, "dtype 99");
  ExpectCode(ParseRawElement(WithWord(record, 1, 0 | uint64_t{1} << 32), loose, "t"),
             absl::StatusCode::kDataLoss, "dtype 0");
  ExpectCode(ParseRawElement(WithWord(record, 0, uint64_t{1} << 60), loose, "t"),
             absl::StatusCode::kFailedPrecondition, "2^60 components");
  EXPECT_EQ(ProcessMemoryBudget().in_use(), in_use) << "a refused record kept memory charged";

  // A bool that is neither 0 nor 1.
  Tensor b = Tensor::Allocate(DType::kBool, Shape({2}));
  const Element be = Element::Leaf(b);
  SerializeRawElement(be, &record);
  record[8 * 3 + 1] = 2;  // count, header, dim, then the bools
  ExpectCode(ParseRawElement(record, SpecOf(be), "t"), absl::StatusCode::kDataLoss, "bool 2");
}

TEST(RawElementTest, AnotherSpecIsFailedPrecondition) {
  const Element e = Element::Tuple({Element::Leaf(Tensor::Scalar<int64_t>(1)),
                                    Element::Leaf(Tensor::StringScalar("x"))});
  std::string record;
  SerializeRawElement(e, &record);
  auto spec = [](DType a, Shape sa, DType b) {
    return ElementSpec::Tuple({ElementSpec::Leaf(TensorSpec{a, std::move(sa)}),
                               ElementSpec::Leaf(TensorSpec{b, Shape()})});
  };
  ExpectCode(ParseRawElement(record, spec(DType::kInt32, Shape(), DType::kString), "t"),
             absl::StatusCode::kFailedPrecondition, "dtype");
  ExpectCode(ParseRawElement(record, spec(DType::kInt64, Shape({1}), DType::kString), "t"),
             absl::StatusCode::kFailedPrecondition, "shape");
  ExpectCode(ParseRawElement(record, ElementSpec::Leaf(TensorSpec{DType::kInt64, Shape()}), "t"),
             absl::StatusCode::kFailedPrecondition, "component count");
}

TEST(RawElementTest, ABudgetThatRefusesIsResourceExhaustedNamingWhat) {
  Tensor big = Tensor::Allocate(DType::kUInt8, Shape({1 << 16}));
  const Element e = Element::Leaf(big);
  std::string record;
  SerializeRawElement(e, &record);
  const MemoryLimits saved = ProcessMemoryBudget().limits();
  MemoryLimits small = saved;
  small.element_bytes = 1 << 10;
  ProcessMemoryBudget().SetLimits(small);
  absl::StatusOr<Element> got = ParseRawElement(record, SpecOf(e), "chunk-x");
  ProcessMemoryBudget().SetLimits(saved);
  ExpectCode(got, absl::StatusCode::kResourceExhausted, "element limit");
  EXPECT_TRUE(absl::StrContains(got.status().message(), "chunk-x")) << got.status();
}

// Random bit flips of a record: a clean status or an element, never a crash (seeded, printed).
TEST(RawElementTest, RandomBitFlipsNeverCrash) {
  const uint64_t seed = 20261205;
  std::cout << "seed " << seed << "\n";
  SeededRng rng(seed);
  const Element e = Mixed();
  std::string record;
  SerializeRawElement(e, &record);
  const ElementSpec loose = SpecOf(e).Map([](const TensorSpec& s) {
    return TensorSpec{s.dtype, Shape(std::vector<int64_t>(s.shape.dims().size(), -1))};
  });
  for (int round = 0; round < 2000; ++round) {
    std::string bytes = record;
    for (int k = 0, n = static_cast<int>(rng.In(1, 3)); k < n; ++k) {
      bytes[static_cast<size_t>(rng.In(0, static_cast<int64_t>(bytes.size()) - 1))] ^=
          static_cast<char>(1 << rng.In(0, 7));
    }
    absl::StatusOr<Element> got = ParseRawElement(bytes, loose, "t");
    if (!got.ok()) {
      const absl::StatusCode c = got.status().code();
      EXPECT_TRUE(c == absl::StatusCode::kDataLoss || c == absl::StatusCode::kFailedPrecondition)
          << "round " << round << ": " << got.status();
    }
  }
}

}  // namespace
}  // namespace sluice
