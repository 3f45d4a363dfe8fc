// Python literals read with tf.constant's and tf.data's conversion rules, and printed back.
#include "core/format/python_literal.h"

#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<Tensor> ToTensor(const std::string& text) {
  absl::StatusOr<PyValue> v = ParsePythonLiteral(text);
  if (!v.ok()) return v.status();
  return PyValueToTensor(*v);
}

absl::StatusOr<Element> ToElement(const std::string& text) {
  absl::StatusOr<PyValue> v = ParsePythonLiteral(text);
  if (!v.ok()) return v.status();
  return PyValueToElement(*v);
}

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<Tensor> t = ToTensor(text);
  if (t.ok()) return "OK";
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << text;
  return std::string(t.status().message());
}

void ExpectTensor(const std::string& text, DType dtype, const Shape& shape) {
  absl::StatusOr<Tensor> t = ToTensor(text);
  ASSERT_TRUE(t.ok()) << text << ": " << t.status();
  EXPECT_EQ(t->dtype(), dtype) << text;
  EXPECT_EQ(t->shape(), shape) << text;
}

TEST(PythonLiteralTest, IntsAreInt32UnlessTheyDoNotFit) {
  ExpectTensor("1", DType::kInt32, Shape());
  ExpectTensor("-2147483648", DType::kInt32, Shape());
  ExpectTensor("2147483647", DType::kInt32, Shape());
  ExpectTensor("2147483648", DType::kInt64, Shape());
  ExpectTensor("-2147483649", DType::kInt64, Shape());
  ExpectTensor("[1, 1099511627776]", DType::kInt64, Shape({2}));
  ExpectTensor("-9223372036854775808", DType::kInt64, Shape());
  EXPECT_EQ(ToTensor("-9223372036854775808")->data<int64_t>()[0],
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ErrorOf("9223372036854775808"),
            "integer 9223372036854775808 at column 1 is out of range for int64");
  EXPECT_THAT(ErrorOf("[1, 100000000000000000000000]"), HasSubstr("out of range for int64"));
  EXPECT_EQ(ToTensor("0x1f")->data<int32_t>()[0], 31);
  EXPECT_EQ(ToTensor("0o17")->data<int32_t>()[0], 15);
  EXPECT_EQ(ToTensor("0b101")->data<int32_t>()[0], 5);
  EXPECT_EQ(ToTensor("1_000")->data<int32_t>()[0], 1000);
  EXPECT_EQ(ToTensor("+7")->data<int32_t>()[0], 7);
  EXPECT_EQ(ToTensor("- 7")->data<int32_t>()[0], -7);
  EXPECT_THAT(ErrorOf("007"), HasSubstr("leading zeros"));
  EXPECT_EQ(ToTensor("00")->data<int32_t>()[0], 0);
}

TEST(PythonLiteralTest, FloatsAreFloat32) {
  for (const char* text : {"1.", ".5", "1e-3", "-2.5", "1.5E+2", "1_0.5", "0.0"}) {
    ExpectTensor(text, DType::kFloat32, Shape());
  }
  EXPECT_EQ(ToTensor("1.")->data<float>()[0], 1.0f);
  EXPECT_EQ(ToTensor(".5")->data<float>()[0], 0.5f);
  EXPECT_EQ(ToTensor("1e-3")->data<float>()[0], 1e-3f);
  EXPECT_EQ(ToTensor("-2.5")->data<float>()[0], -2.5f);
  EXPECT_TRUE(std::signbit(ToTensor("-0.0")->data<float>()[0]));
  EXPECT_EQ(ToTensor("3.4028235e38")->data<float>()[0], FLT_MAX);
  // TF: "Can't convert Python sequence with a value out of range for a double-precision float."
  EXPECT_THAT(ErrorOf("1e39"), HasSubstr("out of range for float32"));
  EXPECT_TRUE(std::isinf(ToTensor("1e400")->data<float>()[0]));  // Python reads inf
  EXPECT_TRUE(std::isinf(ToTensor("float('-inf')")->data<float>()[0]));
  EXPECT_TRUE(std::isnan(ToTensor("float('nan')")->data<float>()[0]));
  EXPECT_EQ(ToTensor("float(3)")->data<float>()[0], 3.0f);
  ExpectTensor("[1, 2.5]", DType::kFloat32, Shape({2}));
  ExpectTensor("[[1, 2], [3.5, 4]]", DType::kFloat32, Shape({2, 2}));
  EXPECT_EQ(ToTensor("[1, 2.5]")->data<float>()[0], 1.0f);
  EXPECT_THAT(ErrorOf("1j"), HasSubstr("complex"));
  EXPECT_THAT(ErrorOf("1.5.2"), HasSubstr("invalid number literal"));
}

TEST(PythonLiteralTest, BoolsStringsAndBytes) {
  ExpectTensor("True", DType::kBool, Shape());
  ExpectTensor("[True, False]", DType::kBool, Shape({2}));
  ExpectTensor("'x'", DType::kString, Shape());
  ExpectTensor("[b'x', 'y']", DType::kString, Shape({2}));
  EXPECT_EQ(ToTensor(R"('a\n\t\\\'"')")->string_at(0), "a\n\t\\'\"");
  EXPECT_EQ(ToTensor(R"("it's")")->string_at(0), "it's");
  EXPECT_EQ(ToTensor(R"('\u00e9\U0001F600\x41\101')")->string_at(0),
            "\xc3\xa9\xf0\x9f\x98\x80" "AA");
  EXPECT_EQ(ToTensor(R"(b'\xff\x00')")->string_at(0), std::string("\xff\x00", 2));
  EXPECT_EQ(ToTensor(R"(r'a\n')")->string_at(0), "a\\n");
  EXPECT_EQ(ToTensor("'''a'b'''")->string_at(0), "a'b");
  EXPECT_THAT(ErrorOf("'abc"), HasSubstr("column 1: unterminated string literal"));
  EXPECT_THAT(ErrorOf("'a\nb'"), HasSubstr("unterminated string literal"));
  EXPECT_THAT(ErrorOf(R"('\ud800')"), HasSubstr("invalid code point"));
  EXPECT_THAT(ErrorOf(R"('\x4')"), HasSubstr("truncated \\x escape"));
}

TEST(PythonLiteralTest, MixedKindsAreErrorsAsInTf) {
  EXPECT_EQ(ErrorOf("[True, 1]"), "mixed types in a tensor: bool at column 2 and int at column 8");
  EXPECT_EQ(ErrorOf("[1, 'a']"), "mixed types in a tensor: int at column 2 and str at column 5");
  EXPECT_THAT(ErrorOf("[None]"), HasSubstr("None at column 2 cannot be converted to a tensor"));
  EXPECT_THAT(ErrorOf("[{'a': 1}]"), HasSubstr("the dict at column 2 cannot be part of a tensor"));
  EXPECT_THAT(ErrorOf("[AUTOTUNE]"), HasSubstr("name 'AUTOTUNE' at column 2 is not a value"));
}

TEST(PythonLiteralTest, NestedListsMustBeRectangular) {
  ExpectTensor("[]", DType::kFloat32, Shape({0}));
  ExpectTensor("[[], []]", DType::kFloat32, Shape({2, 0}));
  ExpectTensor("[[[]]]", DType::kFloat32, Shape({1, 1, 0}));
  ExpectTensor("[(1, 2), (3, 4)]", DType::kInt32, Shape({2, 2}));  // tuples in lists are dims
  ExpectTensor("[[1, 2], [3, 4], [5, 6]]", DType::kInt32, Shape({3, 2}));
  EXPECT_EQ(ErrorOf("[[1, 2], [3]]"),
            "ragged nested list: the item at column 10 has shape (1,) but the item at column 2 "
            "has shape (2,)");
  EXPECT_THAT(ErrorOf("[1, [2]]"), HasSubstr("ragged nested list: the item at column 5"));
  EXPECT_THAT(ErrorOf("[[1], []]"), HasSubstr("ragged nested list"));
  absl::StatusOr<Tensor> t = ToTensor("[[1, 2], [3, 4]]");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->data<int32_t>()[2], 3);
}

TEST(PythonLiteralTest, TfConstantWithDtypeAndShape) {
  ExpectTensor("tf.constant([1, 2], dtype=tf.int64)", DType::kInt64, Shape({2}));
  ExpectTensor("tf.constant([1, 2], 'int64')", DType::kInt64, Shape({2}));
  ExpectTensor("tf.constant(1, dtype=tf.float16)", DType::kFloat16, Shape());
  ExpectTensor("tf.constant([], dtype=tf.int32, shape=(0, 3))", DType::kInt32, Shape({0, 3}));
  ExpectTensor("tf.constant([1, 2, 3, 4], shape=(2, 2))", DType::kInt32, Shape({2, 2}));
  absl::StatusOr<Tensor> filled = ToTensor("tf.constant(7, shape=(2, 2))");
  ASSERT_TRUE(filled.ok());
  EXPECT_EQ(filled->data<int32_t>()[3], 7);
  // TF wraps integers into narrower dtypes and refuses floats for integer dtypes.
  EXPECT_EQ(ToTensor("tf.constant(300, dtype=tf.int8)")->data<int8_t>()[0], 44);
  EXPECT_EQ(ToTensor("tf.constant(-1, dtype=tf.uint8)")->data<uint8_t>()[0], 255);
  EXPECT_EQ(ToTensor("tf.constant(18446744073709551615, dtype=tf.uint64)")->data<uint64_t>()[0],
            std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(ToTensor("tf.constant(True, dtype=tf.int32)")->data<int32_t>()[0], 1);
  EXPECT_TRUE(std::isinf(ToTensor("tf.constant(1e39, dtype=tf.float32)")->data<float>()[0]));
  EXPECT_EQ(ToTensor("tf.constant(1e39, dtype=tf.float64)")->data<double>()[0], 1e39);
  EXPECT_EQ(ErrorOf("tf.constant(1.5, dtype=tf.int32)"),
            "cannot convert float at column 13 to int32");
  EXPECT_EQ(ErrorOf("tf.constant(1, dtype=tf.bool)"), "cannot convert int at column 13 to bool");
  EXPECT_EQ(ErrorOf("tf.constant(1, dtype=tf.string)"),
            "cannot convert int at column 13 to string");
  EXPECT_THAT(ErrorOf("tf.constant([1, 2, 3], shape=(2, 2))"),
              HasSubstr("value has 3 elements but shape (2, 2) needs 4"));
  EXPECT_THAT(ErrorOf("tf.constant(0, shape=(100000, 100000, 100000))"),
              HasSubstr("has more than"));
  EXPECT_THAT(ErrorOf("tf.constant(1, dtype=tf.foo)"), HasSubstr("unknown dtype 'tf.foo'"));
  EXPECT_THAT(ErrorOf("tf.constant(1, bogus=2)"), HasSubstr("unexpected keyword argument"));
  EXPECT_THAT(ErrorOf("np.array([1])"), HasSubstr("unsupported call 'np.array(...)'"));
  EXPECT_THAT(ErrorOf("[tf.constant(1)]"), HasSubstr("cannot be nested inside a list"));
}

TEST(PythonLiteralTest, ElementsFollowTfDataStructureRules) {
  absl::StatusOr<Element> e = ToElement("([1.], [1.])");
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->kind(), NestKind::kTuple);
  ASSERT_EQ(e->children().size(), 2u);
  EXPECT_EQ(e->children()[0].leaf().shape(), Shape({1}));

  e = ToElement("(1,)");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->kind(), NestKind::kTuple);
  EXPECT_EQ(e->children().size(), 1u);

  e = ToElement("(1)");  // parentheses, not a tuple
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->is_leaf());

  e = ToElement("{'b': [1, 2], 'a': (3., 'x')}");
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->kind(), NestKind::kDict);
  EXPECT_EQ(e->keys(), (std::vector<std::string>{"b", "a"}));  // insertion order kept
  EXPECT_EQ(e->children()[1].kind(), NestKind::kTuple);

  e = ToElement("[(1, 2), (3, 4)]");  // a list is one tensor
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->is_leaf());
  EXPECT_EQ(e->leaf().shape(), Shape({2, 2}));

  EXPECT_THAT(std::string(ToElement("(1, None)").status().message()),
              HasSubstr("None at column 5 is not supported in a dataset element"));
  EXPECT_THAT(std::string(ToElement("{'a': 1, 'a': 2}").status().message()),
              HasSubstr("duplicate dict key 'a'"));
  EXPECT_THAT(std::string(ToElement("{1: 2}").status().message()),
              HasSubstr("dict keys must be strings"));
}

TEST(PythonLiteralTest, SyntaxErrorsNameTheColumn) {
  EXPECT_EQ(std::string(ParsePythonLiteral("[1, 2").status().message()),
            "python literal, column 6: expected ',' or ']', found end of input");
  EXPECT_EQ(std::string(ParsePythonLiteral("(1 2)").status().message()),
            "python literal, column 4: expected ',' or ')', found number '2'");
  EXPECT_EQ(std::string(ParsePythonLiteral("[1] x").status().message()),
            "python literal, column 5: unexpected text after the literal: 'x'");
  EXPECT_EQ(std::string(ParsePythonLiteral("").status().message()),
            "python literal, column 1: expected a value, found end of input");
  EXPECT_EQ(std::string(ParsePythonLiteral("-'a'").status().message()),
            "python literal, column 1: unary '-' needs a number, found str");
}

TEST(PythonLiteralTest, DeepNestingIsRefusedNotACrash) {
  std::string deep(100000, '[');
  absl::Status s = ParsePythonLiteral(deep).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("nested deeper than"));
  std::string minus(100000, '-');
  EXPECT_FALSE(ParsePythonLiteral(minus + "1").ok());
}

TEST(PythonLiteralTest, FloatLiteralsAreShortestRoundTrip) {
  EXPECT_EQ(PythonFloat32Literal(1.0f), "1.0");
  EXPECT_EQ(PythonFloat32Literal(0.1f), "0.1");
  EXPECT_EQ(PythonFloat32Literal(-2.5f), "-2.5");
  EXPECT_EQ(PythonFloat32Literal(1e-5f), "1.0e-05");
  EXPECT_EQ(PythonFloat32Literal(FLT_MAX), "3.4028235e+38");
  EXPECT_EQ(PythonFloat32Literal(-0.0f), "-0.0");
  EXPECT_EQ(PythonFloat32Literal(std::numeric_limits<float>::infinity()), "float('inf')");
  EXPECT_EQ(PythonFloat32Literal(std::nanf("")), "float('nan')");
  EXPECT_EQ(PythonFloat64Literal(0.1), "0.1");
  EXPECT_EQ(PythonFloat64Literal(1.0 / 3), "0.3333333333333333");
}

TEST(PythonLiteralTest, StringLiteralsReadBackToTheSameBytes) {
  EXPECT_EQ(PythonStringLiteral("a'b\\"), R"('a\'b\\')");
  EXPECT_EQ(PythonStringLiteral("\xc3\xa9"), R"('\u00e9')");
  EXPECT_EQ(PythonStringLiteral(std::string("\xff\x00", 2)), R"(b'\xff\x00')");
  for (std::string s : {std::string("plain"), std::string("\n\t\r\x01\x7f"),
                        std::string("\xf0\x9f\x98\x80 smile"), std::string("\xc0\x80"),
                        std::string("\xed\xa0\x80"), std::string(1, '\0'),
                        std::string("\"quotes'")}) {
    absl::StatusOr<PyValue> v = ParsePythonLiteral(PythonStringLiteral(s));
    ASSERT_TRUE(v.ok()) << PythonStringLiteral(s) << ": " << v.status();
    EXPECT_EQ(v->text, s) << PythonStringLiteral(s);
  }
}

TEST(PythonLiteralTest, TensorLiteralsUsePlainPythonWhenInferenceAgrees) {
  EXPECT_EQ(TensorToPythonLiteral(Tensor::FromVector<int32_t>({1, 2})), "[1, 2]");
  EXPECT_EQ(TensorToPythonLiteral(Tensor::FromVector<float>({1, 2})), "[1.0, 2.0]");
  EXPECT_EQ(TensorToPythonLiteral(Tensor::Scalar<int64_t>(5)),
            "tf.constant(5, dtype=tf.int64)");
  EXPECT_EQ(TensorToPythonLiteral(Tensor::Allocate(DType::kFloat32, Shape({0}))), "[]");
  EXPECT_EQ(TensorToPythonLiteral(Tensor::Allocate(DType::kInt32, Shape({0}))),
            "tf.constant([], dtype=tf.int32)");
  EXPECT_EQ(TensorToPythonLiteral(Tensor::Allocate(DType::kFloat32, Shape({0, 3}))),
            "tf.constant([], dtype=tf.float32, shape=(0, 3))");
  EXPECT_EQ(TensorToPythonLiteral(Tensor::FromVector<int32_t>({1, 2, 3, 4}, Shape({2, 2}))),
            "[[1, 2], [3, 4]]");
  EXPECT_EQ(ElementToPythonLiteral(Element::Tuple({Tensor::Scalar<bool>(true)})), "(True,)");
}

// A random tensor of any dtype and a small random shape (zero sizes included).
Tensor RandomTensor(std::mt19937_64& rng) {
  static const DType kDTypes[] = {DType::kBool,    DType::kInt8,    DType::kInt16,
                                  DType::kInt32,   DType::kInt64,   DType::kUInt8,
                                  DType::kUInt16,  DType::kUInt32,  DType::kUInt64,
                                  DType::kFloat16, DType::kBFloat16, DType::kFloat32,
                                  DType::kFloat64, DType::kString};
  DType dtype = kDTypes[rng() % std::size(kDTypes)];
  std::vector<int64_t> dims(rng() % 4);
  for (int64_t& d : dims) d = static_cast<int64_t>(rng() % 4);
  Shape shape(dims);
  if (dtype == DType::kString) {
    std::vector<std::string> values;
    for (int64_t i = 0; i < shape.num_elements(); ++i) {
      std::string s(rng() % 6, ' ');
      for (char& c : s) c = static_cast<char>(rng() % 256);
      values.push_back(s);
    }
    return Tensor::FromStrings(values, shape);
  }
  Tensor t = Tensor::Allocate(dtype, shape);
  unsigned char* bytes = static_cast<unsigned char*>(t.mutable_raw_data());
  for (size_t i = 0; i < t.byte_size(); ++i) bytes[i] = static_cast<unsigned char>(rng());
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < t.byte_size(); ++i) bytes[i] &= 1;
  }
  // Every NaN reads back as the canonical NaN; keep payloads out of the bitwise comparison.
  if (dtype == DType::kFloat32) {
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if (std::isnan(t.data<float>()[i])) t.mutable_data<float>()[i] = 0.5f;
    }
  } else if (dtype == DType::kFloat64) {
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if (std::isnan(t.data<double>()[i])) t.mutable_data<double>()[i] = 0.25;
    }
  } else if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) {
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      uint16_t h = t.data<uint16_t>()[i];
      float f = dtype == DType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
      if (std::isnan(f)) t.mutable_data<uint16_t>()[i] = 0;
    }
  }
  return t;
}

TEST(PythonLiteralTest, RandomTensorsRoundTripThroughTheirLiterals) {
  std::mt19937_64 rng(12345);
  for (int i = 0; i < 3000; ++i) {
    Tensor t = RandomTensor(rng);
    std::string text = TensorToPythonLiteral(t);
    absl::StatusOr<Tensor> back = ToTensor(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status();
    EXPECT_TRUE(back->Equals(t)) << text << " read back as dtype " << DTypeName(back->dtype())
                                 << " shape " << back->shape().ToString();
  }
}

TEST(PythonLiteralTest, MutatedTextNeverCrashes) {
  const std::vector<std::string> seeds = {
      "([1., 2.], {'a': b'\\x00', 'b': (True, None)})",
      "tf.constant([[1, 2], [3, 4]], dtype=tf.int64, shape=(4,))",
      "[0x1f, 0o7, 0b1, 1_000, -.5e-3, float('nan'), '\\u00e9', r'\\n', '''x''']",
  };
  const std::string alphabet = "()[]{},:'\"\\.-+eE0123456789xob_ jTrueFalsNn\n\t";
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !s.empty(); ++k) {
      size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s.erase(at, 1 + rng() % 3); break;
        case 1: s.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: s[at] = static_cast<char>(rng() % 256); break;
      }
    }
    absl::StatusOr<PyValue> v = ParsePythonLiteral(s);
    if (v.ok()) {
      (void)PyValueToElement(*v);
    } else {
      EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

}  // namespace
}  // namespace sluice
