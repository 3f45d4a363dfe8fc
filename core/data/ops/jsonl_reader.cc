#include "core/data/ops/jsonl_reader.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/data/op_iterator.h"
#include "core/io/input_stream.h"
#include "core/tensor/host_memory.h"
#include "core/data/ops/jsonl_line_scanner.h"
#include "simdjson.h"

namespace sluice {
namespace {

constexpr size_t kBlockBytes = 1 << 20;
constexpr size_t kMaxDepth = 64;  // deeper nesting is an element error, not a deep recursion

bool SupportedDType(DType d) {
  return d == DType::kString || d == DType::kBool || d == DType::kInt32 || d == DType::kInt64 ||
         d == DType::kFloat32 || d == DType::kFloat64;
}

const char* JsonTypeName(simdjson::dom::element_type t) {
  switch (t) {
    case simdjson::dom::element_type::ARRAY: return "an array";
    case simdjson::dom::element_type::OBJECT: return "an object";
    case simdjson::dom::element_type::INT64:
    case simdjson::dom::element_type::UINT64: return "an integer";
    case simdjson::dom::element_type::DOUBLE: return "a number with a fraction or exponent";
    case simdjson::dom::element_type::STRING: return "a string";
    case simdjson::dom::element_type::BOOL: return "a boolean";
    case simdjson::dom::element_type::NULL_VALUE: return "null";
  }
  return "an unknown JSON value";
}

// Writes one JSON value as item `i` of `out` (dtype `d`), or says why it cannot.
absl::Status PutValue(simdjson::dom::element v, DType d, Tensor* out, int64_t i) {
  using simdjson::dom::element_type;
  const element_type t = v.type();
  auto wrong = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", DTypeName(d), ", got ", JsonTypeName(t)));
  };
  switch (d) {
    case DType::kString:
      if (t != element_type::STRING) return wrong();
      *out->mutable_string(i) = std::string(v.get_string().value_unsafe());
      return absl::OkStatus();
    case DType::kBool:
      if (t != element_type::BOOL) return wrong();
      out->mutable_data<bool>()[i] = v.get_bool().value_unsafe();
      return absl::OkStatus();
    case DType::kInt32:
    case DType::kInt64: {
      int64_t x = 0;
      if (t == element_type::INT64) {
        x = v.get_int64().value_unsafe();
      } else if (t == element_type::UINT64) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the integer ", v.get_uint64().value_unsafe(), " does not fit in ", DTypeName(d)));
      } else {
        return wrong();
      }
      if (d == DType::kInt64) {
        out->mutable_data<int64_t>()[i] = x;
      } else if (x < std::numeric_limits<int32_t>::min() ||
                 x > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the integer ", x, " does not fit in int32"));
      } else {
        out->mutable_data<int32_t>()[i] = static_cast<int32_t>(x);
      }
      return absl::OkStatus();
    }
    case DType::kFloat32:
    case DType::kFloat64: {
      double x = 0;
      if (t == element_type::DOUBLE) {
        x = v.get_double().value_unsafe();
      } else if (t == element_type::INT64) {
        x = static_cast<double>(v.get_int64().value_unsafe());
      } else if (t == element_type::UINT64) {
        x = static_cast<double>(v.get_uint64().value_unsafe());
      } else {
        return wrong();
      }
      if (d == DType::kFloat64) {
        out->mutable_data<double>()[i] = x;
      } else {
        out->mutable_data<float>()[i] = static_cast<float>(x);
      }
      return absl::OkStatus();
    }
    default:
      return wrong();
  }
}

// The tensor for one key's value, or why it cannot be one.
absl::StatusOr<Tensor> KeyTensor(simdjson::dom::element v, const proto::JsonlSource::Key& key,
                                 absl::string_view what) {
  const DType d = static_cast<DType>(key.dtype());
  if (!key.vector()) {
    absl::StatusOr<Tensor> t = d == DType::kString
                                   ? Tensor::TryAllocateStrings(Shape(), 0, what)
                                   : Tensor::TryAllocate(d, Shape(), what);
    if (!t.ok()) return t.status();
    absl::Status s = PutValue(v, d, &*t, 0);
    if (!s.ok()) return s;
    return t;
  }
  simdjson::dom::array items;
  if (v.get_array().get(items) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat("expected an array of ", DTypeName(d),
                                                   ", got ", JsonTypeName(v.type())));
  }
  const int64_t n = static_cast<int64_t>(items.size());
  absl::StatusOr<Tensor> t = d == DType::kString
                                 ? Tensor::TryAllocateStrings(Shape({n}), 0, what)
                                 : Tensor::TryAllocate(d, Shape({n}), what);
  if (!t.ok()) return t.status();
  int64_t i = 0;
  for (simdjson::dom::element item : items) {
    absl::Status s = PutValue(item, d, &*t, i);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("item ", i, ": ", s.message()));
    }
    ++i;
  }
  return t;
}

}  // namespace

size_t JsonlLineLimit() {
  return static_cast<size_t>(ProcessMemoryBudget().limits().element_bytes);
}

JsonlLineParser::JsonlLineParser(proto::JsonlSource source, std::string label)
    : source_(std::move(source)), label_(std::move(label)) {}
JsonlLineParser::~JsonlLineParser() = default;

absl::Status JsonlLineParser::Parse(const JsonlLineScanner::Line& line, absl::string_view file,
                                    Element* out) {
  auto line_error = [&](absl::string_view message) {
    return MarkElementError(absl::InvalidArgumentError(
        absl::StrCat(file, " line ", line.number, ": ", message)));
  };
  if (line.too_long) {
    return line_error(absl::StrCat("the line is longer than the memory limit of one element, ",
                                   JsonlLineLimit(), " bytes (--max_element_bytes)"));
  }
  if (parser_ == nullptr) {
    auto parser = std::make_unique<simdjson::dom::parser>(JsonlLineLimit());
    if (parser->allocate(4096, kMaxDepth) != simdjson::SUCCESS) {
      return absl::ResourceExhaustedError(
          absl::StrCat(label_, ": ", file, ": cannot allocate the JSON parser"));
    }
    parser_ = std::move(parser);
  }
  simdjson::dom::element doc;
  simdjson::error_code e =
      parser_->parse(line.data, line.length, /*realloc_if_needed=*/false).get(doc);
  if (e != simdjson::SUCCESS) {
    return line_error(absl::StrCat("invalid JSON: ", simdjson::error_message(e)));
  }
  simdjson::dom::object object;
  if (doc.get_object().get(object) != simdjson::SUCCESS) {
    return line_error(absl::StrCat("expected a JSON object, got ", JsonTypeName(doc.type())));
  }
  std::vector<std::pair<std::string, Element>> items;
  items.reserve(source_.keys_size());
  for (const proto::JsonlSource::Key& key : source_.keys()) {
    simdjson::dom::element v;
    if (object.at_key(key.name()).get(v) != simdjson::SUCCESS) {
      return line_error(absl::StrCat("key '", key.name(), "' is missing"));
    }
    absl::StatusOr<Tensor> t = KeyTensor(v, key, label_);
    if (absl::IsResourceExhausted(t.status())) return t.status();
    if (!t.ok()) return line_error(absl::StrCat("key '", key.name(), "': ", t.status().message()));
    items.emplace_back(key.name(), Element(*std::move(t)));
  }
  *out = Element::Dict(std::move(items));
  return absl::OkStatus();
}

namespace {

class JsonlIterator : public OpIterator {
 public:
  JsonlIterator(std::string label, proto::JsonlSource source)
      : OpIterator(label), parser_(source, label), source_(std::move(source)) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (true) {
      if (!open_) {
        if (next_file_ >= source_.filenames_size()) {
          *end_of_sequence = true;
          return absl::OkStatus();
        }
        absl::Status s = OpenFile(source_.filenames(next_file_++));
        if (!s.ok()) return s;
      }
      JsonlLineScanner::Line line;
      bool have = false;
      absl::Status s = scanner_.Next(JsonlLineLimit(), &line, &have);
      if (!s.ok()) {
        CloseFile();
        return OpError(file_name_, s);
      }
      if (!have) {  // the file ended; the next one
        CloseFile();
        continue;
      }
      if (line.blank) continue;
      s = parser_.Parse(line, file_name_, out);
      // Element errors get the op's name; others (RESOURCE_EXHAUSTED) pass as they are.
      if (IsElementError(s)) return MarkElementError(InvalidArgument(s.message()));
      return s;
    }
  }

 private:
  absl::Status OpenFile(const std::string& name) {
    absl::StatusOr<std::unique_ptr<InputStream>> stream = OpenFileStream(name);
    if (!stream.ok()) return OpError(stream.status());
    stream_ = *std::move(stream);
    file_name_ = name;
    InputStream* in = stream_.get();
    scanner_.Reset([in](char* dst, size_t n) { return in->Read(dst, n); }, 0, 0);
    open_ = true;
    return absl::OkStatus();
  }

  void CloseFile() {
    stream_.reset();
    open_ = false;
  }

  JsonlLineParser parser_;
  const proto::JsonlSource source_;
  int next_file_ = 0;
  std::unique_ptr<InputStream> stream_;
  bool open_ = false;
  std::string file_name_;
  JsonlLineScanner scanner_{kBlockBytes};
};

}  // namespace

absl::StatusOr<ElementSpec> JsonlSourceSpec(const proto::JsonlSource& source) {
  if (source.keys_size() == 0) {
    return absl::InvalidArgumentError("jsonl_dataset: keys must name at least one key");
  }
  absl::flat_hash_set<std::string> seen;
  std::vector<std::pair<std::string, ElementSpec>> items;
  for (const proto::JsonlSource::Key& key : source.keys()) {
    if (key.name().empty()) {
      return absl::InvalidArgumentError("jsonl_dataset: a key name is empty");
    }
    if (!seen.insert(key.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("jsonl_dataset: key '", key.name(), "' is named twice"));
    }
    const DType d = static_cast<DType>(key.dtype());
    if (!SupportedDType(d)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "jsonl_dataset: key '", key.name(), "' has dtype ", DTypeName(d),
          "; supported: string, bool, int32, int64, float32, float64"));
    }
    items.emplace_back(key.name(),
                       ElementSpec(TensorSpec{d, key.vector() ? Shape({kUnknownDim}) : Shape()}));
  }
  return ElementSpec::Dict(std::move(items));
}

std::unique_ptr<Iterator> NewJsonlIterator(std::string label, proto::JsonlSource source) {
  return std::make_unique<JsonlIterator>(std::move(label), std::move(source));
}

}  // namespace sluice
