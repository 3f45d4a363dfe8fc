#include "core/data/transform_graph.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/data/map_fns.h"
#include "core/data/ops/csv_reader.h"
#include "core/data/ops/example_parser.h"
#include "core/data/ops/filter_iterator.h"
#include "core/data/ops/image_ops.h"
#include "core/data/ops/padded_batch_iterator.h"
#include "core/data/spec_inference.h"
#include "core/format/python_literal.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"
#include "sluice/dataset.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

const char* PyBool(bool b) { return b ? "True" : "False"; }

std::string TfDType(proto::DataType d) {
  return absl::StrCat("tf.", DTypeName(static_cast<DType>(d)));
}

std::string Literal(const proto::TensorProto& p) {
  absl::StatusOr<Tensor> t = TensorFromProto(p);
  return t.ok() ? TensorToPythonLiteral(*t) : "<invalid literal>";
}

std::string StringList(const google::protobuf::RepeatedPtrField<std::string>& names) {
  std::vector<std::string> quoted;
  for (const std::string& n : names) quoted.push_back(PythonStringLiteral(n));
  return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
}

std::string FloatList(const google::protobuf::RepeatedField<float>& values) {
  std::vector<std::string> out;
  for (float v : values) out.push_back(PythonFloat32Literal(v));
  return absl::StrCat("[", absl::StrJoin(out, ", "), "]");
}

// The active message of SourceDef.kind, or null.
google::protobuf::Message* MutableSource(proto::SourceDef* source) {
  const google::protobuf::OneofDescriptor* kind =
      source->GetDescriptor()->FindOneofByName("kind");
  const google::protobuf::Reflection* r = source->GetReflection();
  const google::protobuf::FieldDescriptor* f =
      kind == nullptr ? nullptr : r->GetOneofFieldDescriptor(*source, kind);
  return f == nullptr ? nullptr : r->MutableMessage(source, f);
}

// The stand-in name interleave's fn is checked and printed with.
constexpr absl::string_view kLambdaFile = "\x01sluice-interleave-input\x01";

std::string MapFnExpression(const proto::MapOp& m) {
  switch (m.fn_case()) {
    case proto::MapOp::kDecodeRaw:
      return absl::StrCat("decode_raw(", TfDType(m.decode_raw().out_type()),
                          m.decode_raw().big_endian() ? ", little_endian=False" : "", ")");
    case proto::MapOp::kCast:
      return absl::StrCat("cast(", TfDType(m.cast().dtype()), ")");
    case proto::MapOp::kReshape:
      return absl::StrCat("reshape([", absl::StrJoin(m.reshape().shape(), ", "), "])");
    case proto::MapOp::kNormalize:
      return absl::StrCat("normalize(mean=", FloatList(m.normalize().mean()),
                          ", std=", FloatList(m.normalize().std()), ")");
    case proto::MapOp::kOneHot: {
      const proto::OneHotFn& o = m.one_hot();
      std::string out = absl::StrCat("one_hot(", o.depth());
      if (o.has_on_value()) absl::StrAppend(&out, ", on_value=", PythonFloat64Literal(o.on_value()));
      if (o.has_off_value()) {
        absl::StrAppend(&out, ", off_value=", PythonFloat64Literal(o.off_value()));
      }
      if (o.dtype() != proto::DT_INVALID) absl::StrAppend(&out, ", dtype=", TfDType(o.dtype()));
      return out + ")";
    }
    case proto::MapOp::kPlugin: {
      std::string out = absl::StrCat("plugin(", PythonStringLiteral(m.plugin().op()));
      for (const proto::PluginArg& a : m.plugin().args()) {
        absl::StrAppend(&out, ", ", a.key(), "=");
        switch (a.value_case()) {
          case proto::PluginArg::kIntValue: absl::StrAppend(&out, a.int_value()); break;
          case proto::PluginArg::kFloatValue:
            absl::StrAppend(&out, PythonFloat64Literal(a.float_value()));
            break;
          case proto::PluginArg::kStringValue:
            absl::StrAppend(&out, PythonStringLiteral(a.string_value()));
            break;
          case proto::PluginArg::kBoolValue: absl::StrAppend(&out, PyBool(a.bool_value())); break;
          case proto::PluginArg::VALUE_NOT_SET: absl::StrAppend(&out, "None"); break;
        }
      }
      return out + ")";
    }
    case proto::MapOp::kParseExample:
      return absl::StrCat("parse_example(", ExampleParser::ToExpression(m.parse_example()), ")");
    case proto::MapOp::kImage:
      return ImageFnExpression(m.image());  // core/data/ops/image_ops.h
    case proto::MapOp::FN_NOT_SET:
      break;
  }
  return "<unset fn>()";
}

// ", key='x'" / ", key=1" / "".
template <typename Op>
std::string KeyArg(const Op& op, bool has_key, bool has_index) {
  if (has_key) return absl::StrCat(", key=", PythonStringLiteral(op.key()));
  if (has_index) return absl::StrCat(", key=", op.index());
  return "";
}

std::string ParallelArgs(int64_t num_parallel_calls, bool has_deterministic, bool deterministic) {
  std::string out;
  if (num_parallel_calls == -1) {
    out += ", num_parallel_calls=tf.data.AUTOTUNE";
  } else if (num_parallel_calls != 0) {
    absl::StrAppend(&out, ", num_parallel_calls=", num_parallel_calls);
  }
  if (has_deterministic) absl::StrAppend(&out, ", deterministic=", PyBool(deterministic));
  return out;
}

std::string Structure(std::vector<std::string> parts) {
  if (parts.size() == 1) return parts[0];
  return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
}

}  // namespace

absl::StatusOr<ElementSpec> NpySourceSpec(const proto::NpySource& source) {
  const DType d = static_cast<DType>(source.dtype());
  if (d == DType::kInvalid || d == DType::kString || DTypeName(d).empty()) {
    return Invalid("npy_dataset: dtype is not set (the parser reads it from the first file's "
                   "header, or give dtype= and shape=)");
  }
  for (int64_t x : source.row_shape()) {
    if (x < 0) return Invalid(absl::StrCat("npy_dataset: bad row shape dimension ", x));
  }
  return ElementSpec(TensorSpec{
      d, Shape(std::vector<int64_t>(source.row_shape().begin(), source.row_shape().end()))});
}

absl::StatusOr<ElementSpec> ListFilesSourceSpec(const proto::ListFilesSource& source) {
  if (source.patterns_size() == 0) return Invalid("list_files: no file pattern given");
  if (source.num_shards() < 0 ||
      (source.num_shards() > 0 &&
       (source.shard_index() < 0 || source.shard_index() >= source.num_shards()))) {
    return Invalid(absl::StrCat("list_files: shard ", source.shard_index(), " of ",
                                source.num_shards(), " is out of range"));
  }
  return ElementSpec(TensorSpec{DType::kString, Shape()});
}

absl::StatusOr<proto::DatasetDef> InterleaveInputGraph(const proto::DatasetDef& fn,
                                                       const std::string& filename) {
  proto::DatasetDef def = fn;
  google::protobuf::Message* source = MutableSource(def.mutable_source());
  const google::protobuf::FieldDescriptor* f =
      source == nullptr ? nullptr : source->GetDescriptor()->FindFieldByName("filenames");
  if (f == nullptr || !f->is_repeated() ||
      f->type() != google::protobuf::FieldDescriptor::TYPE_STRING) {
    return Invalid(absl::StrCat("interleave: the function's source (",
                                SourceKindName(fn.source()),
                                ") does not read files; use a file reader such as "
                                "text_line_dataset or tf_record_dataset"));
  }
  const google::protobuf::Reflection* r = source->GetReflection();
  r->ClearField(source, f);
  r->AddString(source, f, filename);
  return def;
}

absl::StatusOr<ElementSpec> InferInterleaveSpec(const proto::InterleaveOp& op,
                                                const ElementSpec& input) {
  if (!input.is_leaf() || input.leaf().dtype != DType::kString ||
      input.leaf().shape.rank() != 0) {
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
        "`num_parallel_calls` is ", op.num_parallel_calls(), " and `cycle_length` is ",
        op.cycle_length()));
  }
  ASSIGN_OR_RETURN(proto::DatasetDef fn, InterleaveInputGraph(op.fn(), std::string(kLambdaFile)));
  absl::StatusOr<std::vector<ElementSpec>> specs = InferElementSpecs(fn);
  if (!specs.ok()) return Invalid(absl::StrCat("in its function: ", specs.status().message()));
  return specs->back();
}

bool IsTransformOp(const proto::OpDef& op) {
  switch (op.kind_case()) {
    case proto::OpDef::kMap:
    case proto::OpDef::kFilter:
    case proto::OpDef::kPaddedBatch:
    case proto::OpDef::kCache:
    case proto::OpDef::kIgnoreErrors:
    case proto::OpDef::kInterleave:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<ElementSpec> InferTransformOpSpec(const proto::OpDef& op,
                                                 const ElementSpec& input) {
  switch (op.kind_case()) {
    case proto::OpDef::kMap: return InferMapSpec(op.map(), input);
    case proto::OpDef::kFilter: return InferFilterSpec(op.filter(), input);
    case proto::OpDef::kPaddedBatch: return InferPaddedBatchSpec(op.padded_batch(), input);
    case proto::OpDef::kCache: return input;
    case proto::OpDef::kIgnoreErrors: return input;
    case proto::OpDef::kInterleave: return InferInterleaveSpec(op.interleave(), input);
    default: break;
  }
  return Invalid("not a transform op");
}

int64_t TransformOpCardinality(const proto::OpDef& op, int64_t n) {
  switch (op.kind_case()) {
    case proto::OpDef::kMap:
    case proto::OpDef::kCache:
      return n;
    case proto::OpDef::kPaddedBatch: {
      if (n < 0) return n;
      const int64_t b = op.padded_batch().batch_size();
      if (b <= 0) return kUnknownCardinality;
      return n / b + (n % b == 0 || op.padded_batch().drop_remainder() ? 0 : 1);
    }
    case proto::OpDef::kFilter:
    case proto::OpDef::kIgnoreErrors:
      return n == kInfiniteCardinality ? n : kUnknownCardinality;
    default:
      return kUnknownCardinality;
  }
}

std::string TransformSourceExpression(const proto::SourceDef& source) {
  switch (source.kind_case()) {
    case proto::SourceDef::kCsv: {
      const proto::CsvSource& c = source.csv();
      std::vector<std::string> defaults;
      for (const proto::TensorProto& d : c.record_defaults()) {
        bool empty = false;
        for (int64_t x : d.shape()) empty = empty || x == 0;
        defaults.push_back(empty ? TfDType(d.dtype()) : Literal(d));
      }
      std::string out = absl::StrCat("csv_dataset(", StringList(c.filenames()),
                                     ", record_defaults=[", absl::StrJoin(defaults, ", "), "]");
      if (c.header()) out += ", header=True";
      if (!c.field_delim().empty() && c.field_delim() != ",") {
        absl::StrAppend(&out, ", field_delim=", PythonStringLiteral(c.field_delim()));
      }
      if (c.has_use_quote_delim()) {
        absl::StrAppend(&out, ", use_quote_delim=", PyBool(c.use_quote_delim()));
      }
      if (!c.na_value().empty()) {
        absl::StrAppend(&out, ", na_value=", PythonStringLiteral(c.na_value()));
      }
      if (c.select_cols_size() > 0) {
        absl::StrAppend(&out, ", select_cols=[", absl::StrJoin(c.select_cols(), ", "), "]");
      }
      return out + ")";
    }
    case proto::SourceDef::kNpy: {
      const proto::NpySource& n = source.npy();
      return absl::StrCat("npy_dataset(", StringList(n.filenames()), ", dtype=",
                          TfDType(n.dtype()), ", shape=[", absl::StrJoin(n.row_shape(), ", "),
                          "])");
    }
    case proto::SourceDef::kListFiles: {
      const proto::ListFilesSource& l = source.list_files();
      std::string out = absl::StrCat("list_files(", StringList(l.patterns()),
                                     ", shuffle=", PyBool(l.shuffle()),
                                     ", seed=", l.has_seed() ? absl::StrCat(l.seed()) : "None");
      if (l.num_shards() > 0) {
        absl::StrAppend(&out, ", num_shards=", l.num_shards(), ", shard_index=", l.shard_index());
      }
      return out + ")";
    }
    default:
      break;
  }
  return "";
}

std::string TransformOpExpression(const proto::OpDef& op) {
  switch (op.kind_case()) {
    case proto::OpDef::kMap: {
      const proto::MapOp& m = op.map();
      return absl::StrCat("map(", MapFnExpression(m),
                          KeyArg(m, m.component_case() == proto::MapOp::kKey,
                                 m.component_case() == proto::MapOp::kIndex),
                          ParallelArgs(m.num_parallel_calls(), m.has_deterministic(),
                                       m.deterministic()),
                          ")");
    }
    case proto::OpDef::kFilter: {
      const proto::FilterOp& f = op.filter();
      std::vector<std::string> values;
      for (const proto::TensorProto& v : f.values()) values.push_back(Literal(v));
      std::string operands = f.predicate() == proto::FilterOp::VALUE_IN
                                 ? absl::StrCat("[", absl::StrJoin(values, ", "), "]")
                                 : absl::StrJoin(values, ", ");
      return absl::StrCat("filter(", FilterPredicateName(f.predicate()), "(", operands, ")",
                          KeyArg(f, f.component_case() == proto::FilterOp::kKey,
                                 f.component_case() == proto::FilterOp::kIndex),
                          ")");
    }
    case proto::OpDef::kPaddedBatch: {
      const proto::PaddedBatchOp& p = op.padded_batch();
      std::string out = absl::StrCat("padded_batch(", p.batch_size());
      if (p.padded_shapes_size() > 0) {
        std::vector<std::string> shapes;
        for (const proto::PaddedShape& s : p.padded_shapes()) {
          std::vector<std::string> dims;
          for (int64_t d : s.dims()) dims.push_back(d < 0 ? "None" : absl::StrCat(d));
          shapes.push_back(absl::StrCat("[", absl::StrJoin(dims, ", "), "]"));
        }
        absl::StrAppend(&out, ", padded_shapes=", Structure(shapes));
      }
      if (p.padding_values_size() > 0) {
        std::vector<std::string> values;
        for (const proto::TensorProto& v : p.padding_values()) values.push_back(Literal(v));
        absl::StrAppend(&out, ", padding_values=", Structure(values));
      }
      return absl::StrCat(out, ", drop_remainder=", PyBool(p.drop_remainder()), ")");
    }
    case proto::OpDef::kCache:
      if (op.cache().filename().empty()) return "cache()";
      return absl::StrCat("cache(", PythonStringLiteral(op.cache().filename()), ")");
    case proto::OpDef::kIgnoreErrors:
      return op.ignore_errors().log_warning() ? "ignore_errors(log_warning=True)"
                                              : "ignore_errors()";
    case proto::OpDef::kInterleave: {
      const proto::InterleaveOp& i = op.interleave();
      std::string fn = "<invalid function>";
      absl::StatusOr<proto::DatasetDef> def =
          InterleaveInputGraph(i.fn(), std::string(kLambdaFile));
      if (def.ok()) {
        absl::StatusOr<Dataset> ds = Dataset::FromDef(*std::move(def));
        if (ds.ok()) {
          const std::string quoted = PythonStringLiteral(kLambdaFile);
          fn = absl::StrReplaceAll(ds->ToExpression(), {{absl::StrCat("[", quoted, "]"), "f"},
                                                        {quoted, "f"}});
        }
      }
      std::string out = absl::StrCat("interleave(lambda f: ", fn);
      if (i.cycle_length() > 0) absl::StrAppend(&out, ", cycle_length=", i.cycle_length());
      if (i.block_length() > 0) absl::StrAppend(&out, ", block_length=", i.block_length());
      absl::StrAppend(&out, ParallelArgs(i.num_parallel_calls(), i.has_deterministic(),
                                         i.deterministic()));
      return out + ")";
    }
    default:
      break;
  }
  return "";
}

}  // namespace sluice
