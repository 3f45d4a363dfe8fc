#include "core/data/spec_inference.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/ops/csv_reader.h"
#include "core/data/ops/permuted_source_iterator.h"
#include "core/data/ops/record_iterators.h"
#include "core/data/ops/webdataset_reader.h"
#include "core/data/transform_graph.h"
#include "core/format/python_literal.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

// A literal tensor may claim at most this many elements; larger claims are refused before
// anything is allocated (a corrupt or hostile graph must not make us multiply into overflow).
constexpr int64_t kMaxLiteralElements = int64_t{1} << 40;

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

absl::Status CheckStructureHasNoLists(const Element& e) {
  if (e.kind() == NestKind::kList) {
    return Invalid(
        "the element has a list structure; tf.data reads Python lists as tensors, so a "
        "structure must be a tuple or a dict");
  }
  for (const Element& c : e.children()) RETURN_IF_ERROR(CheckStructureHasNoLists(c));
  return absl::OkStatus();
}

// Decodes a source literal, refusing oversized shape claims before ElementFromProto
// allocates them.
absl::StatusOr<Element> DecodeLiteral(const proto::ElementProto& p) {
  for (int i = 0; i < p.tensors_size(); ++i) {
    int64_t n = 1;
    for (int64_t d : p.tensors(i).shape()) {
      if (d < 0) {
        return Invalid(absl::StrCat("literal component ", i, " has a negative dimension ", d));
      }
      if (d != 0 && n > kMaxLiteralElements / d) {
        return Invalid(absl::StrCat("literal component ", i, " claims more than ",
                                    kMaxLiteralElements, " elements"));
      }
      n *= d;
    }
  }
  absl::StatusOr<Element> e = ElementFromProto(p);
  if (!e.ok()) return Invalid(absl::StrCat("bad literal: ", e.status().message()));
  RETURN_IF_ERROR(CheckStructureHasNoLists(*e));
  if (e->num_leaves() == 0) {
    return Invalid("the element has no components (tf.data needs at least one tensor)");
  }
  return *std::move(e);
}

absl::StatusOr<ElementSpec> SourceSpec(const proto::SourceDef& source) {
  switch (source.kind_case()) {
    case proto::SourceDef::kRange:
      if (source.range().step() == 0) return Invalid("step must not be 0");
      return ElementSpec(TensorSpec{DType::kInt64, Shape()});
    case proto::SourceDef::kFromTensors: {
      ASSIGN_OR_RETURN(Element e, DecodeLiteral(source.from_tensors().element()));
      return SpecOf(e);
    }
    case proto::SourceDef::kFromTensorSlices: {
      ASSIGN_OR_RETURN(Element e, DecodeLiteral(source.from_tensor_slices().element()));
      std::vector<Tensor> leaves = e.Flatten();
      for (size_t i = 0; i < leaves.size(); ++i) {
        if (leaves[i].shape().rank() == 0) {
          return Invalid(absl::StrCat("component ", i,
                                      " is a scalar; slicing needs tensors of rank >= 1"));
        }
        if (leaves[i].shape().dim(0) != leaves[0].shape().dim(0)) {
          return Invalid(absl::StrCat("components differ in dimension 0: component 0 has ",
                                      leaves[0].shape().dim(0), ", component ", i, " has ",
                                      leaves[i].shape().dim(0)));
        }
      }
      return e.Map([](const Tensor& t) { return TensorSpec{t.dtype(), t.shape().DropFirst()}; });
    }
    case proto::SourceDef::kTfRecord:  // core/data/ops/record_iterators.h
      RETURN_IF_ERROR(ValidateTFRecordSource(source.tf_record()));
      return ElementSpec(TensorSpec{DType::kString, Shape()});
    case proto::SourceDef::kFixedLengthRecord:
      RETURN_IF_ERROR(ValidateFixedLengthRecordSource(source.fixed_length_record()));
      return ElementSpec(TensorSpec{DType::kString, Shape()});
    case proto::SourceDef::kTextLine:
      return ElementSpec(TensorSpec{DType::kString, Shape()});
    case proto::SourceDef::kWebdataset:  // core/data/ops/webdataset_reader.h
      RETURN_IF_ERROR(ValidateWebDatasetSource(source.webdataset()));
      return WebDatasetSpec(source.webdataset());
    case proto::SourceDef::kCsv:
      return CsvSourceSpec(source.csv());
    case proto::SourceDef::kNpy:
      return NpySourceSpec(source.npy());
    case proto::SourceDef::kListFiles:
      return ListFilesSourceSpec(source.list_files());
    case proto::SourceDef::kPermuted:  // core/data/ops/permuted_source_iterator.h
      RETURN_IF_ERROR(ValidatePermutedSource(source.permuted()));
      return SourceSpec(source.permuted().source());
    case proto::SourceDef::KIND_NOT_SET:
      break;
  }
  return Invalid("no source set");
}

// The index (in flatten order) of the first scalar leaf, or -1.
int FirstScalar(const ElementSpec& spec) {
  std::vector<TensorSpec> leaves = spec.Flatten();
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i].shape.rank() == 0) return static_cast<int>(i);
  }
  return -1;
}

ElementSpec WithBatchDim(const ElementSpec& spec, int64_t dim) {
  return spec.Map([dim](const TensorSpec& s) {
    return TensorSpec{s.dtype, s.shape.DropFirst().Prepend(dim)};
  });
}

absl::StatusOr<ElementSpec> RebatchSpec(const proto::RebatchOp& r, const ElementSpec& input) {
  if (r.legacy_num_replicas() != 0) {
    if (r.batch_sizes_size() > 0) {
      return Invalid("batch_sizes and legacy_num_replicas cannot both be set");
    }
    int64_t n = r.legacy_num_replicas();
    if (n <= 0) return Invalid(absl::StrCat("num_replicas must be positive, got ", n));
    int scalar = FirstScalar(input);
    if (scalar >= 0) {
      return Invalid(absl::StrCat("component ", scalar,
                                  " is a scalar; rebatch needs a batched input (rank >= 1)"));
    }
    return input.Map([n](const TensorSpec& s) {
      int64_t d = s.shape.dim(0);
      int64_t out = (d != kUnknownDim && d % n == 0) ? d / n : kUnknownDim;
      return TensorSpec{s.dtype, s.shape.WithFirst(out)};
    });
  }
  if (r.batch_sizes_size() == 0) return Invalid("batch_sizes must not be empty");
  bool all_zero = true;
  for (int i = 0; i < r.batch_sizes_size(); ++i) {
    if (r.batch_sizes(i) < 0) {
      return Invalid(absl::StrCat("batch_sizes must be >= 0, got ", r.batch_sizes(i),
                                  " at position ", i));
    }
    if (r.batch_sizes(i) != 0) all_zero = false;
  }
  if (all_zero) return Invalid("batch_sizes must not all be 0");
  int scalar = FirstScalar(input);
  if (scalar >= 0) {
    return Invalid(absl::StrCat("component ", scalar,
                                " is a scalar; rebatch needs a batched input (rank >= 1)"));
  }
  // TF's _compute_static_batch_dim.
  int64_t b = r.batch_sizes(0);
  for (int64_t s : r.batch_sizes()) {
    if (s != b) return WithBatchDim(input, kUnknownDim);
  }
  if (r.drop_remainder()) return WithBatchDim(input, b);
  std::vector<TensorSpec> leaves = input.Flatten();
  int64_t known = kUnknownDim;
  int known_at = -1;
  for (size_t i = 0; i < leaves.size(); ++i) {
    int64_t d = leaves[i].shape.dim(0);
    if (d == kUnknownDim) continue;
    if (known == kUnknownDim) {
      known = d;
      known_at = static_cast<int>(i);
    } else if (d != known) {
      return Invalid(absl::StrCat("components have different batch dimensions: component ",
                                  known_at, " has ", known, ", component ", i, " has ", d));
    }
  }
  if (known == kUnknownDim || known % b != 0) return WithBatchDim(input, kUnknownDim);
  return WithBatchDim(input, b);
}

void AppendSpec(const ElementSpec& spec, std::string* out) {
  switch (spec.kind()) {
    case NestKind::kLeaf:
      out->append(spec.leaf().ToString());
      return;
    case NestKind::kDict:
      out->push_back('{');
      for (size_t i = 0; i < spec.children().size(); ++i) {
        if (i > 0) out->append(", ");
        absl::StrAppend(out, PythonStringLiteral(spec.keys()[i]), ": ");
        AppendSpec(spec.children()[i], out);
      }
      out->push_back('}');
      return;
    case NestKind::kTuple:
    case NestKind::kList: {
      bool list = spec.kind() == NestKind::kList;
      out->push_back(list ? '[' : '(');
      for (size_t i = 0; i < spec.children().size(); ++i) {
        if (i > 0) out->append(", ");
        AppendSpec(spec.children()[i], out);
      }
      if (!list && spec.children().size() == 1) out->push_back(',');
      out->push_back(list ? ']' : ')');
      return;
    }
  }
}

}  // namespace

std::string SourceKindName(const proto::SourceDef& source) {
  switch (source.kind_case()) {
    case proto::SourceDef::kRange: return "range";
    case proto::SourceDef::kFromTensors: return "from_tensors";
    case proto::SourceDef::kFromTensorSlices: return "from_tensor_slices";
    case proto::SourceDef::kTextLine: return "text_line_dataset";
    case proto::SourceDef::kTfRecord: return "tf_record_dataset";
    case proto::SourceDef::kFixedLengthRecord: return "fixed_length_record_dataset";
    case proto::SourceDef::kCsv: return "csv_dataset";
    case proto::SourceDef::kNpy: return "npy_dataset";
    case proto::SourceDef::kListFiles: return "list_files";
    case proto::SourceDef::kPermuted: return "permuted";
    case proto::SourceDef::kWebdataset: return "webdataset_dataset";
    case proto::SourceDef::KIND_NOT_SET: break;
  }
  return "unset";
}

std::string OpKindName(const proto::OpDef& op) {
  switch (op.kind_case()) {
    case proto::OpDef::kBatch: return "batch";
    case proto::OpDef::kRepeat: return "repeat";
    case proto::OpDef::kTake: return "take";
    case proto::OpDef::kSkip: return "skip";
    case proto::OpDef::kShard: return "shard";
    case proto::OpDef::kShuffle: return "shuffle";
    case proto::OpDef::kPrefetch: return "prefetch";
    case proto::OpDef::kUnbatch: return "unbatch";
    case proto::OpDef::kRebatch:
      return op.rebatch().legacy_num_replicas() != 0 ? "legacy_rebatch" : "rebatch";
    case proto::OpDef::kMap: return "map";
    case proto::OpDef::kFilter: return "filter";
    case proto::OpDef::kPaddedBatch: return "padded_batch";
    case proto::OpDef::kCache: return "cache";
    case proto::OpDef::kIgnoreErrors: return "ignore_errors";
    case proto::OpDef::kInterleave: return "interleave";
    case proto::OpDef::KIND_NOT_SET: break;
  }
  return "unset";
}

std::string DescribePosition(const proto::DatasetDef& def, int position) {
  if (position < 0) return "dataset graph";
  if (position == 0) return absl::StrCat("source (", SourceKindName(def.source()), ")");
  std::string name = position <= def.ops_size() ? OpKindName(def.ops(position - 1)) : "?";
  return absl::StrCat("op ", position, " (", name, ")");
}

absl::StatusOr<ElementSpec> InferOpSpec(const proto::OpDef& op, const ElementSpec& input) {
  switch (op.kind_case()) {
    case proto::OpDef::kBatch: {
      int64_t n = op.batch().batch_size();
      if (n <= 0) return Invalid(absl::StrCat("batch_size must be positive, got ", n));
      int64_t dim = op.batch().drop_remainder() ? n : kUnknownDim;
      return input.Map([dim](const TensorSpec& s) {
        return TensorSpec{s.dtype, s.shape.Prepend(dim)};
      });
    }
    case proto::OpDef::kRepeat:
      if (op.repeat().count() < -1) {
        return Invalid(absl::StrCat("count must be -1 (forever) or >= 0, got ",
                                    op.repeat().count()));
      }
      return input;
    case proto::OpDef::kTake:
      if (op.take().count() < -1) {
        return Invalid(absl::StrCat("count must be -1 (all) or >= 0, got ", op.take().count()));
      }
      return input;
    case proto::OpDef::kSkip:
      if (op.skip().count() < -1) {
        return Invalid(absl::StrCat("count must be -1 (all) or >= 0, got ", op.skip().count()));
      }
      return input;
    case proto::OpDef::kShard: {
      const proto::ShardOp& s = op.shard();
      if (!s.num_shards_is_hint() && s.num_shards() <= 0) {
        return Invalid(absl::StrCat("num_shards must be positive, got ", s.num_shards()));
      }
      if (!s.index_is_hint()) {
        if (s.index() < 0) return Invalid(absl::StrCat("index must be >= 0, got ", s.index()));
        if (!s.num_shards_is_hint() && s.index() >= s.num_shards()) {
          return Invalid(absl::StrCat("index must be in [0, ", s.num_shards(), "), got ",
                                      s.index()));
        }
      }
      return input;
    }
    case proto::OpDef::kShuffle:
      if (op.shuffle().buffer_size() <= 0) {
        return Invalid(absl::StrCat("buffer_size must be positive, got ",
                                    op.shuffle().buffer_size()));
      }
      return input;
    case proto::OpDef::kPrefetch:
      if (op.prefetch().buffer_size() < -1) {
        return Invalid(absl::StrCat("buffer_size must be >= 0 or -1 (AUTOTUNE), got ",
                                    op.prefetch().buffer_size()));
      }
      return input;
    case proto::OpDef::kUnbatch: {
      int scalar = FirstScalar(input);
      if (scalar >= 0) {
        return Invalid(absl::StrCat("cannot unbatch scalar components: component ", scalar,
                                    " has shape ()"));
      }
      return input.Map([](const TensorSpec& s) {
        return TensorSpec{s.dtype, s.shape.DropFirst()};
      });
    }
    case proto::OpDef::kRebatch:
      return RebatchSpec(op.rebatch(), input);
    case proto::OpDef::kMap:
    case proto::OpDef::kFilter:
    case proto::OpDef::kPaddedBatch:
    case proto::OpDef::kCache:
    case proto::OpDef::kIgnoreErrors:
    case proto::OpDef::kInterleave:
      return InferTransformOpSpec(op, input);  // core/data/transform_graph.h
    case proto::OpDef::KIND_NOT_SET:
      break;
  }
  return Invalid("no op set (written by a newer build?)");
}

absl::StatusOr<std::vector<ElementSpec>> InferElementSpecs(const proto::DatasetDef& def,
                                                           int* failed_position) {
  int position = kGraphPosition;
  auto fail = [&](const absl::Status& s) {
    if (failed_position != nullptr) *failed_position = position;
    return absl::InvalidArgumentError(
        absl::StrCat(DescribePosition(def, position), ": ", s.message()));
  };
  if (def.version() != proto::DATASET_GRAPH_VERSION_1) {
    if (def.version() == proto::DATASET_GRAPH_VERSION_UNSPECIFIED) {
      return fail(Invalid("version is not set"));
    }
    return fail(Invalid(absl::StrCat("unknown version ", static_cast<int>(def.version()),
                                     " (this build reads version 1)")));
  }
  if (def.source().kind_case() == proto::SourceDef::KIND_NOT_SET) {
    return fail(Invalid("no source set"));
  }
  std::vector<ElementSpec> specs;
  position = 0;
  absl::StatusOr<ElementSpec> spec = SourceSpec(def.source());
  if (!spec.ok()) return fail(spec.status());
  specs.push_back(*std::move(spec));
  for (int i = 0; i < def.ops_size(); ++i) {
    position = i + 1;
    spec = InferOpSpec(def.ops(i), specs.back());
    if (!spec.ok()) return fail(spec.status());
    specs.push_back(*std::move(spec));
  }
  return specs;
}

std::string ElementSpecToString(const ElementSpec& spec) {
  std::string out;
  AppendSpec(spec, &out);
  return out;
}

}  // namespace sluice
