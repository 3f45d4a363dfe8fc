// cast(dtype) for map(): the function (core/data/map_fns.h has the semantics) and its
// registration (core/data/op_registry.h).
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/map_fns.h"
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

class CastFn : public ComponentFn {
 public:
  explicit CastFn(DType dtype) : dtype_(dtype) {}

  std::string Describe() const override { return absl::StrCat("cast(", TfDType(dtype_), ")"); }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    RETURN_IF_ERROR(Check(input.dtype));
    return ElementSpec(TensorSpec{dtype_, input.shape});
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(Check(input.dtype()));
    if (input.dtype() == dtype_) return Element(input);
    ASSIGN_OR_RETURN(Tensor out, Tensor::TryAllocate(dtype_, input.shape(), "its output"));
    const int64_t n = input.num_elements();
    VisitNumericDType(input.dtype(), [&](auto src_tag) {
      using Src = typename decltype(src_tag)::type;
      const Src* src = input.data<Src>();
      VisitNumericDType(dtype_, [&](auto dst_tag) {
        using Dst = typename decltype(dst_tag)::type;
        Dst* dst = out.mutable_data<Dst>();
        for (int64_t i = 0; i < n; ++i) dst[i] = ConvertNumber<Dst>(src[i]);
      });
    });
    return Element(std::move(out));
  }

  // Each value converts on its own, and Check looks only at the dtype.
  bool ElementWise() const override { return true; }

 private:
  absl::Status Check(DType from) const {
    if (from == dtype_) return absl::OkStatus();
    if (!IsNumeric(from) || !IsNumeric(dtype_)) {
      return absl::UnimplementedError(
          absl::StrCat("Cast ", DTypeName(from), " to ", DTypeName(dtype_), " is not supported"));
    }
    return absl::OkStatus();
  }

  const DType dtype_;
};

}  // namespace

SLUICE_REGISTER_OPS(cast_fn) {
  MapFnRegistration r;
  r.name = "cast";
  r.make = [](const proto::MapOp& m) -> absl::StatusOr<std::unique_ptr<ComponentFn>> {
    const DType t = static_cast<DType>(m.cast().dtype());
    if (t == DType::kInvalid || DTypeName(t).empty()) return Invalid("cast: dtype is not set");
    return std::unique_ptr<ComponentFn>(new CastFn(t));
  };
  r.expression = [](const proto::MapOp& m) {
    return absl::StrCat("cast(", TfDType(m.cast().dtype()), ")");
  };
  {
    MapFnParseRule p;
    p.name = "cast";
    p.list_order = 1;
    p.params = {{"dtype", true}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      ASSIGN_OR_RETURN(DType t, c.DTypeArg("dtype", *c.arg(0)));
      m->mutable_cast()->set_dtype(static_cast<proto::DataType>(t));
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddMapFn(proto::MapOp::kCast, std::move(r));
}

}  // namespace sluice
