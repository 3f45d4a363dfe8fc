#include "core/data/distribute/auto_shard.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "absl/strings/str_cat.h"
#include "core/data/distribute/distribute_spec.h"
#include "core/data/distribute/rebatch.h"
#include "core/data/distribute/replica_cut.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

// A Dataset for a rewritten graph. Our rewrites keep a valid graph valid, so FromDef can only
// fail when `original` was invalid already; `original` is then returned unchanged, and its own
// error surfaces from Validate()/MakeIterator() as before.
Dataset Rewritten(const Dataset& original, proto::DatasetDef def) {
  absl::StatusOr<Dataset> ds = Dataset::FromDef(std::move(def));
  return ds.ok() ? *std::move(ds) : original;
}

absl::StatusOr<Dataset> RewrittenOrError(proto::DatasetDef def) {
  return Dataset::FromDef(std::move(def));
}

// The active source message and its name ("range", "text_line", "tf_record", ...).
const google::protobuf::Message* ActiveSource(const proto::SourceDef& source,
                                              std::string* name) {
  const google::protobuf::Reflection* reflection = source.GetReflection();
  const google::protobuf::OneofDescriptor* kind = source.GetDescriptor()->FindOneofByName("kind");
  const google::protobuf::FieldDescriptor* field =
      kind == nullptr ? nullptr : reflection->GetOneofFieldDescriptor(source, kind);
  if (field == nullptr) {
    *name = "an empty source";
    return nullptr;
  }
  *name = field->name();
  return &reflection->GetMessage(source, field);
}

google::protobuf::Message* MutableActiveSource(proto::SourceDef* source) {
  const google::protobuf::Reflection* reflection = source->GetReflection();
  const google::protobuf::OneofDescriptor* kind = source->GetDescriptor()->FindOneofByName("kind");
  const google::protobuf::FieldDescriptor* field =
      kind == nullptr ? nullptr : reflection->GetOneofFieldDescriptor(*source, kind);
  return field == nullptr ? nullptr : reflection->MutableMessage(source, field);
}

// File sources are recognised by their fields, so that every reader (text lines, TFRecord,
// fixed-length records, CSV, .npy, ...) is FILE-shardable as in TF, where all readers are:
// a `repeated string filenames`, or a `list_files` source (`patterns` with num_shards and
// shard_index, sharded when the pattern is expanded).
const google::protobuf::FieldDescriptor* FilenamesField(const google::protobuf::Message& m) {
  const google::protobuf::FieldDescriptor* f = m.GetDescriptor()->FindFieldByName("filenames");
  if (f == nullptr || !f->is_repeated() ||
      f->type() != google::protobuf::FieldDescriptor::TYPE_STRING) {
    return nullptr;
  }
  return f;
}

bool IsListFiles(const google::protobuf::Message& m) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  return d->FindFieldByName("patterns") != nullptr &&
         d->FindFieldByName("num_shards") != nullptr &&
         d->FindFieldByName("shard_index") != nullptr;
}

// DATA sharding as TF's auto_shard.cc ShardByData does it: below the trailing prefetches, a
// new-style rebatch is rewritten to the legacy rebatch into `num_replicas` pieces (rebatch with
// worker sizes is incompatible with data sharding), and shard(num_shards, index) goes right
// there, before the prefetches.
Dataset ShardByData(const Dataset& dataset, int64_t num_shards, int64_t index,
                    int64_t num_replicas) {
  proto::DatasetDef def = dataset.def();
  std::vector<proto::OpDef> trailing;
  while (def.ops_size() > 0 && def.ops(def.ops_size() - 1).kind_case() == proto::OpDef::kPrefetch) {
    trailing.insert(trailing.begin(), def.ops(def.ops_size() - 1));
    def.mutable_ops()->RemoveLast();
  }
  if (def.ops_size() > 0) {
    proto::OpDef* last = def.mutable_ops(def.ops_size() - 1);
    if (last->kind_case() == proto::OpDef::kRebatch && last->rebatch().legacy_num_replicas() == 0 &&
        num_replicas >= 1) {
      last->mutable_rebatch()->Clear();
      last->mutable_rebatch()->set_legacy_num_replicas(num_replicas);
    }
  }
  if (num_shards > 1) {  // shard(1, 0) is the identity
    proto::OpDef* shard = def.add_ops();
    shard->mutable_shard()->set_num_shards(num_shards);
    shard->mutable_shard()->set_index(index);
  }
  for (proto::OpDef& op : trailing) *def.add_ops() = std::move(op);
  return Rewritten(dataset, std::move(def));
}

}  // namespace

absl::Status TooFewFilesError(int64_t num_files, int64_t num_shards) {
  // TF's text (core/kernels/data/shard_dataset_op.cc), with the spaces TF's literal lacks.
  return absl::InvalidArgumentError(absl::StrCat(
      "Could not apply FILE based sharding: the dataset only has ", num_files,
      " file(s), which is not enough for the required ", num_shards,
      " shards/workers. If you are using datasets with distribution strategy, consider setting "
      "the auto sharding policy to either DATA or OFF using the "
      "`experimental_distribute.auto_shard_policy` option of `tf.data.Options()`. Or, split "
      "your input files into a larger number of small files such that number of files is "
      "greater than number of shards/workers."));
}

absl::StatusOr<AutoShardPolicy> ParseAutoShardPolicy(absl::string_view name) {
  std::string upper = absl::AsciiStrToUpper(name);
  if (upper == "OFF") return AutoShardPolicy::kOff;
  if (upper == "AUTO") return AutoShardPolicy::kAuto;
  if (upper == "FILE") return AutoShardPolicy::kFile;
  if (upper == "DATA") return AutoShardPolicy::kData;
  if (upper == "HINT") return AutoShardPolicy::kHint;
  return absl::InvalidArgumentError(absl::StrCat("unknown auto-shard policy \"", name,
                                                 "\"; expected OFF, AUTO, FILE, DATA or HINT"));
}

absl::string_view AutoShardPolicyName(AutoShardPolicy policy) {
  switch (policy) {
    case AutoShardPolicy::kOff:
      return "OFF";
    case AutoShardPolicy::kAuto:
      return "AUTO";
    case AutoShardPolicy::kFile:
      return "FILE";
    case AutoShardPolicy::kData:
      return "DATA";
    case AutoShardPolicy::kHint:
      return "HINT";
  }
  return "UNKNOWN";
}

bool ReadsFiles(const Dataset& dataset) {
  // Every op we have passes through to its input for TF's FILE rewrite, so the source decides.
  std::string name;
  const google::protobuf::Message* source = ActiveSource(dataset.def().source(), &name);
  return source != nullptr && (FilenamesField(*source) != nullptr || IsListFiles(*source));
}

absl::StatusOr<Dataset> ShardByFile(const Dataset& dataset, int64_t num_shards, int64_t index) {
  if (num_shards <= 0 || index < 0 || index >= num_shards) {
    return absl::InvalidArgumentError(absl::StrCat("ShardByFile: shard index ", index,
                                                   " out of range for ", num_shards, " shards"));
  }
  std::string name;
  const google::protobuf::Message* source = ActiveSource(dataset.def().source(), &name);
  if (!ReadsFiles(dataset)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Could not apply FILE based sharding: the dataset's source (", name,
        ") does not read files. Consider setting the auto sharding policy to either DATA or OFF "
        "using the `experimental_distribute.auto_shard_policy` option of `tf.data.Options()`."));
  }
  const google::protobuf::Reflection* reflection = source->GetReflection();
  const google::protobuf::FieldDescriptor* range =
      source->GetDescriptor()->FindFieldByName("record_range");
  if (range != nullptr && !range->is_repeated() && reflection->HasField(*source, range)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Could not apply FILE based sharding: the ", name,
        " source is restricted to a record range, which counts records across its files; "
        "shard it by DATA or OFF instead"));
  }
  proto::DatasetDef def = dataset.def();
  google::protobuf::Message* mutable_source = MutableActiveSource(def.mutable_source());
  if (IsListFiles(*source)) {
    // The file names are known only when the patterns are expanded: list_files shards its
    // sorted list then, and reports too few files with the same message (as TF does at run
    // time).
    const google::protobuf::Descriptor* d = source->GetDescriptor();
    const google::protobuf::FieldDescriptor* shards = d->FindFieldByName("num_shards");
    const google::protobuf::FieldDescriptor* shard_index = d->FindFieldByName("shard_index");
    if (reflection->GetInt64(*source, shards) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Could not apply FILE based sharding: the list_files source is already sharded"));
    }
    reflection->SetInt64(mutable_source, shards, num_shards);
    reflection->SetInt64(mutable_source, shard_index, index);
    return RewrittenOrError(std::move(def));
  }
  const google::protobuf::FieldDescriptor* filenames = FilenamesField(*source);
  const int num_files = reflection->FieldSize(*source, filenames);
  if (num_files < num_shards) {
    return TooFewFilesError(num_files, num_shards);
  }
  std::vector<std::string> kept;
  for (int i = static_cast<int>(index); i < num_files; i += static_cast<int>(num_shards)) {
    kept.push_back(reflection->GetRepeatedString(*source, filenames, i));
  }
  reflection->ClearField(mutable_source, filenames);
  for (std::string& f : kept) reflection->AddString(mutable_source, filenames, std::move(f));
  return RewrittenOrError(std::move(def));
}

Dataset ReplaceShardHints(const Dataset& dataset, int64_t num_shards, int64_t index) {
  proto::DatasetDef def = dataset.def();
  bool changed = false;
  for (proto::OpDef& op : *def.mutable_ops()) {
    if (op.kind_case() != proto::OpDef::kShard) continue;
    proto::ShardOp* shard = op.mutable_shard();
    if (!shard->num_shards_is_hint()) continue;  // TF keys on the SHARD_HINT num_shards
    shard->set_num_shards(num_shards);
    shard->set_index(index);
    shard->set_num_shards_is_hint(false);
    shard->set_index_is_hint(false);
    changed = true;
  }
  return changed ? Rewritten(dataset, std::move(def)) : dataset;
}

absl::StatusOr<Dataset> DistributeForWorker(const Dataset& dataset, AutoShardPolicy policy,
                                            int64_t num_workers, int64_t worker_index,
                                            int64_t num_replicas_in_sync) {
  if (num_workers <= 0 || worker_index < 0 || worker_index >= num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("DistributeForWorker: worker index ",
                                                   worker_index, " out of range for ",
                                                   num_workers, " workers"));
  }
  if (num_replicas_in_sync <= 0 || num_replicas_in_sync % num_workers != 0) {
    // input_lib.py's ValueError.
    return absl::InvalidArgumentError(absl::StrCat(
        "tf.distribute expects every worker to have the same number of replicas. However, "
        "encountered `num_replicas_in_sync` (",
        num_replicas_in_sync, ") that cannot be divided by `num_workers` (", num_workers, ")"));
  }
  RETURN_IF_ERROR(dataset.Validate());
  const int64_t replicas_per_worker = num_replicas_in_sync / num_workers;

  // input_lib.py: rebatch first (only with more than one replica in sync) ...
  // (core/data/distribute/replica_cut.h: the same rule the service's tasks cut by).
  Dataset ds = dataset;
  if (num_replicas_in_sync > 1) {
    ASSIGN_OR_RETURN(ReplicaCut cut, ReplicaCutForWorker(dataset, num_workers,
                                                         replicas_per_worker, worker_index));
    ds = ApplyReplicaCut(ds, cut).Prefetch(replicas_per_worker);
  }

  // ... then auto-shard (grappler's auto_shard.cc, OptimizeGraph/ApplyAutoShard). It runs for
  // one worker too: only FILE with one worker is skipped, so AUTO and DATA still rewrite the
  // rebatch to the legacy one (observable: range(8).batch(4) over 3 replicas gives
  // [0,1],[2,3],[] in TF 2.15, not [0,1],[2],[3]).
  switch (policy) {
    case AutoShardPolicy::kOff:
      return ds;
    case AutoShardPolicy::kFile:
      if (num_workers == 1) return ds;
      return ShardByFile(ds, num_workers, worker_index);
    case AutoShardPolicy::kData:
      return ShardByData(ds, num_workers, worker_index, num_replicas_in_sync);
    case AutoShardPolicy::kHint:
      return ReplaceShardHints(ds, num_workers, worker_index);
    case AutoShardPolicy::kAuto:
      // FILE when the source reads files (its errors stand: TF falls back to DATA only when it
      // finds no reader), else DATA.
      if (ReadsFiles(ds)) return ShardByFile(ds, num_workers, worker_index);
      return ShardByData(ds, num_workers, worker_index, num_replicas_in_sync);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown auto-shard policy ", static_cast<int>(policy)));
}

}  // namespace sluice
