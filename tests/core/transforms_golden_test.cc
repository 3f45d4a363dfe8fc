// Transforms and file sources against TensorFlow: every case of
// tests/testdata/transforms/goldens.json (tools/golden/gen_transforms_goldens.py, tensorflow-cpu
// 2.15) is a Sluice pipeline expression and what TF yields for the same tf.data pipeline, or
// a piece of TF's error message that Sluice's must contain too.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sluice/dataset.h"
#include "core/tensor/dtype_dispatch.h"
#include "core/data/executor.h"
#include "core/util/json_value.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A tensor as the generator writes it: nested lists, floats as doubles, non-finite floats as
// strings, bytes as Latin-1 strings.
JsonValue TensorJson(const Tensor& t, int dim, int64_t* offset) {
  if (dim == t.shape().rank()) {
    const int64_t i = (*offset)++;
    if (t.dtype() == DType::kString) {
      std::string latin1;
      for (unsigned char c : t.string_at(i)) {
        if (c < 0x80) {
          latin1.push_back(static_cast<char>(c));
        } else {  // as UTF-8, as Python's json.dumps of a Latin-1 decoded str reads back
          latin1.push_back(static_cast<char>(0xC0 | (c >> 6)));
          latin1.push_back(static_cast<char>(0x80 | (c & 0x3F)));
        }
      }
      return JsonValue::String(latin1);
    }
    JsonValue out;
    VisitNumericDType(t.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T v = t.data<T>()[i];
      if constexpr (std::is_same_v<T, bool>) {
        out = JsonValue::Bool(v);
      } else if constexpr (std::is_integral_v<T>) {
        out = JsonValue::Integer(static_cast<int64_t>(v));
        if constexpr (std::is_same_v<T, uint64_t>) out = JsonValue::Number(static_cast<double>(v));
      } else {
        const double d = static_cast<double>(Widen(v));
        if (std::isnan(d)) {
          out = JsonValue::String("nan");
        } else if (std::isinf(d)) {
          out = JsonValue::String(d > 0 ? "inf" : "-inf");
        } else {
          out = JsonValue::Number(d);
        }
      }
    });
    return out;
  }
  std::vector<JsonValue> items;
  for (int64_t k = 0; k < t.shape().dim(dim); ++k) items.push_back(TensorJson(t, dim + 1, offset));
  return JsonValue::Array(std::move(items));
}

JsonValue ElementJson(const Element& e) {
  if (e.is_leaf()) {
    int64_t offset = 0;
    return TensorJson(e.leaf(), 0, &offset);
  }
  if (e.kind() == NestKind::kDict) {
    std::vector<JsonValue::Member> members;
    for (size_t i : e.FlattenOrder()) members.push_back({e.keys()[i], ElementJson(e.children()[i])});
    return JsonValue::Object(std::move(members));
  }
  std::vector<JsonValue> items;
  for (const Element& c : e.children()) items.push_back(ElementJson(c));
  return JsonValue::Array(std::move(items));
}

// Equality with numbers compared by value (the golden's "1.0" and our 1 are equal).
bool SameJson(const JsonValue& a, const JsonValue& b) {
  if (a.is_number() && b.is_number()) return a.number() == b.number();
  if (a.kind() != b.kind()) return false;
  if (a.is_string()) return a.string_value() == b.string_value();
  if (a.is_bool()) return a.bool_value() == b.bool_value();
  if (a.is_array()) {
    if (a.items().size() != b.items().size()) return false;
    for (size_t i = 0; i < a.items().size(); ++i) {
      if (!SameJson(a.items()[i], b.items()[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.members().size() != b.members().size()) return false;
    for (const auto& m : a.members()) {
      const JsonValue* other = b.Find(m.first);
      if (other == nullptr || !SameJson(m.second, *other)) return false;
    }
    return true;
  }
  return true;
}

TEST(TransformsGoldenTest, EveryCaseMatchesTensorFlow) {
  absl::StatusOr<JsonValue> goldens =
      ParseJson(ReadFile("tests/testdata/transforms/goldens.json"));
  ASSERT_TRUE(goldens.ok()) << goldens.status();
  const JsonValue& cases = (*goldens)["cases"];
  ASSERT_GT(cases.size(), 50u);
  for (const JsonValue& c : cases.items()) {
    const std::string name = c["name"].string_value();
    const std::string pipeline = c["pipeline"].string_value();
    SCOPED_TRACE(absl::StrCat(name, ": ", pipeline));
    absl::StatusOr<Dataset> ds = Dataset::Parse(pipeline);
    ASSERT_TRUE(ds.ok()) << ds.status();
    // The expression round-trips to the same graph.
    absl::StatusOr<Dataset> again = Dataset::Parse(ds->ToExpression());
    ASSERT_TRUE(again.ok()) << ds->ToExpression() << ": " << again.status();
    EXPECT_EQ(again->Fingerprint(), ds->Fingerprint()) << ds->ToExpression();

    absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
    ASSERT_TRUE(it.ok()) << it.status();
    std::vector<JsonValue> got;
    absl::Status status;
    for (int i = 0; i < 1000; ++i) {
      Element e;
      bool end = false;
      status = (*it)->GetNext(&e, &end);
      if (!status.ok() || end) break;
      got.push_back(ElementJson(e));
    }
    if (const JsonValue* error = c.Find("error")) {
      EXPECT_FALSE(status.ok()) << "TF fails with: " << error->string_value();
      EXPECT_NE(status.message().find(error->string_value()), std::string::npos) << status;
      continue;
    }
    ASSERT_TRUE(status.ok()) << status;
    const JsonValue want = c["elements"];
    const JsonValue have = JsonValue::Array(got);
    EXPECT_TRUE(SameJson(want, have)) << "TF:     " << want.ToString() << "\nSluice: "
                                      << have.ToString();
  }
}

}  // namespace
}  // namespace sluice
