#include "core/util/json_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sluice {

const std::string JsonValue::empty_;

namespace {

// Python's float_repr_style 'short' layout of shortest digits given as to_chars' scientific
// output ("1.5e-05").
std::string ReprFromScientific(const char* begin, const char* end) {
  std::string s(begin, end);
  std::string sign;
  if (!s.empty() && s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (s[i] != '.') digits.push_back(s[i]);
  }
  int exp = 0;
  {
    const char* p = s.c_str() + e + 1;
    bool neg = false;
    if (*p == '+' || *p == '-') neg = *p++ == '-';
    std::from_chars(p, s.c_str() + s.size(), exp);
    if (neg) exp = -exp;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (digits == "0") return sign + "0.0";
  const int n = static_cast<int>(digits.size());
  const int decpt = exp + 1;  // value = 0.digits * 10^decpt
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return absl::StrCat(sign, "0.", std::string(-decpt, '0'), digits);
    if (decpt >= n) return absl::StrCat(sign, digits, std::string(decpt - n, '0'), ".0");
    return absl::StrCat(sign, digits.substr(0, decpt), ".", digits.substr(decpt));
  }
  std::string out = sign + digits.substr(0, 1);
  if (n > 1) absl::StrAppend(&out, ".", digits.substr(1));
  const int x = decpt - 1;
  char buf[16];
  std::snprintf(buf, sizeof(buf), "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
  return out + buf;
}

template <typename F>
std::string FloatRepr(F v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  return ReprFromScientific(buf, r.ptr);
}

bool IsIntegerLiteral(const std::string& text) {
  if (text.empty()) return false;
  return text.find_first_of(".eE") == std::string::npos;
}

// Canonical form of an integer literal: no "-0", no leading zeros.
std::string CanonicalInteger(const std::string& text) {
  std::string sign = text[0] == '-' ? "-" : "";
  std::string digits = text.substr(sign.size());
  size_t nz = digits.find_first_not_of('0');
  digits = nz == std::string::npos ? "0" : digits.substr(nz);
  if (digits == "0") sign.clear();
  return sign + digits;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 if there is none.
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t len;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff)) {
    return 0;
  }
  return len;
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : s_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    JsonValue v;
    absl::Status st = ParseValue(&v, 0);
    if (!st.ok()) return st;
    SkipSpace();
    if (pos_ != s_.size()) return Error("end of input");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 512;

  absl::Status Error(absl::string_view expected) const {
    std::string found = pos_ < s_.size() ? absl::StrCat("'", s_.substr(pos_, 1), "'")
                                         : std::string("end of input");
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON at byte ", pos_, ": expected ", expected, ", found ", found));
  }

  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(absl::string_view word) {
    if (s_.substr(pos_, word.size()) == word) {
      pos_ += word.size();
      return true;
    }
    return false;
  }

  absl::Status ParseValue(JsonValue* out, int depth) {
    if (depth > kMaxDepth) return Error("less nesting");
    SkipSpace();
    if (pos_ >= s_.size()) return Error("a value");
    const char c = s_[pos_];
    if (c == '{') return ParseObject(out, depth);
    if (c == '[') return ParseArray(out, depth);
    if (c == '"') {
      std::string str;
      absl::Status st = ParseString(&str);
      if (!st.ok()) return st;
      *out = JsonValue::String(std::move(str));
      return absl::OkStatus();
    }
    if (Consume("true")) {
      *out = JsonValue::Bool(true);
      return absl::OkStatus();
    }
    if (Consume("false")) {
      *out = JsonValue::Bool(false);
      return absl::OkStatus();
    }
    if (Consume("null")) {
      *out = JsonValue::Null();
      return absl::OkStatus();
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
    return Error("a value");
  }

  absl::Status ParseNumber(JsonValue* out) {
    const size_t start = pos_;
    auto digits = [&]() {
      size_t n = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_, ++n;
      return n;
    };
    if (s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      return Error("a digit");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return Error("a digit after '.'");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return Error("a digit in the exponent");
    }
    *out = JsonValue::NumberLiteral(std::string(s_.substr(start, pos_ - start)));
    return absl::OkStatus();
  }

  absl::Status ParseHex4(uint32_t* cp) {
    if (pos_ + 4 > s_.size()) return Error("4 hex digits");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= h - '0';
      } else if (h >= 'a' && h <= 'f') {
        v |= h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        v |= h - 'A' + 10;
      } else {
        return Error("a hex digit");
      }
      ++pos_;
    }
    *cp = v;
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // '"'
    while (true) {
      if (pos_ >= s_.size()) return Error("'\"'");
      const unsigned char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (c < 0x20) return Error("an escaped control character");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) return Error("an escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          absl::Status st = ParseHex4(&cp);
          if (!st.ok()) return st;
          if (cp >= 0xdc00 && cp <= 0xdfff) return Error("a high surrogate first");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (!Consume("\\u")) return Error("a low surrogate");
            uint32_t lo = 0;
            st = ParseHex4(&lo);
            if (!st.ok()) return st;
            if (lo < 0xdc00 || lo > 0xdfff) return Error("a low surrogate");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          --pos_;
          return Error("a valid escape");
      }
    }
  }

  absl::Status ParseArray(JsonValue* out, int depth) {
    ++pos_;  // '['
    std::vector<JsonValue> items;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      *out = JsonValue::Array(std::move(items));
      return absl::OkStatus();
    }
    while (true) {
      JsonValue v;
      absl::Status st = ParseValue(&v, depth + 1);
      if (!st.ok()) return st;
      items.push_back(std::move(v));
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        *out = JsonValue::Array(std::move(items));
        return absl::OkStatus();
      }
      return Error("',' or ']'");
    }
  }

  absl::Status ParseObject(JsonValue* out, int depth) {
    ++pos_;  // '{'
    std::vector<JsonValue::Member> members;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      *out = JsonValue::Object(std::move(members));
      return absl::OkStatus();
    }
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("a member name");
      std::string key;
      absl::Status st = ParseString(&key);
      if (!st.ok()) return st;
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') return Error("':'");
      ++pos_;
      JsonValue v;
      st = ParseValue(&v, depth + 1);
      if (!st.ok()) return st;
      members.emplace_back(std::move(key), std::move(v));
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        *out = JsonValue::Object(std::move(members));
        return absl::OkStatus();
      }
      return Error("',' or '}'");
    }
  }

  absl::string_view s_;
  size_t pos_ = 0;
};

bool NumbersEqual(const JsonValue& a, const JsonValue& b) {
  if (IsIntegerLiteral(a.number_text()) && IsIntegerLiteral(b.number_text())) {
    return CanonicalInteger(a.number_text()) == CanonicalInteger(b.number_text());
  }
  return a.number() == b.number();
}

bool Equal(const JsonValue& a, const JsonValue& b, bool same_order) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case JsonValue::Kind::kNull: return true;
    case JsonValue::Kind::kBool: return a.bool_value() == b.bool_value();
    case JsonValue::Kind::kNumber: return NumbersEqual(a, b);
    case JsonValue::Kind::kString: return a.string_value() == b.string_value();
    case JsonValue::Kind::kArray:
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!Equal(a[i], b[i], same_order)) return false;
      }
      return true;
    case JsonValue::Kind::kObject: {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        const JsonValue::Member& m = a.members()[i];
        if (same_order) {
          if (m.first != b.members()[i].first) return false;
          if (!Equal(m.second, b.members()[i].second, same_order)) return false;
        } else {
          const JsonValue* other = b.Find(m.first);
          if (other == nullptr || !Equal(m.second, *other, same_order)) return false;
        }
      }
      return true;
    }
  }
  return false;
}

void Serialize(const JsonValue& v, std::string* out) {
  switch (v.kind()) {
    case JsonValue::Kind::kNull: out->append("null"); return;
    case JsonValue::Kind::kBool: out->append(v.bool_value() ? "true" : "false"); return;
    case JsonValue::Kind::kNumber: out->append(v.number_text()); return;
    case JsonValue::Kind::kString: out->append(JsonQuote(v.string_value())); return;
    case JsonValue::Kind::kArray:
      out->push_back('[');
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out->append(", ");
        Serialize(v[i], out);
      }
      out->push_back(']');
      return;
    case JsonValue::Kind::kObject:
      out->push_back('{');
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out->append(", ");
        out->append(JsonQuote(v.members()[i].first));
        out->append(": ");
        Serialize(v.members()[i].second, out);
      }
      out->push_back('}');
      return;
  }
}

}  // namespace

JsonValue JsonValue::Bool(bool b) {
  JsonValue v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  return v;
}

JsonValue JsonValue::NumberLiteral(std::string text) {
  JsonValue v;
  v.kind_ = Kind::kNumber;
  double d = 0;
  std::from_chars(text.data(), text.data() + text.size(), d);
  v.number_ = d;
  v.text_ = std::move(text);
  return v;
}

JsonValue JsonValue::Number(double d) {
  JsonValue v;
  v.kind_ = Kind::kNumber;
  v.number_ = d;
  v.text_ = PythonFloatRepr(d);
  return v;
}

JsonValue JsonValue::Integer(int64_t i) {
  JsonValue v;
  v.kind_ = Kind::kNumber;
  v.number_ = static_cast<double>(i);
  v.text_ = std::to_string(i);
  return v;
}

JsonValue JsonValue::String(std::string s) {
  JsonValue v;
  v.kind_ = Kind::kString;
  v.text_ = std::move(s);
  return v;
}

JsonValue JsonValue::Array(std::vector<JsonValue> items) {
  JsonValue v;
  v.kind_ = Kind::kArray;
  v.items_ = std::move(items);
  return v;
}

JsonValue JsonValue::Object(std::vector<Member> members) {
  JsonValue v;
  v.kind_ = Kind::kObject;
  v.members_ = std::move(members);
  return v;
}

std::optional<int64_t> JsonValue::int_value() const {
  if (kind_ != Kind::kNumber || !IsIntegerLiteral(text_)) return std::nullopt;
  int64_t out = 0;
  auto r = std::from_chars(text_.data(), text_.data() + text_.size(), out);
  if (r.ec != std::errc() || r.ptr != text_.data() + text_.size()) return std::nullopt;
  return out;
}

size_t JsonValue::size() const {
  if (kind_ == Kind::kArray) return items_.size();
  if (kind_ == Kind::kObject) return members_.size();
  return 0;
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  if (kind_ != Kind::kObject) return nullptr;
  for (const Member& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

std::string JsonValue::ToString() const {
  std::string out;
  Serialize(*this, &out);
  return out;
}

bool operator==(const JsonValue& a, const JsonValue& b) { return Equal(a, b, false); }

bool JsonValue::SameOrder(const JsonValue& other) const { return Equal(*this, other, true); }

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) {
  return Parser(text).ParseDocument();
}

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\b': out += "\\b"; ++i; continue;
      case '\f': out += "\\f"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      default: break;
    }
    const size_t len = c < 0x20 || c == 0x7f ? 0 : Utf8SequenceLength(s, i);
    if (len == 0) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
      ++i;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  out += "\"";
  return out;
}

std::string PythonFloatRepr(double v) { return FloatRepr(v); }

std::string PythonFloatRepr(float v) { return FloatRepr(v); }

void PrintTo(const JsonValue& v, std::ostream* os) { *os << v.ToString(); }

}  // namespace sluice
