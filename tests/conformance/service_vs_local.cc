#include "tests/conformance/service_vs_local.h"

#include <algorithm>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/distribute/auto_shard.h"
#include "sluice/per_replica_format.h"
#include "core/io/tfrecord_writer.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "proto/example.pb.h"
#include "sluice/service.h"
#include "sluice/strategy.h"

namespace sluice {
namespace {

constexpr int64_t kMaxSteps = 5000;  // every generated pipeline has far fewer

std::vector<std::string> Devices(int64_t replicas) {
  std::vector<std::string> devices;
  for (int64_t r = 0; r < replicas; ++r) devices.push_back(absl::StrCat("CPU:", r));
  return devices;
}

std::string TensorBytes(const Tensor& t, int64_t begin, int64_t end) {
  if (t.dtype() == DType::kString) {
    std::vector<std::string> parts;
    for (int64_t i = begin; i < end; ++i) parts.push_back(absl::CEscape(t.string_at(i)));
    return absl::StrCat("'", absl::StrJoin(parts, "','"), "'");
  }
  const size_t item = DTypeSize(t.dtype());
  const char* data = static_cast<const char*>(t.raw_data());
  return absl::BytesToHexString(absl::string_view(data + begin * item, (end - begin) * item));
}

// One step exactly: Python's repr, then each replica's leaves with dtype, shape and bytes.
void Record(const PerReplica<Element>& value, RecordedRun* run) {
  std::string step = FormatPerReplicaRepr(value);
  for (size_t r = 0; r < value.num_replicas(); ++r) {
    const std::vector<Tensor> leaves = value[r].Flatten();
    for (size_t l = 0; l < leaves.size(); ++l) {
      const Tensor& t = leaves[l];
      absl::StrAppend(&step, "\n  replica ", r, " leaf ", l, ": ", DTypeName(t.dtype()), " ",
                      t.shape().ToString(), " ", TensorBytes(t, 0, t.num_elements()));
      // Rows along dimension 0, for the multiset comparison.
      if (t.shape().rank() == 0) {
        run->rows.push_back(absl::StrCat(l, ":", TensorBytes(t, 0, 1)));
        continue;
      }
      const int64_t rows = t.shape().dim(0);
      const int64_t per_row = rows > 0 ? t.num_elements() / rows : 0;
      for (int64_t i = 0; i < rows; ++i) {
        run->rows.push_back(
            absl::StrCat(l, ":", DTypeName(t.dtype()), ":",
                         TensorBytes(t, i * per_row, (i + 1) * per_row)));
      }
    }
  }
  run->steps.push_back(std::move(step));
}

void ReadAll(DistributedIterator& it, int64_t max_steps, RecordedRun* run) {
  for (int64_t s = 0; s < kMaxSteps && (max_steps < 0 || s < max_steps); ++s) {
    absl::StatusOr<PerReplica<Element>> x = it.GetNext();
    if (!x.ok()) {
      if (x.status().code() != absl::StatusCode::kOutOfRange) run->status = x.status();
      return;
    }
    Record(*x, run);
  }
}

ServiceShardingPolicy ServicePolicy(const std::string& name) {
  if (name == "DATA") return ServiceShardingPolicy::kData;
  if (name == "OFF") return ServiceShardingPolicy::kOff;
  if (name == "FILE") return ServiceShardingPolicy::kFile;
  if (name == "HINT") return ServiceShardingPolicy::kHint;
  if (name == "RANGES") return ServiceShardingPolicy::kRanges;
  if (name == "DYNAMIC") return ServiceShardingPolicy::kDynamic;
  return ServiceShardingPolicy::kAuto;
}

// One consumer's run of one job: max_steps (-1: to the end).
RecordedRun ConsumeOnce(const std::string& coordinator, const ConformanceCase& c,
                        const std::string& job_name, int64_t consumer, int64_t max_steps,
                        const std::optional<IteratorCheckpoint>& resume_from) {
  RecordedRun run;
  absl::StatusOr<Dataset> ds = Dataset::Parse(c.pipeline);
  absl::StatusOr<MirroredStrategy> strategy = MirroredStrategy::Create(Devices(c.replicas));
  if (!ds.ok() || !strategy.ok()) {
    run.status = ds.ok() ? strategy.status() : ds.status();
    return run;
  }
  ServiceOptions options;
  options.coordinator_address = coordinator;
  options.job_name = job_name;
  options.consumer_index = consumer;
  options.num_consumers = c.consumers;
  options.read_mode = c.independent ? ServiceReadMode::kIndependent : ServiceReadMode::kCoordinated;
  options.sharding_policy = ServicePolicy(c.policy);
  options.num_tasks = c.num_tasks;
  options.fetch_to_device = false;
  options.retry_deadline = absl::Seconds(30);
  options.heartbeat_interval = absl::Milliseconds(20);
  options.resume_from = resume_from;
  absl::StatusOr<DistributedDataset> dist = DistributeDatasetFromService(*strategy, *ds, options);
  if (!dist.ok()) {
    run.status = dist.status();
    return run;
  }
  run.spec = FormatPerReplicaSpecRepr(dist->element_spec());
  absl::StatusOr<DistributedIterator> it = dist->MakeIterator();
  if (!it.ok()) {
    run.status = it.status();
    return run;
  }
  ReadAll(*it, max_steps, &run);
  if (absl::StatusOr<IteratorCheckpoint> cp = it->Checkpoint(); cp.ok()) run.checkpoint = *cp;
  return run;
}

std::string Show(const RecordedRun& run) {
  std::string out = absl::StrCat("status: ", run.status.ToString(), "\nspec: ", run.spec, "\n",
                                 run.steps.size(), " steps:\n");
  for (size_t s = 0; s < run.steps.size(); ++s) absl::StrAppend(&out, "[", s, "] ", run.steps[s], "\n");
  return out;
}

std::string CompareRuns(const ConformanceCase& c, const RecordedRun& local,
                        const RecordedRun& service, int64_t consumer, bool* both_rejected) {
  const std::string both = absl::StrCat("--- in-process (worker ", consumer, " of ", c.consumers,
                                        "):\n", Show(local), "--- service (consumer ", consumer,
                                        "):\n", Show(service));
  if (!local.status.ok() || !service.status.ok()) {
    if (local.status.ok() != service.status.ok()) return absl::StrCat("status differs\n", both);
    // Both fail: with the same code, and the service's message says what in-process mode says
    // (it may add where: a worker, a task).
    if (local.status.code() != service.status.code()) {
      return absl::StrCat("both fail, with different codes\n", both);
    }
    if (!absl::StrContains(service.status.message(), local.status.message())) {
      return absl::StrCat("both fail, the service without in-process mode's message\n", both);
    }
    if (both_rejected != nullptr) *both_rejected = true;
    return "";
  }
  if (c.multiset_only) {
    std::vector<std::string> a = local.rows, b = service.rows;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    return a == b ? "" : absl::StrCat("multiset of rows differs\n", both);
  }
  if (local.spec != service.spec) return absl::StrCat("element_spec differs\n", both);
  if (local.steps != service.steps) return absl::StrCat("steps differ\n", both);
  return "";
}

std::string SerializedExample(int64_t i) {
  proto::Example ex;
  auto& features = *ex.mutable_features()->mutable_feature();
  features["label"].mutable_int64_list()->add_value(i * 7 % 10);
  features["bbox"].mutable_float_list()->add_value(static_cast<float>(i) / 4);
  features["bbox"].mutable_float_list()->add_value(static_cast<float>(-i) - 0.5f);
  features["name"].mutable_bytes_list()->add_value(absl::StrCat("ex", i));
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  ex.SerializeToCodedStream(&coded);
  return out;
}

}  // namespace

GeneratorOptions WriteConformanceFiles(const std::string& dir) {
  GeneratorOptions options;
  for (int f = 0; f < 3; ++f) {
    std::string path = absl::StrCat(dir, "/sluice_conformance_", f, ".txt");
    std::ofstream out(path, std::ios::trunc);
    for (int line = 0; line < 4 + 3 * f; ++line) {
      out << (line % 5 == 4 ? "" : absl::StrCat("file", f, "-line", line)) << "\n";
    }
    options.text_files.push_back(path);
  }
  for (int f = 0; f < 2; ++f) {
    std::string path = absl::StrCat(dir, "/sluice_conformance_", f, ".tfrecord");
    std::string bytes;
    for (int64_t i = 0; i < 7 + 4 * f; ++i) AppendTFRecord(SerializedExample(f * 100 + i), &bytes);
    std::ofstream out(path, std::ios::trunc | std::ios::binary);
    out << bytes;
    options.record_files.push_back(path);
  }
  return options;
}

RecordedRun RunLocal(const ConformanceCase& c, int64_t worker_index) {
  RecordedRun run;
  absl::StatusOr<Dataset> ds = Dataset::Parse(c.pipeline);
  absl::StatusOr<AutoShardPolicy> policy = ParseAutoShardPolicy(c.local_policy);
  if (!ds.ok() || !policy.ok()) {
    run.status = ds.ok() ? policy.status() : ds.status();
    return run;
  }
  InputOptions options;
  options.auto_shard_policy = *policy;
  options.experimental_fetch_to_device = false;
  // The values: one worker with all C x R replicas, consumer c's share being replicas
  // c * R .. c * R + R - 1 (docs/SERVICE.md, "Per-replica values").
  const int64_t all = c.consumers * c.replicas;
  absl::StatusOr<MirroredStrategy> strategy = MirroredStrategy::Create(Devices(all));
  if (!strategy.ok()) {
    run.status = strategy.status();
    return run;
  }
  absl::StatusOr<DistributedDataset> dist = strategy->ExperimentalDistributeDataset(*ds, options);
  if (!dist.ok()) {
    run.status = dist.status();
    return run;
  }
  run.spec = FormatPerReplicaSpecRepr(dist->element_spec());
  if (c.consumers > 1) {
    // The element_spec: in-process worker c of C's, as the coordinator answers it.
    absl::StatusOr<MirroredStrategy> worker =
        MirroredStrategy::Create(Devices(c.replicas), {c.consumers, worker_index});
    absl::StatusOr<DistributedDataset> spec_of =
        worker.ok() ? worker->ExperimentalDistributeDataset(*ds, options)
                    : absl::StatusOr<DistributedDataset>(worker.status());
    if (!spec_of.ok()) {
      run.status = spec_of.status();
      return run;
    }
    run.spec = FormatPerReplicaSpecRepr(spec_of->element_spec());
  }
  absl::StatusOr<DistributedIterator> it = dist->MakeIterator();
  if (!it.ok()) {
    run.status = it.status();
    return run;
  }
  for (int64_t s = 0; s < kMaxSteps; ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (!x.ok()) {
      if (x.status().code() != absl::StatusCode::kOutOfRange) run.status = x.status();
      break;
    }
    std::vector<Element> mine(x->values().begin() + worker_index * c.replicas,
                              x->values().begin() + (worker_index + 1) * c.replicas);
    Record(PerReplica<Element>(std::move(mine)), &run);
  }
  return run;
}

std::vector<RecordedRun> RunService(const std::string& coordinator, const ConformanceCase& c,
                                    const std::string& job_name) {
  std::vector<RecordedRun> runs(static_cast<size_t>(c.consumers));
  const int64_t first = c.resume_after > 0 ? c.resume_after : -1;
  {
    std::vector<std::thread> threads;
    for (int64_t k = 0; k < c.consumers; ++k) {
      threads.emplace_back([&, k] {
        runs[k] = ConsumeOnce(coordinator, c, job_name, k, first, std::nullopt);
      });
    }
    for (std::thread& t : threads) t.join();
  }
  if (c.resume_after <= 0) return runs;
  for (int64_t k = 0; k < c.consumers; ++k) {
    RecordedRun& run = runs[k];
    if (!run.status.ok() || static_cast<int64_t>(run.steps.size()) < c.resume_after) continue;
    if (!run.checkpoint.has_value()) {
      run.status = absl::InternalError("no checkpoint to resume from");
      continue;
    }
    RecordedRun rest = ConsumeOnce(coordinator, c, job_name, k, -1, run.checkpoint);
    if (!rest.status.ok()) run.status = rest.status;
    if (rest.spec != run.spec) run.status = absl::InternalError("resumed spec: " + rest.spec);
    for (std::string& s : rest.steps) run.steps.push_back(std::move(s));
    for (std::string& s : rest.rows) run.rows.push_back(std::move(s));
  }
  return runs;
}

std::string CompareServiceWithLocal(const std::string& coordinator, const ConformanceCase& c,
                                    const std::string& job_name, bool* both_rejected) {
  std::vector<RecordedRun> service = RunService(coordinator, c, job_name);
  for (int64_t k = 0; k < c.consumers; ++k) {
    std::string why = CompareRuns(c, RunLocal(c, k), service[k], k, both_rejected);
    if (!why.empty()) return why;
  }
  return "";
}

}  // namespace sluice
