// The JSON Lines formats of `sluicectl --format=json` (core/format/json_format.h) and the JSON reader
// and escaper they are checked with (core/util/json_value.h).
#include "core/format/json_format.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "sluice/per_replica.h"
#include "sluice/dtype.h"
#include "sluice/element.h"
#include "core/util/json_value.h"
#include "sluice/tensor.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

JsonValue Parse(const std::string& text) {
  absl::StatusOr<JsonValue> v = ParseJson(text);
  EXPECT_TRUE(v.ok()) << v.status() << " in " << text;
  return v.ok() ? *v : JsonValue();
}

TEST(JsonFormatTest, TensorLayout) {
  EXPECT_EQ(TensorToJson(Tensor::FromVector<float>({1.f, 1.f}, Shape({2, 1}))),
            R"({"dtype": "float32", "shape": [2, 1], "values": [[1.0], [1.0]]})");
  EXPECT_EQ(TensorToJson(Tensor::Scalar<int32_t>(-3)),
            R"({"dtype": "int32", "shape": [], "values": -3})");
  EXPECT_EQ(TensorToJson(Tensor::FromVector<bool>({true, false})),
            R"({"dtype": "bool", "shape": [2], "values": [true, false]})");
  EXPECT_EQ(TensorToJson(Tensor::Allocate(DType::kInt64, Shape({2, 0}))),
            R"({"dtype": "int64", "shape": [2, 0], "values": [[], []]})");
  EXPECT_EQ(TensorToJson(Tensor::FromStrings({"a\"b", "\xff\n"}, Shape({2}))),
            R"({"dtype": "string", "shape": [2], "values": ["a\"b", "\u00ff\n"]})");
}

TEST(JsonFormatTest, FloatsInShortestPythonForm) {
  EXPECT_EQ(TensorToJson(Tensor::FromVector<float>({0.7f, 1e-5f, 1.5e20f, 123456.f, -0.f})),
            R"({"dtype": "float32", "shape": [5], "values": [0.7, 1e-05, 1.5e+20, 123456.0, -0.0]})");
  EXPECT_EQ(TensorToJson(Tensor::FromVector<double>({0.1, 1.0 / 3, 1e16, 1e-4})),
            R"({"dtype": "float64", "shape": [4], "values": [0.1, 0.3333333333333333, 1e+16, 0.0001]})");
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(TensorToJson(Tensor::FromVector<float>({std::nanf(""), inf, -inf})),
            R"({"dtype": "float32", "shape": [3], "values": ["NaN", "Infinity", "-Infinity"]})");
  Tensor half = Tensor::Allocate(DType::kFloat16, Shape({2}));
  half.mutable_data<uint16_t>()[0] = FloatToHalf(0.5f);
  half.mutable_data<uint16_t>()[1] = FloatToHalf(2.f);
  EXPECT_EQ(TensorToJson(half), R"({"dtype": "float16", "shape": [2], "values": [0.5, 2.0]})");
  Tensor bf = Tensor::Allocate(DType::kBFloat16, Shape());
  bf.mutable_data<uint16_t>()[0] = FloatToBFloat16(0.1f);
  EXPECT_EQ(TensorToJson(bf), R"({"dtype": "bfloat16", "shape": [], "values": 0.100097656})");
}

TEST(JsonFormatTest, IntegersKeepFullRange) {
  Tensor t = Tensor::FromVector<uint64_t>({std::numeric_limits<uint64_t>::max()});
  EXPECT_EQ(TensorToJson(t),
            R"({"dtype": "uint64", "shape": [1], "values": [18446744073709551615]})");
  Tensor i = Tensor::FromVector<int64_t>({std::numeric_limits<int64_t>::min()});
  JsonValue v = Parse(TensorToJson(i));
  EXPECT_EQ(v["values"][0].int_value(), std::numeric_limits<int64_t>::min());
}

TEST(JsonFormatTest, ElementsAndRunSteps) {
  Element e = Element::Dict({{"b", Tensor::Scalar<float>(1.f)},
                             {"a", Element::Tuple({Tensor::Scalar<int32_t>(2)})}});
  EXPECT_EQ(ElementToJson(e),
            R"({"b": {"dtype": "float32", "shape": [], "values": 1.0}, )"
            R"("a": [{"dtype": "int32", "shape": [], "values": 2}]})");
  PerReplica<Element> step({Element(Tensor::FromVector<int32_t>({1, 2})),
                            Element(Tensor::FromVector<int32_t>({3, 4}))});
  const std::string line = FormatRunStepJson(0, step);
  EXPECT_EQ(line,
            R"({"step": 0, "per_replica": [)"
            R"({"dtype": "int32", "shape": [2], "values": [1, 2]}, )"
            R"({"dtype": "int32", "shape": [2], "values": [3, 4]}]})");
  EXPECT_EQ(line.find('\n'), std::string::npos);
  JsonValue v = Parse(line);
  EXPECT_EQ(v["step"].int_value(), 0);
  EXPECT_EQ(v["per_replica"][1]["values"][0].int_value(), 3);
}

TEST(JsonFormatTest, ElementSpec) {
  PerReplicaSpec f{{TensorSpec{DType::kFloat32, Shape({kUnknownDim, 1})},
                    TensorSpec{DType::kFloat32, Shape({kUnknownDim, 1})}}};
  DistributedElementSpec spec = DistributedElementSpec::Tuple({f});
  EXPECT_EQ(FormatElementSpecJson(spec),
            R"([{"per_replica": [{"dtype": "float32", "shape": [null, 1]}, )"
            R"({"dtype": "float32", "shape": [null, 1]}]}])");
  ElementSpec plain = ElementSpec::List({TensorSpec{DType::kString, Shape()}});
  EXPECT_EQ(ElementSpecToJson(plain), R"([{"dtype": "string", "shape": []}])");
}

// One device on one worker: TF gives the plain element and the dataset's own spec
// (tests/testdata/distribute/one_device_*), and a multi-worker strategy wraps even one replica.
TEST(JsonFormatTest, OneDeviceIsNotWrappedWhereTfDoesNotWrap) {
  EXPECT_EQ(WrappingFor(/*num_workers=*/1, /*num_local_replicas=*/1),
            PerReplicaWrapping::kPlainElement);
  EXPECT_EQ(WrappingFor(2, 1), PerReplicaWrapping::kPerReplica);
  EXPECT_EQ(WrappingFor(1, 2), PerReplicaWrapping::kPerReplica);
  PerReplica<Element> step({Element(Tensor::FromVector<int64_t>({0, 1}))});
  EXPECT_EQ(FormatRunStepJson(3, step, PerReplicaWrapping::kPlainElement),
            R"({"step": 3, "value": {"dtype": "int64", "shape": [2], "values": [0, 1]}})");
  EXPECT_EQ(FormatRunStepJson(3, step, PerReplicaWrapping::kPerReplica),
            R"({"step": 3, "per_replica": [{"dtype": "int64", "shape": [2], "values": [0, 1]}]})");
  DistributedElementSpec spec = DistributedElementSpec::Tuple(
      {PerReplicaSpec{{TensorSpec{DType::kInt64, Shape({kUnknownDim})}}}});
  EXPECT_EQ(FormatElementSpecJson(spec, PerReplicaWrapping::kPlainElement),
            R"([{"dtype": "int64", "shape": [null]}])");
  EXPECT_EQ(FormatElementSpecJson(spec, PerReplicaWrapping::kPerReplica),
            R"([{"per_replica": [{"dtype": "int64", "shape": [null]}]}])");
}

// Reports device memory; the bytes are never read.
class FakeDeviceBuffer : public TensorBuffer {
 public:
  void* data() override { return bytes_; }
  size_t size() const override { return sizeof(bytes_); }
  MemorySpace space() const override { return MemorySpace::kDevice; }
  int device() const override { return 0; }

 private:
  alignas(64) char bytes_[64] = {};
};

TEST(JsonFormatTest, DeviceTensorsHaveNullValues) {
  absl::StatusOr<Tensor> t =
      Tensor::Wrap(DType::kFloat32, Shape({2}), std::make_shared<FakeDeviceBuffer>());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(TensorToJson(*t), R"({"dtype": "float32", "shape": [2], "values": null})");
}

TEST(JsonFormatTest, OutputParsesBackToTheSameValues) {
  Tensor t = Tensor::FromVector<double>({0.1, -2.5e-300, 7}, Shape({3, 1}));
  JsonValue v = Parse(TensorToJson(t));
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v["dtype"].string_value(), "float64");
  ASSERT_EQ(v["values"].size(), 3u);
  EXPECT_EQ(v["values"][0][0].number(), 0.1);
  EXPECT_EQ(v["values"][1][0].number(), -2.5e-300);
  EXPECT_EQ(v["values"][2][0].number_text(), "7.0");
  EXPECT_EQ(v.ToString(), TensorToJson(t));
}

}  // namespace
}  // namespace sluice
