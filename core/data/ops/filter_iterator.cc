#include "core/data/ops/filter_iterator.h"

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tensor/dtype_dispatch.h"
#include "core/data/map_fns.h"
#include "core/data/op_iterator.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

// A scalar as the predicates compare it.
struct Scalar {
  enum class Kind { kInt, kFloat, kString, kBool } kind;
  __int128 i = 0;  // every integer dtype fits
  double f = 0;
  std::string s;
  bool b = false;
};

Scalar ReadScalar(const Tensor& t, int64_t at = 0) {
  Scalar out{};
  if (t.dtype() == DType::kString) {
    out.kind = Scalar::Kind::kString;
    out.s = t.string_at(at);
    return out;
  }
  VisitNumericDType(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = t.data<T>()[at];
    if constexpr (std::is_same_v<T, bool>) {
      out.kind = Scalar::Kind::kBool;
      out.b = v;
    } else if constexpr (std::is_integral_v<T>) {
      out.kind = Scalar::Kind::kInt;
      out.i = static_cast<__int128>(v);
      out.f = static_cast<double>(v);
    } else {
      out.kind = Scalar::Kind::kFloat;
      out.f = static_cast<double>(Widen(v));
    }
  });
  return out;
}

enum class Kind { kNumber, kString, kBool };
Kind KindOf(DType d) {
  if (d == DType::kString) return Kind::kString;
  if (d == DType::kBool) return Kind::kBool;
  return Kind::kNumber;
}
const char* KindName(Kind k) {
  switch (k) {
    case Kind::kNumber: return "a number";
    case Kind::kString: return "a string";
    case Kind::kBool: return "a bool";
  }
  return "?";
}

// -1, 0, 1, or nullopt when unordered (NaN).
std::optional<int> Compare(const Scalar& a, const Scalar& b) {
  if (a.kind == Scalar::Kind::kString) return a.s < b.s ? -1 : (a.s == b.s ? 0 : 1);
  if (a.kind == Scalar::Kind::kBool) return a.b == b.b ? 0 : (a.b ? 1 : -1);
  if (a.kind == Scalar::Kind::kInt && b.kind == Scalar::Kind::kInt) {
    return a.i < b.i ? -1 : (a.i == b.i ? 0 : 1);
  }
  if (std::isnan(a.f) || std::isnan(b.f)) return std::nullopt;
  return a.f < b.f ? -1 : (a.f == b.f ? 0 : 1);
}

bool NeedsScalar(proto::FilterOp::Predicate p) { return p != proto::FilterOp::NOT_EMPTY; }

const std::string* KeyOf(const proto::FilterOp& f) {
  return f.component_case() == proto::FilterOp::kKey ? &f.key() : nullptr;
}
// Points into `storage`, which must outlive the use.
const int64_t* IndexOf(const proto::FilterOp& f, int64_t* storage) {
  *storage = f.index();
  return f.component_case() == proto::FilterOp::kIndex ? storage : nullptr;
}

std::string Describe(const proto::FilterOp& f) {
  std::string where;
  if (f.component_case() == proto::FilterOp::kKey) where = absl::StrCat(" on '", f.key(), "'");
  if (f.component_case() == proto::FilterOp::kIndex) where = absl::StrCat(" on ", f.index());
  return absl::StrCat(FilterPredicateName(f.predicate()), "()", where);
}

// The tensor or spec the predicate reads.
template <typename T>
absl::StatusOr<const Nest<T>*> Component(const proto::FilterOp& f, const Nest<T>& e) {
  int64_t index = 0;
  ASSIGN_OR_RETURN(int at, SelectChild(e.kind(), e.keys(), e.children().size(), KeyOf(f),
                                       IndexOf(f, &index)));
  const Nest<T>* c = at < 0 ? &e : &e.children()[at];
  if (!c->is_leaf()) {
    return Invalid(absl::StrCat(Describe(f), ": the predicate reads one tensor, but the ",
                                at < 0 ? "element" : "component",
                                " is a structure; choose one with key="));
  }
  return c;
}

class FilterIterator : public OpIterator {
 public:
  FilterIterator(std::string label, std::unique_ptr<Iterator> input, proto::FilterOp filter,
                 std::vector<Scalar> operands)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        filter_(std::move(filter)),
        operands_(std::move(operands)) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (true) {
      Element e;
      absl::Status s = input_->GetNext(&e, end_of_sequence);
      if (!s.ok() || *end_of_sequence) return s;
      absl::StatusOr<bool> keep = Evaluate(e);
      if (!keep.ok()) {
        return MarkElementError(OpError(keep.status().code(), keep.status().message()));
      }
      if (*keep) {
        *out = std::move(e);
        return absl::OkStatus();
      }
    }
  }

 private:
  absl::StatusOr<bool> Evaluate(const Element& e) const {
    ASSIGN_OR_RETURN(const Element* c, Component(filter_, e));
    const Tensor& t = c->leaf();
    if (filter_.predicate() == proto::FilterOp::NOT_EMPTY) {
      if (t.shape().rank() == 0 && t.dtype() == DType::kString) return !t.string_at(0).empty();
      return t.num_elements() > 0;
    }
    if (t.shape().rank() != 0) {
      return Invalid(absl::StrCat(Describe(filter_), ": needs a scalar, got ",
                                  DTypeName(t.dtype()), " ", TfShapeString(t.shape())));
    }
    const Scalar x = ReadScalar(t);
    switch (filter_.predicate()) {
      case proto::FilterOp::VALUE_IN:
        for (const Scalar& v : operands_) {
          if (Compare(x, v) == std::optional<int>(0)) return true;
        }
        return false;
      case proto::FilterOp::NOT_EQUAL:
        return Compare(x, operands_[0]) != std::optional<int>(0);
      default:
        break;
    }
    std::optional<int> c3 = Compare(x, operands_[0]);
    if (!c3.has_value()) return false;
    switch (filter_.predicate()) {
      case proto::FilterOp::EQUAL: return *c3 == 0;
      case proto::FilterOp::LESS: return *c3 < 0;
      case proto::FilterOp::LESS_EQUAL: return *c3 <= 0;
      case proto::FilterOp::GREATER: return *c3 > 0;
      case proto::FilterOp::GREATER_EQUAL: return *c3 >= 0;
      default: return false;
    }
  }

  std::unique_ptr<Iterator> input_;
  const proto::FilterOp filter_;
  const std::vector<Scalar> operands_;
};

absl::StatusOr<std::vector<Scalar>> Operands(const proto::FilterOp& f) {
  std::vector<Scalar> out;
  for (int i = 0; i < f.values_size(); ++i) {
    ASSIGN_OR_RETURN(Tensor t, TensorFromProto(f.values(i)));
    if (t.shape().rank() != 0) {
      return Invalid(absl::StrCat(Describe(f), ": operand ", i, " must be a scalar, got shape ",
                                  TfShapeString(t.shape())));
    }
    out.push_back(ReadScalar(t));
  }
  return out;
}

absl::Status CheckOperands(const proto::FilterOp& f) {
  const int n = f.values_size();
  switch (f.predicate()) {
    case proto::FilterOp::PREDICATE_UNSPECIFIED:
      return Invalid("filter: no predicate set (written by a newer build?)");
    case proto::FilterOp::NOT_EMPTY:
      if (n != 0) return Invalid("not_empty() takes no operands");
      return absl::OkStatus();
    case proto::FilterOp::VALUE_IN:
      if (n == 0) return Invalid("value_in() needs at least one value");
      return absl::OkStatus();
    default:
      if (n != 1) {
        return Invalid(absl::StrCat(FilterPredicateName(f.predicate()),
                                    "() takes exactly one operand, got ", n));
      }
      return absl::OkStatus();
  }
}

}  // namespace

std::string FilterPredicateName(proto::FilterOp::Predicate p) {
  switch (p) {
    case proto::FilterOp::EQUAL: return "equal";
    case proto::FilterOp::NOT_EQUAL: return "not_equal";
    case proto::FilterOp::LESS: return "less";
    case proto::FilterOp::LESS_EQUAL: return "less_equal";
    case proto::FilterOp::GREATER: return "greater";
    case proto::FilterOp::GREATER_EQUAL: return "greater_equal";
    case proto::FilterOp::VALUE_IN: return "value_in";
    case proto::FilterOp::NOT_EMPTY: return "not_empty";
    default: break;
  }
  return "unset";
}

absl::StatusOr<ElementSpec> InferFilterSpec(const proto::FilterOp& filter,
                                            const ElementSpec& input) {
  RETURN_IF_ERROR(CheckOperands(filter));
  ASSIGN_OR_RETURN(std::vector<Scalar> operands, Operands(filter));
  ASSIGN_OR_RETURN(const ElementSpec* c, Component(filter, input));
  const TensorSpec& spec = c->leaf();
  if (NeedsScalar(filter.predicate())) {
    if (spec.shape.rank() != 0) {
      return Invalid(absl::StrCat(Describe(filter), ": needs a scalar, but the ",
                                  filter.component_case() ==
                                          proto::FilterOp::COMPONENT_NOT_SET
                                      ? "element"
                                      : "component",
                                  " is ", DTypeName(spec.dtype), " ",
                                  TfShapeString(spec.shape)));
    }
    const Kind want = KindOf(spec.dtype);
    for (int i = 0; i < filter.values_size(); ++i) {
      const Kind got = KindOf(static_cast<DType>(filter.values(i).dtype()));
      if (got != want) {
        return Invalid(absl::StrCat(Describe(filter), ": compares ", DTypeName(spec.dtype),
                                    " values with ", KindName(got), " (operand ", i, ")"));
      }
    }
  }
  return input;
}

std::unique_ptr<Iterator> NewFilterIterator(std::string label, std::unique_ptr<Iterator> input,
                                            proto::FilterOp filter) {
  absl::StatusOr<std::vector<Scalar>> operands = Operands(filter);
  return std::make_unique<FilterIterator>(std::move(label), std::move(input), std::move(filter),
                                          operands.ok() ? *std::move(operands)
                                                        : std::vector<Scalar>());
}

}  // namespace sluice
