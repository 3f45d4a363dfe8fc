#include "server/task_planner.h"

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/distribute/auto_shard.h"
#include "core/util/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace sluice {
namespace {

// Number of elements of range(start, stop, step); step != 0 (the graph validated, and refused
// a range whose length does not fit in int64; computed in 128 bits so that no range overflows).
int64_t RangeSize(const proto::RangeSource& r) {
  const __int128 start = r.start(), stop = r.stop(), step = r.step();
  __int128 n = 0;
  if (step > 0 && stop > start) n = (stop - start - 1) / step + 1;
  if (step < 0 && start > stop) n = (start - stop - 1) / -step + 1;
  return n > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max()
                                                  : static_cast<int64_t>(n);
}

// The reader message set in `source` and its `repeated string filenames` field, if it has one.
template <typename SourceT, typename MessageT>
void FileListField(SourceT* source, MessageT** reader,
                   const google::protobuf::FieldDescriptor** filenames) {
  *reader = nullptr;
  *filenames = nullptr;
  const google::protobuf::Reflection* r = source->GetReflection();
  const google::protobuf::OneofDescriptor* kind = source->GetDescriptor()->FindOneofByName("kind");
  const google::protobuf::FieldDescriptor* set = r->GetOneofFieldDescriptor(*source, kind);
  if (set == nullptr || set->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
    return;
  }
  const google::protobuf::FieldDescriptor* f = set->message_type()->FindFieldByName("filenames");
  if (f == nullptr || !f->is_repeated() || f->type() != google::protobuf::FieldDescriptor::TYPE_STRING) {
    return;
  }
  if constexpr (std::is_const_v<MessageT>) {
    *reader = &r->GetMessage(*source, set);
  } else {
    *reader = r->MutableMessage(source, set);
  }
  *filenames = f;
}

struct FileList {
  int64_t count = 0;
};

// A file-reading source's file count. INVALID_ARGUMENT for a source that is neither split by
// elements nor has a file list (list_files: its files are known only by globbing), or whose
// reader is limited to a record range (a range over all files cannot be cut by file).
absl::StatusOr<FileList> FilesOf(const proto::SourceDef& source) {
  const google::protobuf::Message* reader = nullptr;
  const google::protobuf::FieldDescriptor* filenames = nullptr;
  FileListField(&source, &reader, &filenames);
  const google::protobuf::Reflection* r = source.GetReflection();
  const google::protobuf::FieldDescriptor* set =
      r->GetOneofFieldDescriptor(source, source.GetDescriptor()->FindOneofByName("kind"));
  const std::string name = set != nullptr ? set->name() : "unknown";
  if (reader == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic sharding: the ", name,
        " source has no static list of files or elements to split; use FILE, DATA or OFF"));
  }
  const google::protobuf::FieldDescriptor* range =
      reader->GetDescriptor()->FindFieldByName("record_range");
  if (range != nullptr && reader->GetReflection()->HasField(*reader, range)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic sharding: the ", name,
        " source reads a record range, which cannot be split by file"));
  }
  return FileList{reader->GetReflection()->FieldSize(*reader, filenames)};
}

}  // namespace

absl::StatusOr<std::vector<TaskPlan>> PlanStaticTasks(const Dataset& dataset,
                                                      proto::ShardingPolicy policy,
                                                      int64_t num_tasks) {
  if (num_tasks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("task plan: num_tasks must be positive, got ", num_tasks));
  }
  if (policy == proto::SHARDING_AUTO) {
    policy = ReadsFiles(dataset) ? proto::SHARDING_FILE : proto::SHARDING_DATA;
  }
  std::vector<TaskPlan> plans;
  plans.reserve(num_tasks);
  for (int64_t k = 0; k < num_tasks; ++k) {
    TaskPlan plan;
    switch (policy) {
      case proto::SHARDING_OFF:
        plan.dataset = dataset.def();
        break;
      case proto::SHARDING_DATA:
        plan.dataset = dataset.def();
        plan.step_sharded = true;
        break;
      case proto::SHARDING_FILE: {
        ASSIGN_OR_RETURN(Dataset sharded, ShardByFile(dataset, num_tasks, k));
        plan.dataset = sharded.def();
        break;
      }
      case proto::SHARDING_HINT:
        plan.dataset = ReplaceShardHints(dataset, num_tasks, k).def();
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "task plan: sharding policy ", proto::ShardingPolicy_Name(policy),
            " has no static task plan"));
    }
    plans.push_back(std::move(plan));
  }
  return plans;
}

absl::StatusOr<SplitSource> DescribeSplitSource(const Dataset& dataset) {
  const proto::SourceDef& source = dataset.def().source();
  switch (source.kind_case()) {
    case proto::SourceDef::kRange:
      return SplitSource{false, RangeSize(source.range())};
    case proto::SourceDef::kFromTensors:
      return SplitSource{false, 1};
    case proto::SourceDef::kFromTensorSlices: {
      const proto::ElementProto& e = source.from_tensor_slices().element();
      if (e.tensors_size() == 0 || e.tensors(0).shape_size() == 0) {
        return absl::InvalidArgumentError(
            "dynamic sharding: from_tensor_slices source has no dimension 0 to split");
      }
      return SplitSource{false, e.tensors(0).shape(0)};
    }
    case proto::SourceDef::KIND_NOT_SET:
      return absl::InvalidArgumentError("dynamic sharding: the dataset has no source");
    default:
      break;
  }
  ASSIGN_OR_RETURN(FileList files, FilesOf(source));
  return SplitSource{true, files.count};
}

absl::StatusOr<Dataset> SplitDataset(const Dataset& dataset, int64_t begin, int64_t end) {
  ASSIGN_OR_RETURN(SplitSource source, DescribeSplitSource(dataset));
  if (begin < 0 || begin >= end || end > source.size) {
    return absl::InvalidArgumentError(absl::StrCat("dynamic sharding: split [", begin, ", ", end,
                                                   ") outside the source's ", source.size,
                                                   source.files ? " files" : " elements"));
  }
  proto::DatasetDef def = dataset.def();
  proto::SourceDef* src = def.mutable_source();
  if (source.files) {
    // Keep files [begin, end) of the source's list, whatever the reader.
    google::protobuf::Message* reader = nullptr;
    const google::protobuf::FieldDescriptor* filenames = nullptr;
    FileListField(src, &reader, &filenames);
    const google::protobuf::Reflection* r = reader->GetReflection();
    std::vector<std::string> kept;
    for (int64_t i = begin; i < end; ++i) {
      kept.push_back(r->GetRepeatedString(*reader, filenames, static_cast<int>(i)));
    }
    r->ClearField(reader, filenames);
    for (std::string& f : kept) r->AddString(reader, filenames, std::move(f));
    return Dataset::FromDef(std::move(def));
  }
  if (src->kind_case() == proto::SourceDef::kRange) {
    proto::RangeSource* r = src->mutable_range();
    const int64_t start = r->start();
    const int64_t step = r->step();
    // The values lie between start and stop: wrapping arithmetic gives them without the
    // intermediate products overflowing.
    auto at = [&](int64_t i) {
      return static_cast<int64_t>(static_cast<uint64_t>(start) +
                                  static_cast<uint64_t>(i) * static_cast<uint64_t>(step));
    };
    r->set_start(at(begin));
    if (end < source.size) r->set_stop(at(end));
    return Dataset::FromDef(std::move(def));
  }
  // skip(begin).take(end - begin) right after the source.
  proto::DatasetDef out;
  out.set_version(def.version());
  *out.mutable_source() = def.source();
  if (begin > 0) out.add_ops()->mutable_skip()->set_count(begin);
  if (end < source.size || begin > 0) out.add_ops()->mutable_take()->set_count(end - begin);
  for (const proto::OpDef& op : def.ops()) *out.add_ops() = op;
  return Dataset::FromDef(std::move(out));
}

namespace {
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

absl::StatusOr<RangeCut> RangeCut::Make(int64_t steps_per_epoch, int64_t num_epochs,
                                        int64_t start_step, int64_t range_steps) {
  if (steps_per_epoch < 0 || num_epochs < 1 || range_steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "global order: steps_per_epoch ", steps_per_epoch, " must be >= 0, num_epochs ",
        num_epochs, " and range_steps ", range_steps, " must be positive"));
  }
  const int64_t total = num_epochs * steps_per_epoch;
  if (start_step < 0 || start_step > total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "start_step ", start_step, " is outside the job's ", total, " global steps (",
        num_epochs, " epochs of ", steps_per_epoch, " steps)"));
  }
  RangeCut cut;
  cut.steps_per_epoch_ = steps_per_epoch;
  cut.num_epochs_ = num_epochs;
  cut.start_step_ = start_step;
  cut.range_steps_ = range_steps;
  if (start_step == total) return cut;  // nothing left (also an empty epoch)
  cut.first_epoch_ = start_step / steps_per_epoch;
  const int64_t left_in_first = (cut.first_epoch_ + 1) * steps_per_epoch - start_step;
  cut.first_epoch_ranges_ = CeilDiv(left_in_first, range_steps);
  cut.epoch_ranges_ = CeilDiv(steps_per_epoch, range_steps);
  cut.num_ranges_ =
      cut.first_epoch_ranges_ + (num_epochs - cut.first_epoch_ - 1) * cut.epoch_ranges_;
  return cut;
}

GlobalRange RangeCut::Range(int64_t i) const {
  GlobalRange r;
  r.index = i;
  int64_t begin = 0;
  if (i < first_epoch_ranges_) {
    r.epoch = first_epoch_;
    begin = start_step_ + i * range_steps_;
  } else {
    const int64_t j = i - first_epoch_ranges_;
    r.epoch = first_epoch_ + 1 + j / epoch_ranges_;
    begin = r.epoch * steps_per_epoch_ + (j % epoch_ranges_) * range_steps_;
  }
  const int64_t epoch_end = (r.epoch + 1) * steps_per_epoch_;
  r.first_step = begin;
  r.num_steps = std::min(begin + range_steps_, epoch_end) - begin;
  r.epoch_first_step = r.epoch * steps_per_epoch_;
  return r;
}

}  // namespace sluice
