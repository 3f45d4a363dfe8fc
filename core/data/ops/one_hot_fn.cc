// one_hot(depth, on_value=1, off_value=0, dtype=tf.float32) for map(): the function
// (core/data/map_fns.h has the semantics) and its registration (core/data/op_registry.h).
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/map_fns.h"
#include "core/data/shape_limits.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/format/python_literal.h"
#include "core/tensor/dtype_dispatch.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

bool IsNumeric(DType d) { return d != DType::kString && d != DType::kInvalid; }

class OneHotFn : public ComponentFn {
 public:
  OneHotFn(int64_t depth, double on, double off, DType dtype)
      : depth_(depth), on_(on), off_(off), dtype_(dtype) {}

  std::string Describe() const override { return absl::StrCat("one_hot(", depth_, ")"); }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    RETURN_IF_ERROR(Check(input.dtype));
    std::vector<int64_t> dims = input.shape.dims();
    dims.push_back(depth_);
    return ElementSpec(TensorSpec{dtype_, Shape(std::move(dims))});
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(Check(input.dtype()));
    const int64_t n = input.num_elements();
    std::vector<int64_t> dims = input.shape().dims();
    dims.push_back(depth_);
    RETURN_IF_ERROR(CheckAllocation("the one-hot output", dtype_, dims));
    ASSIGN_OR_RETURN(Tensor out, Tensor::TryAllocate(dtype_, Shape(std::move(dims)), "one_hot"));
    VisitNumericDType(input.dtype(), [&](auto in_tag) {
      using I = typename decltype(in_tag)::type;
      if constexpr (std::is_integral_v<I>) {
        const I* idx = input.data<I>();
        VisitNumericDType(dtype_, [&](auto out_tag) {
          using O = typename decltype(out_tag)::type;
          const O on = ConvertNumber<O>(on_);
          const O off = ConvertNumber<O>(off_);
          O* dst = out.mutable_data<O>();
          for (int64_t i = 0; i < n; ++i) {
            const int64_t k = static_cast<int64_t>(idx[i]);
            for (int64_t j = 0; j < depth_; ++j) dst[i * depth_ + j] = off;
            if constexpr (std::is_unsigned_v<I>) {
              if (static_cast<uint64_t>(idx[i]) < static_cast<uint64_t>(depth_)) {
                dst[i * depth_ + k] = on;
              }
            } else {
              if (k >= 0 && k < depth_) dst[i * depth_ + k] = on;
            }
          }
        });
      }
    });
    return Element(std::move(out));
  }

 private:
  static absl::Status Check(DType d) {
    if (d != DType::kUInt8 && d != DType::kInt8 && d != DType::kInt32 && d != DType::kInt64) {
      return Invalid(
          absl::StrCat("indices must be uint8, int8, int32 or int64, got ", DTypeName(d)));
    }
    return absl::OkStatus();
  }

  const int64_t depth_;
  const double on_;
  const double off_;
  const DType dtype_;
};

}  // namespace

SLUICE_REGISTER_OPS(one_hot_fn) {
  MapFnRegistration r;
  r.name = "one_hot";
  r.make = [](const proto::MapOp& m) -> absl::StatusOr<std::unique_ptr<ComponentFn>> {
    const proto::OneHotFn& o = m.one_hot();
    if (o.depth() < 0) {
      return Invalid(absl::StrCat("one_hot: depth must be non-negative, got ", o.depth()));
    }
    DType t = static_cast<DType>(o.dtype());
    if (t == DType::kInvalid) t = DType::kFloat32;
    if (!IsNumeric(t)) {
      return Invalid(absl::StrCat("one_hot: dtype must be numeric, got ", DTypeName(t)));
    }
    return std::unique_ptr<ComponentFn>(new OneHotFn(o.depth(),
                                                     o.has_on_value() ? o.on_value() : 1.0,
                                                     o.has_off_value() ? o.off_value() : 0.0, t));
  };
  r.expression = [](const proto::MapOp& m) {
    const proto::OneHotFn& o = m.one_hot();
    std::string out = absl::StrCat("one_hot(", o.depth());
    if (o.has_on_value()) {
      absl::StrAppend(&out, ", on_value=", PythonFloat64Literal(o.on_value()));
    }
    if (o.has_off_value()) {
      absl::StrAppend(&out, ", off_value=", PythonFloat64Literal(o.off_value()));
    }
    if (o.dtype() != proto::DT_INVALID) absl::StrAppend(&out, ", dtype=", TfDType(o.dtype()));
    return out + ")";
  };
  {
    MapFnParseRule p;
    p.name = "one_hot";
    p.list_order = 4;
    p.params = {{"depth", true}, {"on_value", false}, {"off_value", false}, {"dtype", false}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      proto::OneHotFn* o = m->mutable_one_hot();
      ASSIGN_OR_RETURN(int64_t depth, c.Int("depth", *c.arg(0)));
      o->set_depth(depth);
      if (c.given(1)) {
        ASSIGN_OR_RETURN(double on, c.Number("on_value", *c.arg(1)));
        o->set_on_value(on);
      }
      if (c.given(2)) {
        ASSIGN_OR_RETURN(double off, c.Number("off_value", *c.arg(2)));
        o->set_off_value(off);
      }
      if (c.given(3)) {
        ASSIGN_OR_RETURN(DType t, c.DTypeArg("dtype", *c.arg(3)));
        o->set_dtype(static_cast<proto::DataType>(t));
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddMapFn(proto::MapOp::kOneHot, std::move(r));
}

}  // namespace sluice
