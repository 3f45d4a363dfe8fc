#include "sluice/dataset.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/data/ops/record_iterators.h"
#include "core/data/ops/webdataset_reader.h"
#include "core/data/spec_inference.h"
#include "core/data/transform_graph.h"
#include "core/format/python_literal.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "proto/dataset.pb.h"

namespace sluice {

Dataset Dataset::Range(int64_t start, int64_t stop, int64_t step) {
  proto::DatasetDef def;
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  auto* r = def.mutable_source()->mutable_range();
  r->set_start(start);
  r->set_stop(stop);
  r->set_step(step);
  return Dataset(std::move(def));
}

Dataset Dataset::FromTensors(const Element& element) {
  proto::DatasetDef def;
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  *def.mutable_source()->mutable_from_tensors()->mutable_element() = ElementToProto(element);
  return Dataset(std::move(def));
}

Dataset Dataset::FromTensorSlices(const Element& element) {
  proto::DatasetDef def;
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  *def.mutable_source()->mutable_from_tensor_slices()->mutable_element() = ElementToProto(element);
  return Dataset(std::move(def));
}

Dataset Dataset::TextLine(std::vector<std::string> filenames) {
  proto::DatasetDef def;
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  auto* t = def.mutable_source()->mutable_text_line();
  for (auto& f : filenames) t->add_filenames(std::move(f));
  return Dataset(std::move(def));
}

Dataset Dataset::TFRecord(std::vector<std::string> filenames, std::string compression_type,
                          int64_t buffer_size, int64_t num_parallel_reads) {
  proto::DatasetDef def;
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  auto* t = def.mutable_source()->mutable_tf_record();
  for (auto& f : filenames) t->add_filenames(std::move(f));
  t->set_compression_type(std::move(compression_type));
  t->set_buffer_size(buffer_size);
  t->set_num_parallel_reads(num_parallel_reads);
  return Dataset(std::move(def));
}

Dataset Dataset::FixedLengthRecord(std::vector<std::string> filenames, int64_t record_bytes,
                                   int64_t header_bytes, int64_t footer_bytes,
                                   std::string compression_type) {
  proto::DatasetDef def;
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  auto* t = def.mutable_source()->mutable_fixed_length_record();
  for (auto& f : filenames) t->add_filenames(std::move(f));
  t->set_record_bytes(record_bytes);
  t->set_header_bytes(header_bytes);
  t->set_footer_bytes(footer_bytes);
  t->set_compression_type(std::move(compression_type));
  return Dataset(std::move(def));
}

Dataset::Dataset(proto::DatasetDef def)
    : def_(std::make_shared<const proto::DatasetDef>(std::move(def))) {}

Dataset Dataset::WithOp(proto::OpDef op) const {
  proto::DatasetDef def = *def_;
  *def.add_ops() = std::move(op);
  return Dataset(std::move(def));
}

Dataset Dataset::Batch(int64_t batch_size, bool drop_remainder) const {
  proto::OpDef op;
  op.mutable_batch()->set_batch_size(batch_size);
  op.mutable_batch()->set_drop_remainder(drop_remainder);
  return WithOp(std::move(op));
}

Dataset Dataset::Repeat(int64_t count) const {
  proto::OpDef op;
  op.mutable_repeat()->set_count(count);
  return WithOp(std::move(op));
}

Dataset Dataset::Take(int64_t count) const {
  proto::OpDef op;
  op.mutable_take()->set_count(count);
  return WithOp(std::move(op));
}

Dataset Dataset::Skip(int64_t count) const {
  proto::OpDef op;
  op.mutable_skip()->set_count(count);
  return WithOp(std::move(op));
}

Dataset Dataset::Shard(int64_t num_shards, int64_t index) const {
  proto::OpDef op;
  op.mutable_shard()->set_num_shards(num_shards);
  op.mutable_shard()->set_index(index);
  return WithOp(std::move(op));
}

Dataset Dataset::ShardHint() const {
  proto::OpDef op;
  op.mutable_shard()->set_num_shards_is_hint(true);
  op.mutable_shard()->set_index_is_hint(true);
  return WithOp(std::move(op));
}

Dataset Dataset::Shuffle(int64_t buffer_size, std::optional<int64_t> seed,
                         bool reshuffle_each_iteration) const {
  proto::OpDef op;
  auto* s = op.mutable_shuffle();
  s->set_buffer_size(buffer_size);
  if (seed.has_value()) {
    s->set_seed(*seed);
    s->set_has_seed(true);
  }
  s->set_reshuffle_each_iteration(reshuffle_each_iteration);
  return WithOp(std::move(op));
}

Dataset Dataset::Prefetch(int64_t buffer_size) const {
  proto::OpDef op;
  op.mutable_prefetch()->set_buffer_size(buffer_size);
  return WithOp(std::move(op));
}

Dataset Dataset::Unbatch() const {
  proto::OpDef op;
  op.mutable_unbatch();
  return WithOp(std::move(op));
}

Dataset Dataset::Rebatch(std::vector<int64_t> batch_sizes, bool drop_remainder) const {
  proto::OpDef op;
  for (int64_t b : batch_sizes) op.mutable_rebatch()->add_batch_sizes(b);
  op.mutable_rebatch()->set_drop_remainder(drop_remainder);
  return WithOp(std::move(op));
}

Dataset Dataset::LegacyRebatch(int64_t num_replicas) const {
  proto::OpDef op;
  op.mutable_rebatch()->set_legacy_num_replicas(num_replicas);
  return WithOp(std::move(op));
}

// FromDef, Validate, element_spec, Cardinality, Fingerprint and ToExpression; Parse is in
// pipeline_parser.cc, the checks and spec rules in spec_inference.cc.

absl::StatusOr<Dataset> Dataset::FromDef(proto::DatasetDef def) {
  RETURN_IF_ERROR(InferElementSpecs(def).status());
  return Dataset(std::move(def));
}

absl::Status Dataset::Validate() const { return InferElementSpecs(def()).status(); }

absl::StatusOr<ElementSpec> Dataset::element_spec() const {
  ASSIGN_OR_RETURN(std::vector<ElementSpec> specs, InferElementSpecs(def()));
  return std::move(specs.back());
}

namespace {

// A count that does not fit in int64 is reported as unknown: no consumer can act on it.
int64_t CountOrUnknown(__int128 n) {
  return n > std::numeric_limits<int64_t>::max() ? kUnknownCardinality : static_cast<int64_t>(n);
}

int64_t RangeCardinality(const proto::RangeSource& r) {
  __int128 start = r.start(), stop = r.stop(), step = r.step();
  if (step > 0) return CountOrUnknown(stop > start ? (stop - start - 1) / step + 1 : 0);
  return CountOrUnknown(start > stop ? (start - stop - 1) / -step + 1 : 0);
}

// The rules of the CardinalityInternal methods of tf.data's kernels.
int64_t OpCardinality(const proto::OpDef& op, const ElementSpec& input, int64_t n) {
  bool finite = n >= 0;
  switch (op.kind_case()) {
    case proto::OpDef::kBatch: {
      if (!finite) return n;
      int64_t b = op.batch().batch_size();
      return n / b + (n % b == 0 || op.batch().drop_remainder() ? 0 : 1);
    }
    case proto::OpDef::kRepeat: {
      int64_t count = op.repeat().count();
      if (count < 0) return n == 0 ? 0 : kInfiniteCardinality;
      if (count == 0) return 0;
      if (!finite) return n;
      return CountOrUnknown(static_cast<__int128>(count) * n);
    }
    case proto::OpDef::kTake: {
      int64_t count = op.take().count();
      if (n == kUnknownCardinality) return kUnknownCardinality;
      if (n == kInfiniteCardinality) return count < 0 ? kInfiniteCardinality : count;
      if (count < 0) return n;
      return std::min(n, count);
    }
    case proto::OpDef::kSkip: {
      if (!finite) return n;
      int64_t count = op.skip().count();
      if (count < 0) return 0;
      return std::max<int64_t>(0, n - count);
    }
    case proto::OpDef::kShard: {
      const proto::ShardOp& s = op.shard();
      if (s.num_shards_is_hint() || s.index_is_hint()) return kUnknownCardinality;
      if (!finite) return n;
      return n / s.num_shards() + (s.index() < n % s.num_shards() ? 1 : 0);
    }
    case proto::OpDef::kShuffle:
    case proto::OpDef::kPrefetch:
      return n;
    case proto::OpDef::kUnbatch: {
      if (!finite) return n;
      // TF uses the first statically known dimension 0 among the components.
      for (const TensorSpec& s : input.Flatten()) {
        if (s.shape.dim(0) != kUnknownDim) {
          return CountOrUnknown(static_cast<__int128>(n) * s.shape.dim(0));
        }
      }
      return kUnknownCardinality;
    }
    case proto::OpDef::kMap:
    case proto::OpDef::kFilter:
    case proto::OpDef::kPaddedBatch:
    case proto::OpDef::kCache:
    case proto::OpDef::kIgnoreErrors:
    case proto::OpDef::kInterleave:
      return TransformOpCardinality(op, n);  // core/data/transform_graph.h
    case proto::OpDef::kRebatch:  // TF reports unknown for both rebatch kernels
    case proto::OpDef::KIND_NOT_SET:
      break;
  }
  return kUnknownCardinality;
}

}  // namespace

int64_t Dataset::Cardinality() const {
  absl::StatusOr<std::vector<ElementSpec>> specs = InferElementSpecs(def());
  if (!specs.ok()) return kUnknownCardinality;
  int64_t n = kUnknownCardinality;
  const proto::SourceDef& source = def().source();
  switch (source.kind_case()) {
    case proto::SourceDef::kRange:
      n = RangeCardinality(source.range());
      break;
    case proto::SourceDef::kFromTensors:
      n = 1;
      break;
    case proto::SourceDef::kFromTensorSlices:
      n = source.from_tensor_slices().element().tensors(0).shape(0);
      break;
    case proto::SourceDef::kPermuted:  // positions [begin, end) of a global order
      n = source.permuted().end() - source.permuted().begin();
      break;
    case proto::SourceDef::kTfRecord:  // TF: unknown without reading the files
    case proto::SourceDef::kFixedLengthRecord:
    case proto::SourceDef::kTextLine:
    case proto::SourceDef::kCsv:
    case proto::SourceDef::kNpy:
    case proto::SourceDef::kListFiles:
    case proto::SourceDef::kWebdataset:
    case proto::SourceDef::KIND_NOT_SET:
      n = kUnknownCardinality;
      break;
  }
  for (int i = 0; i < def().ops_size(); ++i) n = OpCardinality(def().ops(i), (*specs)[i], n);
  return n;
}

namespace {

uint64_t Fnv1a64(absl::string_view bytes, uint64_t offset) {
  uint64_t h = offset;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

std::string Dataset::Fingerprint() const {
  // Fields that carry no meaning (a seed without has_seed, the sizes of a hinted shard) are
  // cleared, so graphs that run the same way hash the same.
  proto::DatasetDef canonical = def();
  for (proto::OpDef& op : *canonical.mutable_ops()) {
    if (op.has_shuffle() && !op.shuffle().has_seed()) op.mutable_shuffle()->clear_seed();
    if (op.has_shard() && op.shard().num_shards_is_hint()) op.mutable_shard()->clear_num_shards();
    if (op.has_shard() && op.shard().index_is_hint()) op.mutable_shard()->clear_index();
  }
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    canonical.SerializeToCodedStream(&coded);
  }
  // FNV-1a is stable across processes and builds (absl::Hash is seeded per process); two runs
  // from different offsets give 128 bits.
  return absl::StrFormat("%016x%016x", Fnv1a64(bytes, 0xcbf29ce484222325ULL),
                         Fnv1a64(bytes, 0x6c62272e07bb0142ULL));
}

namespace {

std::string LiteralExpression(const proto::ElementProto& p) {
  absl::StatusOr<Element> e = ElementFromProto(p);
  return e.ok() ? ElementToPythonLiteral(*e) : "<invalid literal>";
}

std::string SourceExpression(const proto::SourceDef& s) {
  switch (s.kind_case()) {
    case proto::SourceDef::kRange:
      return absl::StrCat("range(", s.range().start(), ", ", s.range().stop(), ", ",
                          s.range().step(), ")");
    case proto::SourceDef::kFromTensors:
      return absl::StrCat("from_tensors(", LiteralExpression(s.from_tensors().element()), ")");
    case proto::SourceDef::kFromTensorSlices:
      return absl::StrCat("from_tensor_slices(",
                          LiteralExpression(s.from_tensor_slices().element()), ")");
    case proto::SourceDef::kCsv:
    case proto::SourceDef::kNpy:
    case proto::SourceDef::kListFiles:
      return TransformSourceExpression(s);  // core/data/transform_graph.h
    case proto::SourceDef::kTfRecord:  // core/data/ops/record_iterators.h
      return TFRecordSourceExpression(s.tf_record());
    case proto::SourceDef::kFixedLengthRecord:
      return FixedLengthRecordSourceExpression(s.fixed_length_record());
    case proto::SourceDef::kWebdataset:  // core/data/ops/webdataset_reader.h
      return WebDatasetSourceExpression(s.webdataset());
    case proto::SourceDef::kPermuted: {
      // Written by the coordinator (core/data/distribute/global_order.h), never parsed: for logs and errors.
      const proto::PermutedSource& p = s.permuted();
      return absl::StrCat("permuted(", SourceExpression(p.source()),
                          ", shuffle=", proto::ShuffleMode_Name(p.shuffle()), ", seed=", p.seed(),
                          ", epoch=", p.epoch(), ", block_size=", p.block_size(),
                          ", begin=", p.begin(), ", end=", p.end(), ")");
    }
    case proto::SourceDef::kTextLine: {
      std::vector<std::string> names;
      for (const std::string& f : s.text_line().filenames()) {
        names.push_back(PythonStringLiteral(f));
      }
      return absl::StrCat("text_line_dataset([", absl::StrJoin(names, ", "), "])");
    }
    case proto::SourceDef::KIND_NOT_SET:
      break;
  }
  return "<no source>";
}

const char* PyBool(bool b) { return b ? "True" : "False"; }

std::string OpExpression(const proto::OpDef& op) {
  switch (op.kind_case()) {
    case proto::OpDef::kBatch:
      return absl::StrCat("batch(", op.batch().batch_size(),
                          ", drop_remainder=", PyBool(op.batch().drop_remainder()), ")");
    case proto::OpDef::kRepeat:
      if (op.repeat().count() == -1) return "repeat()";
      return absl::StrCat("repeat(", op.repeat().count(), ")");
    case proto::OpDef::kTake:
      return absl::StrCat("take(", op.take().count(), ")");
    case proto::OpDef::kSkip:
      return absl::StrCat("skip(", op.skip().count(), ")");
    case proto::OpDef::kShard: {
      const proto::ShardOp& s = op.shard();
      return absl::StrCat(
          "shard(", s.num_shards_is_hint() ? "SHARD_HINT" : absl::StrCat(s.num_shards()), ", ",
          s.index_is_hint() ? "SHARD_HINT" : absl::StrCat(s.index()), ")");
    }
    case proto::OpDef::kShuffle: {
      const proto::ShuffleOp& s = op.shuffle();
      return absl::StrCat("shuffle(", s.buffer_size(),
                          ", seed=", s.has_seed() ? absl::StrCat(s.seed()) : "None",
                          ", reshuffle_each_iteration=", PyBool(s.reshuffle_each_iteration()),
                          ")");
    }
    case proto::OpDef::kPrefetch:
      if (op.prefetch().buffer_size() == -1) return "prefetch(tf.data.AUTOTUNE)";
      return absl::StrCat("prefetch(", op.prefetch().buffer_size(), ")");
    case proto::OpDef::kUnbatch:
      return "unbatch()";
    case proto::OpDef::kMap:
    case proto::OpDef::kFilter:
    case proto::OpDef::kPaddedBatch:
    case proto::OpDef::kCache:
    case proto::OpDef::kIgnoreErrors:
    case proto::OpDef::kInterleave:
      return TransformOpExpression(op);  // core/data/transform_graph.h
    case proto::OpDef::kRebatch: {
      const proto::RebatchOp& r = op.rebatch();
      if (r.legacy_num_replicas() != 0) {
        return absl::StrCat("legacy_rebatch(", r.legacy_num_replicas(), ")");
      }
      return absl::StrCat("rebatch([", absl::StrJoin(r.batch_sizes(), ", "),
                          "], drop_remainder=", PyBool(r.drop_remainder()), ")");
    }
    case proto::OpDef::KIND_NOT_SET:
      break;
  }
  return "<unset op>()";
}

}  // namespace

std::string Dataset::ToExpression() const {
  std::string out = SourceExpression(def().source());
  for (const proto::OpDef& op : def().ops()) absl::StrAppend(&out, ".", OpExpression(op));
  return out;
}

}  // namespace sluice
