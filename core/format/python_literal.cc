#include "core/format/python_literal.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/util/status_macros.h"
#include "sluice/composite_tensor.h"

namespace sluice {
namespace {

// Deeper nesting is refused, so that no input can exhaust the stack.
constexpr int kMaxDepth = 128;
// tf.constant(v, shape=...) fills at most this many elements.
constexpr int64_t kMaxFilledElements = int64_t{1} << 24;

bool IsIdentStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsIdentChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Strict UTF-8 decoding (no overlongs, no surrogates, at most U+10FFFF), as Python decodes.
bool DecodeUtf8(absl::string_view s, std::vector<uint32_t>* out) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n;
    uint32_t cp;
    uint32_t min;
    if (c < 0x80) {
      out->push_back(c);
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (i + static_cast<size_t>(n) >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    out->push_back(cp);
    i += n + 1;
  }
  return true;
}

// Narrows a double to float as IEEE round-to-nearest does, without the undefined behaviour of
// a C++ cast of an out-of-range value.
float NarrowToFloat(double d) {
  if (std::isfinite(d) && std::fabs(d) > FLT_MAX) {
    // Values from FLT_MAX + half an ulp up round to infinity (the tie goes to the even one).
    bool inf = std::fabs(d) >= 0x1.ffffffp127;
    float mag = inf ? std::numeric_limits<float>::infinity() : FLT_MAX;
    return d < 0 ? -mag : mag;
  }
  return static_cast<float>(d);
}

// ---------------------------------------------------------------------------------------------
// Parsing.

class LiteralParser {
 public:
  LiteralParser(absl::string_view text, absl::string_view context)
      : text_(text), context_(context) {}

  absl::StatusOr<PyValue> Parse(size_t* pos) {
    pos_ = *pos;
    ASSIGN_OR_RETURN(PyValue v, Value(0));
    *pos = pos_;
    return v;
  }

 private:
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  void SkipWs() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  absl::Status Error(size_t at, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(context_, ", column ", at + 1, ": ", message));
  }
  // What is at `at`, for "found ..." in messages.
  std::string Describe(size_t at) const {
    if (at >= text_.size()) return "end of input";
    char c = text_[at];
    if (IsIdentStart(c)) {
      size_t e = at;
      while (e < text_.size() && IsIdentChar(text_[e])) ++e;
      return absl::StrCat("'", text_.substr(at, e - at), "'");
    }
    if (absl::ascii_isdigit(c)) {
      size_t e = at;
      while (e < text_.size() && (absl::ascii_isalnum(text_[e]) || text_[e] == '.' ||
                                  text_[e] == '_')) {
        ++e;
      }
      return absl::StrCat("number '", text_.substr(at, std::min<size_t>(e - at, 40)), "'");
    }
    if (c == '\'' || c == '"') return "a string";
    if (absl::ascii_isprint(c)) return absl::StrCat("'", std::string(1, c), "'");
    return absl::StrFormat("byte 0x%02x", static_cast<unsigned char>(c));
  }
  absl::Status Expected(absl::string_view what) const {
    return Error(pos_, absl::StrCat("expected ", what, ", found ", Describe(pos_)));
  }

  absl::StatusOr<PyValue> Value(int depth) {
    if (depth > kMaxDepth) {
      return Error(pos_, absl::StrCat("literal nested deeper than ", kMaxDepth, " levels"));
    }
    SkipWs();
    size_t begin = pos_;
    char c = Peek();
    absl::StatusOr<PyValue> v;
    if (AtEnd()) {
      return Expected("a value");
    } else if (c == '(') {
      v = TupleOrParens(depth);
    } else if (c == '[') {
      v = List(depth);
    } else if (c == '{') {
      v = Dict(depth);
    } else if (c == '-' || c == '+') {
      v = Signed(depth);
    } else if (absl::ascii_isdigit(c) || (c == '.' && absl::ascii_isdigit(Peek(1)))) {
      v = Number();
    } else if (c == '\'' || c == '"') {
      v = String(/*raw=*/false, /*bytes=*/false);
    } else if (IsIdentStart(c)) {
      v = NameOrKeyword(depth);
    } else {
      return Expected("a value");
    }
    if (!v.ok()) return v.status();
    v->begin = begin;
    v->end = pos_;
    return v;
  }

  // Comma-separated values up to `close`; a trailing comma is allowed. Sets *saw_comma.
  absl::Status Items(char close, int depth, std::vector<PyValue>* items, bool* saw_comma) {
    *saw_comma = false;
    for (;;) {
      SkipWs();
      if (Peek() == close) {
        ++pos_;
        return absl::OkStatus();
      }
      ASSIGN_OR_RETURN(PyValue item, Value(depth + 1));
      items->push_back(std::move(item));
      SkipWs();
      if (Peek() == ',') {
        ++pos_;
        *saw_comma = true;
        continue;
      }
      if (Peek() == close) {
        ++pos_;
        return absl::OkStatus();
      }
      return Expected(absl::StrCat("',' or '", std::string(1, close), "'"));
    }
  }

  absl::StatusOr<PyValue> TupleOrParens(int depth) {
    ++pos_;  // (
    std::vector<PyValue> items;
    bool saw_comma;
    RETURN_IF_ERROR(Items(')', depth, &items, &saw_comma));
    if (items.size() == 1 && !saw_comma) return std::move(items[0]);  // (x) is x
    PyValue v;
    v.kind = PyValue::Kind::kTuple;
    v.items = std::move(items);
    return v;
  }

  absl::StatusOr<PyValue> List(int depth) {
    ++pos_;  // [
    PyValue v;
    v.kind = PyValue::Kind::kList;
    bool saw_comma;
    RETURN_IF_ERROR(Items(']', depth, &v.items, &saw_comma));
    return v;
  }

  absl::StatusOr<PyValue> Dict(int depth) {
    ++pos_;  // {
    PyValue v;
    v.kind = PyValue::Kind::kDict;
    for (;;) {
      SkipWs();
      if (Peek() == '}') {
        ++pos_;
        return v;
      }
      size_t key_at = pos_;
      ASSIGN_OR_RETURN(PyValue key, Value(depth + 1));
      if (key.kind != PyValue::Kind::kStr && key.kind != PyValue::Kind::kBytes) {
        return Error(key_at, absl::StrCat("dict keys must be strings, found ", key.KindName()));
      }
      for (const std::string& k : v.keys) {
        if (k == key.text) {
          return Error(key_at, absl::StrCat("duplicate dict key ", PythonStringLiteral(k)));
        }
      }
      SkipWs();
      if (Peek() != ':') return Expected("':' after a dict key");
      ++pos_;
      ASSIGN_OR_RETURN(PyValue value, Value(depth + 1));
      v.keys.push_back(std::move(key.text));
      v.items.push_back(std::move(value));
      SkipWs();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        return v;
      }
      return Expected("',' or '}'");
    }
  }

  absl::StatusOr<PyValue> Signed(int depth) {
    bool minus = Peek() == '-';
    size_t at = pos_;
    ++pos_;
    ASSIGN_OR_RETURN(PyValue v, Value(depth + 1));
    if (v.kind == PyValue::Kind::kInt) {
      if (minus && v.magnitude != 0) v.negative = !v.negative;
      if (minus) v.float_value = -v.float_value;
    } else if (v.kind == PyValue::Kind::kFloat) {
      if (minus) v.float_value = -v.float_value;
    } else {
      return Error(at, absl::StrCat("unary '", minus ? "-" : "+", "' needs a number, found ",
                                    v.KindName()));
    }
    return v;
  }

  static int DigitValue(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'z') return c - 'a' + 10;
    if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
    return 99;
  }

  // Digits of `base` with single underscores between them; returns the digits without '_'.
  absl::StatusOr<std::string> Digits(int base, bool required) {
    size_t start = pos_;
    std::string out;
    while (!AtEnd()) {
      char c = Peek();
      if (c == '_') {
        if (out.empty() || pos_ + 1 >= text_.size() || DigitValue(text_[pos_ + 1]) >= base ||
            text_[pos_ - 1] == '_') {
          return Error(pos_, "invalid '_' in a number literal");
        }
        ++pos_;
        continue;
      }
      if (DigitValue(c) >= base) break;
      out.push_back(c);
      ++pos_;
    }
    if (required && out.empty()) {
      return Error(start, absl::StrCat("expected digits in a number literal, found ",
                                       Describe(pos_)));
    }
    return out;
  }

  absl::StatusOr<PyValue> Number() {
    size_t start = pos_;
    PyValue v;
    v.kind = PyValue::Kind::kInt;
    int base = 10;
    if (Peek() == '0' && (Peek(1) == 'x' || Peek(1) == 'X' || Peek(1) == 'o' || Peek(1) == 'O' ||
                          Peek(1) == 'b' || Peek(1) == 'B')) {
      char p = absl::ascii_tolower(Peek(1));
      base = p == 'x' ? 16 : p == 'o' ? 8 : 2;
      pos_ += 2;
      if (Peek() == '_') ++pos_;  // 0x_ff is valid Python
      ASSIGN_OR_RETURN(std::string digits, Digits(base, /*required=*/true));
      SetInt(digits, base, &v);
    } else {
      ASSIGN_OR_RETURN(std::string int_part, Digits(10, /*required=*/false));
      std::string cleaned = int_part;
      bool is_float = false;
      if (Peek() == '.') {
        is_float = true;
        ++pos_;
        cleaned.push_back('.');
        if (absl::ascii_isdigit(Peek())) {
          ASSIGN_OR_RETURN(std::string frac, Digits(10, /*required=*/false));
          cleaned += frac;
        }
      }
      if (Peek() == 'e' || Peek() == 'E') {
        is_float = true;
        ++pos_;
        cleaned.push_back('e');
        if (Peek() == '+' || Peek() == '-') cleaned.push_back(text_[pos_++]);
        ASSIGN_OR_RETURN(std::string exp, Digits(10, /*required=*/true));
        cleaned += exp;
      }
      if (is_float) {
        v.kind = PyValue::Kind::kFloat;
        if (cleaned[0] == '.') cleaned.insert(cleaned.begin(), '0');
        if (!absl::SimpleAtod(cleaned, &v.float_value)) {
          return Error(start, absl::StrCat("invalid float literal '",
                                           text_.substr(start, pos_ - start), "'"));
        }
      } else {
        if (int_part.size() > 1 && int_part[0] == '0' &&
            int_part.find_first_not_of('0') != std::string::npos) {
          return Error(start, "leading zeros in a decimal integer literal are not permitted");
        }
        SetInt(int_part, 10, &v);
      }
    }
    if (Peek() == 'j' || Peek() == 'J') return Error(start, "complex literals are not supported");
    if (IsIdentChar(Peek()) || Peek() == '.') {
      return Error(start, absl::StrCat("invalid number literal '",
                                       text_.substr(start, pos_ + 1 - start), "'"));
    }
    return v;
  }

  static void SetInt(const std::string& digits, int base, PyValue* v) {
    uint64_t m = 0;
    double d = 0;
    bool big = false;
    for (char c : digits) {
      uint64_t dv = static_cast<uint64_t>(DigitValue(c));
      d = d * base + static_cast<double>(dv);
      if (!big) {
        if (m > (std::numeric_limits<uint64_t>::max() - dv) / static_cast<uint64_t>(base)) {
          big = true;
        } else {
          m = m * base + dv;
        }
      }
    }
    if (base == 10) absl::SimpleAtod(digits, &d);  // exactly rounded
    v->magnitude = big ? 0 : m;
    v->int_too_big = big;
    v->float_value = d;
  }

  // A quoted string at pos_ (any prefix already consumed).
  absl::StatusOr<PyValue> String(bool raw, bool bytes) {
    size_t start = pos_;
    char q = Peek();
    bool triple = Peek(1) == q && Peek(2) == q;
    pos_ += triple ? 3 : 1;
    PyValue v;
    v.kind = bytes ? PyValue::Kind::kBytes : PyValue::Kind::kStr;
    std::string& out = v.text;
    for (;;) {
      if (AtEnd()) return Error(start, "unterminated string literal");
      char c = text_[pos_];
      if (c == q) {
        if (!triple) {
          ++pos_;
          return v;
        }
        if (Peek(1) == q && Peek(2) == q) {
          pos_ += 3;
          return v;
        }
      }
      if (c == '\n' && !triple) return Error(start, "unterminated string literal");
      if (bytes && static_cast<unsigned char>(c) >= 0x80) {
        return Error(pos_, "bytes literals can only hold ASCII characters");
      }
      if (c != '\\') {
        out.push_back(c);
        ++pos_;
        continue;
      }
      // A backslash.
      if (pos_ + 1 >= text_.size()) return Error(start, "unterminated string literal");
      char e = text_[pos_ + 1];
      if (raw) {
        out.push_back('\\');
        out.push_back(e);
        pos_ += 2;
        continue;
      }
      size_t esc_at = pos_;
      pos_ += 2;
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': {
          uint32_t cp;
          RETURN_IF_ERROR(HexEscape(esc_at, 2, &cp));
          if (bytes) {
            out.push_back(static_cast<char>(cp));
          } else {
            AppendUtf8(cp, &out);
          }
          break;
        }
        case 'u':
        case 'U': {
          if (bytes) {  // not an escape in bytes literals
            out.push_back('\\');
            out.push_back(e);
            break;
          }
          uint32_t cp;
          RETURN_IF_ERROR(HexEscape(esc_at, e == 'u' ? 4 : 8, &cp));
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return Error(esc_at, absl::StrFormat("invalid code point U+%X in a string", cp));
          }
          AppendUtf8(cp, &out);
          break;
        }
        case 'N':
          if (!bytes) return Error(esc_at, "\\N{...} escapes are not supported");
          out.push_back('\\');
          out.push_back(e);
          break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = 0;
            int n = 0;
            --pos_;
            while (n < 3 && Peek() >= '0' && Peek() <= '7') {
              cp = cp * 8 + static_cast<uint32_t>(Peek() - '0');
              ++pos_;
              ++n;
            }
            if (bytes) {
              out.push_back(static_cast<char>(cp & 0xFF));
            } else {
              AppendUtf8(cp, &out);
            }
          } else {  // Python keeps unknown escapes as written
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
  }

  // `n` hex digits at pos_ (just after \x, \u or \U at esc_at).
  absl::Status HexEscape(size_t esc_at, int n, uint32_t* cp) {
    *cp = 0;
    for (int i = 0; i < n; ++i) {
      int d = DigitValue(Peek());
      if (AtEnd() || d >= 16) {
        return Error(esc_at, absl::StrCat("truncated \\", text_.substr(esc_at + 1, 1),
                                          " escape: expected ", n, " hex digits"));
      }
      *cp = *cp * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return absl::OkStatus();
  }

  // An identifier run with optional dots: True, None, AUTOTUNE, tf.data.AUTOTUNE, a string
  // prefix (b'..'), or a call: tf.constant(...), float(...).
  absl::StatusOr<PyValue> NameOrKeyword(int depth) {
    size_t start = pos_;
    while (IsIdentChar(Peek())) ++pos_;
    std::string first(text_.substr(start, pos_ - start));
    if ((Peek() == '\'' || Peek() == '"') && first.size() <= 2) {
      std::string p = absl::AsciiStrToLower(first);
      if (p == "r" || p == "u" || p == "b" || p == "rb" || p == "br") {
        return String(p.find('r') != std::string::npos, p.find('b') != std::string::npos);
      }
    }
    std::string name = first;
    for (;;) {
      size_t save = pos_;
      SkipWs();
      if (Peek() != '.') {
        pos_ = save;
        break;
      }
      ++pos_;
      SkipWs();
      if (!IsIdentStart(Peek())) return Expected(absl::StrCat("a name after '", name, ".'"));
      size_t s = pos_;
      while (IsIdentChar(Peek())) ++pos_;
      absl::StrAppend(&name, ".", text_.substr(s, pos_ - s));
    }
    PyValue v;
    if (name == "True" || name == "False") {
      v.kind = PyValue::Kind::kBool;
      v.bool_value = name == "True";
      return v;
    }
    if (name == "None") return v;
    size_t save = pos_;
    SkipWs();
    if (Peek() != '(') {
      pos_ = save;
      v.kind = PyValue::Kind::kName;
      v.text = std::move(name);
      return v;
    }
    if (name == "tf.constant") return Constant(start, depth);
    if (name == "float") return FloatCall(start, depth);
    if (name == "tf.ragged.constant") return RaggedConstant(start, depth);
    if (absl::StartsWith(name, "tf.RaggedTensor.") && IsLiteralCall(name)) {
      return RaggedFromSplits(name, start, depth);
    }
    if (absl::EndsWith(name, "SparseTensor") && IsLiteralCall(name)) {
      return SparseTensorCall(name, start, depth);
    }
    return Error(start, absl::StrCat("unsupported call '", name,
                                     "(...)'; a literal may only call tf.constant(...), "
                                     "tf.ragged.constant(...), tf.RaggedTensor.from_row_splits(...), "
                                     "tf.RaggedTensor.from_nested_row_splits(...), "
                                     "tf.sparse.SparseTensor(...) and float(...)"));
  }

  absl::StatusOr<PyValue> FloatCall(size_t start, int depth) {
    ++pos_;  // (
    ASSIGN_OR_RETURN(PyValue arg, Value(depth + 1));
    SkipWs();
    if (Peek() != ')') return Expected("')' to close float(...)");
    ++pos_;
    PyValue v;
    v.kind = PyValue::Kind::kFloat;
    if (arg.kind == PyValue::Kind::kInt || arg.kind == PyValue::Kind::kFloat) {
      v.float_value = arg.float_value;
      return v;
    }
    if (arg.kind == PyValue::Kind::kStr) {
      std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(arg.text));
      bool neg = !s.empty() && s[0] == '-';
      std::string body = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? s.substr(1) : s;
      if (body == "inf" || body == "infinity") {
        v.float_value = neg ? -std::numeric_limits<double>::infinity()
                            : std::numeric_limits<double>::infinity();
        return v;
      }
      if (body == "nan") {
        v.float_value = std::numeric_limits<double>::quiet_NaN();
        return v;
      }
      if (!body.empty() && (absl::ascii_isdigit(body[0]) || body[0] == '.') &&
          body.find_first_not_of("0123456789.e+-") == std::string::npos &&
          absl::SimpleAtod(s, &v.float_value)) {
        return v;
      }
    }
    return Error(start, absl::StrCat("float(...) needs a number or 'inf', '-inf', 'nan', got ",
                                     arg.KindName(), " ", text_.substr(arg.begin,
                                                                        arg.end - arg.begin)));
  }

  // The arguments of a call `name(...)` at `start` (pos_ on its '('), bound to `params` by
  // position or keyword as Python binds them; an argument left out stays nullopt.
  absl::StatusOr<std::vector<std::optional<PyValue>>> CallArgs(
      absl::string_view name, const std::vector<absl::string_view>& params, int depth) {
    ++pos_;  // (
    std::vector<std::optional<PyValue>> args(params.size());
    size_t positional = 0;
    bool saw_keyword = false;
    for (;;) {
      SkipWs();
      if (Peek() == ')') {
        ++pos_;
        break;
      }
      size_t arg_at = pos_;
      int slot = -1;
      if (IsIdentStart(Peek())) {
        size_t s = pos_;
        while (IsIdentChar(Peek())) ++pos_;
        std::string kw(text_.substr(s, pos_ - s));
        SkipWs();
        if (Peek() == '=' && Peek(1) != '=') {
          ++pos_;
          for (size_t i = 0; i < params.size(); ++i) {
            if (kw == params[i]) slot = static_cast<int>(i);
          }
          if (slot < 0) {
            return Error(arg_at, absl::StrCat(name, ": unexpected keyword argument '", kw,
                                              "' (known: ", absl::StrJoin(params, ", "), ")"));
          }
          saw_keyword = true;
        } else {
          pos_ = s;
        }
      }
      if (slot < 0) {
        if (saw_keyword) {
          return Error(arg_at, absl::StrCat(name, ": positional argument follows keyword argument"));
        }
        if (positional >= params.size()) {
          return Error(arg_at, absl::StrCat(name, ": takes at most ", params.size(),
                                            " positional arguments"));
        }
        slot = static_cast<int>(positional++);
      }
      if (args[slot].has_value()) {
        return Error(arg_at, absl::StrCat(name, ": argument ", params[slot], " given twice"));
      }
      ASSIGN_OR_RETURN(PyValue a, Value(depth + 1));
      args[slot] = std::move(a);
      SkipWs();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == ')') {
        ++pos_;
        break;
      }
      return Expected(absl::StrCat("',' or ')' in ", name, "(...)"));
    }
    return args;
  }

  // A dtype argument (tf.int64, 'int64'); nullopt when absent or None.
  absl::StatusOr<std::optional<DType>> DTypeArg(absl::string_view call,
                                                const std::optional<PyValue>& arg) {
    if (!arg.has_value() || arg->kind == PyValue::Kind::kNone) return std::optional<DType>();
    const PyValue& d = *arg;
    if (d.kind != PyValue::Kind::kName && d.kind != PyValue::Kind::kStr) {
      return Error(d.begin, absl::StrCat(call, ": dtype must be a dtype such as tf.int64, found ",
                                         d.KindName()));
    }
    absl::StatusOr<DType> dtype = ParseDType(d.text);
    if (!dtype.ok()) return Error(d.begin, absl::StrCat(call, ": unknown dtype '", d.text, "'"));
    return std::optional<DType>(*dtype);
  }

  // A required argument that must be a tensor value (a number, string, list or tf.constant).
  absl::StatusOr<PyValue> TensorArg(absl::string_view call, size_t start, absl::string_view param,
                                    std::optional<PyValue>& arg) {
    if (!arg.has_value()) return Error(start, absl::StrCat(call, ": missing argument ", param));
    if (arg->kind == PyValue::Kind::kDict || arg->kind == PyValue::Kind::kNone ||
        arg->kind == PyValue::Kind::kName || arg->kind == PyValue::Kind::kRagged ||
        arg->kind == PyValue::Kind::kSparse) {
      return Error(arg->begin, absl::StrCat(call, ": ", param, " must be a tensor value, found ",
                                            arg->KindName()));
    }
    return std::move(*arg);
  }

  // tf.ragged.constant(pylist, dtype=None, ragged_rank=None, inner_shape=None, name=None,
  // row_splits_dtype=tf.int64); inner_shape is not supported, row_splits_dtype must be int64.
  absl::StatusOr<PyValue> RaggedConstant(size_t start, int depth) {
    static constexpr absl::string_view kCall = "tf.ragged.constant";
    ASSIGN_OR_RETURN(auto args, CallArgs(kCall, {"pylist", "dtype", "ragged_rank", "inner_shape",
                                                 "name", "row_splits_dtype"}, depth));
    PyValue v;
    v.kind = PyValue::Kind::kRagged;
    ASSIGN_OR_RETURN(PyValue list, TensorArg(kCall, start, "pylist", args[0]));
    ASSIGN_OR_RETURN(v.constant_dtype, DTypeArg(kCall, args[1]));
    if (args[2].has_value() && args[2]->kind != PyValue::Kind::kNone) {
      std::optional<int64_t> r = args[2]->AsInt64();
      if (!r.has_value() || *r < 0) {
        return Error(args[2]->begin, absl::StrCat(kCall, ": ragged_rank must be an int >= 0"));
      }
      v.ragged_rank = *r;
    }
    if (args[3].has_value() && args[3]->kind != PyValue::Kind::kNone) {
      return Error(args[3]->begin, absl::StrCat(kCall, ": inner_shape is not supported"));
    }
    ASSIGN_OR_RETURN(std::optional<DType> splits, DTypeArg(kCall, args[5]));
    if (splits.has_value() && *splits != DType::kInt64) {
      return Error(args[5]->begin, absl::StrCat(kCall, ": row_splits_dtype must be tf.int64"));
    }
    v.items.push_back(std::move(list));
    return v;
  }

  // tf.RaggedTensor.from_nested_row_splits(flat_values, nested_row_splits) and
  // tf.RaggedTensor.from_row_splits(values, row_splits) (values itself a tensor).
  absl::StatusOr<PyValue> RaggedFromSplits(absl::string_view call, size_t start, int depth) {
    const bool nested = absl::EndsWith(call, "from_nested_row_splits");
    ASSIGN_OR_RETURN(auto args,
                     CallArgs(call, {nested ? "flat_values" : "values",
                                     nested ? "nested_row_splits" : "row_splits", "name",
                                     "validate"}, depth));
    PyValue v;
    v.kind = PyValue::Kind::kRagged;
    v.ragged_from_splits = true;
    ASSIGN_OR_RETURN(PyValue values, TensorArg(call, start, nested ? "flat_values" : "values",
                                               args[0]));
    v.items.push_back(std::move(values));
    if (!args[1].has_value()) return Error(start, absl::StrCat(call, ": missing row splits"));
    if (nested) {
      if (args[1]->kind != PyValue::Kind::kTuple && args[1]->kind != PyValue::Kind::kList) {
        return Error(args[1]->begin,
                     absl::StrCat(call, ": nested_row_splits must be a tuple or list"));
      }
      for (PyValue& s : args[1]->items) v.items.push_back(std::move(s));
    } else {
      ASSIGN_OR_RETURN(PyValue splits, TensorArg(call, start, "row_splits", args[1]));
      v.items.push_back(std::move(splits));
    }
    return v;
  }

  // tf.sparse.SparseTensor(indices, values, dense_shape) (also tf.SparseTensor).
  absl::StatusOr<PyValue> SparseTensorCall(absl::string_view call, size_t start, int depth) {
    ASSIGN_OR_RETURN(auto args, CallArgs(call, {"indices", "values", "dense_shape"}, depth));
    PyValue v;
    v.kind = PyValue::Kind::kSparse;
    for (size_t i = 0; i < args.size(); ++i) {
      static constexpr absl::string_view kParams[] = {"indices", "values", "dense_shape"};
      ASSIGN_OR_RETURN(PyValue a, TensorArg(call, start, kParams[i], args[i]));
      v.items.push_back(std::move(a));
    }
    return v;
  }

  // tf.constant(value, dtype=None, shape=None, name=None).
  absl::StatusOr<PyValue> Constant(size_t start, int depth) {
    ASSIGN_OR_RETURN(auto args, CallArgs("tf.constant", {"value", "dtype", "shape", "name"},
                                         depth));
    if (!args[0].has_value()) return Error(start, "tf.constant: missing argument value");
    PyValue v;
    v.kind = PyValue::Kind::kConstant;
    const PyValue& value = *args[0];
    if (value.kind == PyValue::Kind::kConstant || value.kind == PyValue::Kind::kDict ||
        value.kind == PyValue::Kind::kNone || value.kind == PyValue::Kind::kName ||
        value.kind == PyValue::Kind::kRagged || value.kind == PyValue::Kind::kSparse) {
      return Error(value.begin, absl::StrCat("tf.constant: value must be a number, string, "
                                             "bool or nested list, found ", value.KindName()));
    }
    ASSIGN_OR_RETURN(v.constant_dtype, DTypeArg("tf.constant", args[1]));
    if (args[2].has_value() && args[2]->kind != PyValue::Kind::kNone) {
      const PyValue& s = *args[2];
      if (s.kind != PyValue::Kind::kTuple && s.kind != PyValue::Kind::kList) {
        return Error(s.begin, "tf.constant: shape must be a tuple or list of sizes");
      }
      std::vector<int64_t> dims;
      for (const PyValue& d : s.items) {
        std::optional<int64_t> n = d.AsInt64();
        if (d.kind != PyValue::Kind::kInt || !n.has_value() || *n < 0) {
          return Error(d.begin, "tf.constant: shape sizes must be non-negative integers");
        }
        dims.push_back(*n);
      }
      v.constant_shape = std::move(dims);
    }
    if (args[3].has_value() && args[3]->kind != PyValue::Kind::kStr &&
        args[3]->kind != PyValue::Kind::kNone) {
      return Error(args[3]->begin, "tf.constant: name must be a string");
    }
    v.items.push_back(std::move(*args[0]));
    return v;
  }

  absl::string_view text_;
  absl::string_view context_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Conversion.

absl::Status ConvError(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

// The shape of `v` read as nested lists; leaves (scalars) appended in row-major order.
absl::StatusOr<std::vector<int64_t>> NestedShape(const PyValue& v,
                                                 std::vector<const PyValue*>* leaves) {
  switch (v.kind) {
    case PyValue::Kind::kBool:
    case PyValue::Kind::kInt:
    case PyValue::Kind::kFloat:
    case PyValue::Kind::kStr:
    case PyValue::Kind::kBytes:
      leaves->push_back(&v);
      return std::vector<int64_t>();
    case PyValue::Kind::kList:
    case PyValue::Kind::kTuple: {
      std::vector<int64_t> inner;
      for (size_t i = 0; i < v.items.size(); ++i) {
        ASSIGN_OR_RETURN(std::vector<int64_t> s, NestedShape(v.items[i], leaves));
        if (i == 0) {
          inner = std::move(s);
        } else if (s != inner) {
          return ConvError(absl::StrCat("ragged nested list: the item at column ",
                                        v.items[i].column(), " has shape ",
                                        Shape(s).ToString(), " but the item at column ",
                                        v.items[0].column(), " has shape ",
                                        Shape(inner).ToString()));
        }
      }
      inner.insert(inner.begin(), static_cast<int64_t>(v.items.size()));
      return inner;
    }
    case PyValue::Kind::kNone:
      return ConvError(absl::StrCat("None at column ", v.column(),
                                    " cannot be converted to a tensor"));
    case PyValue::Kind::kDict:
      return ConvError(absl::StrCat("the dict at column ", v.column(),
                                    " cannot be part of a tensor (lists are tensors in tf.data; "
                                    "use a tuple for structure)"));
    case PyValue::Kind::kName:
      return ConvError(absl::StrCat("name '", v.text, "' at column ", v.column(),
                                    " is not a value here"));
    case PyValue::Kind::kConstant:
      return ConvError(absl::StrCat("tf.constant at column ", v.column(),
                                    " cannot be nested inside a list"));
    case PyValue::Kind::kRagged:
    case PyValue::Kind::kSparse:
      return ConvError(absl::StrCat("the ", v.KindName(), " at column ", v.column(),
                                    " is not a dense tensor (it can only be an element or a "
                                    "component of one)"));
  }
  return ConvError("unknown literal kind");
}

enum class LeafClass { kBool, kNumber, kString };
LeafClass ClassOf(const PyValue& v) {
  switch (v.kind) {
    case PyValue::Kind::kBool: return LeafClass::kBool;
    case PyValue::Kind::kStr:
    case PyValue::Kind::kBytes: return LeafClass::kString;
    default: return LeafClass::kNumber;
  }
}

std::string LeafText(const PyValue& v) {
  if (v.kind == PyValue::Kind::kInt) {
    if (v.int_too_big) return absl::StrCat(v.negative ? "-" : "", "<an integer >= 2**64>");
    return absl::StrCat(v.negative ? "-" : "", v.magnitude);
  }
  if (v.kind == PyValue::Kind::kFloat) return absl::StrCat(v.float_value);
  return std::string(v.KindName());
}

// The dtype tf.constant infers for these leaves; INVALID_ARGUMENT on mixed kinds or values out
// of range, as TF reports them.
absl::StatusOr<DType> InferDType(const std::vector<const PyValue*>& leaves) {
  if (leaves.empty()) return DType::kFloat32;
  const PyValue* first = leaves[0];
  bool any_float = false;
  bool all_int32 = true;
  for (const PyValue* l : leaves) {
    if (ClassOf(*l) != ClassOf(*first)) {
      return ConvError(absl::StrCat("mixed types in a tensor: ", first->KindName(), " at column ",
                                    first->column(), " and ", l->KindName(), " at column ",
                                    l->column()));
    }
    if (l->kind == PyValue::Kind::kFloat) any_float = true;
    if (l->kind == PyValue::Kind::kInt) {
      std::optional<int64_t> n = l->AsInt64();
      if (!n.has_value()) {
        return ConvError(absl::StrCat("integer ", LeafText(*l), " at column ", l->column(),
                                      " is out of range for int64"));
      }
      if (*n < std::numeric_limits<int32_t>::min() || *n > std::numeric_limits<int32_t>::max()) {
        all_int32 = false;
      }
    }
  }
  switch (ClassOf(*first)) {
    case LeafClass::kBool: return DType::kBool;
    case LeafClass::kString: return DType::kString;
    case LeafClass::kNumber: break;
  }
  if (!any_float) return all_int32 ? DType::kInt32 : DType::kInt64;
  for (const PyValue* l : leaves) {
    // TF refuses a finite value that float32 rounds to infinity.
    if (std::isfinite(l->float_value) && std::isinf(NarrowToFloat(l->float_value))) {
      return ConvError(absl::StrCat("value ", LeafText(*l), " at column ", l->column(),
                                    " is out of range for float32"));
    }
  }
  return DType::kFloat32;
}

template <typename T>
void Put(void* base, int64_t i, T value) {
  std::memcpy(static_cast<char*>(base) + i * sizeof(T), &value, sizeof(T));
}

// Stores leaf `l` as element i of a numeric tensor of `dtype`, with tf.constant(v, dtype)'s
// conversions: bools and ints to any numeric dtype (ints wrap modulo 2^bits, as TF's do),
// floats to floating dtypes only.
absl::Status StoreLeaf(const PyValue& l, DType dtype, void* base, int64_t i) {
  auto cannot = [&]() {
    return ConvError(absl::StrCat("cannot convert ", l.KindName(), " at column ", l.column(),
                                  " to ", DTypeName(dtype)));
  };
  if (dtype == DType::kBool) {
    if (l.kind != PyValue::Kind::kBool) return cannot();
    Put<uint8_t>(base, i, l.bool_value ? 1 : 0);
    return absl::OkStatus();
  }
  if (l.kind != PyValue::Kind::kBool && l.kind != PyValue::Kind::kInt &&
      l.kind != PyValue::Kind::kFloat) {
    return cannot();
  }
  if (IsInteger(dtype)) {
    if (l.kind == PyValue::Kind::kFloat) return cannot();
    uint64_t bits;
    if (l.kind == PyValue::Kind::kBool) {
      bits = l.bool_value ? 1 : 0;
    } else {
      if (l.int_too_big || (l.negative && l.magnitude > (uint64_t{1} << 63))) {
        return ConvError(absl::StrCat("integer ", LeafText(l), " at column ", l.column(),
                                      " is out of range for ", DTypeName(dtype)));
      }
      bits = l.negative ? uint64_t{0} - l.magnitude : l.magnitude;
    }
    switch (dtype) {
      case DType::kInt8: Put<int8_t>(base, i, static_cast<int8_t>(bits)); break;
      case DType::kInt16: Put<int16_t>(base, i, static_cast<int16_t>(bits)); break;
      case DType::kInt32: Put<int32_t>(base, i, static_cast<int32_t>(bits)); break;
      case DType::kInt64: Put<int64_t>(base, i, static_cast<int64_t>(bits)); break;
      case DType::kUInt8: Put<uint8_t>(base, i, static_cast<uint8_t>(bits)); break;
      case DType::kUInt16: Put<uint16_t>(base, i, static_cast<uint16_t>(bits)); break;
      case DType::kUInt32: Put<uint32_t>(base, i, static_cast<uint32_t>(bits)); break;
      case DType::kUInt64: Put<uint64_t>(base, i, bits); break;
      default: return cannot();
    }
    return absl::OkStatus();
  }
  double d = l.kind == PyValue::Kind::kBool ? (l.bool_value ? 1.0 : 0.0) : l.float_value;
  switch (dtype) {
    case DType::kFloat64: Put<double>(base, i, d); break;
    case DType::kFloat32: Put<float>(base, i, NarrowToFloat(d)); break;
    case DType::kFloat16: Put<uint16_t>(base, i, FloatToHalf(NarrowToFloat(d))); break;
    case DType::kBFloat16: Put<uint16_t>(base, i, FloatToBFloat16(NarrowToFloat(d))); break;
    default: return cannot();
  }
  return absl::OkStatus();
}

// A tensor of `dtype` and `shape` from `leaves` (row-major); when `fill` the single leaf is
// repeated to fill the shape.
absl::StatusOr<Tensor> BuildTensor(DType dtype, const Shape& shape,
                                   const std::vector<const PyValue*>& leaves, bool fill) {
  constexpr absl::string_view kWhat = "a tensor literal";
  if (dtype == DType::kString) {
    // Checked and charged before the strings are copied: a filled shape may ask for many.
    int64_t chars = 0;
    if (fill) {
      if (__builtin_mul_overflow(static_cast<int64_t>(leaves[0]->text.size()),
                                 shape.num_elements(), &chars)) {
        chars = std::numeric_limits<int64_t>::max();
      }
    } else {
      for (const PyValue* l : leaves) chars += static_cast<int64_t>(l->text.size());
    }
    ASSIGN_OR_RETURN(Tensor t, Tensor::TryAllocateStrings(shape, chars, kWhat));
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      const PyValue& l = *leaves[fill ? 0 : i];
      if (ClassOf(l) != LeafClass::kString) {
        return ConvError(absl::StrCat("cannot convert ", l.KindName(), " at column ", l.column(),
                                      " to string"));
      }
      *t.mutable_string(i) = l.text;
    }
    return t;
  }
  ASSIGN_OR_RETURN(Tensor t, Tensor::TryAllocate(dtype, shape, kWhat));
  const int64_t n = t.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(StoreLeaf(*leaves[fill ? 0 : i], dtype, t.mutable_raw_data(), i));
  }
  return t;
}

bool IsListLike(const PyValue& v) {
  return v.kind == PyValue::Kind::kList || v.kind == PyValue::Kind::kTuple;
}

// The list nesting depth of `v`: 0 for a scalar, 1 for an empty list.
int MaxListDepth(const PyValue& v) {
  if (!IsListLike(v)) return 0;
  int depth = 0;
  for (const PyValue& item : v.items) depth = std::max(depth, MaxListDepth(item));
  return depth + 1;
}

// tf.ragged.constant's rule: every scalar sits at nesting depth `depth` (empty lists may end
// a branch early). INVALID_ARGUMENT naming the column of the first scalar that does not.
absl::Status CheckScalarDepth(const PyValue& v, int level, int depth) {
  if (!IsListLike(v)) {
    if (level == depth) return absl::OkStatus();
    return ConvError(absl::StrCat("tf.ragged.constant: all scalar values must have the same "
                                  "nesting depth; the value at column ", v.column(), " is at ",
                                  level, ", others at ", depth));
  }
  for (const PyValue& item : v.items) RETURN_IF_ERROR(CheckScalarDepth(item, level + 1, depth));
  return absl::OkStatus();
}

// `v` as tf.constant(v, dtype=tf.int64) unless it names a dtype itself: TF converts indices,
// dense_shape and row_splits given as Python lists to int64.
PyValue AsInt64Constant(const PyValue& v) {
  PyValue c;
  if (v.kind == PyValue::Kind::kConstant) {
    c = v;
  } else {
    c.kind = PyValue::Kind::kConstant;
    c.begin = v.begin;
    c.items.push_back(v);
  }
  if (!c.constant_dtype.has_value()) c.constant_dtype = DType::kInt64;
  return c;
}

absl::StatusOr<Element> RaggedToElement(const PyValue& v) {
  std::vector<Tensor> splits;
  if (v.ragged_from_splits) {
    ASSIGN_OR_RETURN(Tensor flat, PyValueToTensor(v.items[0]));
    for (size_t i = 1; i < v.items.size(); ++i) {
      ASSIGN_OR_RETURN(Tensor s, PyValueToTensor(AsInt64Constant(v.items[i])));
      splits.push_back(std::move(s));
    }
    return MakeRaggedTensor(std::move(flat), std::move(splits),
                            absl::StrCat("RaggedTensor at column ", v.column()));
  }
  const PyValue& list = v.items[0];
  if (list.kind != PyValue::Kind::kList && list.kind != PyValue::Kind::kTuple) {
    return ConvError(absl::StrCat("tf.ragged.constant at column ", v.column(),
                                  ": pylist must be a nested list"));
  }
  const int depth = MaxListDepth(list);
  RETURN_IF_ERROR(CheckScalarDepth(list, 0, depth));
  const int64_t ragged_rank = v.ragged_rank.value_or(depth - 1);
  if (ragged_rank >= depth) {
    return ConvError(absl::StrCat("tf.ragged.constant at column ", v.column(), ": ragged_rank ",
                                  ragged_rank, " must be below the nesting depth ", depth));
  }
  // Peel one list level per ragged dimension: the rows' lengths become its row_splits.
  std::vector<const PyValue*> rows;
  for (const PyValue& item : list.items) rows.push_back(&item);
  for (int64_t level = 0; level < ragged_rank; ++level) {
    std::vector<int64_t> s = {0};
    std::vector<const PyValue*> next;
    for (const PyValue* row : rows) {
      for (const PyValue& item : row->items) next.push_back(&item);
      s.push_back(static_cast<int64_t>(next.size()));
    }
    splits.push_back(Tensor::FromVector(s));
    rows = std::move(next);
  }
  // What is left is uniform: flat_values, converted as tf.constant converts a list.
  PyValue flat;
  flat.kind = PyValue::Kind::kList;
  flat.begin = list.begin;
  for (const PyValue* row : rows) flat.items.push_back(*row);
  if (v.constant_dtype.has_value()) {
    PyValue constant;
    constant.kind = PyValue::Kind::kConstant;
    constant.begin = list.begin;
    constant.constant_dtype = v.constant_dtype;
    constant.items.push_back(std::move(flat));
    flat = std::move(constant);
  }
  ASSIGN_OR_RETURN(Tensor flat_values, PyValueToTensor(flat));
  // tf.ragged.constant of ragged rank 0 is a tf.Tensor.
  if (ragged_rank == 0) return Element(std::move(flat_values));
  return MakeRaggedTensor(std::move(flat_values), std::move(splits),
                          absl::StrCat("tf.ragged.constant at column ", v.column()));
}

absl::StatusOr<Element> SparseToElement(const PyValue& v) {
  ASSIGN_OR_RETURN(Tensor indices, PyValueToTensor(AsInt64Constant(v.items[0])));
  ASSIGN_OR_RETURN(Tensor values, PyValueToTensor(v.items[1]));
  ASSIGN_OR_RETURN(Tensor dense_shape, PyValueToTensor(AsInt64Constant(v.items[2])));
  const std::string what = absl::StrCat("SparseTensor at column ", v.column());
  if (indices.num_elements() == 0 && indices.shape().rank() == 1 &&
      dense_shape.shape().rank() == 1) {
    // indices=[]: no entries, of the rank dense_shape gives (TF reads it the same way).
    ASSIGN_OR_RETURN(indices, indices.Reshape(Shape({0, dense_shape.shape().dim(0)})));
  }
  if (indices.dtype() != DType::kInt64 || dense_shape.dtype() != DType::kInt64) {
    return ConvError(absl::StrCat(what, ": indices and dense_shape must be int64"));
  }
  return MakeSparseTensor(std::move(indices), std::move(values), std::move(dense_shape), what);
}

absl::StatusOr<Element> ToElement(const PyValue& v) {
  if (v.kind == PyValue::Kind::kRagged) return RaggedToElement(v);
  if (v.kind == PyValue::Kind::kSparse) return SparseToElement(v);
  if (v.kind == PyValue::Kind::kTuple) {
    std::vector<Element> children;
    for (const PyValue& item : v.items) {
      ASSIGN_OR_RETURN(Element e, ToElement(item));
      children.push_back(std::move(e));
    }
    return Element::Tuple(std::move(children));
  }
  if (v.kind == PyValue::Kind::kDict) {
    std::vector<std::pair<std::string, Element>> items;
    for (size_t i = 0; i < v.items.size(); ++i) {
      ASSIGN_OR_RETURN(Element e, ToElement(v.items[i]));
      items.emplace_back(v.keys[i], std::move(e));
    }
    return Element::Dict(std::move(items));
  }
  if (v.kind == PyValue::Kind::kNone) {
    return ConvError(absl::StrCat("None at column ", v.column(),
                                  " is not supported in a dataset element"));
  }
  ASSIGN_OR_RETURN(Tensor t, PyValueToTensor(v));
  return Element(std::move(t));
}

// ---------------------------------------------------------------------------------------------
// Printing.

std::string Pythonize(std::string s) {
  size_t e = s.find_first_of("eE");
  if (s.find('.') == std::string::npos) {
    if (e == std::string::npos) {
      s += ".0";
    } else {
      s.insert(e, ".0");
    }
  }
  return s;
}

// A plain nested-list literal can give back a tensor of this shape: no zero dimension before
// the last one.
bool ListsCanExpress(const Shape& shape) {
  for (int i = 0; i + 1 < shape.rank(); ++i) {
    if (shape.dim(i) == 0) return false;
  }
  return true;
}

template <typename T>
T Get(const Tensor& t, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(t.raw_data()) + i * sizeof(T), sizeof(T));
  return v;
}

std::string ScalarText(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kBool: return Get<uint8_t>(t, i) ? "True" : "False";
    case DType::kInt8: return absl::StrCat(Get<int8_t>(t, i));
    case DType::kInt16: return absl::StrCat(Get<int16_t>(t, i));
    case DType::kInt32: return absl::StrCat(Get<int32_t>(t, i));
    case DType::kInt64: return absl::StrCat(Get<int64_t>(t, i));
    case DType::kUInt8: return absl::StrCat(Get<uint8_t>(t, i));
    case DType::kUInt16: return absl::StrCat(Get<uint16_t>(t, i));
    case DType::kUInt32: return absl::StrCat(Get<uint32_t>(t, i));
    case DType::kUInt64: return absl::StrCat(Get<uint64_t>(t, i));
    case DType::kFloat16: return PythonFloat32Literal(HalfToFloat(Get<uint16_t>(t, i)));
    case DType::kBFloat16: return PythonFloat32Literal(BFloat16ToFloat(Get<uint16_t>(t, i)));
    case DType::kFloat32: return PythonFloat32Literal(Get<float>(t, i));
    case DType::kFloat64: return PythonFloat64Literal(Get<double>(t, i));
    case DType::kString: return PythonStringLiteral(t.string_at(i));
    case DType::kInvalid: break;
  }
  return "None";
}

void AppendNested(const Tensor& t, int dim, int64_t* next, std::string* out) {
  if (dim == t.shape().rank()) {
    out->append(ScalarText(t, (*next)++));
    return;
  }
  out->push_back('[');
  for (int64_t i = 0; i < t.shape().dim(dim); ++i) {
    if (i > 0) out->append(", ");
    AppendNested(t, dim + 1, next, out);
  }
  out->push_back(']');
}

}  // namespace

std::optional<int64_t> PyValue::AsInt64() const {
  if (kind != Kind::kInt || int_too_big) return std::nullopt;
  if (negative) {
    if (magnitude > (uint64_t{1} << 63)) return std::nullopt;
    return static_cast<int64_t>(uint64_t{0} - magnitude);
  }
  if (magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(magnitude);
}

absl::string_view PyValue::KindName() const {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kTuple: return "tuple";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kName: return "name";
    case Kind::kConstant: return "tf.constant";
    case Kind::kRagged: return "tf.RaggedTensor";
    case Kind::kSparse: return "tf.sparse.SparseTensor";
  }
  return "?";
}

absl::StatusOr<PyValue> ParsePyValue(absl::string_view text, size_t* pos,
                                     absl::string_view context) {
  return LiteralParser(text, context).Parse(pos);
}

bool IsLiteralCall(absl::string_view name) {
  return name == "tf.constant" || name == "float" || name == "tf.ragged.constant" ||
         name == "tf.RaggedTensor.from_nested_row_splits" ||
         name == "tf.RaggedTensor.from_row_splits" || name == "tf.sparse.SparseTensor" ||
         name == "tf.SparseTensor";
}

absl::StatusOr<PyValue> ParsePythonLiteral(absl::string_view text) {
  size_t pos = 0;
  ASSIGN_OR_RETURN(PyValue v, ParsePyValue(text, &pos));
  while (pos < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos < text.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "python literal, column ", pos + 1, ": unexpected text after the literal: '",
        text.substr(pos, 20), "'"));
  }
  return v;
}

absl::StatusOr<Tensor> PyValueToTensor(const PyValue& v) {
  const PyValue& value = v.kind == PyValue::Kind::kConstant ? v.items[0] : v;
  std::vector<const PyValue*> leaves;
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, NestedShape(value, &leaves));
  DType dtype;
  if (v.kind == PyValue::Kind::kConstant && v.constant_dtype.has_value()) {
    dtype = *v.constant_dtype;
  } else {
    ASSIGN_OR_RETURN(dtype, InferDType(leaves));
  }
  Shape shape(std::move(dims));
  bool fill = false;
  if (v.kind == PyValue::Kind::kConstant && v.constant_shape.has_value()) {
    const std::vector<int64_t>& want = *v.constant_shape;
    int64_t count = 1;
    for (int64_t d : want) {
      if (d != 0 && count > kMaxFilledElements / d) {
        count = kMaxFilledElements + 1;
        break;
      }
      count *= d;
    }
    if (count > kMaxFilledElements) {
      return ConvError(absl::StrCat("tf.constant at column ", v.column(), ": shape ",
                                    Shape(want).ToString(), " has more than ",
                                    kMaxFilledElements, " elements"));
    }
    if (count == static_cast<int64_t>(leaves.size())) {
      shape = Shape(want);
    } else if (shape.rank() == 0) {
      shape = Shape(want);
      fill = true;
    } else {
      return ConvError(absl::StrCat("tf.constant at column ", v.column(), ": value has ",
                                    leaves.size(), " elements but shape ",
                                    Shape(want).ToString(), " needs ", count));
    }
  }
  return BuildTensor(dtype, shape, leaves, fill);
}

absl::StatusOr<Element> PyValueToElement(const PyValue& v) { return ToElement(v); }

std::string PythonFloat32Literal(float f) {
  if (std::isnan(f)) return "float('nan')";
  if (std::isinf(f)) return f > 0 ? "float('inf')" : "float('-inf')";
  for (int p = 1; p <= 9; ++p) {
    std::string s = absl::StrFormat("%.*g", p, f);
    double d;
    if (absl::SimpleAtod(s, &d) && NarrowToFloat(d) == f) return Pythonize(s);
  }
  return Pythonize(absl::StrFormat("%.9g", f));
}

std::string PythonFloat64Literal(double x) {
  if (std::isnan(x)) return "float('nan')";
  if (std::isinf(x)) return x > 0 ? "float('inf')" : "float('-inf')";
  for (int p = 1; p <= 17; ++p) {
    std::string s = absl::StrFormat("%.*g", p, x);
    double d;
    if (absl::SimpleAtod(s, &d) && d == x) return Pythonize(s);
  }
  return Pythonize(absl::StrFormat("%.17g", x));
}

std::string PythonStringLiteral(absl::string_view s) {
  std::vector<uint32_t> cps;
  std::string out;
  if (DecodeUtf8(s, &cps)) {
    out.push_back('\'');
    for (uint32_t cp : cps) {
      if (cp == '\\') {
        out += "\\\\";
      } else if (cp == '\'') {
        out += "\\'";
      } else if (cp == '\n') {
        out += "\\n";
      } else if (cp == '\r') {
        out += "\\r";
      } else if (cp == '\t') {
        out += "\\t";
      } else if (cp < 0x20 || cp == 0x7F) {
        out += absl::StrFormat("\\x%02x", cp);
      } else if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
      } else if (cp <= 0xFFFF) {
        out += absl::StrFormat("\\u%04x", cp);
      } else {
        out += absl::StrFormat("\\U%08x", cp);
      }
    }
    out.push_back('\'');
    return out;
  }
  out = "b'";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\'') {
      out += "\\'";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7F) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('\'');
  return out;
}

std::string TensorToPythonLiteral(const Tensor& t) {
  DType d = t.dtype();
  bool expressible = ListsCanExpress(t.shape());
  bool inferred = d == DType::kInt32 || d == DType::kFloat32 || d == DType::kBool ||
                  d == DType::kString;
  bool plain = inferred && expressible && (t.num_elements() > 0 || d == DType::kFloat32);
  std::string values;
  if (expressible) {
    int64_t next = 0;
    AppendNested(t, 0, &next, &values);
  } else {
    values = "[]";  // only zero-size shapes are not expressible
  }
  if (plain) return values;
  std::string out = absl::StrCat("tf.constant(", values, ", dtype=tf.", DTypeName(d));
  if (!expressible) absl::StrAppend(&out, ", shape=", t.shape().ToString());
  out.push_back(')');
  return out;
}

std::string CompositeToPythonLiteral(const Element& node) {
  if (node.kind() == NestKind::kSparse) {
    return absl::StrCat("tf.sparse.SparseTensor(indices=",
                        TensorToPythonLiteral(node.children()[0].leaf()),
                        ", values=", TensorToPythonLiteral(node.children()[1].leaf()),
                        ", dense_shape=", TensorToPythonLiteral(node.children()[2].leaf()), ")");
  }
  std::vector<std::string> splits;
  for (size_t i = 1; i < node.children().size(); ++i) {
    splits.push_back(TensorToPythonLiteral(node.children()[i].leaf()));
  }
  return absl::StrCat("tf.RaggedTensor.from_nested_row_splits(flat_values=",
                      TensorToPythonLiteral(node.children()[0].leaf()), ", nested_row_splits=(",
                      absl::StrJoin(splits, ", "), splits.size() == 1 ? ",)" : ")", ")");
}

std::string ElementToPythonLiteral(const Element& e) {
  switch (e.kind()) {
    case NestKind::kLeaf:
      return TensorToPythonLiteral(e.leaf());
    case NestKind::kSparse:
    case NestKind::kRagged:
      return CompositeToPythonLiteral(e);
    case NestKind::kDict: {
      std::vector<std::string> parts;
      for (size_t i = 0; i < e.children().size(); ++i) {
        parts.push_back(absl::StrCat(PythonStringLiteral(e.keys()[i]), ": ",
                                     ElementToPythonLiteral(e.children()[i])));
      }
      return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
    }
    case NestKind::kTuple:
    case NestKind::kList: {
      std::vector<std::string> parts;
      for (const Element& c : e.children()) parts.push_back(ElementToPythonLiteral(c));
      return absl::StrCat("(", absl::StrJoin(parts, ", "), parts.size() == 1 ? "," : "", ")");
    }
  }
  return "()";
}

}  // namespace sluice
