// load(directory, wait=False, timeout=600, num_parallel_calls=1): the registration of the source (core/data/op_registry.h), its
// iterators and LoadSnapshot (include/sluice/snapshot.h). Format: snapshot_manifest.h,
// snapshot_chunk.h; semantics: docs/SNAPSHOTS.md.
//
// wait=False reads a finished snapshot: the chunks the parser listed (in name order, each
// chunk's elements in the order they were written; FILE sharding and DYNAMIC splits divide the
// list), each checked against the count the manifest gives it. wait=True follows a snapshot
// still being written: it reads the chunks as they are committed (in the order it finds them,
// name order among those found together), polling the chunk folder and the manifest at an
// interval that doubles from 10 ms to 1 s while nothing new appears, and ends when the manifest
// says done and every chunk it lists has been read. It gives up with DEADLINE_EXCEEDED after
// `timeout` seconds in which the snapshot did not grow (no chunk committed, no temporary chunk
// created, grown or removed, the manifest unchanged), naming what is missing and whether a save
// still holds the lock; and at once, with the error, when the manifest says the save failed.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/data/op_expression.h"
#include "core/data/op_iterator.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/parallel_calls.h"
#include "core/data/ops/snapshot_chunk.h"
#include "core/data/ops/snapshot_manifest.h"
#include "core/data/ops/snapshot_read_ahead.h"
#include "core/format/python_literal.h"
#include "core/io/file_system.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "core/util/thread_pool.h"
#include "sluice/dataset.h"
#include "sluice/snapshot.h"

namespace sluice {
namespace {

constexpr absl::Duration kFirstPoll = absl::Milliseconds(10);
constexpr absl::Duration kMaxPoll = absl::Seconds(1);

absl::Duration WaitTimeout(const proto::LoadSource& source) {
  if (!source.has_timeout_seconds()) return absl::Seconds(kDefaultSnapshotWaitTimeoutSeconds);
  if (source.timeout_seconds() <= 0) return absl::InfiniteDuration();
  return absl::Seconds(source.timeout_seconds());
}

// Why a snapshot that is not done will not become done by waiting: "" while a save may still
// finish it.
std::string SaveFailure(const proto::SnapshotManifest& m) {
  if (m.save_error().empty()) return "";
  return absl::StrCat("its save failed (", m.save_error(), "); a save of the same pipeline with "
                      "resume=True (sluicectl save --resume) continues it");
}

absl::Status Incomplete(const proto::SnapshotManifest& m, const std::string& directory) {
  const std::string failure = SaveFailure(m);
  return absl::FailedPreconditionError(absl::StrCat(
      "load: snapshot '", directory, "' is incomplete (", SnapshotManifestPath(directory),
      " does not say done", failure.empty() ? "" : "; ", failure,
      "); wait=True reads a snapshot while it is written"));
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The manifest's spec must be the one the graph was parsed with.
absl::Status CheckManifestSpec(const proto::SnapshotManifest& m, const ElementSpec& spec,
                               const std::string& directory) {
  absl::StatusOr<ElementSpec> got = ElementSpecFromProto(m.element_spec());
  if (!got.ok()) {
    return absl::DataLossError(absl::StrCat("snapshot manifest '",
                                            SnapshotManifestPath(directory),
                                            "': bad element spec: ", got.status().message()));
  }
  if (!got->SameStructure(spec) || got->Flatten() != spec.Flatten()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "snapshot '", directory, "' now holds elements of another spec than when the pipeline "
        "was parsed (", SnapshotManifestPath(directory), " was rewritten by another save)"));
  }
  return absl::OkStatus();
}

// Reads the chunks of a source, wait=False or wait=True. wait=False with `parallelism` > 1
// (num_parallel_calls)
// reads through a SnapshotReadAhead (snapshot_read_ahead.h): the mapped chunks' records are
// checksummed on the process's pool, ahead of the consumer, which decodes them in order.
class LoadIterator : public OpIterator {
 public:
  LoadIterator(std::string label, proto::LoadSource source, ElementSpec spec, int parallelism)
      : OpIterator(std::move(label)),
        source_(std::move(source)),
        spec_(std::move(spec)),
        parallelism_(parallelism) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (!started_) {
      RETURN_IF_ERROR(Start());
      started_ = true;
    }
    if (ahead_ != nullptr) return NextAhead(out, end_of_sequence);
    while (true) {
      if (reader_ != nullptr) {
        bool end_of_chunk = false;
        RETURN_IF_ERROR(reader_->Next(out, &end_of_chunk));
        if (!end_of_chunk) {
          *end_of_sequence = false;
          return absl::OkStatus();
        }
        RETURN_IF_ERROR(FinishChunk());
      }
      if (next_ < pending_.size()) {
        RETURN_IF_ERROR(OpenChunk(pending_[next_++]));
        continue;
      }
      if (!source_.wait()) {
        *end_of_sequence = true;
        return absl::OkStatus();
      }
      bool end = false;
      RETURN_IF_ERROR(Poll(&end));
      if (end) {
        *end_of_sequence = true;
        return absl::OkStatus();
      }
    }
  }

 private:
  absl::Status Start() {
    ASSIGN_OR_RETURN(proto::SnapshotManifest m, ReadSnapshotManifest(source_.directory()));
    RETURN_IF_ERROR(CheckManifestSpec(m, spec_, source_.directory()));
    ASSIGN_OR_RETURN(compression_, ParseCompressionType(m.compression_type()));
    if (source_.wait()) return absl::OkStatus();
    if (!m.done()) return Incomplete(m, directory());
    Count(m);
    pending_.assign(source_.filenames().begin(), source_.filenames().end());
    if (parallelism_ > 1) {
      ASSIGN_OR_RETURN(ThreadPool * pool, ProcessThreadPool());
      ahead_ = std::make_unique<SnapshotReadAhead>(parallelism_,
                                                   SnapshotReadAhead::kDefaultMaxBytesAhead, pool);
    }
    return absl::OkStatus();
  }

  // wait=False, read ahead: the next element in chunk order, or the error in its place.
  absl::Status NextAhead(Element* out, bool* end_of_sequence) {
    while (!fill_stopped_ && ahead_->HasRoom()) {
      absl::Status s = QueueNext();
      if (!s.ok()) {
        ahead_->AddResult(std::move(s));  // in its place; nothing is queued after it
        fill_stopped_ = true;
      }
    }
    ahead_->Flush();
    *end_of_sequence = ahead_->empty();
    if (*end_of_sequence) return absl::OkStatus();
    return ahead_->TakeFront(out);
  }

  // Queues the next record of the chunk being framed (a mapped chunk's for the pool to verify,
  // any other's decoded here), that chunk's count check at its end, or opens the next chunk;
  // sets fill_stopped_ after the last chunk.
  absl::Status QueueNext() {
    if (reader_ == nullptr) {
      if (next_ >= pending_.size()) {
        fill_stopped_ = true;
        return absl::OkStatus();
      }
      return OpenChunk(pending_[next_++]);
    }
    bool end_of_chunk = false;
    if (reader_->mapped()) {
      SnapshotChunkReader::FramedRecord record;
      RETURN_IF_ERROR(reader_->NextRecord(&record, &end_of_chunk));
      if (!end_of_chunk) ahead_->Add(reader_, record);
    } else {
      Element e;
      RETURN_IF_ERROR(reader_->Next(&e, &end_of_chunk));
      if (!end_of_chunk) ahead_->AddResult(std::move(e));
    }
    return end_of_chunk ? FinishChunk() : absl::OkStatus();
  }

  const std::string& directory() const { return source_.directory(); }

  void Count(const proto::SnapshotManifest& m) {
    expected_.clear();
    expected_bytes_.clear();
    for (const proto::SnapshotChunk& c : m.chunks()) {
      expected_[c.name()] = c.num_elements();
      if (c.has_num_bytes()) expected_bytes_[c.name()] = c.num_bytes();
    }
  }

  absl::Status OpenChunk(const std::string& filename) {
    const std::string name = BaseName(filename);
    if (!source_.wait() && !expected_.contains(name)) {
      return absl::DataLossError(absl::StrCat("snapshot chunk '", filename, "' is not listed in ",
                                              SnapshotManifestPath(directory())));
    }
    SnapshotChunkReadOptions options;
    auto bytes = expected_bytes_.find(name);
    if (!source_.wait() && bytes != expected_bytes_.end()) options.expected_bytes = bytes->second;
    ASSIGN_OR_RETURN(reader_, SnapshotChunkReader::Open(filename, compression_,
                                                        source_.format_version(), spec_,
                                                        options));
    return absl::OkStatus();
  }

  // The chunk just read to its end has the count the manifest gives it (wait=True: checked
  // once the manifest is done).
  absl::Status FinishChunk() {
    const std::string name = BaseName(reader_->filename());
    read_[name] = reader_->num_read();
    std::shared_ptr<SnapshotChunkReader> done = std::move(reader_);
    if (source_.wait()) return absl::OkStatus();
    return CheckCount(done->filename(), name);
  }

  absl::Status CheckCount(const std::string& filename, const std::string& name) const {
    auto e = expected_.find(name);
    auto r = read_.find(name);
    const int64_t got = r == read_.end() ? 0 : r->second;
    if (e == expected_.end() || e->second != got) {
      return absl::DataLossError(absl::StrCat(
          "snapshot chunk '", filename, "' holds ", got, " elements but ",
          SnapshotManifestPath(directory()), " says ",
          e == expected_.end() ? std::string("nothing of it") : absl::StrCat(e->second),
          " (truncated or replaced?)"));
    }
    return absl::OkStatus();
  }

  // wait=True: queues the chunks committed since the last look; *end once the manifest says
  // done and every chunk it lists has been read. Sleeps while nothing is new; errors when the
  // save failed or nothing changed for the timeout.
  absl::Status Poll(bool* end) {
    const std::string chunks = SnapshotChunksDirectory(directory());
    while (true) {
      // The manifest first: chunks listed as done were all committed before it was written.
      ASSIGN_OR_RETURN(proto::SnapshotManifest m, ReadSnapshotManifest(directory()));
      RETURN_IF_ERROR(CheckManifestSpec(m, spec_, directory()));
      if (!m.done() && !SaveFailure(m).empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "load: snapshot '", directory(), "' will not be finished: ", SaveFailure(m),
            " (", read_.size(), " chunks read)"));
      }
      ASSIGN_OR_RETURN(std::vector<std::string> found,
                       GlobFiles(absl::StrCat(chunks, "/chunk-*.tfrecord")));
      pending_.clear();
      next_ = 0;
      for (std::string& f : found) {
        if (IsSnapshotChunkName(BaseName(f)) && !read_.contains(BaseName(f))) {
          pending_.push_back(std::move(f));
        }
      }
      if (!pending_.empty()) {
        poll_ = kFirstPoll;
        last_change_ = absl::InfinitePast();  // grown: the timeout starts again at the next look
        return absl::OkStatus();
      }
      if (m.done()) {
        Count(m);
        for (const proto::SnapshotChunk& c : m.chunks()) {
          RETURN_IF_ERROR(CheckCount(absl::StrCat(chunks, "/", c.name()), c.name()));
        }
        if (read_.size() != expected_.size()) {
          return absl::DataLossError(absl::StrCat(
              "snapshot '", directory(), "': chunks were read that ",
              SnapshotManifestPath(directory()), " does not list"));
        }
        *end = true;
        return absl::OkStatus();
      }
      RETURN_IF_ERROR(CheckGrowing(m));
      absl::SleepFor(poll_);
      poll_ = std::min(poll_ * 2, kMaxPoll);
    }
  }

  // Notes whether the snapshot changed since the last look (the manifest, or the temporary
  // chunks being written: their names and sizes); DEADLINE_EXCEEDED once it has not for the
  // timeout.
  absl::Status CheckGrowing(const proto::SnapshotManifest& m) {
    std::string look = m.SerializeAsString();
    absl::StatusOr<std::vector<std::string>> temps =
        GlobFiles(absl::StrCat(SnapshotChunksDirectory(directory()), "/.tmp-*"));
    if (temps.ok()) {
      for (const std::string& t : *temps) {
        absl::StatusOr<FileStat> st = StatFile(t);
        absl::StrAppend(&look, "|", t, ":", st.ok() ? st->size : 0);
      }
    }
    const absl::Time now = absl::Now();
    if (look != last_look_ || last_change_ == absl::InfinitePast()) {
      last_look_ = std::move(look);
      last_change_ = now;
      return absl::OkStatus();
    }
    const absl::Duration timeout = WaitTimeout(source_);
    if (now - last_change_ < timeout) return absl::OkStatus();
    int64_t elements = 0;
    for (const auto& [name, n] : read_) elements += n;
    absl::StatusOr<std::string> owner = SnapshotLockOwner(directory());
    std::string saver;
    if (owner.ok()) {
      saver = absl::StrCat("a save of pipeline ", *owner, " holds ", SnapshotLockPath(directory()),
                           " but wrote nothing in that time (if it died, the same save with "
                           "resume=True, sluicectl save --resume, continues it)");
    } else if (absl::IsNotFound(owner.status())) {
      saver = absl::StrCat("no save holds ", SnapshotLockPath(directory()),
                           ": the save that wrote it stopped without finishing (the same save "
                           "with resume=True, sluicectl save --resume, continues it)");
    } else {
      saver = absl::StrCat("its lock could not be read: ", owner.status().message());
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "load(wait=True): snapshot '", directory(), "' did not grow for ",
        absl::FormatDuration(timeout), " (timeout): ", SnapshotManifestPath(directory()),
        " does not say done, ", read_.size(), " chunks (", elements, " elements) read, ",
        temps.ok() ? temps->size() : 0, " chunks being written; ", saver));
  }

  const proto::LoadSource source_;
  const ElementSpec spec_;
  const int parallelism_;  // > 1: wait=False reads ahead on the pool
  bool started_ = false;
  Compression compression_ = Compression::kNone;
  std::vector<std::string> pending_;  // chunk files to read, from next_ on
  size_t next_ = 0;
  std::shared_ptr<SnapshotChunkReader> reader_;  // the read-ahead's decodes share it
  std::unique_ptr<SnapshotReadAhead> ahead_;     // wait=False with parallelism_ > 1
  bool fill_stopped_ = false;                    // ahead_ holds everything up to the end or an error
  absl::flat_hash_map<std::string, int64_t> expected_;  // chunk name -> manifest count
  absl::flat_hash_map<std::string, int64_t> expected_bytes_;  // chunk name -> manifest size
  absl::flat_hash_map<std::string, int64_t> read_;      // chunk name -> elements read
  absl::Duration poll_ = kFirstPoll;
  std::string last_look_;  // what CheckGrowing saw last
  absl::Time last_change_ = absl::InfinitePast();
};

// The source of load(directory, wait, timeout): the manifest's spec and format and (wait=false)
// chunks.
absl::StatusOr<proto::SourceDef> MakeLoadSource(const std::string& directory,
                                                const SnapshotLoadOptions& options) {
  if (directory.empty()) return absl::InvalidArgumentError("load: the directory is empty");
  const bool wait = options.wait;
  ASSIGN_OR_RETURN(proto::SnapshotManifest m, ReadSnapshotManifest(directory));
  if (!wait && !m.done()) return Incomplete(m, directory);
  RETURN_IF_ERROR(ParseCompressionType(m.compression_type()).status());
  proto::SourceDef source;
  proto::LoadSource* l = source.mutable_load();
  l->set_directory(directory);
  l->set_wait(wait);
  l->set_format_version(m.format_version());
  if (wait && options.timeout_seconds != kDefaultSnapshotWaitTimeoutSeconds) {
    l->set_timeout_seconds(options.timeout_seconds);
  }
  // Unset when sequential: the graph (and its fingerprint) of a plain load() stays what it was.
  if (options.num_parallel_calls != 1) l->set_num_parallel_calls(options.num_parallel_calls);
  *l->mutable_element_spec() = m.element_spec();
  l->set_compression_type(m.compression_type());
  if (!wait) {
    const std::string chunks = SnapshotChunksDirectory(directory);
    for (const proto::SnapshotChunk& c : m.chunks()) {
      l->add_filenames(absl::StrCat(chunks, "/", c.name()));
    }
  }
  return source;
}

}  // namespace

absl::StatusOr<Dataset> LoadSnapshot(const std::string& directory, bool wait) {
  SnapshotLoadOptions options;
  options.wait = wait;
  return LoadSnapshot(directory, options);
}

absl::StatusOr<Dataset> LoadSnapshot(const std::string& directory,
                                     const SnapshotLoadOptions& options) {
  ASSIGN_OR_RETURN(proto::SourceDef source, MakeLoadSource(directory, options));
  proto::DatasetDef def;
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  *def.mutable_source() = std::move(source);
  return Dataset::FromDef(std::move(def));
}

SLUICE_REGISTER_OPS(load_op) {
  SourceRegistration r;
  r.name = "load";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    const proto::LoadSource& l = s.load();
    if (l.directory().empty()) return absl::InvalidArgumentError("load: the directory is empty");
    if (l.wait() && l.filenames_size() > 0) {
      return absl::InvalidArgumentError("load: wait=True lists no chunk files");
    }
    if (!l.wait() && l.has_timeout_seconds()) {
      return absl::InvalidArgumentError("load: timeout is for wait=True");
    }
    if (l.has_num_parallel_calls()) {
      if (l.num_parallel_calls() < -1 || l.num_parallel_calls() == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "load: num_parallel_calls must be positive or -1 (AUTOTUNE), got ",
            l.num_parallel_calls()));
      }
      if (l.wait() && l.num_parallel_calls() != 1) {
        return absl::InvalidArgumentError(
            "load: num_parallel_calls is for wait=False (wait=True reads sequentially)");
      }
    }
    if (l.format_version() < 0 || l.format_version() > kSnapshotFormatVersion) {
      return absl::InvalidArgumentError(
          absl::StrCat("load: unknown snapshot format_version ", l.format_version()));
    }
    RETURN_IF_ERROR(ParseCompressionType(l.compression_type()).status());
    absl::StatusOr<ElementSpec> spec = ElementSpecFromProto(l.element_spec());
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("load: bad element spec: ", spec.status().message()));
    }
    return spec;
  };
  r.expression = [](const proto::SourceDef& s) {
    const proto::LoadSource& l = s.load();
    std::string timeout;
    if (l.has_timeout_seconds()) {
      timeout = l.timeout_seconds() <= 0 ? ", timeout=None"
                                         : absl::StrCat(", timeout=", l.timeout_seconds());
    }
    return absl::StrCat("load(", PythonStringLiteral(l.directory()),
                        l.wait() ? ", wait=True" : "", timeout,
                        l.has_num_parallel_calls()
                            ? ParallelArgs(l.num_parallel_calls(), false, false)
                            : "",
                        ")");
  };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::LoadSource load = args.source.load();
    ASSIGN_OR_RETURN(ElementSpec spec, ElementSpecFromProto(load.element_spec()));
    const int parallelism = static_cast<int>(ResolveParallelCalls(
        load.has_num_parallel_calls() ? load.num_parallel_calls() : 1, args.options));
    return IteratorFactory([label, load, spec, parallelism] {
      return std::make_unique<LoadIterator>(label, load, spec, parallelism);
    });
  };
  {
    SourceParseRule p;
    p.name = "load";
    p.list_order = 180;
    p.params = {{"directory", true},
                {"wait", false},
                {"timeout", false},
                {"num_parallel_calls", false}};
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      ASSIGN_OR_RETURN(std::string directory, c.Str("directory", *c.arg(0)));
      SnapshotLoadOptions options;
      if (c.given(1)) {
        ASSIGN_OR_RETURN(options.wait, c.Bool("wait", *c.arg(1)));
      }
      if (c.arg(2).has_value()) {
        if (!options.wait) return c.Error(c.at(), "load: timeout is for wait=True");
        options.timeout_seconds = 0;  // None: no limit
        if (c.given(2)) {
          ASSIGN_OR_RETURN(options.timeout_seconds, c.Number("timeout", *c.arg(2)));
          if (!(options.timeout_seconds > 0)) {
            return c.Error(c.at(), "load: timeout must be positive seconds, or None (no limit)");
          }
        }
      }
      if (c.given(3)) {
        ASSIGN_OR_RETURN(options.num_parallel_calls, c.Int("num_parallel_calls", *c.arg(3)));
      }
      absl::StatusOr<proto::SourceDef> made = MakeLoadSource(directory, options);
      if (!made.ok()) return PipelineError(c.at(), made.status(), "load: ");
      *source = *std::move(made);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  r.no_random_access = "load reads its chunks in order";
  registry.AddSource(proto::SourceDef::kLoad, std::move(r));
}

}  // namespace sluice
