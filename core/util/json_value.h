// JsonValue: a parsed JSON document, and the JSON string escaper Sluice's JSON output uses.
//
// Small on purpose: enough to read back what Sluice writes (sluicectl --format=json, see
// core/format/json_format.h) and compare it structurally in tests. Objects keep their members in
// document order; duplicate keys are kept as written (Find returns the first).
//
// Numbers keep their literal text as well as a double, so integers beyond 2^53 (uint64 values)
// compare exactly: two numbers are equal if both are integer literals with the same value, or
// otherwise if their doubles are equal.
//
// Equality (operator==) is JSON equality: same kind and value; arrays element by element;
// objects with the same set of keys and equal values whatever the member order. Use
// SameOrder() to also require the same member order.
//
// Strings are UTF-8. Escapes \uXXXX (with surrogate pairs) decode to UTF-8; a lone surrogate is
// INVALID_ARGUMENT.
//
// Thread safety: a const JsonValue may be read from many threads; it is a plain value type.
#ifndef SLUICE_CORE_JSON_VALUE_H_
#define SLUICE_CORE_JSON_VALUE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() = default;  // null
  static JsonValue Null() { return JsonValue(); }
  static JsonValue Bool(bool b);
  // A number from its JSON literal text ("1", "-2.5e3"); the text is not validated here.
  static JsonValue NumberLiteral(std::string text);
  static JsonValue Number(double v);   // written in Python repr style ("1.0", "1e-05")
  static JsonValue Integer(int64_t v);
  static JsonValue String(std::string s);
  static JsonValue Array(std::vector<JsonValue> items);
  static JsonValue Object(std::vector<Member> members);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_number() const { return kind_ == Kind::kNumber; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }

  // Accessors require the matching kind (they return false / 0 / empty otherwise).
  bool bool_value() const { return kind_ == Kind::kBool && bool_; }
  double number() const { return kind_ == Kind::kNumber ? number_ : 0; }
  // The number's literal text as written ("1.0", "1e-05"); empty for other kinds.
  const std::string& number_text() const { return kind_ == Kind::kNumber ? text_ : empty_; }
  // The number as an int64 if it is an integer literal that fits; nullopt otherwise.
  std::optional<int64_t> int_value() const;
  const std::string& string_value() const { return kind_ == Kind::kString ? text_ : empty_; }
  const std::vector<JsonValue>& items() const { return items_; }     // array elements
  const std::vector<Member>& members() const { return members_; }   // object members

  // Number of array elements or object members; 0 for other kinds.
  size_t size() const;
  // Array element `i`; requires is_array() and i < size().
  const JsonValue& operator[](size_t i) const { return items_[i]; }
  const JsonValue& operator[](int i) const { return items_[static_cast<size_t>(i)]; }
  // The first member named `key`, or nullptr if there is none or this is not an object.
  const JsonValue* Find(absl::string_view key) const;
  // Member `key`; requires that it exists (see Find).
  const JsonValue& operator[](absl::string_view key) const { return *Find(key); }
  const JsonValue& operator[](const char* key) const { return *Find(key); }

  // Compact JSON in Python json.dumps style: separators ", " and ": ", members in order.
  std::string ToString() const;

  friend bool operator==(const JsonValue& a, const JsonValue& b);
  friend bool operator!=(const JsonValue& a, const JsonValue& b) { return !(a == b); }
  // Equal, and every object's members in the same order.
  bool SameOrder(const JsonValue& other) const;

 private:
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string text_;  // string value, or the number's literal
  std::vector<JsonValue> items_;
  std::vector<Member> members_;
  static const std::string empty_;
};

// Parses one JSON document (surrounding whitespace allowed). INVALID_ARGUMENT naming the byte
// offset and what was expected when the text is not JSON or has trailing content.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

// `s` as a JSON string literal, quotes included. '"' and '\\' are escaped; \b \f \n \r \t use
// their short escapes; other bytes below 0x20 and 0x7f become \u00XX. Valid UTF-8 sequences are
// copied as they are. Each byte that is not part of a valid UTF-8 sequence becomes \u00XX (its
// Latin-1 reading), so arbitrary tf.string bytes always give valid JSON; ParseJson then reads
// such a byte back as the UTF-8 encoding of U+00XX, not as the raw byte.
std::string JsonQuote(absl::string_view s);

// Python's repr() of a float, in the shortest digits that read back to the same value of the
// argument's type: "1.0", "0.7", "123456.0", "1e-05", "1.5e+20" (exponent form when the value
// is below 1e-4 or at least 1e16). Non-finite values give "nan", "inf", "-inf" (not JSON).
std::string PythonFloatRepr(double v);
std::string PythonFloatRepr(float v);

// For GoogleTest messages: ToString().
void PrintTo(const JsonValue& v, std::ostream* os);

}  // namespace sluice

#endif  // SLUICE_CORE_JSON_VALUE_H_
