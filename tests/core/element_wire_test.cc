// SerializeElementProto writes exactly the bytes of ElementToProto(e).SerializeToString(), so
// snapshot chunks written by it keep their format and read back as before.
#include "core/tensor/element_wire.h"

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/tensor/proto_convert.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

std::string ViaProto(const Element& e) {
  std::string s;
  EXPECT_TRUE(ElementToProto(e).SerializeToString(&s));
  return s;
}

void ExpectSameBytesAndRoundTrip(const Element& e) {
  std::string wire = "stale bytes of a previous element that must not survive";
  SerializeElementProto(e, &wire);
  EXPECT_EQ(wire, ViaProto(e));
  proto::ElementProto p;
  ASSERT_TRUE(p.ParseFromString(wire));
  absl::StatusOr<Element> back = ElementFromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  std::string again;
  SerializeElementProto(*back, &again);
  EXPECT_EQ(again, wire);
  // The consuming parse gives the same element as the copying one.
  absl::StatusOr<Element> consumed = ConsumeElementProto(&p);
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  SerializeElementProto(*consumed, &again);
  EXPECT_EQ(again, wire);
}

TEST(ElementWireTest, ConsumeElementProtoChecksLikeElementFromProto) {
  proto::ElementProto p = ElementToProto(
      Element(Tensor::FromStrings({"a", "b", "c"}, Shape({3}))));
  p.mutable_tensors(0)->set_shape(0, 4);  // 4 strings claimed, 3 present
  absl::StatusOr<Element> e = ConsumeElementProto(&p);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();
}

TEST(ElementWireTest, NumericStringScalarAndEmptyTensorsMatchTheProtoLibrary) {
  ExpectSameBytesAndRoundTrip(Element(Tensor::Scalar<int64_t>(-7)));
  ExpectSameBytesAndRoundTrip(Element(Tensor::Scalar<float>(0.5f)));
  ExpectSameBytesAndRoundTrip(Element(Tensor::StringScalar("")));
  ExpectSameBytesAndRoundTrip(Element(Tensor::FromVector<int32_t>({}, Shape({0, 3}))));
  ExpectSameBytesAndRoundTrip(
      Element(Tensor::FromStrings({"", "a", std::string(300, 'x'), ""}, Shape({2, 2}))));
  ExpectSameBytesAndRoundTrip(
      Element(Tensor::FromVector<double>({1, 2, 3, 4, 5, 6}, Shape({1, 200, 0}))));
}

TEST(ElementWireTest, NestedElementsMatchTheProtoLibrary) {
  ExpectSameBytesAndRoundTrip(Element::Dict(
      {{"image", Element(Tensor::FromStrings({std::string(4000, '\xff')}, Shape({1})))},
       {"label", Element::Tuple({Element(Tensor::Scalar<int64_t>(3)),
                                 Element::List({Element(Tensor::Scalar<uint8_t>(0))})})}}));
  ExpectSameBytesAndRoundTrip(Element::Tuple({}));
}

TEST(ElementWireTest, SeededRandomElementsMatchTheProtoLibrary) {
  const uint32_t seed = 29;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  for (int round = 0; round < 200; ++round) {
    std::vector<Element> leaves;
    const int n = static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i) {
      std::vector<int64_t> dims(rng() % 3);
      int64_t count = 1;
      for (int64_t& d : dims) count *= (d = static_cast<int64_t>(rng() % 200));
      if (rng() % 2 == 0) {
        std::vector<std::string> values(count);
        for (std::string& v : values) v.assign(rng() % 300, static_cast<char>(rng()));
        leaves.emplace_back(Tensor::FromStrings(std::move(values), Shape(dims)));
      } else {
        std::vector<int64_t> values(count);
        for (int64_t& v : values) v = static_cast<int64_t>(rng()) - (1LL << 31);
        leaves.emplace_back(Tensor::FromVector(values, Shape(dims)));
      }
    }
    ExpectSameBytesAndRoundTrip(Element::Tuple(std::move(leaves)));
  }
}

}  // namespace
}  // namespace sluice
