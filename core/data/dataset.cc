#include "sluice/dataset.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_registry.h"
#include "core/data/spec_inference.h"
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

Dataset Dataset::Jsonl(std::vector<std::string> filenames, std::vector<JsonlKey> keys) {
  proto::DatasetDef def;
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  auto* j = def.mutable_source()->mutable_jsonl();
  for (auto& f : filenames) j->add_filenames(std::move(f));
  for (JsonlKey& k : keys) {
    auto* key = j->add_keys();
    key->set_name(std::move(k.name));
    key->set_dtype(static_cast<proto::DataType>(k.dtype));
    key->set_vector(k.vector);
  }
  return Dataset(std::move(def));
}

Dataset Dataset::Tokenize(std::string model, std::string key, bool add_bos, bool add_eos,
                          int64_t num_parallel_calls) const {
  proto::OpDef op;
  proto::MapOp* m = op.mutable_map();
  m->mutable_tokenize()->set_model(std::move(model));
  m->mutable_tokenize()->set_add_bos(add_bos);
  m->mutable_tokenize()->set_add_eos(add_eos);
  m->set_key(std::move(key));
  m->set_num_parallel_calls(num_parallel_calls);
  return WithOp(std::move(op));
}

Dataset Dataset::Pack(int64_t sequence_length, std::vector<std::string> keys,
                      int64_t max_open_rows) const {
  proto::OpDef op;
  op.mutable_pack()->set_sequence_length(sequence_length);
  for (auto& k : keys) op.mutable_pack()->add_keys(std::move(k));
  op.mutable_pack()->set_max_open_rows(max_open_rows);
  return WithOp(std::move(op));
}

Dataset Dataset::BucketBySequenceLength(std::string length_key, std::vector<int64_t> boundaries,
                                        std::vector<int64_t> batch_sizes,
                                        bool pad_to_bucket_boundary, bool drop_remainder) const {
  proto::OpDef op;
  proto::BucketBySequenceLengthOp* b = op.mutable_bucket_by_sequence_length();
  b->set_key(std::move(length_key));
  for (int64_t x : boundaries) b->add_bucket_boundaries(x);
  for (int64_t x : batch_sizes) b->add_bucket_batch_sizes(x);
  b->set_pad_to_bucket_boundary(pad_to_bucket_boundary);
  b->set_drop_remainder(drop_remainder);
  return WithOp(std::move(op));
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

int64_t Dataset::Cardinality() const {
  absl::StatusOr<std::vector<ElementSpec>> specs = InferElementSpecs(def());
  if (!specs.ok()) return kUnknownCardinality;
  // InferElementSpecs() found a registration for the source and every op.
  const SourceRegistration* source = OpRegistry::Global().FindSource(def().source().kind_case());
  int64_t n = source->cardinality ? source->cardinality(def().source()) : kUnknownCardinality;
  for (int i = 0; i < def().ops_size(); ++i) {
    const proto::OpDef& op = def().ops(i);
    const OpRegistration* r = OpRegistry::Global().FindOp(op.kind_case());
    n = r->cardinality ? r->cardinality(op, (*specs)[i], n) : kUnknownCardinality;
  }
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
    const OpRegistration* r = OpRegistry::Global().FindOp(op.kind_case());
    if (r != nullptr && r->canonicalize) r->canonicalize(&op);
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

std::string Dataset::ToExpression() const {
  std::string out = SourceExpression(def().source());
  for (const proto::OpDef& op : def().ops()) absl::StrAppend(&out, ".", OpExpression(op));
  return out;
}

}  // namespace sluice
