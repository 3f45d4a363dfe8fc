// fixed_length_record_dataset(files, record_bytes, ...): the registration of the source
// (core/data/op_registry.h); the reader is in record_iterators.h.
//
// Source fusion (SourceRegistration::absorbed_op): the first map after the source, past any
// repeat(), take(), skip() and shard() (which pass records on whole), when it is a sequential
// map(decode_raw(out_type, little_endian)) of the whole record and record_bytes is a multiple of
// out_type's size, runs in the source: each record is read straight into its decoded tensor
// (NewDecodedFixedLengthRecordIterator), and the records a skip() or shard() before the map
// drops are passed over undecoded (Iterator::Skip). When no op but those follows it, the tensor is the
// pipeline's output as it is, and it is built in the step's place (a co-located consumer's
// ring on a worker): the record's bytes are copied once, from the page cache to the consumer.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/map_fns.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/random_access_source.h"
#include "core/data/ops/record_iterators.h"
#include "core/data/spec_inference.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// Ops that pass the source's elements on whole and unchanged (only which and how many).
bool PassesElementsOn(const proto::OpDef& op) {
  switch (op.kind_case()) {
    case proto::OpDef::kRepeat:
    case proto::OpDef::kTake:
    case proto::OpDef::kSkip:
    case proto::OpDef::kShard:
      return true;
    default:
      return false;
  }
}

// The op the source fuses with (see the top of this file), or -1.
int DecodeRawToFuse(const proto::DatasetDef& graph) {
  int i = 0;
  while (i < graph.ops_size() && PassesElementsOn(graph.ops(i))) ++i;
  if (i == graph.ops_size() || graph.ops(i).kind_case() != proto::OpDef::kMap) return -1;
  const proto::MapOp& map = graph.ops(i).map();
  if (map.fn_case() != proto::MapOp::kDecodeRaw ||
      map.component_case() != proto::MapOp::COMPONENT_NOT_SET ||
      (map.num_parallel_calls() != 0 && map.num_parallel_calls() != 1)) {
    return -1;
  }
  const DType out = static_cast<DType>(map.decode_raw().out_type());
  const size_t width = out == DType::kString || out == DType::kInvalid ? 0 : DTypeSize(out);
  const int64_t record_bytes = graph.source().fixed_length_record().record_bytes();
  if (width == 0 || record_bytes <= 0 || record_bytes % static_cast<int64_t>(width) != 0) {
    return -1;
  }
  return i;
}

// The fused iterators' arguments for op `i` of `graph` (DecodeRawToFuse's); INVALID_ARGUMENT
// as the map's fn would be.
absl::StatusOr<DecodedRecords> FusedDecodeRaw(const proto::DatasetDef& graph, int i) {
  const proto::MapOp& map = graph.ops(i).map();
  // The fn as the unfused map makes it: its errors' name (Describe) is the fused source's.
  ASSIGN_OR_RETURN(const MapFnRegistration* registration, FindMapFnRegistration(map));
  ASSIGN_OR_RETURN(std::unique_ptr<ComponentFn> fn, registration->make(map));
  DecodedRecords d;
  d.out_type = static_cast<DType>(map.decode_raw().out_type());
  d.big_endian = map.decode_raw().big_endian();
  d.map_label = DescribePosition(graph, i + 1);
  d.fn = fn->Describe();
  d.to_step = true;
  for (int j = i + 1; j < graph.ops_size(); ++j) d.to_step &= PassesElementsOn(graph.ops(j));
  return d;
}

}  // namespace

SLUICE_REGISTER_OPS(fixed_length_record_op) {
  SourceRegistration r;
  r.name = "fixed_length_record_dataset";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    RETURN_IF_ERROR(ValidateFixedLengthRecordSource(s.fixed_length_record()));
    return ElementSpec(TensorSpec{DType::kString, Shape()});
  };
  // Cardinality: unknown without reading the files, as TF.
  r.expression = [](const proto::SourceDef& s) {
    return FixedLengthRecordSourceExpression(s.fixed_length_record());
  };
  r.absorbed_op = DecodeRawToFuse;
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::FixedLengthRecordSource source = args.source.fixed_length_record();
    if (args.graph != nullptr && args.absorbed_op >= 0) {
      ASSIGN_OR_RETURN(DecodedRecords decoded, FusedDecodeRaw(*args.graph, args.absorbed_op));
      return IteratorFactory([label, source, decoded] {
        return NewDecodedFixedLengthRecordIterator(label, source, decoded);
      });
    }
    return IteratorFactory([label, source] { return NewFixedLengthRecordIterator(label, source); });
  };
  {
    SourceParseRule p;
    p.name = "fixed_length_record_dataset";
    p.list_order = 5;
    p.aliases = {"FixedLengthRecordDataset"};
    p.params = {{"filenames", true},     {"record_bytes", true}, {"header_bytes", false},
                {"footer_bytes", false}, {"buffer_size", false}, {"compression_type", false},
                {"start_record", false}, {"num_records", false}};
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      proto::FixedLengthRecordSource* f = source->mutable_fixed_length_record();
      RETURN_IF_ERROR(c.Filenames(*c.arg(0), f->mutable_filenames()));
      ASSIGN_OR_RETURN(int64_t record_bytes, c.Int("record_bytes", *c.arg(1)));
      f->set_record_bytes(record_bytes);
      if (c.given(2)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("header_bytes", *c.arg(2)));
        f->set_header_bytes(n);
      }
      if (c.given(3)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("footer_bytes", *c.arg(3)));
        f->set_footer_bytes(n);
      }
      if (c.given(4)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("buffer_size", *c.arg(4)));
        f->set_buffer_size(n);
      }
      if (c.given(5)) {
        ASSIGN_OR_RETURN(*f->mutable_compression_type(), c.Str("compression_type", *c.arg(5)));
      }
      if (c.given(6) || c.given(7)) RETURN_IF_ERROR(c.RecordRange(6, f->mutable_record_range()));
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  r.random_access = [](const proto::SourceDef& s) {
    return CheckUncompressedRandomAccess(s, s.fixed_length_record().compression_type());
  };
  registry.AddSource(proto::SourceDef::kFixedLengthRecord, std::move(r));
}

}  // namespace sluice
