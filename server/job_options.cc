#include "server/job_options.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rpc/trainer_id.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace sluice {

namespace {

constexpr proto::WireVersion kWireVersion = proto::WIRE_VERSION_1;

std::string WireVersionName(int v) {
  std::string name = proto::WireVersion_Name(static_cast<proto::WireVersion>(v));
  return name.empty() ? absl::StrCat("wire version ", v) : name;
}

absl::Status ValidateCrossTrainerOptions(const proto::JobOptions& o, absl::string_view where) {
  const proto::CrossTrainerOptions& x = o.cross_trainer();
  if (!x.enabled()) return absl::OkStatus();
  if (o.read_mode() != proto::READ_MODE_INDEPENDENT) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".cross_trainer: a job shared across trainers needs READ_MODE_INDEPENDENT (the "
               "consumers of one trainer split its steps)"));
  }
  if (x.max_trainers() < 0 || x.max_trainers() > kMaxTrainersPerJob) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".cross_trainer.max_trainers must be in [0, ",
                                                   kMaxTrainersPerJob, "], got ", x.max_trainers()));
  }
  const int64_t max = x.max_trainers() > 0 ? x.max_trainers() : kDefaultMaxTrainers;
  if (x.expected_trainers() < 0 || x.expected_trainers() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".cross_trainer.expected_trainers must be in [0, ", max,
                     "] (max_trainers), got ", x.expected_trainers()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobTrainer(const proto::JobOptions& o, absl::string_view trainer_id,
                                absl::string_view where) {
  const std::string field = absl::StrCat(where, ".trainer_id");
  if (!o.cross_trainer().enabled()) {
    if (trainer_id.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        field, " ", QuoteTrainerId(trainer_id),
        " names a trainer, but the job is not shared (options.cross_trainer.enabled is false)"));
  }
  if (trainer_id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is empty: a job shared across trainers (options.cross_trainer) needs one"));
  }
  return ValidateTrainerId(trainer_id, field);
}

absl::Status CheckWireVersion(int version, absl::string_view request) {
  if (version == kWireVersion) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      request, ".wire_version: wire version mismatch: the coordinator speaks ",
      WireVersionName(kWireVersion), ", the request has ", WireVersionName(version)));
}

absl::Status ValidateJobOptions(const proto::JobOptions& o, absl::string_view where) {
  if (o.dataset_id().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".dataset_id is empty"));
  }
  if (o.num_consumers() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".num_consumers must be positive, got ", o.num_consumers()));
  }
  if (o.replicas_per_consumer() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".replicas_per_consumer must be positive, got ", o.replicas_per_consumer()));
  }
  if (!proto::ShardingPolicy_IsValid(o.sharding_policy())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".sharding_policy: unknown value ", o.sharding_policy()));
  }
  if (!proto::ReadMode_IsValid(o.read_mode())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".read_mode: unknown value ", o.read_mode()));
  }
  if (o.num_tasks() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".num_tasks must be >= 0, got ", o.num_tasks()));
  }
  if (o.split_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".split_size must be >= 0, got ", o.split_size()));
  }
  if (o.start_step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".start_step must be >= 0, got ", o.start_step()));
  }
  if (!proto::WireCompression_IsValid(o.compression())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".compression: unknown value ", o.compression()));
  }
  const proto::GlobalOrder& order = o.order();
  if (!proto::ShuffleMode_IsValid(order.shuffle())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".order.shuffle: unknown value ", order.shuffle()));
  }
  if (order.shuffle_block_size() < 0 || order.num_epochs() < 0 || order.range_steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".order: shuffle_block_size (", order.shuffle_block_size(), "), num_epochs (",
        order.num_epochs(), ") and range_steps (", order.range_steps(), ") must be >= 0"));
  }
  if (absl::Status s = ValidateCrossTrainerOptions(o, where); !s.ok()) return s;
  if (o.sharding_policy() == proto::SHARDING_RANGES &&
      o.read_mode() == proto::READ_MODE_INDEPENDENT) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".sharding_policy: SHARDING_RANGES with READ_MODE_INDEPENDENT is not supported "
               "yet; use READ_MODE_COORDINATED"));
  }
  return absl::OkStatus();
}

namespace {
constexpr int64_t kDefaultRangeSteps = 16;
constexpr int64_t kDefaultShuffleBlock = 1024;
}  // namespace

GlobalOrderOptions OrderOptions(const proto::GlobalOrder& order) {
  GlobalOrderOptions g;
  g.shuffle = order.shuffle();
  g.seed = order.seed();
  g.block_size =
      order.shuffle_block_size() > 0 ? order.shuffle_block_size() : kDefaultShuffleBlock;
  return g;
}

absl::StatusOr<RangeCut> CutJob(const proto::JobOptions& o, int64_t steps_per_epoch) {
  const int64_t epochs = std::max<int64_t>(1, o.order().num_epochs());
  const int64_t range_steps =
      o.order().range_steps() > 0 ? o.order().range_steps() : kDefaultRangeSteps;
  absl::StatusOr<RangeCut> cut = RangeCut::Make(steps_per_epoch, epochs, o.start_step(),
                                                range_steps);
  if (!cut.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GetOrCreateJobRequest.options: ", cut.status().message()));
  }
  return cut;
}

namespace {

std::string FieldValue(const google::protobuf::Message& m,
                       const google::protobuf::FieldDescriptor* f) {
  const google::protobuf::Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(r->GetInt64(m, f));
    case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(r->GetInt32(m, f));
    case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(m, f) ? "true" : "false";
    case google::protobuf::FieldDescriptor::CPPTYPE_ENUM:
      return r->GetEnum(m, f)->name();
    case google::protobuf::FieldDescriptor::CPPTYPE_STRING:
      return absl::StrCat("\"", r->GetString(m, f), "\"");
    default:
      return "(value)";
  }
}

}  // namespace

std::vector<std::string> DifferingFields(const proto::JobOptions& have,
                                         const proto::JobOptions& want) {
  std::vector<std::string> out;
  const google::protobuf::Descriptor* d = proto::JobOptions::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    std::string a = FieldValue(have, f);
    std::string b = FieldValue(want, f);
    if (a != b) out.push_back(absl::StrCat(f->name(), " (job has ", a, ", request has ", b, ")"));
  }
  return out;
}

}  // namespace sluice
