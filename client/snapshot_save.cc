// SaveSnapshot (include/sluice/snapshot_save.h): the manifest and lock around a DYNAMIC job of
// save_chunks (core/data/ops/save_chunks_op.cc), and the final manifest when the job ends.
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/data/ops/snapshot_chunk.h"
#include "core/data/ops/snapshot_manifest.h"
#include "core/io/file_system.h"
#include "core/io/input_stream.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "sluice/snapshot_save.h"
#include "sluice/strategy.h"

namespace sluice {
namespace {

// Chunk name -> elements the workers reported writing (-1: committed by an earlier try).
using ChunkReports = std::map<std::string, int64_t>;

// Checks DIR against this save and takes its lock; writes the first manifest (done=false).
absl::Status Prepare(const Dataset& dataset, const std::string& directory,
                     const SnapshotSaveOptions& options) {
  ASSIGN_OR_RETURN(ElementSpec spec, dataset.element_spec());
  const std::string fingerprint = dataset.Fingerprint();
  if (IsLocalPath(directory)) {
    RETURN_IF_ERROR(MakeLocalDirectories(SnapshotChunksDirectory(directory)));
  }
  absl::StatusOr<proto::SnapshotManifest> existing = ReadSnapshotManifest(directory);
  if (existing.ok()) {
    if (existing->done()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "'", directory, "' already holds a finished snapshot (", SnapshotManifestPath(directory),
          "); save to another directory"));
    }
    if (existing->fingerprint() != fingerprint) {
      return absl::FailedPreconditionError(absl::StrCat(
          "'", directory, "' holds an unfinished snapshot of another pipeline (",
          SnapshotManifestPath(directory), ": ", existing->pipeline().substr(0, 200), ")"));
    }
  } else if (!absl::IsNotFound(existing.status())) {
    return existing.status();
  }
  absl::Status lock = AcquireSnapshotLock(directory, fingerprint);
  if (absl::IsAlreadyExists(lock)) {
    if (!options.resume) {
      return absl::AlreadyExistsError(absl::StrCat(
          lock.message(), "; two saves to one directory are refused (resume=true continues an "
          "interrupted save of the same pipeline)"));
    }
    ASSIGN_OR_RETURN(std::string owner, SnapshotLockOwner(directory));
    if (owner != fingerprint) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot resume: ", SnapshotLockPath(directory), " is held for pipeline ", owner,
          ", not ", fingerprint));
    }
  } else {
    RETURN_IF_ERROR(lock);
  }
  if (existing.ok()) {
    if (existing->save_error().empty()) return absl::OkStatus();
    existing->clear_save_error();  // this save takes over: loaders wait for it again
    return WriteSnapshotManifest(directory, *existing);
  }
  proto::SnapshotManifest m;
  m.set_format_version(kSnapshotFormatVersion);
  *m.mutable_element_spec() = ElementSpecToProto(spec);
  m.set_compression_type(options.compression);
  m.set_pipeline(dataset.ToExpression());
  m.set_fingerprint(fingerprint);
  return WriteSnapshotManifest(directory, m);
}

// The job's graph: the dataset, save_chunks, batch(1) (the service streams batches). The chunks
// have the manifest's format (a resumed save keeps the format its snapshot started with).
absl::StatusOr<Dataset> JobDataset(const Dataset& dataset, const std::string& directory,
                                   const proto::SnapshotManifest& manifest) {
  proto::DatasetDef def = dataset.def();
  proto::SaveChunksOp* save = def.add_ops()->mutable_save_chunks();
  save->set_directory(directory);
  save->set_compression_type(manifest.compression_type());
  save->set_format_version(manifest.format_version());
  def.add_ops()->mutable_batch()->set_batch_size(1);
  return Dataset::FromDef(std::move(def));
}

// Runs the job to its end, collecting the workers' reports.
absl::Status RunJob(const Dataset& job, const std::string& directory,
                    const SnapshotSaveOptions& options, ChunkReports* reports) {
  ServiceOptions service = options.service;
  // One job per SaveSnapshot call: a resumed save (a new call) must not join the job of an
  // earlier call, which may have ended and whose tasks the workers have dropped; what the earlier
  // call committed is kept anyway (a committed chunk is not computed again). Within this call,
  // the name lets the saver rejoin its job after a coordinator restart.
  absl::BitGen gen;
  service.job_name = absl::StrCat("snapshot:", directory, ":",
                                  absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16));
  service.consumer_index = 0;
  service.num_consumers = 1;
  service.read_mode = ServiceReadMode::kIndependent;
  service.sharding_policy = ServiceShardingPolicy::kDynamic;
  service.split_size = options.split_size > 0 ? options.split_size : 4096;
  service.fetch_to_device = false;
  service.end_of_data_collective = nullptr;
  service.resume_from.reset();
  ASSIGN_OR_RETURN(MirroredStrategy strategy, MirroredStrategy::Create({"CPU:0"}));
  ASSIGN_OR_RETURN(DistributedDataset dist, DistributeDatasetFromService(strategy, job, service));
  ASSIGN_OR_RETURN(DistributedIterator it, dist.MakeIterator());
  while (true) {
    absl::StatusOr<PerReplica<Element>> x = it.GetNext();
    if (absl::IsOutOfRange(x.status())) return absl::OkStatus();
    RETURN_IF_ERROR(x.status());
    for (const Element& e : x->values()) {
      if (e.children().size() != 2) continue;
      const Tensor& names = e.children()[0].leaf();
      const Tensor& counts = e.children()[1].leaf();
      for (int64_t i = 0; i < names.num_elements() && i < counts.num_elements(); ++i) {
        (*reports)[names.string_at(i)] = counts.data<int64_t>()[i];
      }
    }
  }
}

// The committed chunk files of DIR/chunks, in name order; removes temporary files left by
// writers that died.
absl::StatusOr<std::vector<std::string>> CommittedChunks(const std::string& directory) {
  if (!IsLocalPath(directory)) {
    // An object store lists the prefix; it holds only whole chunks (uploads appear when
    // complete), so there is nothing to remove.
    const std::string chunks = SnapshotChunksDirectory(directory);
    ASSIGN_OR_RETURN(std::vector<std::string> urls,
                     GlobFiles(absl::StrCat(chunks, "/", SnapshotChunkName("*"))));
    std::vector<std::string> names;
    for (const std::string& url : urls) {
      std::string name = url.substr(chunks.size() + 1);
      if (IsSnapshotChunkName(name)) names.push_back(std::move(name));
    }
    return names;  // GlobFiles sorts
  }
  const std::string chunks = LocalPathOf(SnapshotChunksDirectory(directory));
  DIR* dir = ::opendir(chunks.c_str());
  if (dir == nullptr) return FileError(errno, "list", chunks);
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (IsSnapshotChunkName(name)) {
      names.push_back(name);
    } else if (absl::StartsWith(name, ".tmp-")) {
      std::remove(absl::StrCat(chunks, "/", name).c_str());
    }
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

// Writes the final manifest: every committed chunk with its count.
absl::StatusOr<SnapshotSaveResult> Finish(const std::string& directory,
                                          const ChunkReports& reports) {
  ASSIGN_OR_RETURN(proto::SnapshotManifest m, ReadSnapshotManifest(directory));
  ASSIGN_OR_RETURN(Compression compression, ParseCompressionType(m.compression_type()));
  ASSIGN_OR_RETURN(std::vector<std::string> names, CommittedChunks(directory));
  for (const auto& [name, count] : reports) {
    if (!std::binary_search(names.begin(), names.end(), name)) {
      return absl::DataLossError(absl::StrCat("snapshot chunk '", SnapshotChunksDirectory(directory),
                                              "/", name, "' was committed and is gone"));
    }
  }
  SnapshotSaveResult result;
  m.clear_chunks();
  for (const std::string& name : names) {
    auto r = reports.find(name);
    int64_t count = r == reports.end() ? -1 : r->second;
    if (count < 0) {
      ASSIGN_OR_RETURN(count, CountSnapshotChunkRecords(
                                  absl::StrCat(SnapshotChunksDirectory(directory), "/", name),
                                  compression));
    }
    const std::string path = absl::StrCat(SnapshotChunksDirectory(directory), "/", name);
    ASSIGN_OR_RETURN(FileStat st, StatFile(path));
    proto::SnapshotChunk* c = m.add_chunks();
    c->set_name(name);
    c->set_num_elements(count);
    c->set_num_bytes(static_cast<int64_t>(st.size));
    result.num_elements += count;
  }
  result.num_chunks = static_cast<int64_t>(names.size());
  m.set_num_elements(result.num_elements);
  m.set_done(true);
  RETURN_IF_ERROR(WriteSnapshotManifest(directory, m));
  RETURN_IF_ERROR(ReleaseSnapshotLock(directory));
  return result;
}

}  // namespace

absl::StatusOr<SnapshotSaveResult> SaveSnapshot(const Dataset& dataset,
                                                const std::string& directory,
                                                const SnapshotSaveOptions& options) {
  if (directory.empty()) return absl::InvalidArgumentError("save: the directory is empty");
  RETURN_IF_ERROR(CheckSnapshotWritable(directory));
  if (!ParseCompressionType(options.compression).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "save: compression must be '', 'GZIP' or 'ZLIB', got '", options.compression, "'"));
  }
  if (options.split_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("save: split_size must be non-negative, got ", options.split_size));
  }
  if (options.service.coordinator_address.empty()) {
    return absl::InvalidArgumentError("save: service.coordinator_address is required");
  }
  RETURN_IF_ERROR(dataset.Validate());
  // Workers resolve the path on their own hosts, and the job is named by it: absolute (an
  // object store's URL is).
  std::string dir = directory;
  if (IsLocalPath(directory)) {
    RETURN_IF_ERROR(MakeLocalDirectories(SnapshotChunksDirectory(LocalPathOf(directory))));
    char resolved[PATH_MAX];
    if (::realpath(LocalPathOf(directory).c_str(), resolved) == nullptr) {
      return FileError(errno, "resolve", directory);
    }
    dir = resolved;
  } else {
    while (absl::EndsWith(dir, "/")) dir.pop_back();
  }
  RETURN_IF_ERROR(Prepare(dataset, dir, options));
  ASSIGN_OR_RETURN(proto::SnapshotManifest manifest, ReadSnapshotManifest(dir));
  ASSIGN_OR_RETURN(Dataset job, JobDataset(dataset, dir, manifest));
  ChunkReports reports;
  absl::Status ran = RunJob(job, dir, options, &reports);
  if (!ran.ok()) {
    // Loads with wait=True stop on this instead of waiting for chunks that will not come. The
    // lock stays: resume=true continues this save. Best effort: the save's own error is what
    // the caller needs.
    manifest.set_save_error(ran.ToString().substr(0, 1000));
    WriteSnapshotManifest(dir, manifest).IgnoreError();
    return ran;
  }
  return Finish(dir, reports);
}

}  // namespace sluice
