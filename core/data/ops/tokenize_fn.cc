// tokenize(model, add_bos=False, add_eos=False) for map(): a string scalar becomes its
// SentencePiece ids, an int32 vector [n] (n varies per element: padded_batch,
// bucket_by_sequence_length or pack batch them). The model (sentencepiece_model.h) is loaded
// when the pipeline is built (ComponentFn::Open) and shared by all the process's threads and
// pipelines; a model that cannot be loaded fails the pipeline, not its elements, with an error
// naming the file (NOT_FOUND, INVALID_ARGUMENT, ...), so ignore_errors() cannot turn it into an
// empty dataset. Spec inference does not load it (a client need not reach the file).
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/map_fns.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/sentencepiece_model.h"
#include "core/format/python_literal.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

class TokenizeFn : public ComponentFn {
 public:
  explicit TokenizeFn(proto::TokenizeFn options) : options_(std::move(options)) {}

  std::string Describe() const override {
    return absl::StrCat("tokenize(", PythonStringLiteral(options_.model()), ")");
  }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    RETURN_IF_ERROR(Check(input.dtype, input.shape));
    return ElementSpec(TensorSpec{DType::kInt32, Shape({kUnknownDim})});
  }

  absl::Status Open() override {
    ASSIGN_OR_RETURN(model_, SentencePieceModel::Get(options_.model()));
    return absl::OkStatus();
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(Check(input.dtype(), input.shape()));
    if (model_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(Describe(), " was applied before its model was loaded (Open)"));
    }
    ASSIGN_OR_RETURN(Tensor ids,
                     model_->Encode(input.string_at(0), options_.add_bos(), options_.add_eos()));
    return Element(std::move(ids));
  }

 private:
  static absl::Status Check(DType dtype, const Shape& shape) {
    if (dtype != DType::kString || shape.rank() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the input must be a string scalar (one text), got ", DTypeName(dtype), " ",
          shape.ToString(), "; tokenize before batching"));
    }
    return absl::OkStatus();
  }

  const proto::TokenizeFn options_;
  // Set by Open, before any Apply; immutable after.
  std::shared_ptr<const SentencePieceModel> model_;
};

}  // namespace

SLUICE_REGISTER_OPS(tokenize_fn) {
  MapFnRegistration r;
  r.name = "tokenize";
  r.make = [](const proto::MapOp& m) -> absl::StatusOr<std::unique_ptr<ComponentFn>> {
    if (m.tokenize().model().empty()) {
      return absl::InvalidArgumentError("tokenize: model must name a SentencePiece .model file");
    }
    return std::unique_ptr<ComponentFn>(new TokenizeFn(m.tokenize()));
  };
  r.expression = [](const proto::MapOp& m) {
    const proto::TokenizeFn& t = m.tokenize();
    std::string out = absl::StrCat("tokenize(", PythonStringLiteral(t.model()));
    if (t.add_bos()) out += ", add_bos=True";
    if (t.add_eos()) out += ", add_eos=True";
    return out + ")";
  };
  {
    MapFnParseRule p;
    p.name = "tokenize";
    p.list_order = 16;
    p.params = {{"model", true}, {"add_bos", false}, {"add_eos", false}};
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      proto::TokenizeFn* t = m->mutable_tokenize();
      ASSIGN_OR_RETURN(std::string model, c.Str("model", *c.arg(0)));
      t->set_model(model);
      if (c.given(1)) {
        ASSIGN_OR_RETURN(bool b, c.Bool("add_bos", *c.arg(1)));
        t->set_add_bos(b);
      }
      if (c.given(2)) {
        ASSIGN_OR_RETURN(bool b, c.Bool("add_eos", *c.arg(2)));
        t->set_add_eos(b);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddMapFn(proto::MapOp::kTokenize, std::move(r));
}

}  // namespace sluice
