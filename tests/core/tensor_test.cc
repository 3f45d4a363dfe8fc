#include "sluice/tensor.h"

#include <vector>

#include "core/tensor/proto_convert.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(TensorTest, SliceSharesStorageAlongDimensionZero) {
  Tensor t = Tensor::FromVector<int32_t>({1, 2, 3, 4, 5, 6}, Shape({3, 2}));
  Tensor s = t.Slice(1, 3);
  EXPECT_EQ(s.shape(), Shape({2, 2}));
  EXPECT_EQ(s.data<int32_t>()[0], 3);
  EXPECT_EQ(s.raw_data(), static_cast<const char*>(t.raw_data()) + 2 * sizeof(int32_t));
  Tensor row = t.Index(2);
  EXPECT_EQ(row.shape(), Shape({2}));
  EXPECT_EQ(row.data<int32_t>()[1], 6);
}

TEST(TensorTest, StackAndConcatRoundTrip) {
  Tensor a = Tensor::FromVector<float>({1.f, 2.f});
  Tensor b = Tensor::FromVector<float>({3.f, 4.f});
  std::vector<Tensor> parts = {a, b};
  auto stacked = Tensor::Stack(parts);
  ASSERT_TRUE(stacked.ok()) << stacked.status();
  EXPECT_EQ(stacked->shape(), Shape({2, 2}));
  EXPECT_TRUE(stacked->Index(1).Equals(b));
  auto concat = Tensor::Concat(parts);
  ASSERT_TRUE(concat.ok());
  EXPECT_TRUE(concat->Equals(Tensor::FromVector<float>({1.f, 2.f, 3.f, 4.f})));
}

TEST(TensorTest, StackRejectsMismatchedShapesNamingTheComponent) {
  std::vector<Tensor> parts = {Tensor::FromVector<float>({1.f}),
                               Tensor::FromVector<float>({1.f, 2.f})};
  auto stacked = Tensor::Stack(parts);
  ASSERT_FALSE(stacked.ok());
  EXPECT_EQ(stacked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(stacked.status().message().find("component 1"), std::string::npos);
}

TEST(TensorTest, StringTensorsSliceAndConcat) {
  Tensor t = Tensor::FromStrings({"a", "bb", "ccc"}, Shape({3}));
  Tensor s = t.Slice(1, 3);
  EXPECT_EQ(s.string_at(0), "bb");
  std::vector<Tensor> parts = {s, t.Slice(0, 1)};
  auto c = Tensor::Concat(parts);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->Equals(Tensor::FromStrings({"bb", "ccc", "a"}, Shape({3}))));
}

TEST(TensorTest, ZeroSizedTensors) {
  Tensor t = Tensor::Allocate(DType::kFloat32, Shape({0, 1}));
  EXPECT_EQ(t.num_elements(), 0);
  EXPECT_EQ(t.byte_size(), 0u);
  EXPECT_TRUE(t.Equals(Tensor::Allocate(DType::kFloat32, Shape({0, 1}))));
}

TEST(TensorTest, WrapChecksBufferSize) {
  auto buf = TensorBuffer::AllocateHost(8);
  EXPECT_TRUE(Tensor::Wrap(DType::kInt32, Shape({2}), buf).ok());
  auto bad = Tensor::Wrap(DType::kInt32, Shape({3}), buf);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, ProtoRoundTripAndCorruptContent) {
  Tensor t = Tensor::FromVector<int64_t>({7, 8, 9});
  auto back = TensorFromProto(TensorToProto(t));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->Equals(t));
  proto::TensorProto p = TensorToProto(t);
  p.mutable_content()->pop_back();
  EXPECT_EQ(TensorFromProto(p).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, ProtoWithOverflowingShapeIsRejected) {
  proto::TensorProto p;
  p.set_dtype(proto::DT_INT32);
  p.add_shape(int64_t{1} << 32);
  p.add_shape(int64_t{1} << 32);
  EXPECT_EQ(TensorFromProto(p).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DTypeTest, HalfPrecisionRoundTrips) {
  for (float f : {0.f, 1.f, -2.5f, 0.333251953125f, 65504.f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(f)), f);
  }
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.5f)), 1.5f);
  EXPECT_EQ(ParseDType("tf.float32").value(), DType::kFloat32);
  EXPECT_FALSE(ParseDType("float31").ok());
}

}  // namespace
}  // namespace sluice
