// The JSON reader, escaper and float printer (core/util/json_value.h).
#include "core/util/json_value.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace sluice {
namespace {

JsonValue Parse(const std::string& text) {
  absl::StatusOr<JsonValue> v = ParseJson(text);
  EXPECT_TRUE(v.ok()) << v.status() << " in " << text;
  return v.ok() ? *v : JsonValue();
}

TEST(JsonValueTest, ParsesAllKinds) {
  JsonValue v = Parse(" {\"a\": [1, -2.5e3, true, false, null, \"x\\u00e9\\ud83d\\ude00\\n\"],"
                      " \"b\": {}} ");
  ASSERT_TRUE(v.is_object());
  const JsonValue& a = v["a"];
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a[0].int_value(), 1);
  EXPECT_EQ(a[1].number(), -2500.0);
  EXPECT_FALSE(a[1].int_value().has_value());
  EXPECT_TRUE(a[2].bool_value());
  EXPECT_TRUE(a[3].is_bool());
  EXPECT_FALSE(a[3].bool_value());
  EXPECT_TRUE(a[4].is_null());
  EXPECT_EQ(a[5].string_value(), "x\xc3\xa9\xf0\x9f\x98\x80\n");
  EXPECT_TRUE(v["b"].is_object());
  EXPECT_EQ(v.Find("missing"), nullptr);
}

TEST(JsonValueTest, RejectsMalformedInputNamingTheOffset) {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "\"abc", "tru", "[1] x",
                          "\"\\ud800\"", "\"\\q\"", "{1: 2}", "-", "1e"}) {
    absl::StatusOr<JsonValue> v = ParseJson(bad);
    EXPECT_FALSE(v.ok()) << bad;
    if (!v.ok()) {
      EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(v.status().message().find("at byte"), absl::string_view::npos);
    }
  }
  absl::StatusOr<JsonValue> v = ParseJson("[1, 2 3]");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("byte 6"), absl::string_view::npos) << v.status();
}

TEST(JsonValueTest, StructuralEquality) {
  EXPECT_EQ(Parse(R"({"a": 1, "b": [1.0, "x"]})"), Parse(R"({"b": [1, "x"], "a": 1.0})"));
  EXPECT_FALSE(Parse(R"({"a": 1, "b": 2})").SameOrder(Parse(R"({"b": 2, "a": 1})")));
  EXPECT_TRUE(Parse(R"({"a": 1, "b": 2})").SameOrder(Parse(R"({"a": 1, "b": 2})")));
  EXPECT_NE(Parse("[1, 2]"), Parse("[2, 1]"));
  EXPECT_NE(Parse(R"({"a": 1})"), Parse(R"({"a": 1, "b": 2})"));
  EXPECT_NE(Parse("1"), Parse("\"1\""));
  EXPECT_NE(Parse("18446744073709551615"), Parse("18446744073709551614"));
  EXPECT_EQ(Parse("-0"), Parse("0"));
}

TEST(JsonValueTest, QuoteEscapesAndRoundTrips) {
  EXPECT_EQ(JsonQuote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(JsonQuote(std::string("\x01\x7f\b\f\t", 5)), R"("\u0001\u007f\b\f\t")");
  EXPECT_EQ(JsonQuote("\xc3\xa9"), "\"\xc3\xa9\"");       // valid UTF-8 kept
  EXPECT_EQ(JsonQuote("\xc3"), R"("\u00c3")");             // truncated sequence
  EXPECT_EQ(JsonQuote("\xed\xa0\x80"), R"("\u00ed\u00a0\u0080")");  // encoded surrogate
  for (const std::string& s : {std::string("plain"), std::string("tab\tquote\"", 10),
                              std::string("\0nul", 4), std::string("\xe2\x82\xac")}) {
    EXPECT_EQ(Parse(JsonQuote(s)).string_value(), s);
  }
}

TEST(JsonValueTest, PythonFloatRepr) {
  EXPECT_EQ(PythonFloatRepr(1.0), "1.0");
  EXPECT_EQ(PythonFloatRepr(0.7f), "0.7");
  EXPECT_EQ(PythonFloatRepr(0.7), "0.7");
  EXPECT_EQ(PythonFloatRepr(1e-5), "1e-05");
  EXPECT_EQ(PythonFloatRepr(1.5e-7), "1.5e-07");
  EXPECT_EQ(PythonFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PythonFloatRepr(9999999999999998.0), "9999999999999998.0");
  EXPECT_EQ(PythonFloatRepr(1e300), "1e+300");
  EXPECT_EQ(PythonFloatRepr(-123.25), "-123.25");
  EXPECT_EQ(PythonFloatRepr(0.0), "0.0");
  EXPECT_EQ(PythonFloatRepr(std::nan("")), "nan");
  EXPECT_EQ(JsonValue::Number(2.0).ToString(), "2.0");
  EXPECT_EQ(JsonValue::Integer(-5).ToString(), "-5");
}

}  // namespace
}  // namespace sluice
