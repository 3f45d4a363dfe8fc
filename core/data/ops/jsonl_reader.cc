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

class JsonlIterator : public OpIterator {
 public:
  JsonlIterator(std::string label, proto::JsonlSource source)
      : OpIterator(std::move(label)), source_(std::move(source)) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (true) {
      if (stream_ == nullptr) {
        if (next_file_ >= source_.filenames_size()) {
          *end_of_sequence = true;
          return absl::OkStatus();
        }
        absl::Status s = OpenFile(source_.filenames(next_file_++));
        if (!s.ok()) return s;
      }
      const char* line = nullptr;
      size_t length = 0;
      bool too_long = false;
      bool have = false;
      absl::Status s = NextLine(&line, &length, &too_long, &have);
      if (!s.ok()) return s;
      if (!have) continue;  // the file ended; the next one
      if (too_long) {
        const int64_t limit = ProcessMemoryBudget().limits().element_bytes;
        return LineError(absl::StrCat("the line is longer than the memory limit of one element, ",
                                      limit, " bytes (--max_element_bytes)"));
      }
      if (IsBlank(line, length)) continue;
      return Parse(line, length, out);
    }
  }

 private:
  static bool IsBlank(const char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return false;
    }
    return true;
  }

  // The next line of the open file (without its '\n' or a trailing '\r'), readable for
  // SIMDJSON_PADDING bytes past its end. *have is false once the file has ended (it is closed
  // then). A line longer than the element limit is skipped to its end and reported by
  // *too_long, without being kept.
  absl::Status NextLine(const char** line, size_t* length, bool* too_long, bool* have) {
    const size_t limit = static_cast<size_t>(ProcessMemoryBudget().limits().element_bytes);
    bool skipping = false;
    carry_size_ = 0;
    while (true) {
      if (pos_ < end_) {
        const char* begin = block_.data() + pos_;
        const char* newline = static_cast<const char*>(std::memchr(begin, '\n', end_ - pos_));
        const size_t n = newline != nullptr ? static_cast<size_t>(newline - begin) : end_ - pos_;
        pos_ += n + (newline != nullptr ? 1 : 0);
        if (newline != nullptr) ++line_number_;
        if (newline != nullptr && carry_size_ == 0 && !skipping) {
          *line = begin;
          *length = TrimCr(begin, n);
          *too_long = n > limit;
          *have = true;
          return absl::OkStatus();
        }
        if (!skipping && carry_size_ + n > limit) {
          skipping = true;
          carry_size_ = 0;
          carry_.clear();
          carry_.shrink_to_fit();
        }
        if (!skipping) Append(begin, n);
        if (newline != nullptr) return FinishCarried(line, length, too_long, have, skipping);
        continue;
      }
      absl::StatusOr<size_t> n = stream_->Read(block_.data(), kBlockBytes);
      if (!n.ok()) {
        const std::string file = stream_->name();
        CloseFile();
        return OpError(n.status().code(), absl::StrCat(file, ": ", n.status().message()));
      }
      pos_ = 0;
      end_ = *n;
      if (*n == 0) {
        // A last line without '\n' is still a line.
        const bool pending = carry_size_ > 0 || skipping;
        if (pending) ++line_number_;
        if (pending) return FinishCarried(line, length, too_long, have, skipping);
        CloseFile();
        *have = false;
        return absl::OkStatus();
      }
    }
  }

  absl::Status FinishCarried(const char** line, size_t* length, bool* too_long, bool* have,
                             bool skipping) {
    *have = true;
    *too_long = skipping;
    carry_.resize(carry_size_ + simdjson::SIMDJSON_PADDING);
    *line = carry_.data();
    *length = TrimCr(carry_.data(), carry_size_);
    return absl::OkStatus();
  }

  void Append(const char* p, size_t n) {
    if (carry_.size() < carry_size_ + n) carry_.resize(carry_size_ + n);
    std::memcpy(carry_.data() + carry_size_, p, n);
    carry_size_ += n;
  }

  static size_t TrimCr(const char* p, size_t n) { return n > 0 && p[n - 1] == '\r' ? n - 1 : n; }

  absl::Status Parse(const char* line, size_t length, Element* out) {
    simdjson::dom::element doc;
    simdjson::error_code e = parser_.parse(line, length, /*realloc_if_needed=*/false).get(doc);
    if (e != simdjson::SUCCESS) {
      return LineError(absl::StrCat("invalid JSON: ", simdjson::error_message(e)));
    }
    simdjson::dom::object object;
    if (doc.get_object().get(object) != simdjson::SUCCESS) {
      return LineError(absl::StrCat("expected a JSON object, got ", JsonTypeName(doc.type())));
    }
    std::vector<std::pair<std::string, Element>> items;
    items.reserve(source_.keys_size());
    for (const proto::JsonlSource::Key& key : source_.keys()) {
      simdjson::dom::element v;
      if (object.at_key(key.name()).get(v) != simdjson::SUCCESS) {
        return LineError(absl::StrCat("key '", key.name(), "' is missing"));
      }
      absl::StatusOr<Tensor> t = KeyTensor(v, key, label());
      if (absl::IsResourceExhausted(t.status())) return t.status();
      if (!t.ok()) return LineError(absl::StrCat("key '", key.name(), "': ", t.status().message()));
      items.emplace_back(key.name(), Element(*std::move(t)));
    }
    *out = Element::Dict(std::move(items));
    return absl::OkStatus();
  }

  // An element error naming the file and the line just read.
  absl::Status LineError(absl::string_view message) const {
    return MarkElementError(InvalidArgument(
        absl::StrCat(file_name_, " line ", line_number_, ": ", message)));
  }

  absl::Status OpenFile(const std::string& name) {
    absl::StatusOr<std::unique_ptr<InputStream>> stream = OpenFileStream(name);
    if (!stream.ok()) return OpError(stream.status().code(), stream.status().message());
    stream_ = *std::move(stream);
    file_name_ = name;
    if (block_.empty()) block_.resize(kBlockBytes + simdjson::SIMDJSON_PADDING);
    if (!parser_allocated_) {
      const size_t limit = static_cast<size_t>(ProcessMemoryBudget().limits().element_bytes);
      parser_ = simdjson::dom::parser(limit);
      if (parser_.allocate(4096, kMaxDepth) != simdjson::SUCCESS) {
        return OpError(absl::StatusCode::kResourceExhausted, "cannot allocate the JSON parser");
      }
      parser_allocated_ = true;
    }
    pos_ = end_ = 0;
    line_number_ = 0;
    return absl::OkStatus();
  }

  void CloseFile() {
    stream_.reset();
    pos_ = end_ = 0;
  }

  const proto::JsonlSource source_;
  int next_file_ = 0;
  std::unique_ptr<InputStream> stream_;
  std::string file_name_;
  int64_t line_number_ = 0;  // of the line last read, from 1
  std::vector<char> block_;  // kBlockBytes + padding
  size_t pos_ = 0;
  size_t end_ = 0;
  std::vector<char> carry_;  // a line that crosses blocks, padded once complete
  size_t carry_size_ = 0;
  simdjson::dom::parser parser_;
  bool parser_allocated_ = false;
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
