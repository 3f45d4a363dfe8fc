// normalize(mean, std) for map(): the function (core/data/map_fns.h has the semantics) and its
// registration (core/data/op_registry.h).
#include <algorithm>
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
#include "core/data/ops/pixel_step.h"
#include "core/format/python_literal.h"
#include "core/tensor/dtype_dispatch.h"
#include "core/tensor/uninitialized_tensor.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

bool IsNumeric(DType d) { return d != DType::kString && d != DType::kInvalid; }

class NormalizeFn : public ComponentFn {
 public:
  NormalizeFn(std::vector<float> mean, std::vector<float> std)
      : mean_(std::move(mean)), std_(std::move(std)) {}

  std::string Describe() const override {
    return absl::StrCat("normalize(mean=[", absl::StrJoin(mean_, ", "), "], std=[",
                        absl::StrJoin(std_, ", "), "])");
  }

  static absl::Status Validate(const std::vector<float>& mean, const std::vector<float>& std) {
    if (mean.empty() || std.empty()) return Invalid("normalize: mean and std must not be empty");
    if (mean.size() != std.size() && mean.size() != 1 && std.size() != 1) {
      return Invalid(absl::StrCat("normalize: mean has ", mean.size(), " values and std ",
                                  std.size(), "; give one value or one per channel each"));
    }
    for (float s : std) {
      if (s == 0) return Invalid("normalize: std must not contain 0");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    if (!IsNumeric(input.dtype)) {
      return Invalid(absl::StrCat("input must be numeric, got ", DTypeName(input.dtype)));
    }
    const int64_t c = Channels();
    if (c > 1) {
      if (input.shape.rank() == 0) {
        return Invalid(absl::StrCat("per-channel mean/std (", c,
                                    " channels) need an input of rank >= 1, got a scalar"));
      }
      int64_t last = input.shape.dim(input.shape.rank() - 1);
      if (last != kUnknownDim && last != c) {
        return Invalid(absl::StrCat("per-channel mean/std have ", c,
                                    " values but the last dimension is ", last));
      }
    }
    return ElementSpec(TensorSpec{DType::kFloat32, input.shape});
  }

  const PixelStep* AsPixelStep() const override { return &step_; }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(OutputSpec(TensorSpec{input.dtype(), input.shape()}).status());
    const int64_t c = Channels();
    const int64_t n = input.num_elements();
    // Every byte is written below: no zero-fill first.
    ASSIGN_OR_RETURN(Tensor out,
                     TryAllocateUninitialized(DType::kFloat32, input.shape(), "its output"));
    float* dst = out.mutable_data<float>();
    VisitNumericDType(input.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = input.data<T>();
      if (c == 1) {
        const float m = mean_[0], s = std_[0];
        for (int64_t i = 0; i < n; ++i) dst[i] = (ConvertNumber<float>(src[i]) - m) / s;
        return;
      }
      // Per channel: the last dimension is c (OutputSpec), so n is a multiple of c; a pixel at
      // a time with the channel's constants, no modulo per value (vectorizes for c = 3 too).
      const float* m = per_channel_mean_.data();
      const float* s = per_channel_std_.data();
      for (int64_t p = 0; p < n; p += c) {
        for (int64_t k = 0; k < c; ++k) {
          dst[p + k] = (ConvertNumber<float>(src[p + k]) - m[k]) / s[k];
        }
      }
    });
    return Element(std::move(out));
  }

 private:
  int64_t Channels() const { return static_cast<int64_t>(std::max(mean_.size(), std_.size())); }

  // mean_ and std_ with the single value repeated to Channels() values.
  static std::vector<float> PerChannel(const std::vector<float>& v, size_t channels) {
    return v.size() == 1 ? std::vector<float>(channels, v[0]) : v;
  }

  const std::vector<float> mean_;
  const std::vector<float> std_;
  const std::vector<float> per_channel_mean_ = PerChannel(mean_, static_cast<size_t>(Channels()));
  const std::vector<float> per_channel_std_ = PerChannel(std_, static_cast<size_t>(Channels()));
  const PixelStep step_{PixelStep::Kind::kNormalize, std::nullopt, mean_, std_};
};

}  // namespace

SLUICE_REGISTER_OPS(normalize_fn) {
  MapFnRegistration r;
  r.name = "normalize";
  r.make = [](const proto::MapOp& m) -> absl::StatusOr<std::unique_ptr<ComponentFn>> {
    std::vector<float> mean(m.normalize().mean().begin(), m.normalize().mean().end());
    std::vector<float> std(m.normalize().std().begin(), m.normalize().std().end());
    RETURN_IF_ERROR(NormalizeFn::Validate(mean, std));
    return std::unique_ptr<ComponentFn>(new NormalizeFn(std::move(mean), std::move(std)));
  };
  r.expression = [](const proto::MapOp& m) {
    return absl::StrCat("normalize(mean=", FloatList(m.normalize().mean()),
                        ", std=", FloatList(m.normalize().std()), ")");
  };
  {
    MapFnParseRule p;
    p.name = "normalize";
    p.list_order = 3;
    p.params = {{"mean", true}, {"std", true}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<float> mean, c.Floats("mean", *c.arg(0)));
      ASSIGN_OR_RETURN(std::vector<float> stddev, c.Floats("std", *c.arg(1)));
      for (float x : mean) m->mutable_normalize()->add_mean(x);
      for (float x : stddev) m->mutable_normalize()->add_std(x);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddMapFn(proto::MapOp::kNormalize, std::move(r));
}

}  // namespace sluice
