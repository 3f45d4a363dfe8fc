#include "core/data/ops/webdataset_reader.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/memory_budget.h"
#include "core/data/op_iterator.h"
#include "core/format/python_literal.h"
#include "core/util/status_macros.h"
#include "core/io/tar_reader.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

constexpr char kKeyField[] = "__key__";

// "dir/n0001.seg.png" -> ("dir/n0001", "seg.png"); no '.' in the file name: no field.
std::pair<std::string, std::string> SplitKey(const std::string& path) {
  const size_t slash = path.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = path.find('.', base);
  if (dot == std::string::npos) return {path, ""};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

struct Sample {
  std::string key;
  std::map<std::string, std::string> fields;  // wanted fields only
  std::vector<std::string> seen;              // every field name, for errors
};

// A member is one field of one element: the element limit bounds what one member may hold.
TarReaderOptions MemberLimit() {
  TarReaderOptions o;
  o.max_member_bytes = static_cast<uint64_t>(ProcessMemoryBudget().limits().element_bytes);
  return o;
}

// Samples of one shard.
class SampleReader {
 public:
  // `wanted`: the fields to read (all of them when empty).
  SampleReader(std::unique_ptr<InputStream> in, std::set<std::string> wanted)
      : tar_(std::move(in), MemberLimit()), wanted_(std::move(wanted)) {}

  // The next sample; OUT_OF_RANGE after the last.
  absl::Status Next(Sample* out) {
    *out = Sample();
    while (true) {
      if (!pending_.has_value()) {
        TarMember m;
        absl::Status s = tar_.Next(&m);
        if (absl::IsOutOfRange(s)) {
          if (out->key.empty() && out->seen.empty()) return s;
          return absl::OkStatus();
        }
        RETURN_IF_ERROR(s);
        pending_ = std::move(m);
      }
      auto [key, field] = SplitKey(pending_->name);
      const std::string base = key.substr(key.rfind('/') == std::string::npos
                                              ? 0
                                              : key.rfind('/') + 1);
      if (field.empty() || base.empty()) {  // no extension, or a dot file: not part of a sample
        pending_.reset();
        continue;
      }
      if (!out->seen.empty() && key != out->key) return absl::OkStatus();  // keep it for next
      out->key = key;
      pending_.reset();
      if (std::find(out->seen.begin(), out->seen.end(), field) != out->seen.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("shard ", tar_.name(), ": sample '", key, "' has two '", field,
                         "' files"));
      }
      out->seen.push_back(field);
      if (wanted_.empty() || wanted_.count(field) > 0) {
        RETURN_IF_ERROR(tar_.ReadData(&out->fields[field]));
      }
    }
  }

  const std::string& name() const { return tar_.name(); }

 private:
  TarReader tar_;
  const std::set<std::string> wanted_;
  std::optional<TarMember> pending_;
};

class WebDatasetIterator : public OpIterator {
 public:
  WebDatasetIterator(std::string label, proto::WebDatasetSource source)
      : OpIterator(std::move(label)),
        source_(std::move(source)),
        wanted_(source_.keys().begin(), source_.keys().end()) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (true) {
      if (reader_ == nullptr) {
        if (next_file_ >= source_.filenames_size()) {
          *end_of_sequence = true;
          return absl::OkStatus();
        }
        absl::StatusOr<std::unique_ptr<InputStream>> in =
            OpenFileStream(source_.filenames(next_file_++));
        if (!in.ok()) return OpError(in.status().code(), in.status().message());
        reader_ = std::make_unique<SampleReader>(*std::move(in), wanted_);
      }
      Sample sample;
      absl::Status s = reader_->Next(&sample);
      if (absl::IsOutOfRange(s)) {
        reader_.reset();
        continue;
      }
      if (!s.ok()) return OpError(s.code(), s.message());
      std::vector<std::pair<std::string, Element>> items;
      items.emplace_back(kKeyField, Element(Tensor::StringScalar(sample.key)));
      for (const std::string& k : source_.keys()) {
        auto it = sample.fields.find(k);
        if (it == sample.fields.end()) {
          return InvalidArgument(absl::StrCat(
              "shard ", reader_->name(), ": sample '", sample.key, "' has no '", k,
              "' file (it has: ", absl::StrJoin(sample.seen, ", "), ")"));
        }
        items.emplace_back(k, Element(Tensor::StringScalar(std::move(it->second))));
      }
      *out = Element::Dict(std::move(items));
      return absl::OkStatus();
    }
  }

 private:
  const proto::WebDatasetSource source_;
  const std::set<std::string> wanted_;
  int next_file_ = 0;
  std::unique_ptr<SampleReader> reader_;
};

absl::Status ValidateKeys(const proto::WebDatasetSource& source) {
  std::set<std::string> seen;
  for (const std::string& k : source.keys()) {
    if (k.empty() || k == kKeyField || !seen.insert(k).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "webdataset_dataset: bad key '", k, "' (keys are file extensions such as 'jpg', "
          "each once; '__key__' is always there)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateWebDatasetSource(const proto::WebDatasetSource& source) {
  if (source.filenames_size() == 0) {
    return absl::InvalidArgumentError("webdataset_dataset: no shard given");
  }
  return ValidateKeys(source);
}

absl::StatusOr<proto::WebDatasetSource> MakeWebDatasetSource(std::vector<std::string> filenames,
                                                             std::vector<std::string> keys) {
  proto::WebDatasetSource source;
  for (std::string& f : filenames) source.add_filenames(std::move(f));
  if (keys.empty() && source.filenames_size() > 0) {
    ASSIGN_OR_RETURN(std::unique_ptr<InputStream> in, OpenFileStream(source.filenames(0)));
    SampleReader reader(std::move(in), {});
    Sample first;
    absl::Status s = reader.Next(&first);
    if (absl::IsOutOfRange(s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "webdataset_dataset: shard ", source.filenames(0),
          " holds no sample to take the keys from; give keys=['jpg', 'cls', ...]"));
    }
    RETURN_IF_ERROR(s);
    keys = first.seen;
  }
  std::sort(keys.begin(), keys.end());
  for (std::string& k : keys) source.add_keys(std::move(k));
  RETURN_IF_ERROR(ValidateKeys(source));
  return source;
}

ElementSpec WebDatasetSpec(const proto::WebDatasetSource& source) {
  std::vector<std::pair<std::string, ElementSpec>> items;
  items.emplace_back(kKeyField, ElementSpec(TensorSpec{DType::kString, Shape()}));
  for (const std::string& k : source.keys()) {
    items.emplace_back(k, ElementSpec(TensorSpec{DType::kString, Shape()}));
  }
  return ElementSpec::Dict(std::move(items));
}

std::unique_ptr<Iterator> NewWebDatasetIterator(std::string label,
                                                proto::WebDatasetSource source) {
  return std::make_unique<WebDatasetIterator>(std::move(label), std::move(source));
}

std::string WebDatasetSourceExpression(const proto::WebDatasetSource& source) {
  std::vector<std::string> files, keys;
  for (const std::string& f : source.filenames()) files.push_back(PythonStringLiteral(f));
  for (const std::string& k : source.keys()) keys.push_back(PythonStringLiteral(k));
  return absl::StrCat("webdataset_dataset([", absl::StrJoin(files, ", "), "], keys=[",
                      absl::StrJoin(keys, ", "), "])");
}

}  // namespace sluice
