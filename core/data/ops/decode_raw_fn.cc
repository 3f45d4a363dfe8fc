// decode_raw(out_type, little_endian=True) for map(): the function (core/data/map_fns.h has the
// semantics) and its registration (core/data/op_registry.h).
#include <cstring>
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
#include "core/data/ops/decode_raw_byte_order.h"
#include "core/format/python_literal.h"
#include "core/tensor/dtype_dispatch.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

bool IsNumeric(DType d) { return d != DType::kString && d != DType::kInvalid; }

class DecodeRawFn : public ComponentFn {
 public:
  DecodeRawFn(DType out_type, bool big_endian) : out_type_(out_type), big_endian_(big_endian) {}

  std::string Describe() const override {
    return absl::StrCat("decode_raw(", TfDType(out_type_),
                        big_endian_ ? ", little_endian=False" : "", ")");
  }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    if (input.dtype != DType::kString) {
      return Invalid(absl::StrCat("input must be a string tensor, got ", DTypeName(input.dtype)));
    }
    std::vector<int64_t> dims = input.shape.dims();
    dims.push_back(kUnknownDim);
    return ElementSpec(TensorSpec{out_type_, Shape(std::move(dims))});
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    if (input.dtype() != DType::kString) {
      return Invalid(absl::StrCat("input must be a string tensor, got ", DTypeName(input.dtype())));
    }
    const size_t width = DTypeSize(out_type_);
    const int64_t n = input.num_elements();
    size_t length = n > 0 ? input.string_at(0).size() : 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t size = input.string_at(i).size();
      if (size != length) {
        // TF's message.
        return Invalid(
            absl::StrCat("DecodeRaw requires input strings to all be the same size, "
                         "but element ",
                         i, " has size ", size, " != ", length));
      }
    }
    if (length % width != 0) {
      return Invalid(absl::StrCat("Input to DecodeRaw has length ", length,
                                  " that is not a multiple of ", width, ", the size of ",
                                  DTypeName(out_type_)));
    }
    std::vector<int64_t> dims = input.shape().dims();
    dims.push_back(static_cast<int64_t>(length / width));
    ASSIGN_OR_RETURN(Tensor out,
                     Tensor::TryAllocate(out_type_, Shape(std::move(dims)), "its output"));
    char* dst = static_cast<char*>(out.mutable_raw_data());
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + i * length, input.string_at(i).data(), length);
    }
    if (DecodeRawSwaps(width, big_endian_)) {
      ReverseEachValue(dst, static_cast<size_t>(n) * length, width);
    }
    return Element(std::move(out));
  }

 private:
  const DType out_type_;
  const bool big_endian_;
};

}  // namespace

SLUICE_REGISTER_OPS(decode_raw_fn) {
  MapFnRegistration r;
  r.name = "decode_raw";
  r.make = [](const proto::MapOp& m) -> absl::StatusOr<std::unique_ptr<ComponentFn>> {
    const DType t = static_cast<DType>(m.decode_raw().out_type());
    if (!IsNumeric(t) || DTypeSize(t) == 0) {
      return Invalid(
          absl::StrCat("decode_raw: out_type must be a numeric dtype, got ", DTypeName(t)));
    }
    return std::unique_ptr<ComponentFn>(new DecodeRawFn(t, m.decode_raw().big_endian()));
  };
  r.expression = [](const proto::MapOp& m) {
    return absl::StrCat("decode_raw(", TfDType(m.decode_raw().out_type()),
                        m.decode_raw().big_endian() ? ", little_endian=False" : "", ")");
  };
  {
    MapFnParseRule p;
    p.name = "decode_raw";
    p.list_order = 0;
    p.params = {{"out_type", true}, {"little_endian", false}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      ASSIGN_OR_RETURN(DType t, c.DTypeArg("out_type", *c.arg(0)));
      m->mutable_decode_raw()->set_out_type(static_cast<proto::DataType>(t));
      if (c.given(1)) {
        ASSIGN_OR_RETURN(bool little, c.Bool("little_endian", *c.arg(1)));
        m->mutable_decode_raw()->set_big_endian(!little);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddMapFn(proto::MapOp::kDecodeRaw, std::move(r));
}

}  // namespace sluice
