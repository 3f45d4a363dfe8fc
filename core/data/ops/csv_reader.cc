#include "core/data/ops/csv_reader.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/data/op_iterator.h"
#include "core/io/input_stream.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

bool SupportedDType(DType d) {
  return d == DType::kInt32 || d == DType::kInt64 || d == DType::kFloat32 ||
         d == DType::kFloat64 || d == DType::kString;
}

// One column: its dtype and its default (nullopt: required).
struct Column {
  DType dtype;
  std::optional<Tensor> default_value;
};

absl::StatusOr<std::vector<Column>> Columns(const proto::CsvSource& s) {
  if (s.record_defaults_size() == 0) return Invalid("record_defaults must not be empty");
  std::vector<Column> out;
  for (int i = 0; i < s.record_defaults_size(); ++i) {
    absl::StatusOr<Tensor> t = TensorFromProto(s.record_defaults(i));
    if (!t.ok()) {
      return Invalid(absl::StrCat("record_defaults[", i, "]: ", t.status().message()));
    }
    if (!SupportedDType(t->dtype())) {
      return Invalid(absl::StrCat("record_defaults[", i, "] has dtype ", DTypeName(t->dtype()),
                                  "; CSV columns can be int32, int64, float32, float64 or "
                                  "string"));
    }
    if (t->num_elements() > 1) {
      return Invalid(absl::StrCat("record_defaults[", i, "] must have at most one element, has ",
                                  t->num_elements()));
    }
    Column c{t->dtype(), std::nullopt};
    if (t->num_elements() == 1) {
      absl::StatusOr<Tensor> scalar = t->Reshape(Shape());
      if (!scalar.ok()) return scalar.status();
      c.default_value = *std::move(scalar);
    }
    out.push_back(std::move(c));
  }
  if (s.select_cols_size() > 0) {
    if (s.select_cols_size() != s.record_defaults_size()) {
      return Invalid(absl::StrCat("select_cols has ", s.select_cols_size(),
                                  " columns but record_defaults has ",
                                  s.record_defaults_size(), "; they must match"));
    }
    for (int i = 0; i < s.select_cols_size(); ++i) {
      if (s.select_cols(i) < 0 || (i > 0 && s.select_cols(i) <= s.select_cols(i - 1))) {
        return Invalid("select_cols must be non-negative and strictly increasing");
      }
    }
  }
  if (s.field_delim().size() > 1) {
    return Invalid(absl::StrCat("field_delim must be one character, got '", s.field_delim(),
                                "'"));
  }
  return out;
}

// Buffered bytes of one file with line and column counting (1-based).
class CsvInput {
 public:
  static constexpr size_t kBufferBytes = 1 << 20;

  ~CsvInput() { Close(); }

  absl::Status Open(const std::string& name) {
    Close();
    ASSIGN_OR_RETURN(stream_, OpenFileStream(name));
    name_ = name;
    if (buffer_ == nullptr) buffer_ = std::make_unique<char[]>(kBufferBytes);
    pos_ = limit_ = 0;
    eof_ = false;
    line_ = 1;
    column_ = 1;
    return absl::OkStatus();
  }

  void Close() { stream_.reset(); }
  bool is_open() const { return stream_ != nullptr; }
  const std::string& name() const { return name_; }
  int64_t line() const { return line_; }
  int64_t column() const { return column_; }

  // The next byte without consuming it, or -1 at the end of the file.
  absl::StatusOr<int> Peek() {
    if (pos_ >= limit_ && !eof_) RETURN_IF_ERROR(Fill());
    if (pos_ >= limit_) return -1;
    return static_cast<unsigned char>(buffer_[pos_]);
  }
  // Consumes one byte (requires Peek() != -1).
  void Advance() {
    const char c = buffer_[pos_++];
    if (c == '\n') {
      ++line_;
      column_ = 1;
    } else if (c == '\r') {
      // "\r\n" counts one line, at its '\n'.
      if (pos_ < limit_ ? buffer_[pos_] != '\n' : true) {
        ++line_;
        column_ = 1;
      } else {
        ++column_;
      }
    } else {
      ++column_;
    }
  }

 private:
  absl::Status Fill() {
    ASSIGN_OR_RETURN(const size_t n, stream_->Read(buffer_.get(), kBufferBytes));
    pos_ = 0;
    limit_ = n;
    if (n == 0) eof_ = true;
    return absl::OkStatus();
  }

  std::unique_ptr<InputStream> stream_;
  std::string name_;
  std::unique_ptr<char[]> buffer_;
  size_t pos_ = 0;
  size_t limit_ = 0;
  bool eof_ = false;
  int64_t line_ = 1;
  int64_t column_ = 1;
};

struct Field {
  std::string text;
  int64_t line;
  int64_t column;
};

std::optional<int64_t> ParseInt(absl::string_view s, int64_t lo, int64_t hi) {
  s = absl::StripAsciiWhitespace(s);
  bool negative = false;
  if (!s.empty() && s[0] == '-') {
    negative = true;
    s.remove_prefix(1);
  }
  if (s.empty()) return std::nullopt;
  __int128 v = 0;
  for (char c : s) {
    if (!absl::ascii_isdigit(c)) return std::nullopt;
    v = v * 10 + (c - '0');
    if (v > static_cast<__int128>(hi) + 1) return std::nullopt;
  }
  if (negative) v = -v;
  if (v < lo || v > hi) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<double> ParseFloat(absl::string_view s) {
  std::string t(absl::StripAsciiWhitespace(s));
  if (t.empty() || t.find_first_of("xX") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

class CsvIterator : public OpIterator {
 public:
  CsvIterator(std::string label, proto::CsvSource source, std::vector<Column> columns)
      : OpIterator(std::move(label)),
        source_(std::move(source)),
        columns_(std::move(columns)),
        delim_(source_.field_delim().empty() ? ',' : source_.field_delim()[0]),
        quotes_(!source_.has_use_quote_delim() || source_.use_quote_delim()) {
    for (int64_t c : source_.select_cols()) selected_.push_back(c);
  }

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (true) {
      if (!input_.is_open()) {
        if (next_file_ >= source_.filenames_size()) {
          *end_of_sequence = true;
          return absl::OkStatus();
        }
        absl::Status s = input_.Open(source_.filenames(next_file_++));
        if (!s.ok()) return OpError(s.code(), s.message());
        if (source_.header()) RETURN_IF_ERROR(SkipHeader());
      }
      ASSIGN_OR_RETURN(int c, Checked(input_.Peek()));
      if (c < 0) {
        input_.Close();
        continue;
      }
      return ReadRecord(out);
    }
  }

 private:
  absl::StatusOr<int> Checked(absl::StatusOr<int> c) {
    if (!c.ok()) return OpError(c.status().code(), c.status().message());
    return c;
  }

  absl::Status RecordError(int64_t line, int64_t column, absl::string_view message) {
    return MarkElementError(InvalidArgument(
        absl::StrCat(input_.name(), ":", line, ":", column, ": ", message)));
  }

  absl::Status SkipHeader() {
    ASSIGN_OR_RETURN(int c, Checked(input_.Peek()));
    if (c < 0) {
      return InvalidArgument(absl::StrCat("Can't read header of file ", input_.name(),
                                          ": the file is empty"));
    }
    while (c >= 0) {
      input_.Advance();
      if (c == '\n') break;
      if (c == '\r') {
        ASSIGN_OR_RETURN(c, Checked(input_.Peek()));
        if (c == '\n') input_.Advance();
        break;
      }
      ASSIGN_OR_RETURN(c, Checked(input_.Peek()));
    }
    return absl::OkStatus();
  }

  // Reads one field into *f. Sets *last when the record ends after it.
  absl::Status ReadField(Field* f, bool* last) {
    f->text.clear();
    f->line = input_.line();
    f->column = input_.column();
    ASSIGN_OR_RETURN(int c, Checked(input_.Peek()));
    if (quotes_ && c == '"') {
      input_.Advance();
      while (true) {
        ASSIGN_OR_RETURN(c, Checked(input_.Peek()));
        if (c < 0) {
          input_.Close();  // nothing more can be read from this file
          return RecordError(f->line, f->column,
                             "Reached end of file without closing quoted field in record");
        }
        input_.Advance();
        if (c == '"') {
          ASSIGN_OR_RETURN(c, Checked(input_.Peek()));
          if (c == '"') {
            input_.Advance();
            f->text.push_back('"');
            continue;
          }
          break;
        }
        f->text.push_back(static_cast<char>(c));
      }
      ASSIGN_OR_RETURN(c, Checked(input_.Peek()));
      if (c >= 0 && c != delim_ && c != '\n' && c != '\r') {
        const int64_t line = input_.line(), column = input_.column();
        RETURN_IF_ERROR(SkipRecord());
        return RecordError(line, column,
                           "Quote inside a string has to be escaped by another quote");
      }
    } else {
      while (c >= 0 && c != delim_ && c != '\n' && c != '\r') {
        if (quotes_ && c == '"') {
          const int64_t line = input_.line(), column = input_.column();
          RETURN_IF_ERROR(SkipRecord());
          return RecordError(line, column, "Unquoted fields cannot have quotes inside");
        }
        f->text.push_back(static_cast<char>(c));
        input_.Advance();
        ASSIGN_OR_RETURN(c, Checked(input_.Peek()));
      }
    }
    return EndField(c, last);
  }

  // After a field, at byte `c`: consumes the delimiter or the line end.
  absl::Status EndField(int c, bool* last) {
    if (c == delim_) {
      input_.Advance();
      *last = false;
      return absl::OkStatus();
    }
    *last = true;
    if (c == '\r') {
      input_.Advance();
      ASSIGN_OR_RETURN(c, Checked(input_.Peek()));
      if (c == '\n') input_.Advance();
    } else if (c == '\n') {
      input_.Advance();
    }
    return absl::OkStatus();
  }

  // Skips the rest of the current record after an error, honouring quotes, so that reading can
  // go on at the next record.
  absl::Status SkipRecord() {
    bool in_quotes = false;
    while (true) {
      ASSIGN_OR_RETURN(int c, Checked(input_.Peek()));
      if (c < 0) return absl::OkStatus();
      if (!in_quotes && (c == '\n' || c == '\r')) {
        bool last;
        return EndField(c, &last);
      }
      if (quotes_ && c == '"') in_quotes = !in_quotes;
      input_.Advance();
    }
  }

  absl::Status ReadRecord(Element* out) {
    const int64_t record_line = input_.line();
    const int64_t wanted = selected_.empty() ? static_cast<int64_t>(columns_.size())
                                             : selected_.back() + 1;
    std::vector<Field> fields;
    bool last = false;
    while (!last) {
      Field f;
      RETURN_IF_ERROR(ReadField(&f, &last));
      if (static_cast<int64_t>(fields.size()) >= wanted) {
        if (selected_.empty()) {
          RETURN_IF_ERROR(last ? absl::OkStatus() : SkipRecord());
          return RecordError(record_line, f.column,
                             absl::StrCat("Expect ", columns_.size(),
                                          " fields but have more in record"));
        }
        if (!last) RETURN_IF_ERROR(SkipRecord());
        break;
      }
      fields.push_back(std::move(f));
    }
    if (static_cast<int64_t>(fields.size()) < wanted) {
      return RecordError(record_line, 1,
                         absl::StrCat("Expect ", selected_.empty() ? columns_.size() : wanted,
                                      " fields but have ", fields.size(), " in record"));
    }
    std::vector<Element> values;
    for (size_t i = 0; i < columns_.size(); ++i) {
      const Field& f = fields[selected_.empty() ? i : static_cast<size_t>(selected_[i])];
      ASSIGN_OR_RETURN(Tensor t, Convert(i, f));
      values.push_back(Element(std::move(t)));
    }
    *out = Element::Tuple(std::move(values));
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> Convert(size_t i, const Field& f) {
    const Column& col = columns_[i];
    if (f.text.empty() || (!source_.na_value().empty() && f.text == source_.na_value())) {
      if (!col.default_value.has_value()) {
        return RecordError(f.line, f.column,
                           absl::StrCat("Field ", i, " is required but missing in record!"));
      }
      return *col.default_value;
    }
    auto bad = [&]() {
      return RecordError(f.line, f.column,
                         absl::StrCat("Field ", i, " in record is not a valid ",
                                      DTypeName(col.dtype), ": ", f.text));
    };
    switch (col.dtype) {
      case DType::kInt32: {
        std::optional<int64_t> v = ParseInt(f.text, INT32_MIN, INT32_MAX);
        if (!v.has_value()) return bad();
        return Tensor::Scalar<int32_t>(static_cast<int32_t>(*v));
      }
      case DType::kInt64: {
        std::optional<int64_t> v = ParseInt(f.text, INT64_MIN, INT64_MAX);
        if (!v.has_value()) return bad();
        return Tensor::Scalar<int64_t>(*v);
      }
      case DType::kFloat32: {
        std::optional<double> v = ParseFloat(f.text);
        if (!v.has_value()) return bad();
        return Tensor::Scalar<float>(static_cast<float>(*v));
      }
      case DType::kFloat64: {
        std::optional<double> v = ParseFloat(f.text);
        if (!v.has_value()) return bad();
        return Tensor::Scalar<double>(*v);
      }
      default:
        return Tensor::StringScalar(f.text);
    }
  }

  const proto::CsvSource source_;
  const std::vector<Column> columns_;
  const char delim_;
  const bool quotes_;
  std::vector<int64_t> selected_;
  int next_file_ = 0;
  CsvInput input_;
};

}  // namespace

absl::StatusOr<ElementSpec> CsvSourceSpec(const proto::CsvSource& source) {
  ASSIGN_OR_RETURN(std::vector<Column> columns, Columns(source));
  std::vector<ElementSpec> specs;
  for (const Column& c : columns) specs.push_back(ElementSpec(TensorSpec{c.dtype, Shape()}));
  return ElementSpec::Tuple(std::move(specs));
}

std::unique_ptr<Iterator> NewCsvIterator(std::string label, proto::CsvSource source) {
  absl::StatusOr<std::vector<Column>> columns = Columns(source);
  return std::make_unique<CsvIterator>(std::move(label), std::move(source),
                                       columns.ok() ? *std::move(columns)
                                                    : std::vector<Column>());
}

}  // namespace sluice
