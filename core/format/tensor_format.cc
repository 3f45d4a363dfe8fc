#include "core/format/tensor_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/device/device_memory.h"
#include "sluice/dtype.h"

namespace sluice {
namespace {

// numpy's array2string defaults.
constexpr int kLineWidth = 75;
constexpr int kPrecision = 8;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

// A decimal value: 0.<digits> * 10^decpt. `digits` has no leading or trailing zeros, except
// that zero is digits "0", decpt 1.
struct Decimal {
  bool negative = false;
  std::string digits = "0";
  int decpt = 1;
};

void StripTrailingZeros(std::string* digits) {
  while (digits->size() > 1 && digits->back() == '0') digits->pop_back();
}

// Parses to_chars' scientific output ("-1.2345e-05").
Decimal ParseScientific(const char* begin, const char* end) {
  Decimal d;
  const char* p = begin;
  if (p < end && *p == '-') {
    d.negative = true;
    ++p;
  }
  std::string digits;
  for (; p < end && *p != 'e'; ++p) {
    if (*p >= '0' && *p <= '9') digits.push_back(*p);
  }
  int exp = 0;
  if (p < end) {
    ++p;  // 'e'
    bool neg_exp = false;
    if (p < end && (*p == '+' || *p == '-')) neg_exp = *p++ == '-';
    std::from_chars(p, end, exp);
    if (neg_exp) exp = -exp;
  }
  StripTrailingZeros(&digits);
  d.digits = digits;
  d.decpt = digits == "0" ? 1 : exp + 1;
  return d;
}

Decimal ShortestOfFloat(float f) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  return ParseScientific(buf, r.ptr);
}

Decimal ShortestOfDouble(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  return ParseScientific(buf, r.ptr);
}

// `v` rounded (exactly, half to even) to `precision` digits after the mantissa's point.
Decimal RoundedScientific(double v, int precision) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific, precision);
  return ParseScientific(buf, r.ptr);
}

// Shortest digits of a finite binary16 value, as numpy's Dragon4 produces them: digits are
// generated until the value is uniquely identified within its rounding interval (closed for an
// even mantissa, open for an odd one), and the last digit is rounded to the nearest (ties to
// even). Exact: every half is k * 2^-24 with k
// < 2^40, so the whole computation fits in 128-bit integers.
Decimal ShortestOfHalf(uint16_t bits) {
  Decimal d;
  d.negative = (bits & 0x8000) != 0;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0 && mantissa == 0) return d;
  // Value, lower margin and upper margin in units of 2^-25.
  __int128 value, margin_low, margin_high;
  if (exponent == 0) {
    value = static_cast<__int128>(mantissa) * 2;
    margin_low = margin_high = 1;
  } else {
    value = static_cast<__int128>(1024 + mantissa) << exponent;  // (1024+m) * 2^(e-1) * 2
    margin_high = static_cast<__int128>(1) << (exponent - 1);
    margin_low = (mantissa == 0 && exponent > 1) ? margin_high / 2 : margin_high;
  }
  __int128 scale = static_cast<__int128>(1) << 25;
  // Bring value/scale into [1, 10).
  int exp10 = 0;
  while (value >= scale * 10) {
    scale *= 10;
    ++exp10;
  }
  while (value < scale) {
    value *= 10;
    margin_low *= 10;
    margin_high *= 10;
    --exp10;
  }
  const bool even = (bits & 1) == 0;
  std::string digits;
  for (int i = 0; i < 40; ++i) {
    int digit = static_cast<int>(value / scale);
    value %= scale;
    // Like IEEE round-half-even parsing, an even mantissa owns its interval's boundaries.
    const bool low = even ? value <= margin_low : value < margin_low;
    const bool high = even ? value + margin_high >= scale : value + margin_high > scale;
    if (low || high) {
      bool round_up = high;
      if (low && high) {
        const __int128 twice = value * 2;
        round_up = twice > scale || (twice == scale && (digit & 1) != 0);
      }
      if (round_up) {
        ++digit;
        // Carry into the digits already produced.
        while (digit == 10) {
          if (digits.empty()) {
            digit = 1;
            ++exp10;
            break;
          }
          digit = digits.back() - '0' + 1;
          digits.pop_back();
        }
      }
      digits.push_back(static_cast<char>('0' + digit));
      break;
    }
    digits.push_back(static_cast<char>('0' + digit));
    value *= 10;
    margin_low *= 10;
    margin_high *= 10;
  }
  StripTrailingZeros(&digits);
  d.digits = digits;
  d.decpt = exp10 + 1;
  return d;
}

// ---------------------------------------------------------------------------------------------
// Element access.

bool IsNumpyFloat(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kFloat32 || dtype == DType::kFloat64;
}

double FloatAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat16: return HalfToFloat(t.data<uint16_t>()[i]);
    case DType::kBFloat16: return BFloat16ToFloat(t.data<uint16_t>()[i]);
    case DType::kFloat32: return t.data<float>()[i];
    case DType::kFloat64: return t.data<double>()[i];
    default: return 0;
  }
}

// Shortest round-trip digits for the element's own type; requires a finite value.
Decimal ShortestAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat16: return ShortestOfHalf(t.data<uint16_t>()[i]);
    case DType::kFloat32: return ShortestOfFloat(t.data<float>()[i]);
    default: return ShortestOfDouble(FloatAt(t, i));
  }
}

std::string IntegerAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kInt8: return std::to_string(t.data<int8_t>()[i]);
    case DType::kInt16: return std::to_string(t.data<int16_t>()[i]);
    case DType::kInt32: return std::to_string(t.data<int32_t>()[i]);
    case DType::kInt64: return std::to_string(t.data<int64_t>()[i]);
    case DType::kUInt8: return std::to_string(t.data<uint8_t>()[i]);
    case DType::kUInt16: return std::to_string(t.data<uint16_t>()[i]);
    case DType::kUInt32: return std::to_string(t.data<uint32_t>()[i]);
    case DType::kUInt64: return std::to_string(t.data<uint64_t>()[i]);
    default: return "?";
  }
}

std::string ExponentText(int exp, int min_digits) {
  std::string digits = std::to_string(exp < 0 ? -exp : exp);
  if (static_cast<int>(digits.size()) < min_digits) {
    digits.insert(0, min_digits - digits.size(), '0');
  }
  return absl::StrCat(exp < 0 ? "-" : "+", digits);
}

// Integer and fractional parts of `d` written positionally ("-12", "5").
void PositionalParts(const Decimal& d, std::string* int_part, std::string* frac_part) {
  const int n = static_cast<int>(d.digits.size());
  if (d.decpt <= 0) {
    *int_part = "0";
    *frac_part = std::string(-d.decpt, '0') + d.digits;
  } else if (d.decpt >= n) {
    *int_part = d.digits + std::string(d.decpt - n, '0');
    frac_part->clear();
  } else {
    *int_part = d.digits.substr(0, d.decpt);
    *frac_part = d.digits.substr(d.decpt);
  }
  if (d.negative) int_part->insert(0, "-");
}

// A numpy scalar's str/repr for float16/32/64 (numpy >= 1.14 rules).
std::string NumpyFloatScalar(const Tensor& t, int64_t i) {
  const double v = FloatAt(t, i);
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  const Decimal d = ShortestAt(t, i);
  const double a = std::fabs(v);
  if (a == 0 || (a >= 1e-4 && a < 1e16)) {
    std::string int_part, frac_part;
    PositionalParts(d, &int_part, &frac_part);
    return absl::StrCat(int_part, ".", frac_part.empty() ? "0" : frac_part);
  }
  std::string out = d.negative ? "-" : "";
  out.push_back(d.digits[0]);
  if (d.digits.size() > 1) absl::StrAppend(&out, ".", d.digits.substr(1));
  absl::StrAppend(&out, "e", ExponentText(d.decpt - 1, 2));
  return out;
}

// ml_dtypes' str/repr of a bfloat16: the float through std::ostream (%g).
std::string BFloat16Text(const Tensor& t, int64_t i) {
  double v = FloatAt(t, i);
  if (std::isnan(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string ElementText(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kBool: return t.data<bool>()[i] ? "True" : "False";
    case DType::kString: return PythonBytesRepr(t.string_at(i));
    case DType::kBFloat16: return BFloat16Text(t, i);
    case DType::kFloat16:
    case DType::kFloat32:
    case DType::kFloat64: return NumpyFloatScalar(t, i);
    default: return IntegerAt(t, i);
  }
}

// ---------------------------------------------------------------------------------------------
// numpy's FloatingFormat (floatmode 'maxprec', precision 8, sign '-', suppress False).

class FloatingFormat {
 public:
  FloatingFormat(const Tensor& t, const std::vector<int64_t>& shown) : t_(t) {
    // Choose exponent mode from the nonzero finite values.
    double max_val = 0, min_val = 0;
    int64_t max_i = -1, min_i = -1;
    bool any_nonfinite = false, any_neg_inf = false, any_finite = false;
    for (int64_t i : shown) {
      const double v = FloatAt(t, i);
      if (!std::isfinite(v)) {
        any_nonfinite = true;
        if (std::isinf(v) && v < 0) any_neg_inf = true;
        continue;
      }
      any_finite = true;
      const double a = std::fabs(v);
      if (a == 0) continue;
      if (max_i < 0 || a > max_val) max_val = a, max_i = i;
      if (min_i < 0 || a < min_val) min_val = a, min_i = i;
    }
    if (max_i >= 0) {
      exp_format_ = max_val >= 1e8 || min_val < 0.0001 || RatioAbove1000(max_val, min_val);
    }
    if (!any_finite) {
      pad_left_ = pad_right_ = 0;
    } else if (exp_format_) {
      int max_frac = 0, max_int = 0, max_exp_digits = 2;
      for (int64_t i : shown) {
        if (!std::isfinite(FloatAt(t, i))) continue;
        Parts p = ScientificParts(i);
        max_int = std::max<int>(max_int, p.int_part.size());
        max_frac = std::max<int>(max_frac, p.frac_part.size());
        max_exp_digits =
            std::max<int>(max_exp_digits, std::to_string(p.exp < 0 ? -p.exp : p.exp).size());
      }
      exp_size_ = max_exp_digits;
      precision_ = max_frac;
      pad_left_ = max_int;
      pad_right_ = exp_size_ + 2 + precision_;
    } else {
      int max_frac = 0, max_int = 0;
      for (int64_t i : shown) {
        if (!std::isfinite(FloatAt(t, i))) continue;
        Parts p = PositionalValueParts(i);
        max_int = std::max<int>(max_int, p.int_part.size());
        max_frac = std::max<int>(max_frac, p.frac_part.size());
      }
      pad_left_ = max_int;
      pad_right_ = max_frac;
    }
    if (any_nonfinite) {
      const int offset = pad_right_ + 1;
      const int inf_len = 3 + (any_neg_inf ? 1 : 0);
      pad_left_ = std::max({pad_left_, 3 - offset, inf_len - offset});
    }
  }

  std::string operator()(int64_t i) const {
    const double v = FloatAt(t_, i);
    if (!std::isfinite(v)) {
      std::string ret = std::isnan(v) ? "nan" : (v < 0 ? "-inf" : "inf");
      const int width = pad_left_ + pad_right_ + 1;
      return std::string(std::max<int>(0, width - ret.size()), ' ') + ret;
    }
    if (exp_format_) {
      // numpy prints with min_digits=precision: a value with fewer shortest digits gets more
      // digits of its exact value, correctly rounded, rather than zeros.
      Parts p = ScientificParts(i);
      if (static_cast<int>(p.frac_part.size()) < precision_) {
        const Decimal d = RoundedScientific(FloatAt(t_, i), precision_);
        p.int_part = absl::StrCat(d.negative ? "-" : "", d.digits.substr(0, 1));
        p.frac_part = d.digits.substr(1);
        p.exp = d.digits == "0" ? 0 : d.decpt - 1;
      }
      std::string out(std::max<int>(0, pad_left_ - p.int_part.size()), ' ');
      absl::StrAppend(&out, p.int_part, ".", p.frac_part,
                      std::string(std::max<int>(0, precision_ - p.frac_part.size()), '0'), "e",
                      ExponentText(p.exp, exp_size_));
      return out;
    }
    Parts p = PositionalValueParts(i);
    if (p.frac_part.empty() && std::fabs(v) >= 10) {
      // numpy prints with min_digits=0, which gives every integer digit exactly: float16 8928
      // prints as "8928." although its shortest digits are 893e1.
      char buf[400];
      auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed, 0);
      p.int_part.assign(buf, r.ptr);
    }
    std::string out(std::max<int>(0, pad_left_ - p.int_part.size()), ' ');
    absl::StrAppend(&out, p.int_part, ".", p.frac_part,
                    std::string(std::max<int>(0, pad_right_ - p.frac_part.size()), ' '));
    return out;
  }

 private:
  struct Parts {
    std::string int_part;
    std::string frac_part;
    int exp = 0;
  };

  // max/min > 1000, with the division done in the array's own precision as numpy does.
  bool RatioAbove1000(double max_val, double min_val) const {
    switch (t_.dtype()) {
      case DType::kFloat16: {
        const float q = static_cast<float>(max_val) / static_cast<float>(min_val);
        return HalfToFloat(FloatToHalf(q)) > 1000.0f;
      }
      case DType::kFloat32:
        return static_cast<float>(max_val) / static_cast<float>(min_val) > 1000.0f;
      default: return max_val / min_val > 1000.0;
    }
  }

  // dragon4_positional(x, precision=8, unique=True, fractional=True, trim='.').
  Parts PositionalValueParts(int64_t i) const {
    Parts p;
    const Decimal d = ShortestAt(t_, i);
    const int frac_digits = std::max<int>(0, static_cast<int>(d.digits.size()) - d.decpt);
    if (frac_digits <= kPrecision) {
      PositionalParts(d, &p.int_part, &p.frac_part);
      return p;
    }
    char buf[400];
    auto r = std::to_chars(buf, buf + sizeof(buf), FloatAt(t_, i), std::chars_format::fixed,
                           kPrecision);
    std::string s(buf, r.ptr);
    const size_t dot = s.find('.');
    p.int_part = s.substr(0, dot);
    p.frac_part = dot == std::string::npos ? "" : s.substr(dot + 1);
    while (!p.frac_part.empty() && p.frac_part.back() == '0') p.frac_part.pop_back();
    return p;
  }

  // dragon4_scientific(x, precision=8, unique=True, trim='.').
  Parts ScientificParts(int64_t i) const {
    Parts p;
    Decimal d = ShortestAt(t_, i);
    if (static_cast<int>(d.digits.size()) - 1 > kPrecision) {
      d = RoundedScientific(FloatAt(t_, i), kPrecision);
    }
    p.int_part = absl::StrCat(d.negative ? "-" : "", d.digits.substr(0, 1));
    p.frac_part = d.digits.substr(1);
    p.exp = d.digits == "0" ? 0 : d.decpt - 1;
    return p;
  }

  const Tensor& t_;
  bool exp_format_ = false;
  int pad_left_ = 0;
  int pad_right_ = 0;
  int precision_ = 0;
  int exp_size_ = 2;
};

// ---------------------------------------------------------------------------------------------
// numpy's _formatArray.

using ElementFormatter = std::function<std::string(int64_t)>;

std::string RStrip(const std::string& s) {
  size_t end = s.size();
  while (end > 0 && (s[end - 1] == ' ' || s[end - 1] == '\n')) --end;
  return s.substr(0, end);
}

class ArrayPrinter {
 public:
  ArrayPrinter(const Tensor& t, std::string separator, bool summarize)
      : dims_(t.shape().dims()), separator_(std::move(separator)), summarize_(summarize) {
    strides_.assign(dims_.size(), 1);
    for (int i = static_cast<int>(dims_.size()) - 2; i >= 0; --i) {
      strides_[i] = strides_[i + 1] * dims_[i + 1];
    }
  }

  // The flat indices of the elements shown (all, or the edges of every long axis).
  std::vector<int64_t> ShownElements() const {
    std::vector<int64_t> out;
    CollectShown(0, 0, &out);
    return out;
  }

  std::string Print(const ElementFormatter& format, int line_width, int prefix_len) const {
    return Recurse(format, 0, 0, std::string(1 + prefix_len, ' '), line_width);
  }

 private:
  bool ShowSummary(int axis) const { return summarize_ && 2 * kEdgeItems < dims_[axis]; }

  void CollectShown(int axis, int64_t offset, std::vector<int64_t>* out) const {
    if (axis == static_cast<int>(dims_.size())) {
      out->push_back(offset);
      return;
    }
    const int64_t n = dims_[axis];
    for (int64_t i = 0; i < n; ++i) {
      if (ShowSummary(axis) && i >= kEdgeItems && i < n - kEdgeItems) continue;
      CollectShown(axis + 1, offset + i * strides_[axis], out);
    }
  }

  static void ExtendLine(std::string* s, std::string* line, const std::string& word,
                         int line_width, const std::string& next_line_prefix) {
    bool needs_wrap = static_cast<int>(line->size() + word.size()) > line_width;
    if (line->size() <= next_line_prefix.size()) needs_wrap = false;
    if (needs_wrap) {
      absl::StrAppend(s, RStrip(*line), "\n");
      *line = next_line_prefix;
    }
    line->append(word);
  }

  std::string Recurse(const ElementFormatter& format, int axis, int64_t offset,
                      const std::string& hanging_indent, int curr_width) const {
    const int axes_left = static_cast<int>(dims_.size()) - axis;
    if (axes_left == 0) return format(offset);
    const std::string next_hanging_indent = hanging_indent + " ";
    const int next_width = curr_width - 1;
    const int64_t a_len = dims_[axis];
    const bool show_summary = ShowSummary(axis);
    const int64_t leading = show_summary ? kEdgeItems : 0;
    const int64_t trailing = show_summary ? kEdgeItems : a_len;
    const int64_t stride = strides_[axis];
    auto child = [&](int64_t i) {
      return Recurse(format, axis + 1, offset + i * stride, next_hanging_indent, next_width);
    };

    std::string s;
    if (axes_left == 1) {
      const int elem_width =
          curr_width - std::max<int>(static_cast<int>(RStrip(separator_).size()), 1);
      std::string line = hanging_indent;
      for (int64_t i = 0; i < leading; ++i) {
        ExtendLine(&s, &line, child(i), elem_width, hanging_indent);
        line += separator_;
      }
      if (show_summary) {
        ExtendLine(&s, &line, "...", elem_width, hanging_indent);
        line += separator_;
      }
      for (int64_t i = trailing; i > 1; --i) {
        ExtendLine(&s, &line, child(a_len - i), elem_width, hanging_indent);
        line += separator_;
      }
      ExtendLine(&s, &line, child(a_len - 1), elem_width, hanging_indent);
      s += line;
    } else {
      const std::string line_sep = RStrip(separator_) + std::string(axes_left - 1, '\n');
      for (int64_t i = 0; i < leading; ++i) {
        absl::StrAppend(&s, hanging_indent, child(i), line_sep);
      }
      if (show_summary) absl::StrAppend(&s, hanging_indent, "...", line_sep);
      for (int64_t i = trailing; i > 1; --i) {
        absl::StrAppend(&s, hanging_indent, child(a_len - i), line_sep);
      }
      absl::StrAppend(&s, hanging_indent, child(a_len - 1));
    }
    return absl::StrCat("[", s.substr(hanging_indent.size()), "]");
  }

  std::vector<int64_t> dims_;
  std::vector<int64_t> strides_;
  std::string separator_;
  bool summarize_;
};

// np.array2string(a, separator=..., prefix=...) for an array with at least one dimension;
// `line_width` is already reduced by the suffix's length.
std::string Array2String(const Tensor& t, const std::string& separator, int prefix_len,
                         int line_width) {
  if (t.num_elements() == 0) return "[]";
  ArrayPrinter printer(t, separator, t.num_elements() > kThreshold);
  const std::vector<int64_t> shown = printer.ShownElements();
  ElementFormatter format;
  if (IsNumpyFloat(t.dtype())) {
    auto ff = std::make_shared<FloatingFormat>(t, shown);
    format = [ff](int64_t i) { return (*ff)(i); };
  } else if (t.dtype() == DType::kBool) {
    const bool* data = t.data<bool>();
    format = [data](int64_t i) { return std::string(data[i] ? " True" : "False"); };
  } else if (IsInteger(t.dtype())) {
    size_t width = 0;
    for (int64_t i : shown) width = std::max(width, IntegerAt(t, i).size());
    format = [&t, width](int64_t i) {
      std::string s = IntegerAt(t, i);
      return std::string(width - std::min(width, s.size()), ' ') + s;
    };
  } else {
    format = [&t](int64_t i) { return ElementText(t, i); };
  }
  return printer.Print(format, line_width, prefix_len);
}

bool IsHostReadable(const Tensor& t) {
  if (t.dtype() == DType::kString || t.num_elements() == 0) return true;
  return t.buffer() != nullptr && t.buffer()->space() != MemorySpace::kDevice;
}

// A device tensor copied to the host (as TF prints a GPU tensor), or nullopt when it cannot be
// (device memory this build cannot read, a failed copy).
std::optional<Tensor> HostCopy(const Tensor& t) {
  absl::StatusOr<Tensor> host = CopyTensorToHost(t);
  if (!host.ok() || !IsHostReadable(*host)) return std::nullopt;
  return *std::move(host);
}

// numpy's dtype name, as repr(ndarray) shows it.
std::string NumpyDTypeName(DType dtype) {
  if (dtype == DType::kString) return "object";
  return std::string(DTypeName(dtype));
}

// numpy leaves the dtype out of repr for its default types.
bool DTypeIsImplied(DType dtype) {
  return dtype == DType::kFloat64 || dtype == DType::kInt64 || dtype == DType::kBool;
}

// TF's numpy_text: a multi-line text starts on a new line.
std::string NumpyText(const Tensor& t, bool repr) {
  // FormatNumpy/FormatNumpyRepr copy device tensors to the host, or say "<unprintable>".
  std::string text = repr ? FormatNumpyRepr(t) : FormatNumpy(t);
  if (text.find('\n') != std::string::npos) text.insert(0, "\n");
  return text;
}

// A numpy array as RaggedTensor.numpy() builds it: numeric (`dense`) or dtype=object with
// arrays as its items (`objects`, row-major over `shape`).
struct NumpyArray {
  std::vector<int64_t> shape;
  Tensor dense;
  std::vector<NumpyArray> objects;
  bool object = false;

  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // Rows [begin, end) along dimension 0.
  NumpyArray Rows(int64_t begin, int64_t end) const {
    NumpyArray out = *this;
    out.shape[0] = end - begin;
    if (!object) {
      out.dense = dense.Slice(begin, end);
      return out;
    }
    const int64_t row = shape[0] == 0 ? 0 : size() / shape[0];
    out.objects.assign(objects.begin() + begin * row, objects.begin() + end * row);
    return out;
  }
};

// RaggedTensor.numpy() of rows [begin, end) of ragged level `level` of `node`: rows of equal
// length stack into one more dimension, rows of different lengths make a 1-d object array.
NumpyArray RaggedNumpy(const Element& node, size_t level, int64_t begin, int64_t end) {
  const Tensor& flat = node.children()[0].leaf();
  if (level + 1 >= node.children().size()) {
    NumpyArray dense;
    dense.dense = flat.Slice(begin, end);
    dense.shape = dense.dense.shape().dims();
    return dense;
  }
  const int64_t* splits = node.children()[level + 1].leaf().data<int64_t>();
  NumpyArray values = RaggedNumpy(node, level + 1, splits[begin], splits[end]);
  const int64_t base = splits[begin];
  bool uniform = true;
  for (int64_t r = begin; r < end; ++r) {
    uniform = uniform && splits[r + 1] - splits[r] == splits[begin + 1] - splits[begin];
  }
  if (end == begin || uniform) {  // np.array(rows) stacks them (np.zeros((0, 0)) when none)
    const int64_t length = end == begin ? 0 : splits[begin + 1] - splits[begin];
    std::vector<int64_t> shape = {end - begin, length};
    shape.insert(shape.end(), values.shape.begin() + 1, values.shape.end());
    if (!values.object) {
      values.dense = *values.dense.Reshape(Shape(shape));
    }
    values.shape = std::move(shape);
    return values;
  }
  NumpyArray rows;
  rows.object = true;
  rows.shape = {end - begin};
  for (int64_t r = begin; r < end; ++r) {
    rows.objects.push_back(values.Rows(splits[r] - base, splits[r + 1] - base));
  }
  return rows;
}

std::string NumpyItemsText(const NumpyArray& a, size_t dim, int64_t offset, int64_t stride,
                           const std::string& hanging, int64_t width);

// repr(np.zeros(shape).tolist()) for a shape with a 0 in it: "[]", "[[], []]".
std::string EmptyListText(const std::vector<int64_t>& shape, size_t dim) {
  if (shape[dim] == 0) return "[]";
  std::vector<std::string> items(shape[dim], EmptyListText(shape, dim + 1));
  return "[" + absl::StrJoin(items, ", ") + "]";
}

// numpy's line width for array2string (np.get_printoptions()['linewidth']).
constexpr int64_t kNumpyLineWidth = 75;

// RaggedTensor's _formatter: np.array2string(a, separator=', ') with str() of each scalar and
// the formatter again for object items; repr(a.tolist()) for an empty array.
std::string FormatterText(const NumpyArray& a) {
  if (a.size() == 0) return EmptyListText(a.shape, 0);
  // array2string's next_line_prefix is " " (past the "["), its width the line width.
  return NumpyItemsText(a, 0, 0, a.size(), " ", kNumpyLineWidth);
}

// numpy 1.26's _extendLine: `word` onto `line`, starting a new line (at `prefix`) when it
// would pass `width`, unless that would not help.
void ExtendLine(std::string* s, std::string* line, const std::string& word, int64_t width,
                const std::string& prefix) {
  const bool wrap = static_cast<int64_t>(line->size() + word.size()) > width &&
                    line->size() > prefix.size();
  if (wrap) {
    *s += RStrip(*line) + "\n";
    *line = prefix;
  }
  *line += word;
}

// numpy 1.26's _extendLine_pretty: a multi-line `word` continues at the column it started in
// (or starts a new line at `prefix` when its widest line would pass `width`), and its last line
// is padded to its widest.
void ExtendLinePretty(std::string* s, std::string* line, const std::string& word, int64_t width,
                      const std::string& prefix) {
  const std::vector<std::string> words = absl::StrSplit(word, '\n');
  if (words.size() == 1) return ExtendLine(s, line, word, width, prefix);
  size_t widest = 0;
  for (const std::string& w : words) widest = std::max(widest, w.size());
  std::string indent;
  if (static_cast<int64_t>(line->size() + widest) > width && line->size() > prefix.size()) {
    *s += RStrip(*line) + "\n";
    *line = prefix + words[0];
    indent = prefix;
  } else {
    indent = std::string(line->size(), ' ');
    *line += words[0];
  }
  for (size_t i = 1; i < words.size(); ++i) {
    *s += RStrip(*line) + "\n";
    *line = indent + words[i];
  }
  *line += std::string(widest - words.back().size(), ' ');
}

// numpy 1.26's _formatArray (no summarization) for the sub-array at `offset` (flat index)
// spanning `stride` items from dimension `dim`: `hanging` is the indent of its continuation
// lines, `width` what is left of the line for it.
std::string NumpyItemsText(const NumpyArray& a, size_t dim, int64_t offset, int64_t stride,
                           const std::string& hanging, int64_t width) {
  const int64_t n = a.shape[dim];
  const int64_t inner = stride / n;
  const size_t axes_left = a.shape.size() - dim;
  const std::string next_hanging = hanging + " ";
  auto item = [&](int64_t i) -> std::string {
    const int64_t at = offset + i * inner;
    if (axes_left > 1) return NumpyItemsText(a, dim + 1, at, inner, next_hanging, width - 1);
    if (a.object) return FormatterText(a.objects[at]);
    return FormatNumpy(a.dense.Reshape(Shape({a.size()}))->Index(at));
  };
  std::string s;
  if (axes_left == 1) {
    const int64_t elem_width = width - 1;  // max(len(','), len(']'))
    std::string line = hanging;
    for (int64_t i = 0; i < n; ++i) {
      ExtendLinePretty(&s, &line, item(i), elem_width, hanging);
      if (i + 1 < n) line += ", ";
    }
    s += line;
  } else {
    const std::string line_sep = "," + std::string(axes_left - 1, '\n');
    for (int64_t i = 0; i < n; ++i) {
      s += hanging + item(i);
      if (i + 1 < n) s += line_sep;
    }
  }
  return "[" + s.substr(hanging.size()) + "]";
}

std::string FormatNest(const Element& e, bool repr) {
  switch (e.kind()) {
    case NestKind::kLeaf: return repr ? FormatTensorRepr(e.leaf()) : FormatTensor(e.leaf());
    case NestKind::kSparse:
    case NestKind::kRagged:
      if (e.kind() == NestKind::kRagged && e.children().size() == 1) {
        return FormatNest(e.children()[0], repr);  // ragged_rank 0: a tensor, as TF prints it
      }
      return FormatComposite(e);
    case NestKind::kTuple:
    case NestKind::kList: {
      const bool tuple = e.kind() == NestKind::kTuple;
      std::string out = tuple ? "(" : "[";
      for (size_t i = 0; i < e.children().size(); ++i) {
        if (i > 0) out += ", ";
        out += FormatNest(e.children()[i], true);
      }
      if (tuple && e.children().size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case NestKind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < e.children().size(); ++i) {
        if (i > 0) out += ", ";
        absl::StrAppend(&out, PythonStrRepr(e.keys()[i]), ": ",
                        FormatNest(e.children()[i], true));
      }
      return out + "}";
    }
  }
  return "";
}

std::string PythonQuoted(const std::string& s, bool escape_high) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f || (escape_high && c >= 0x80)) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace

std::string PythonStrRepr(const std::string& s) { return PythonQuoted(s, false); }

std::string PythonBytesRepr(const std::string& s) { return "b" + PythonQuoted(s, true); }

std::string FormatNumpy(const Tensor& t) {
  if (!t.valid()) return "<invalid Tensor>";
  if (!IsHostReadable(t)) {
    std::optional<Tensor> host = HostCopy(t);
    return host.has_value() ? FormatNumpy(*host) : "<unprintable>";
  }
  if (t.shape().rank() == 0) return ElementText(t, 0);
  return Array2String(t, " ", 0, kLineWidth);
}

std::string FormatNumpyRepr(const Tensor& t) {
  if (!t.valid()) return "<invalid Tensor>";
  if (!IsHostReadable(t)) {
    std::optional<Tensor> host = HostCopy(t);
    return host.has_value() ? FormatNumpyRepr(*host) : "<unprintable>";
  }
  if (t.shape().rank() == 0) return ElementText(t, 0);
  const bool skip_dtype = DTypeIsImplied(t.dtype()) && t.num_elements() > 0;
  const std::string prefix = "array(";
  const std::string suffix = skip_dtype ? ")" : ",";
  std::string list;
  if (t.num_elements() > 0 || t.shape() == Shape({0})) {
    list = Array2String(t, ", ", static_cast<int>(prefix.size()),
                        kLineWidth - static_cast<int>(suffix.size()));
  } else {
    list = "[], shape=" + t.shape().ToString();
  }
  std::string arr = prefix + list + suffix;
  if (skip_dtype) return arr;
  const std::string dtype = "dtype=" + NumpyDTypeName(t.dtype()) + ")";
  const size_t newline = arr.rfind('\n');
  const size_t last_line_len = newline == std::string::npos ? arr.size() : arr.size() - newline - 1;
  const bool wrap = static_cast<int>(last_line_len + dtype.size() + 1) > kLineWidth;
  return arr + (wrap ? "\n" + std::string(prefix.size(), ' ') : " ") + dtype;
}

std::string FormatTensor(const Tensor& t) {
  if (!t.valid()) return "<invalid Tensor>";
  return absl::StrCat("tf.Tensor(", NumpyText(t, false), ", shape=", t.shape().ToString(),
                      ", dtype=", DTypeName(t.dtype()), ")");
}

std::string FormatTensorRepr(const Tensor& t) {
  if (!t.valid()) return "<invalid Tensor>";
  return absl::StrCat("<tf.Tensor: shape=", t.shape().ToString(), ", dtype=",
                      DTypeName(t.dtype()), ", numpy=", NumpyText(t, true), ">");
}

std::string FormatComposite(const Element& node) {
  if (node.kind() == NestKind::kSparse) {
    return absl::StrCat("SparseTensor(indices=", FormatTensor(node.children()[0].leaf()),
                        ", values=", FormatTensor(node.children()[1].leaf()),
                        ", dense_shape=", FormatTensor(node.children()[2].leaf()), ")");
  }
  for (const Element& c : node.children()) {
    if (!IsHostReadable(c.leaf())) return "<tf.RaggedTensor <unprintable>>";
  }
  const Tensor& splits = node.children()[1].leaf();
  // TF: f"<tf.RaggedTensor {_formatter(self.numpy())}>", with no indent for the prefix.
  return absl::StrCat("<tf.RaggedTensor ",
                      FormatterText(RaggedNumpy(node, 0, 0, splits.shape().dim(0) - 1)), ">");
}

std::string FormatElement(const Element& e) { return FormatNest(e, false); }

std::string FormatElementRepr(const Element& e) { return FormatNest(e, true); }

void PrintTo(const Tensor& t, std::ostream* os) { *os << FormatTensor(t); }

}  // namespace sluice
