#include "core/data/ops/pack_iterator.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/data/op_iterator.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

constexpr int64_t kDefaultMaxOpenRows = 8;

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("pack: ", message));
}

int64_t MaxOpenRows(const proto::PackOp& op) {
  return op.max_open_rows() == 0 ? kDefaultMaxOpenRows : op.max_open_rows();
}

// The packed features: positions in the input dict's children, in its key order.
absl::StatusOr<std::vector<size_t>> PackedChildren(const proto::PackOp& op,
                                                   const std::vector<std::string>& keys) {
  std::vector<size_t> out;
  if (op.keys_size() == 0) {
    for (size_t i = 0; i < keys.size(); ++i) out.push_back(i);
    return out;
  }
  absl::flat_hash_set<std::string> wanted(op.keys().begin(), op.keys().end());
  if (wanted.size() != static_cast<size_t>(op.keys_size())) return Invalid("a key is named twice");
  for (const std::string& k : op.keys()) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
      return Invalid(absl::StrCat("the element has no key '", k, "'"));
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (wanted.contains(keys[i])) out.push_back(i);
  }
  return out;
}

// One row being filled: per feature the tokens, segment ids and positions, and how many of the
// row's positions are used.
struct Row {
  std::vector<Tensor> tokens;
  std::vector<Tensor> segment_ids;
  std::vector<Tensor> positions;
  std::vector<int64_t> used;
  int32_t segments = 0;
};

class PackIterator : public OpIterator {
 public:
  PackIterator(std::string label, std::unique_ptr<Iterator> input, proto::PackOp op)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        op_(std::move(op)),
        length_(op_.sequence_length()),
        max_open_(MaxOpenRows(op_)) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (ready_.empty()) {
      if (input_done_) {
        if (open_.empty()) {
          *end_of_sequence = true;
          return absl::OkStatus();
        }
        ready_.push_back(std::move(open_.front()));
        open_.pop_front();
        break;
      }
      Element e;
      bool end = false;
      RETURN_IF_ERROR(input_->GetNext(&e, &end));
      if (end) {
        input_done_ = true;
        continue;
      }
      RETURN_IF_ERROR(Add(e));
    }
    *out = Emit(std::move(ready_.front()));
    ready_.pop_front();
    return absl::OkStatus();
  }

 private:
  // Places one example (first fit), moving rows to ready_ as they fill or make room.
  absl::Status Add(const Element& e) {
    if (e.kind() != NestKind::kDict) return InvalidArgument("the element is not a dict");
    if (children_.empty()) {
      absl::StatusOr<std::vector<size_t>> c = PackedChildren(op_, e.keys());
      if (!c.ok()) return InvalidArgument(c.status().message());
      children_ = *std::move(c);
    }
    std::vector<Tensor> features;
    std::vector<int64_t> lengths;
    bool empty = true;
    for (size_t c : children_) {
      if (c >= e.children().size() || !e.children()[c].is_leaf()) {
        return MarkElementError(InvalidArgument("the element's structure changed"));
      }
      const Tensor& t = e.children()[c].leaf();
      if (t.shape().rank() != 1 || t.dtype() == DType::kString) {
        return MarkElementError(InvalidArgument(absl::StrCat(
            "feature '", e.keys()[c], "' must be a 1-D numeric tensor, got ",
            DTypeName(t.dtype()), " ", TfShapeString(t.shape()))));
      }
      if (!dtypes_.empty() && dtypes_[features.size()] != t.dtype()) {
        return MarkElementError(InvalidArgument(absl::StrCat(
            "feature '", e.keys()[c], "' changed dtype to ", DTypeName(t.dtype()))));
      }
      lengths.push_back(std::min(t.shape().dim(0), length_));
      empty = empty && lengths.back() == 0;
      features.push_back(t);
    }
    if (dtypes_.empty()) {
      for (const Tensor& t : features) dtypes_.push_back(t.dtype());
      for (size_t c : children_) names_.push_back(e.keys()[c]);
    }
    if (empty) return absl::OkStatus();
    size_t row = 0;
    while (row < open_.size() && !Fits(open_[row], lengths)) ++row;
    if (row == open_.size()) {
      if (static_cast<int64_t>(open_.size()) >= max_open_) {
        ready_.push_back(std::move(open_.front()));
        open_.pop_front();
      }
      ASSIGN_OR_RETURN(Row fresh, NewRow());
      open_.push_back(std::move(fresh));
      row = open_.size() - 1;
    }
    Append(features, lengths, &open_[row]);
    if (Full(open_[row])) {
      ready_.push_back(std::move(open_[row]));
      open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(row));
    }
    return absl::OkStatus();
  }

  bool Fits(const Row& r, const std::vector<int64_t>& lengths) const {
    for (size_t f = 0; f < lengths.size(); ++f) {
      if (r.used[f] + lengths[f] > length_) return false;
    }
    return true;
  }

  bool Full(const Row& r) const {
    for (int64_t u : r.used) {
      if (u != length_) return false;
    }
    return true;
  }

  absl::StatusOr<Row> NewRow() const {
    Row r;
    for (DType d : dtypes_) {
      ASSIGN_OR_RETURN(Tensor t, Tensor::TryAllocate(d, Shape({length_}), label()));
      ASSIGN_OR_RETURN(Tensor s, Tensor::TryAllocate(DType::kInt32, Shape({length_}), label()));
      ASSIGN_OR_RETURN(Tensor p, Tensor::TryAllocate(DType::kInt32, Shape({length_}), label()));
      r.tokens.push_back(std::move(t));
      r.segment_ids.push_back(std::move(s));
      r.positions.push_back(std::move(p));
      r.used.push_back(0);
    }
    return r;
  }

  static void Append(const std::vector<Tensor>& features, const std::vector<int64_t>& lengths,
                     Row* r) {
    const int32_t segment = ++r->segments;
    for (size_t f = 0; f < features.size(); ++f) {
      const int64_t n = lengths[f];
      const int64_t at = r->used[f];
      const size_t width = DTypeSize(features[f].dtype());
      std::memcpy(static_cast<char*>(r->tokens[f].mutable_raw_data()) + at * width,
                  features[f].raw_data(), static_cast<size_t>(n) * width);
      int32_t* seg = r->segment_ids[f].mutable_data<int32_t>() + at;
      int32_t* pos = r->positions[f].mutable_data<int32_t>() + at;
      for (int64_t i = 0; i < n; ++i) {
        seg[i] = segment;
        pos[i] = static_cast<int32_t>(i);
      }
      r->used[f] = at + n;
    }
  }

  Element Emit(Row r) const {
    std::vector<std::pair<std::string, Element>> items;
    for (size_t f = 0; f < names_.size(); ++f) {
      items.emplace_back(names_[f], Element(std::move(r.tokens[f])));
      items.emplace_back(names_[f] + "_segment_ids", Element(std::move(r.segment_ids[f])));
      items.emplace_back(names_[f] + "_positions", Element(std::move(r.positions[f])));
    }
    return Element::Dict(std::move(items));
  }

  std::unique_ptr<Iterator> input_;
  const proto::PackOp op_;
  const int64_t length_;
  const int64_t max_open_;
  std::vector<size_t> children_;   // the packed features' positions in the input dict
  std::vector<std::string> names_;  // their keys
  std::vector<DType> dtypes_;       // their dtypes
  std::deque<Row> open_;            // oldest first, at most max_open_
  std::deque<Row> ready_;           // rows to emit, in order
  bool input_done_ = false;
};

}  // namespace

absl::StatusOr<ElementSpec> InferPackSpec(const proto::PackOp& op, const ElementSpec& input) {
  if (op.sequence_length() <= 0) {
    return Invalid(absl::StrCat("sequence_length must be positive, got ", op.sequence_length()));
  }
  if (op.sequence_length() > std::numeric_limits<int32_t>::max()) {
    return Invalid(absl::StrCat("sequence_length must fit in int32 (positions are int32), got ",
                                op.sequence_length()));
  }
  if (op.max_open_rows() < 0) {
    return Invalid(absl::StrCat("max_open_rows must be positive, got ", op.max_open_rows()));
  }
  if (input.kind() != NestKind::kDict) {
    return Invalid("the element must be a dict of token vectors such as {'text': int32 [None]}");
  }
  ASSIGN_OR_RETURN(std::vector<size_t> children, PackedChildren(op, input.keys()));
  if (children.empty()) return Invalid("no feature to pack");
  absl::flat_hash_set<std::string> out_keys;
  std::vector<std::pair<std::string, ElementSpec>> items;
  for (size_t c : children) {
    const std::string& k = input.keys()[c];
    const ElementSpec& child = input.children()[c];
    if (!child.is_leaf() || child.leaf().shape.rank() != 1 ||
        child.leaf().dtype == DType::kString) {
      return Invalid(absl::StrCat("feature '", k, "' must be a 1-D numeric tensor (token ids)"));
    }
    const Shape row({op.sequence_length()});
    for (auto& [name, spec] : std::vector<std::pair<std::string, TensorSpec>>{
             {k, TensorSpec{child.leaf().dtype, row}},
             {k + "_segment_ids", TensorSpec{DType::kInt32, row}},
             {k + "_positions", TensorSpec{DType::kInt32, row}}}) {
      if (!out_keys.insert(name).second) {
        return Invalid(absl::StrCat("the output key '", name, "' would appear twice"));
      }
      items.emplace_back(name, ElementSpec(spec));
    }
  }
  return ElementSpec::Dict(std::move(items));
}

std::unique_ptr<Iterator> NewPackIterator(std::string label, std::unique_ptr<Iterator> input,
                                          proto::PackOp op) {
  return std::make_unique<PackIterator>(std::move(label), std::move(input), std::move(op));
}

}  // namespace sluice
