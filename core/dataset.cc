#include "core/dataset.h"

#include "core/proto_convert.h"

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

Dataset Dataset::WithOp(proto::OpDef op) const {
  proto::DatasetDef def = def_;
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

// Owned by the graph work: FromDef, Parse, Validate, element_spec, Cardinality, Fingerprint and
// ToExpression are defined below or in pipeline_parser.cc / spec_inference.cc.

}  // namespace sluice
