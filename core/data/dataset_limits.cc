#include "core/data/dataset_limits.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

struct Count {
  int64_t ops = 0;
  int64_t nesting = 0;
};

// Counts OpDefs and the deepest DatasetDef nesting below `m`, which is at nesting `depth`.
// Stops descending past `max_nesting` (the caller reports it), so the recursion is bounded.
void Walk(const google::protobuf::Message& m, int64_t depth, int64_t max_nesting, Count* c) {
  const std::string& type = m.GetDescriptor()->full_name();
  if (type == "sluice.proto.TensorProto" || type == "sluice.proto.ElementProto") return;
  if (type == "sluice.proto.OpDef") ++c->ops;
  if (type == "sluice.proto.DatasetDef") {
    ++depth;
    c->nesting = std::max(c->nesting, depth);
    if (depth > max_nesting) return;
  }
  const google::protobuf::Reflection* r = m.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(m, f); ++i) {
        Walk(r->GetRepeatedMessage(m, f, i), depth, max_nesting, c);
      }
    } else {
      Walk(r->GetMessage(m, f), depth, max_nesting, c);
    }
  }
}

}  // namespace

absl::Status CheckDatasetLimits(const proto::DatasetDef& def, const DatasetLimits& limits) {
  const int64_t bytes = static_cast<int64_t>(def.ByteSizeLong());
  if (bytes > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("dataset graph of ", bytes,
                                                   " bytes exceeds the limit of ",
                                                   limits.max_bytes, " bytes"));
  }
  Count c;
  Walk(def, 0, limits.max_nesting, &c);
  if (c.nesting > limits.max_nesting) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset graph nests graphs (interleave functions) more than ", limits.max_nesting,
        " deep"));
  }
  if (c.ops > limits.max_ops) {
    return absl::InvalidArgumentError(absl::StrCat("dataset graph has ", c.ops,
                                                   " ops, more than the limit of ",
                                                   limits.max_ops));
  }
  return absl::OkStatus();
}

absl::Status CheckPipelineLimits(absl::string_view pipeline, const DatasetLimits& limits) {
  if (static_cast<int64_t>(pipeline.size()) > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline expression of ", pipeline.size(),
                                                   " bytes exceeds the limit of ",
                                                   limits.max_bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace sluice
