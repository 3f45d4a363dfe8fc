// interleave(lambda f: <graph reading f>, cycle_length, block_length, num_parallel_calls,
// deterministic): the registration of the op (core/data/op_registry.h); the iterator is in
// interleave_iterator.h. `fn` is a graph whose file-reading source has no filenames; each input
// element (a string scalar) becomes its only filename.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/data/executor.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/interleave_iterator.h"
#include "core/data/ops/parallel_calls.h"
#include "core/data/spec_inference.h"
#include "core/util/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

// The stand-in name interleave's fn is checked and printed with.
constexpr absl::string_view kLambdaFile = "\x01sluice-interleave-input\x01";

// The active message of SourceDef.kind, or null.
google::protobuf::Message* MutableSource(proto::SourceDef* source) {
  const google::protobuf::OneofDescriptor* kind = source->GetDescriptor()->FindOneofByName("kind");
  const google::protobuf::Reflection* r = source->GetReflection();
  const google::protobuf::FieldDescriptor* f =
      kind == nullptr ? nullptr : r->GetOneofFieldDescriptor(*source, kind);
  return f == nullptr ? nullptr : r->MutableMessage(source, f);
}

// `fn` reading only `filename`: its source's `filenames` set to that one name.
// INVALID_ARGUMENT when the source reads no files (has no `filenames` field).
absl::StatusOr<proto::DatasetDef> InterleaveInputGraph(const proto::DatasetDef& fn,
                                                       const std::string& filename) {
  proto::DatasetDef def = fn;
  google::protobuf::Message* source = MutableSource(def.mutable_source());
  const google::protobuf::FieldDescriptor* f =
      source == nullptr ? nullptr : source->GetDescriptor()->FindFieldByName("filenames");
  if (f == nullptr || !f->is_repeated() ||
      f->type() != google::protobuf::FieldDescriptor::TYPE_STRING) {
    return Invalid(absl::StrCat("interleave: the function's source (", SourceKindName(fn.source()),
                                ") does not read files; use a file reader such as "
                                "text_line_dataset or tf_record_dataset"));
  }
  const google::protobuf::Reflection* r = source->GetReflection();
  r->ClearField(source, f);
  r->AddString(source, f, filename);
  return def;
}

// The input must be string scalars; the spec is fn's, checked with a stand-in file name. TF's
// limits on the arguments (num_parallel_calls <= cycle_length when both fixed).
absl::StatusOr<ElementSpec> InferInterleaveSpec(const proto::InterleaveOp& op,
                                                const ElementSpec& input) {
  if (!input.is_leaf() || input.leaf().dtype != DType::kString || input.leaf().shape.rank() != 0) {
    return Invalid(absl::StrCat("the input elements must be file names (string scalars), got ",
                                ElementSpecToString(input)));
  }
  if (op.cycle_length() == 0 || op.cycle_length() < -1) {
    return Invalid(absl::StrCat("cycle_length must be positive or None, got ", op.cycle_length()));
  }
  if (op.block_length() == 0 || op.block_length() < -1) {
    return Invalid(absl::StrCat("block_length must be positive or None, got ", op.block_length()));
  }
  if (op.num_parallel_calls() < -1) {
    return Invalid(absl::StrCat("num_parallel_calls must be positive, 0 or -1 (AUTOTUNE), got ",
                                op.num_parallel_calls()));
  }
  if (op.cycle_length() > 0 && op.num_parallel_calls() > op.cycle_length()) {
    // TF's message.
    return Invalid(absl::StrCat(
        "If `cycle_length` is set to a fixed value, `num_parallel_calls` must be either "
        "`tf.data.AUTOTUNE` or a value less than or equal to `cycle_length`. However, "
        "`num_parallel_calls` is ",
        op.num_parallel_calls(), " and `cycle_length` is ", op.cycle_length()));
  }
  ASSIGN_OR_RETURN(proto::DatasetDef fn, InterleaveInputGraph(op.fn(), std::string(kLambdaFile)));
  absl::StatusOr<std::vector<ElementSpec>> specs = InferElementSpecs(fn);
  if (!specs.ok()) return Invalid(absl::StrCat("in its function: ", specs.status().message()));
  return specs->back();
}

std::string InterleaveExpression(const proto::InterleaveOp& i) {
  std::string fn = "<invalid function>";
  absl::StatusOr<proto::DatasetDef> def = InterleaveInputGraph(i.fn(), std::string(kLambdaFile));
  if (def.ok()) {
    absl::StatusOr<Dataset> ds = Dataset::FromDef(*std::move(def));
    if (ds.ok()) {
      const std::string quoted = PythonStringLiteral(kLambdaFile);
      fn = absl::StrReplaceAll(ds->ToExpression(),
                               {{absl::StrCat("[", quoted, "]"), "f"}, {quoted, "f"}});
    }
  }
  std::string out = absl::StrCat("interleave(lambda f: ", fn);
  if (i.cycle_length() > 0) absl::StrAppend(&out, ", cycle_length=", i.cycle_length());
  if (i.block_length() > 0) absl::StrAppend(&out, ", block_length=", i.block_length());
  absl::StrAppend(&out,
                  ParallelArgs(i.num_parallel_calls(), i.has_deterministic(), i.deterministic()));
  return out + ")";
}

}  // namespace

SLUICE_REGISTER_OPS(interleave_op) {
  OpRegistration r;
  r.name = "interleave";
  r.infer_spec = [](const proto::OpDef& op, const ElementSpec& input) {
    return InferInterleaveSpec(op.interleave(), input);
  };
  // Cardinality: unknown (it depends on the files).
  r.expression = [](const proto::OpDef& op) { return InterleaveExpression(op.interleave()); };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const proto::InterleaveOp& i = args.op.interleave();
    const int64_t cycle = i.cycle_length() > 0 ? i.cycle_length() : AutotuneParallelism();
    const int64_t block = i.block_length() > 0 ? i.block_length() : 1;
    // Slots are made as inputs open, each charged to the process's budget by the iterator
    // (NewInterleaveIterator): no cycle_length is refused up front, as in TF.
    const int64_t threads = ResolveParallelCalls(i.num_parallel_calls(), args.options);
    const bool deterministic = !i.has_deterministic() || i.deterministic();
    InterleaveInputFn make = [fn = i.fn(), options = args.options](
                                 const Element& e) -> absl::StatusOr<std::unique_ptr<Iterator>> {
      if (!e.is_leaf() || e.leaf().dtype() != DType::kString || e.leaf().shape().rank() != 0) {
        return absl::InvalidArgumentError("the input element is not a file name");
      }
      ASSIGN_OR_RETURN(proto::DatasetDef def, InterleaveInputGraph(fn, e.leaf().string_at(0)));
      ASSIGN_OR_RETURN(Dataset ds, Dataset::FromDef(std::move(def)));
      return MakeIterator(ds, options);
    };
    return IteratorFactory([label, input, make, cycle, block, threads, deterministic] {
      return NewInterleaveIterator(label, input(), make, cycle, block, threads, deterministic);
    });
  };
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "changes how many elements there are, so positions of records no longer cut "
           "global steps";
  };
  {
    OpParseRule p;
    p.name = "interleave";
    p.list_order = 15;
    p.params = {{"map_func", true},
                {"cycle_length", false},
                {"block_length", false},
                {"num_parallel_calls", false},
                {"deterministic", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      proto::InterleaveOp* i = op->mutable_interleave();
      const ParsedArg* fn = c.slot(0);
      const PyValue& f = *c.arg(0);
      if (fn != nullptr && fn->lambda != nullptr) {
        *i->mutable_fn() = *fn->lambda;
      } else if (f.kind == PyValue::Kind::kName && fn != nullptr && fn->call_args == nullptr) {
        // A reader's name, such as text_line_dataset or tf.data.TFRecordDataset.
        absl::StatusOr<proto::DatasetDef> parsed =
            c.context().parse_lambda_body(absl::StrCat(f.text, "(f)"), "f");
        if (!parsed.ok()) {
          return c.Error(f.begin, absl::StrCat("interleave: map_func '", f.text,
                                               "' is not a file reader; write a lambda such "
                                               "as lambda f: csv_dataset(f, record_defaults="
                                               "[0])"));
        }
        *i->mutable_fn() = *std::move(parsed);
      } else {
        return c.Error(f.begin, absl::StrCat("interleave: map_func must be a reader such as "
                                             "text_line_dataset or a lambda such as lambda f: "
                                             "text_line_dataset(f), got ",
                                             c.Text(f)));
      }
      i->set_cycle_length(-1);
      i->set_block_length(-1);
      if (c.given(1)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("cycle_length", *c.arg(1)));
        i->set_cycle_length(n);
      }
      if (c.given(2)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("block_length", *c.arg(2)));
        i->set_block_length(n);
      }
      if (c.given(3)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("num_parallel_calls", *c.arg(3)));
        i->set_num_parallel_calls(n);
      }
      if (c.given(4)) {
        ASSIGN_OR_RETURN(bool d, c.Bool("deterministic", *c.arg(4)));
        i->set_deterministic(d);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kInterleave, std::move(r));
}

}  // namespace sluice
