// Tensor printing against TensorFlow's own output: tests/testdata/format/tensors.txt holds what
// TF 2.15 printed for str() and repr() of ~290 tensors (tools/golden/gen_format_goldens.py);
// each case is rebuilt here from its exact values and must print byte for byte the same.
#include "core/format/tensor_format.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "sluice/dtype.h"
#include "sluice/element.h"
#include "sluice/tensor.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

struct GoldenCase {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<std::string> values;
  std::string str;
  std::string repr;
};

std::vector<GoldenCase> ReadGoldens(const std::string& path) {
  std::ifstream in(path);
  std::vector<GoldenCase> cases;
  std::string line;
  GoldenCase cur;
  std::vector<std::string>* text = nullptr;
  std::vector<std::string> str_lines, repr_lines;
  auto starts = [&](absl::string_view p) { return absl::StartsWith(line, p); };
  while (std::getline(in, line)) {
    if (starts("#")) continue;
    if (starts("@case ")) {
      cur = GoldenCase();
      cur.name = line.substr(6);
      str_lines.clear();
      repr_lines.clear();
      text = nullptr;
    } else if (starts("@dtype ")) {
      cur.dtype = line.substr(7);
    } else if (starts("@shape")) {
      for (absl::string_view d : absl::StrSplit(line.substr(6), ' ', absl::SkipEmpty())) {
        int64_t v = 0;
        EXPECT_TRUE(absl::SimpleAtoi(d, &v)) << line;
        cur.shape.push_back(v);
      }
    } else if (starts("@values")) {
      for (absl::string_view v : absl::StrSplit(line.substr(7), ' ', absl::SkipEmpty())) {
        cur.values.emplace_back(v);
      }
    } else if (line == "@str") {
      text = &str_lines;
    } else if (line == "@repr") {
      text = &repr_lines;
    } else if (line == "@end") {
      cur.str = absl::StrJoin(str_lines, "\n");
      cur.repr = absl::StrJoin(repr_lines, "\n");
      cases.push_back(cur);
      text = nullptr;
    } else if (text != nullptr) {
      text->push_back(line);
    }
  }
  return cases;
}

uint64_t Hex(const std::string& s) { return std::stoull(s, nullptr, 16); }

std::string Unhex(const std::string& s) {
  if (s == "-") return "";
  std::string out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(s.substr(i, 2), nullptr, 16)));
  }
  return out;
}

Tensor Build(const GoldenCase& c) {
  absl::StatusOr<DType> dtype = ParseDType(c.dtype);
  EXPECT_TRUE(dtype.ok()) << c.name;
  const Shape shape(c.shape);
  if (*dtype == DType::kString) {
    std::vector<std::string> strings;
    for (const std::string& v : c.values) strings.push_back(Unhex(v));
    return Tensor::FromStrings(strings, shape);
  }
  Tensor t = Tensor::Allocate(*dtype, shape);
  EXPECT_EQ(static_cast<int64_t>(c.values.size()), t.num_elements()) << c.name;
  for (size_t i = 0; i < c.values.size(); ++i) {
    const std::string& v = c.values[i];
    switch (*dtype) {
      case DType::kBool: t.mutable_data<bool>()[i] = v == "1"; break;
      case DType::kInt8: t.mutable_data<int8_t>()[i] = std::stoi(v); break;
      case DType::kInt16: t.mutable_data<int16_t>()[i] = std::stoi(v); break;
      case DType::kInt32: t.mutable_data<int32_t>()[i] = std::stoi(v); break;
      case DType::kInt64: t.mutable_data<int64_t>()[i] = std::stoll(v); break;
      case DType::kUInt8: t.mutable_data<uint8_t>()[i] = std::stoul(v); break;
      case DType::kUInt16: t.mutable_data<uint16_t>()[i] = std::stoul(v); break;
      case DType::kUInt32: t.mutable_data<uint32_t>()[i] = std::stoul(v); break;
      case DType::kUInt64: t.mutable_data<uint64_t>()[i] = std::stoull(v); break;
      case DType::kFloat16:
      case DType::kBFloat16: t.mutable_data<uint16_t>()[i] = Hex(v); break;
      case DType::kFloat32: {
        uint32_t bits = Hex(v);
        std::memcpy(&t.mutable_data<float>()[i], &bits, 4);
        break;
      }
      case DType::kFloat64: {
        uint64_t bits = Hex(v);
        std::memcpy(&t.mutable_data<double>()[i], &bits, 8);
        break;
      }
      default: ADD_FAILURE() << "unexpected dtype in " << c.name;
    }
  }
  return t;
}

TEST(TensorFormatTest, MatchesTensorFlowGoldens) {
  // SLUICE_FORMAT_GOLDEN_FILE points at another file in the same format, such as the output of
  // gen_format_goldens.py --stress, for a developer's local check.
  const char* override_path = std::getenv("SLUICE_FORMAT_GOLDEN_FILE");
  const std::vector<GoldenCase> cases = ReadGoldens(
      override_path != nullptr ? override_path : "tests/testdata/format/tensors.txt");
  ASSERT_GT(cases.size(), override_path != nullptr ? 0u : 250u) << "golden file missing or truncated (run from the repo root)";
  int failures = 0;
  for (const GoldenCase& c : cases) {
    const Tensor t = Build(c);
    const std::string str = FormatTensor(t);
    const std::string repr = FormatTensorRepr(t);
    EXPECT_EQ(str, c.str) << "str of case " << c.name;
    EXPECT_EQ(repr, c.repr) << "repr of case " << c.name;
    if (str != c.str || repr != c.repr) ++failures;
  }
  EXPECT_EQ(failures, 0);
}

// The seed's strings, independent of the golden file.
TEST(TensorFormatTest, SeedStrings) {
  EXPECT_EQ(FormatTensor(Tensor::FromVector<int32_t>({1, 2})),
            "tf.Tensor([1 2], shape=(2,), dtype=int32)");
  EXPECT_EQ(FormatTensor(Tensor::FromVector<int32_t>({3, 4})),
            "tf.Tensor([3 4], shape=(2,), dtype=int32)");
  EXPECT_EQ(FormatTensor(Tensor::FromVector<float>({0.7f, 0.7f}, Shape({2, 1}))),
            "tf.Tensor(\n[[0.7]\n [0.7]], shape=(2, 1), dtype=float32)");
  EXPECT_EQ(FormatTensor(Tensor::FromVector<float>({4.f, 4.f}, Shape({2, 1}))),
            "tf.Tensor(\n[[4.]\n [4.]], shape=(2, 1), dtype=float32)");
}

TEST(TensorFormatTest, NumpyText) {
  EXPECT_EQ(FormatNumpy(Tensor::FromVector<float>({1.5f, 2.f})), "[1.5 2. ]");
  EXPECT_EQ(FormatNumpy(Tensor::FromVector<bool>({true, false})), "[ True False]");
  EXPECT_EQ(FormatNumpy(Tensor::FromStrings({"a", "bb"}, Shape({2}))), "[b'a' b'bb']");
  EXPECT_EQ(FormatNumpy(Tensor::Scalar<float>(1.0f)), "1.0");
  EXPECT_EQ(FormatNumpy(Tensor::Scalar<float>(1e-5f)), "1e-05");
  EXPECT_EQ(FormatNumpy(Tensor::Allocate(DType::kFloat32, Shape({0, 1}))), "[]");
  EXPECT_EQ(FormatNumpyRepr(Tensor::FromVector<int64_t>({1, 2})), "array([1, 2])");
  EXPECT_EQ(FormatNumpyRepr(Tensor::Allocate(DType::kFloat32, Shape({0, 1}))),
            "array([], shape=(0, 1), dtype=float32)");
  EXPECT_EQ(FormatTensorRepr(Tensor::FromVector<int32_t>({1, 2})),
            "<tf.Tensor: shape=(2,), dtype=int32, numpy=array([1, 2], dtype=int32)>");
  EXPECT_EQ(FormatTensorRepr(Tensor::FromVector<float>({1.f, 1.f}, Shape({2, 1}))),
            "<tf.Tensor: shape=(2, 1), dtype=float32, numpy=\narray([[1.],\n       [1.]], "
            "dtype=float32)>");
}

TEST(TensorFormatTest, SlicedTensorPrintsItsOwnRows) {
  Tensor t = Tensor::FromVector<int32_t>({1, 2, 3, 4}, Shape({2, 2}));
  EXPECT_EQ(FormatNumpy(t.Index(1)), "[3 4]");
  EXPECT_EQ(FormatNumpy(t.Slice(1, 2)), "[[3 4]]");
}

TEST(TensorFormatTest, Elements) {
  Element tuple = Element::Tuple({Tensor::FromVector<int32_t>({1}), Tensor::Scalar<float>(2.f)});
  EXPECT_EQ(FormatElement(tuple),
            "(<tf.Tensor: shape=(1,), dtype=int32, numpy=array([1], dtype=int32)>, "
            "<tf.Tensor: shape=(), dtype=float32, numpy=2.0>)");
  EXPECT_EQ(FormatElement(Element::Tuple({Tensor::Scalar<int64_t>(3)})),
            "(<tf.Tensor: shape=(), dtype=int64, numpy=3>,)");
  EXPECT_EQ(FormatElement(Element::Dict({{"b", Tensor::Scalar<bool>(true)},
                                         {"a", Element::List({})}})),
            "{'b': <tf.Tensor: shape=(), dtype=bool, numpy=True>, 'a': []}");
  EXPECT_EQ(FormatElement(Element(Tensor::Scalar<int32_t>(5))),
            "tf.Tensor(5, shape=(), dtype=int32)");
}

TEST(TensorFormatTest, PythonQuoting) {
  EXPECT_EQ(PythonStrRepr("a"), "'a'");
  EXPECT_EQ(PythonStrRepr("it's"), "\"it's\"");
  EXPECT_EQ(PythonStrRepr("a'\"b"), "'a\\'\"b'");
  EXPECT_EQ(PythonBytesRepr("\xff\n"), "b'\\xff\\n'");
}

class FakeDeviceBuffer : public TensorBuffer {
 public:
  void* data() override { return bytes_; }
  size_t size() const override { return sizeof(bytes_); }
  MemorySpace space() const override { return MemorySpace::kDevice; }

 private:
  alignas(64) char bytes_[64] = {};
};

TEST(TensorFormatTest, DeviceTensorsAreUnprintable) {
  absl::StatusOr<Tensor> t =
      Tensor::Wrap(DType::kInt32, Shape({2}), std::make_shared<FakeDeviceBuffer>());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(FormatTensor(*t), "tf.Tensor(<unprintable>, shape=(2,), dtype=int32)");
}

TEST(TensorFormatTest, PrintToUsesStr) {
  std::ostringstream os;
  PrintTo(Tensor::FromVector<int32_t>({1, 2}), &os);
  EXPECT_EQ(os.str(), "tf.Tensor([1 2], shape=(2,), dtype=int32)");
}

}  // namespace
}  // namespace sluice
