// reshape(shape) for map(): the function (core/data/map_fns.h has the semantics) and its
// registration (core/data/op_registry.h).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/map_fns.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/shape_limits.h"
#include "core/format/python_literal.h"
#include "core/tensor/dtype_dispatch.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

class ReshapeFn : public ComponentFn {
 public:
  explicit ReshapeFn(std::vector<int64_t> shape) : shape_(std::move(shape)) {}

  std::string Describe() const override {
    return absl::StrCat("reshape([", absl::StrJoin(shape_, ", "), "])");
  }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    if (input.shape.IsFullyDefined()) {
      ASSIGN_OR_RETURN(Shape s, Resolve(input.shape.num_elements()));
      return ElementSpec(TensorSpec{input.dtype, std::move(s)});
    }
    return ElementSpec(TensorSpec{input.dtype, Shape(shape_)});  // -1 is unknown there
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    ASSIGN_OR_RETURN(Shape s, Resolve(input.num_elements()));
    ASSIGN_OR_RETURN(Tensor out, input.Reshape(s));
    return Element(std::move(out));
  }

  // Checks the requested shape itself.
  static absl::Status Validate(const std::vector<int64_t>& shape) {
    int unknown = 0;
    for (int64_t d : shape) {
      if (d == -1) {
        ++unknown;
      } else if (d < 0) {
        return Invalid(absl::StrCat("reshape: dimensions must be >= 0 or -1, got ", d));
      }
    }
    if (unknown > 1) return Invalid("reshape: only one dimension can be -1");
    return KnownProduct(KnownDims(shape)).status();
  }

 private:
  static std::vector<int64_t> KnownDims(const std::vector<int64_t>& shape) {
    std::vector<int64_t> known;
    for (int64_t d : shape) {
      if (d != -1) known.push_back(d);
    }
    return known;
  }
  // The product of the known dimensions; INVALID_ARGUMENT when it overflows int64 (a wrapped
  // product could match the input's count and give a tensor whose shape lies about its size).
  static absl::StatusOr<int64_t> KnownProduct(const std::vector<int64_t>& known) {
    return CheckedNumElements(known, "reshape");
  }

  absl::StatusOr<Shape> Resolve(int64_t n) const {
    ASSIGN_OR_RETURN(const int64_t known, KnownProduct(KnownDims(shape_)));
    int unknown_at = -1;
    for (size_t i = 0; i < shape_.size(); ++i) {
      if (shape_[i] == -1) unknown_at = static_cast<int>(i);
    }
    std::vector<int64_t> dims = shape_;
    if (unknown_at >= 0) {
      if (known == 0 || n % known != 0) {
        return Invalid(absl::StrCat("Input to reshape is a tensor with ", n,
                                    " values, but the requested shape requires a multiple of ",
                                    known));
      }
      dims[unknown_at] = n / known;
    } else if (known != n) {
      return Invalid(absl::StrCat("Input to reshape is a tensor with ", n,
                                  " values, but the requested shape has ", known));
    }
    return Shape(std::move(dims));
  }

  const std::vector<int64_t> shape_;
};

}  // namespace

SLUICE_REGISTER_OPS(reshape_fn) {
  MapFnRegistration r;
  r.name = "reshape";
  r.make = [](const proto::MapOp& m) -> absl::StatusOr<std::unique_ptr<ComponentFn>> {
    std::vector<int64_t> shape(m.reshape().shape().begin(), m.reshape().shape().end());
    RETURN_IF_ERROR(ReshapeFn::Validate(shape));
    return std::unique_ptr<ComponentFn>(new ReshapeFn(std::move(shape)));
  };
  r.expression = [](const proto::MapOp& m) {
    return absl::StrCat("reshape([", absl::StrJoin(m.reshape().shape(), ", "), "])");
  };
  {
    MapFnParseRule p;
    p.name = "reshape";
    p.list_order = 2;
    p.params = {{"shape", true}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<int64_t> shape, c.Ints("shape", *c.arg(0), false));
      if (c.arg(0)->kind != PyValue::Kind::kList && c.arg(0)->kind != PyValue::Kind::kTuple) {
        return c.Error(c.arg(0)->begin, "reshape: shape must be a list such as [28, 28]");
      }
      for (int64_t d : shape) m->mutable_reshape()->add_shape(d);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddMapFn(proto::MapOp::kReshape, std::move(r));
}

}  // namespace sluice
