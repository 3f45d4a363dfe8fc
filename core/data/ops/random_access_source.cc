#include "core/data/ops/random_access_source.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/data/op_registry.h"
#include "core/data/ops/jsonl_line_index.h"
#include "core/data/ops/jsonl_line_scanner.h"
#include "core/data/ops/jsonl_reader.h"
#include "core/data/ops/npy_reader.h"
#include "core/data/ops/record_iterators.h"
#include "core/data/spec_inference.h"
#include "core/io/file_system.h"
#include "core/io/fixed_length_record_reader.h"
#include "core/io/input_stream.h"
#include "core/io/tfrecord_reader.h"
#include "core/io/zlib_stream.h"
#include "core/tensor/proto_convert.h"
#include "core/util/crc32c.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

absl::Status NoRandomAccess(const proto::SourceDef& source, absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat(SourceKindName(source), " source has no random access: ", why));
}

absl::Status CheckUncompressed(const proto::SourceDef& source,
                               const std::string& compression_type) {
  absl::StatusOr<Compression> c = ParseCompressionType(compression_type);
  if (!c.ok()) return NoRandomAccess(source, c.status().message());
  if (*c != Compression::kNone) {
    return NoRandomAccess(source, absl::StrCat("its files are ", compression_type,
                                               "-compressed, and a compressed stream can only "
                                               "be read from its start"));
  }
  return absl::OkStatus();
}

absl::Status BadIndex(int64_t index, int64_t size) {
  return absl::InvalidArgumentError(
      absl::StrCat("random access: element ", index, " is outside [0, ", size, ")"));
}

// ---- Index caches ----

// What an index holds, in 8-byte units, for the cache's limit.
int64_t IndexUnits(const RecordIndex& index) { return index.num_records(); }
int64_t IndexUnits(const JsonlLineIndex& index) {
  return static_cast<int64_t>(index.checkpoints().size() * sizeof(JsonlLineIndex::Checkpoint) /
                              sizeof(uint64_t));
}

// Indexes (RecordIndex, JsonlLineIndex) by file name (and cache folder), so that a worker opening
// the same files for one range after another loads each index once. Entries are checked against
// the file's current size and mtime. Above kMaxUnits cached units, the entries least recently
// used are dropped, but never those of the Open in progress (`use`): a dataset larger than the
// limit stays cached whole rather than being reloaded by every range.
template <typename Index>
class IndexCache {
 public:
  static IndexCache& Get() {
    static IndexCache* cache = new IndexCache();
    return *cache;
  }

  // A new id for one Open's lookups.
  uint64_t NewUse() {
    absl::MutexLock lock(&mu_);
    return ++last_use_;
  }

  // The cached index of `file` under `key` when the file's size and mtime are those it was made
  // from, else build()'s.
  absl::StatusOr<std::shared_ptr<const Index>> LoadOrBuild(
      const std::string& file, const std::string& key,
      const std::function<absl::StatusOr<Index>()>& build, uint64_t use) {
    ASSIGN_OR_RETURN(FileStat stat, StatFile(file));
    {
      absl::MutexLock lock(&mu_);
      auto it = entries_.find(key);
      if (it != entries_.end() && it->second.index->file_stat().size == stat.size &&
          it->second.index->file_stat().mtime_ns == stat.mtime_ns) {
        it->second.last_use = use;
        return it->second.index;
      }
    }
    ASSIGN_OR_RETURN(Index index, build());
    auto shared = std::make_shared<const Index>(std::move(index));
    absl::MutexLock lock(&mu_);
    Entry& entry = entries_[key];
    if (entry.index != nullptr) units_ -= IndexUnits(*entry.index);
    entry.index = shared;
    entry.last_use = use;
    units_ += IndexUnits(*shared);
    if (units_ > kMaxUnits) EvictLocked(use);
    return shared;
  }

 private:
  static constexpr int64_t kMaxUnits = int64_t{1} << 25;  // 256 MiB

  struct Entry {
    std::shared_ptr<const Index> index;
    uint64_t last_use = 0;
  };

  void EvictLocked(uint64_t keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::pair<uint64_t, std::string>> victims;
    for (const auto& [key, entry] : entries_) {
      if (entry.last_use != keep) victims.emplace_back(entry.last_use, key);
    }
    std::sort(victims.begin(), victims.end());
    for (const auto& [last_use, key] : victims) {
      if (units_ <= kMaxUnits) break;
      auto it = entries_.find(key);
      units_ -= IndexUnits(*it->second.index);
      entries_.erase(it);
    }
  }

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t units_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_use_ ABSL_GUARDED_BY(mu_) = 0;
};

// ---- Files ----

// The open descriptors of a source's files, opened on first use and kept open across Get calls
// (at most kMaxOpen at a time; the oldest is closed first).
class FileHandles {
 public:
  explicit FileHandles(std::vector<std::string> names)
      : names_(std::move(names)), files_(names_.size()) {}
  FileHandles(const FileHandles&) = delete;
  FileHandles& operator=(const FileHandles&) = delete;

  const std::string& name(size_t file) const { return names_[file]; }

  // File `file`, open until another Open or ReadAt closes it (at most kMaxOpen stay open).
  absl::StatusOr<RandomAccessFile*> Open(size_t file) { return File(file); }

  // Reads exactly `n` bytes at `offset` of file `file` into `dst`. A file shorter than that is
  // DATA_LOSS (it changed since it was indexed).
  absl::Status ReadAt(size_t file, uint64_t offset, char* dst, size_t n) {
    ASSIGN_OR_RETURN(RandomAccessFile * f, File(file));
    ASSIGN_OR_RETURN(const size_t done, f->ReadAt(offset, dst, n));
    if (done < n) {
      return absl::DataLossError(absl::StrCat(
          "file ", names_[file], " ends at byte ", offset + done, ", inside the ", n,
          " bytes at byte offset ", offset, " (did it change since it was indexed?)"));
    }
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kMaxOpen = 64;

  absl::StatusOr<RandomAccessFile*> File(size_t file) {
    if (files_[file] != nullptr) return files_[file].get();
    if (open_.size() >= kMaxOpen) {
      files_[open_.front()].reset();
      open_.pop_front();
    }
    ASSIGN_OR_RETURN(files_[file], OpenRandomAccessFile(names_[file]));
    open_.push_back(file);
    return files_[file].get();
  }

  const std::vector<std::string> names_;
  std::vector<std::unique_ptr<RandomAccessFile>> files_;
  std::deque<size_t> open_;
};

// Positions over a list of files: the global position of each file's first element, and the
// window [range_start, range_start + size) that the source exposes.
class FileLayout {
 public:
  void AddFile(int64_t count) {
    starts_.push_back(total_);
    counts_.push_back(count);
    total_ += count;
  }
  // Restricts to records [start, start + count) (count -1: to the end), clamped to the files.
  void Restrict(const proto::RecordRange& range) {
    range_start_ = std::min(range.start(), total_);
    const int64_t left = total_ - range_start_;
    size_ = range.count() < 0 ? left : std::min(range.count(), left);
  }
  void Unrestricted() {
    range_start_ = 0;
    size_ = total_;
  }
  int64_t size() const { return size_; }
  // Element `index` of the window as (file, record within the file); requires
  // 0 <= index < size().
  std::pair<size_t, int64_t> Locate(int64_t index) const {
    const int64_t g = range_start_ + index;
    // The last file starting at or before g holds it (empty files before it share its start).
    const size_t f =
        static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), g) - starts_.begin()) -
        1;
    return {f, g - starts_[f]};
  }

 private:
  std::vector<int64_t> starts_;
  std::vector<int64_t> counts_;
  int64_t total_ = 0;
  int64_t range_start_ = 0;
  int64_t size_ = 0;
};

// ---- Sources ----

class RangeAccess : public RandomAccessSource {
 public:
  RangeAccess(int64_t start, int64_t step, int64_t size)
      : start_(start), step_(step), size_(size) {}
  int64_t size() const override { return size_; }
  absl::StatusOr<Element> Get(int64_t index) override {
    if (index < 0 || index >= size_) return BadIndex(index, size_);
    // Wraps like the sequential iterator's running sum would not: the value is in range by
    // construction (it lies between start and stop).
    const int64_t v = static_cast<int64_t>(static_cast<uint64_t>(start_) +
                                           static_cast<uint64_t>(index) *
                                               static_cast<uint64_t>(step_));
    return Element(Tensor::Scalar<int64_t>(v));
  }

 private:
  const int64_t start_, step_, size_;
};

class TensorsAccess : public RandomAccessSource {
 public:
  explicit TensorsAccess(Element e) : element_(std::move(e)) {}
  int64_t size() const override { return 1; }
  absl::StatusOr<Element> Get(int64_t index) override {
    if (index != 0) return BadIndex(index, 1);
    return element_;
  }

 private:
  const Element element_;
};

class SlicesAccess : public RandomAccessSource {
 public:
  SlicesAccess(Element e, int64_t rows)
      : element_(std::move(e)), leaves_(element_.Flatten()), rows_(rows) {}
  int64_t size() const override { return rows_; }
  absl::StatusOr<Element> Get(int64_t index) override {
    if (index < 0 || index >= rows_) return BadIndex(index, rows_);
    std::vector<Tensor> row;
    row.reserve(leaves_.size());
    for (const Tensor& t : leaves_) row.push_back(t.Index(index));
    return Element::Pack(element_, std::move(row));
  }

 private:
  const Element element_;
  const std::vector<Tensor> leaves_;
  const int64_t rows_;
};

uint32_t LoadU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

uint64_t LoadU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

class TFRecordAccess : public RandomAccessSource {
 public:
  TFRecordAccess(std::vector<std::string> files,
                 std::vector<std::shared_ptr<const RecordIndex>> indexes, FileLayout layout)
      : files_(std::move(files)), indexes_(std::move(indexes)), layout_(std::move(layout)) {}
  int64_t size() const override { return layout_.size(); }

  absl::StatusOr<Element> Get(int64_t index) override {
    if (index < 0 || index >= layout_.size()) return BadIndex(index, layout_.size());
    const auto [file, record] = layout_.Locate(index);
    const RecordIndex& idx = *indexes_[file];
    const uint64_t begin = idx.offset(record);
    const uint64_t end =
        record + 1 < idx.num_records() ? idx.offset(record + 1) : idx.file_stat().size;
    const uint64_t framed = end - begin;
    auto error = [&, file = file, record = record](absl::StatusCode code, absl::string_view why) {
      return absl::Status(code, absl::StrCat("tf_record_dataset: record ", record,
                                             " (byte offset ", begin, ") of file ",
                                             files_.name(file), ": ", why));
    };
    if (end < begin || framed < kTFRecordHeaderBytes + kTFRecordFooterBytes) {
      return error(absl::StatusCode::kDataLoss, "the record index is inconsistent");
    }
    buffer_.resize(framed);
    absl::Status read = files_.ReadAt(file, begin, buffer_.data(), framed);
    if (!read.ok()) return error(read.code(), read.message());
    const uint64_t length = LoadU64(buffer_.data());
    if (crc32c::Mask(crc32c::Value(buffer_.data(), 8)) != LoadU32(buffer_.data() + 8)) {
      return error(absl::StatusCode::kDataLoss, "corrupted record (length checksum mismatch)");
    }
    if (length != framed - kTFRecordHeaderBytes - kTFRecordFooterBytes) {
      return error(absl::StatusCode::kDataLoss,
                   absl::StrCat("the record holds ", length, " bytes but its index entry ",
                                framed, " framed bytes (did the file change since it was "
                                "indexed?)"));
    }
    const char* data = buffer_.data() + kTFRecordHeaderBytes;
    if (crc32c::Mask(crc32c::Value(data, length)) != LoadU32(data + length)) {
      return error(absl::StatusCode::kDataLoss, "corrupted record (data checksum mismatch)");
    }
    return Element(Tensor::StringScalar(std::string(data, length)));
  }

 private:
  FileHandles files_;
  const std::vector<std::shared_ptr<const RecordIndex>> indexes_;
  const FileLayout layout_;
  std::string buffer_;
};

class FixedLengthAccess : public RandomAccessSource {
 public:
  FixedLengthAccess(std::vector<std::string> files, int64_t header_bytes, int64_t record_bytes,
                    FileLayout layout)
      : files_(std::move(files)),
        header_bytes_(header_bytes),
        record_bytes_(record_bytes),
        layout_(std::move(layout)) {}
  int64_t size() const override { return layout_.size(); }

  absl::StatusOr<Element> Get(int64_t index) override {
    if (index < 0 || index >= layout_.size()) return BadIndex(index, layout_.size());
    const auto [file, record] = layout_.Locate(index);
    const uint64_t offset = FixedLengthRecordOffset(header_bytes_, record_bytes_, record);
    std::string out(static_cast<size_t>(record_bytes_), '\0');
    absl::Status read = files_.ReadAt(file, offset, out.data(), out.size());
    if (!read.ok()) {
      return absl::Status(read.code(),
                          absl::StrCat("fixed_length_record_dataset: record ", record,
                                       " (byte offset ", offset, ") of file ", files_.name(file),
                                       ": ", read.message()));
    }
    return Element(Tensor::StringScalar(std::move(out)));
  }

 private:
  FileHandles files_;
  const int64_t header_bytes_, record_bytes_;
  const FileLayout layout_;
};

class NpyAccess : public RandomAccessSource {
 public:
  NpyAccess(std::vector<std::string> files, std::vector<NpyHeader> headers, DType dtype,
            Shape row_shape, FileLayout layout)
      : files_(std::move(files)),
        headers_(std::move(headers)),
        dtype_(dtype),
        row_shape_(std::move(row_shape)),
        row_bytes_(static_cast<size_t>(row_shape_.num_elements()) * DTypeSize(dtype_)),
        layout_(std::move(layout)) {}
  int64_t size() const override { return layout_.size(); }

  absl::StatusOr<Element> Get(int64_t index) override {
    if (index < 0 || index >= layout_.size()) return BadIndex(index, layout_.size());
    const auto [file, row] = layout_.Locate(index);
    const NpyHeader& h = headers_[file];
    const uint64_t offset = h.data_offset + static_cast<uint64_t>(row) * row_bytes_;
    ASSIGN_OR_RETURN(Tensor t, Tensor::TryAllocate(dtype_, row_shape_, "npy_dataset"));
    if (row_bytes_ > 0) {
      char* dst = static_cast<char*>(t.mutable_raw_data());
      absl::Status read = files_.ReadAt(file, offset, dst, row_bytes_);
      if (!read.ok()) {
        return absl::Status(read.code(), absl::StrCat("npy_dataset: row ", row, " of file ",
                                                      files_.name(file), ": ", read.message()));
      }
      const size_t width = DTypeSize(dtype_);
      if (width > 1 && h.big_endian != (std::endian::native == std::endian::big)) {
        for (size_t i = 0; i < row_bytes_; i += width) std::reverse(dst + i, dst + i + width);
      }
    }
    return Element(std::move(t));
  }

 private:
  FileHandles files_;
  const std::vector<NpyHeader> headers_;
  const DType dtype_;
  const Shape row_shape_;
  const size_t row_bytes_;
  const FileLayout layout_;
};

// Element i of jsonl_dataset: the non-blank line found by reading forward from the last
// checkpoint of its file's line index at or before it, or from where the previous Get stopped
// when that is on the way (reading a range in order reads each line once).
class JsonlAccess : public RandomAccessSource {
 public:
  JsonlAccess(const proto::JsonlSource& source, std::vector<std::string> files,
              std::vector<std::shared_ptr<const JsonlLineIndex>> indexes, FileLayout layout)
      : parser_(source, "jsonl_dataset"),
        files_(std::move(files)),
        indexes_(std::move(indexes)),
        layout_(std::move(layout)) {}
  int64_t size() const override { return layout_.size(); }

  absl::StatusOr<Element> Get(int64_t index) override {
    if (index < 0 || index >= layout_.size()) return BadIndex(index, layout_.size());
    const auto [file, element] = layout_.Locate(index);
    const JsonlLineIndex& idx = *indexes_[file];
    const size_t checkpoint = idx.CheckpointBefore(element);
    const bool on_the_way = cursor_file_ == static_cast<int64_t>(file) &&
                            cursor_element_ <= element &&
                            cursor_element_ >= idx.checkpoints()[checkpoint].element;
    if (!on_the_way) {
      absl::Status s = Seek(file, checkpoint);
      if (!s.ok()) return Fail(file, s);
    }
    while (true) {
      JsonlLineScanner::Line line;
      bool have = false;
      // Lines before the one asked for are only counted, never kept.
      const size_t limit = cursor_element_ == element ? JsonlLineLimit() : 0;
      absl::Status s = scanner_.Next(limit, &line, &have);
      if (!s.ok()) return Fail(file, s);
      if (!have) {
        return Fail(file, Changed(absl::StrCat("it ends before its element ", element,
                                               " (its index counted ", idx.num_elements(), ")")));
      }
      if (line.blank) continue;
      s = CheckCheckpoint(idx, line);
      if (!s.ok()) return Fail(file, s);
      if (cursor_element_++ < element) continue;
      Element out;
      RETURN_IF_ERROR(parser_.Parse(line, files_.name(file), &out));
      return out;
    }
  }

 private:
  static constexpr size_t kBlockBytes = JsonlLineIndex::kDefaultSpacingBytes;

  static absl::Status Changed(absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat(why, ": did the file change since its lines were indexed?"));
  }

  // `s` naming the file; the next Get seeks.
  absl::Status Fail(size_t file, const absl::Status& s) {
    cursor_file_ = -1;
    return absl::Status(s.code(),
                        absl::StrCat("jsonl_dataset: file ", files_.name(file), ": ", s.message()));
  }

  // Reads from checkpoint `c` of `file`, one byte early: a checkpoint starts a line, so that byte
  // must be a '\n', which the scanner returns as an empty line of its own.
  absl::Status Seek(size_t file, size_t c) {
    ASSIGN_OR_RETURN(RandomAccessFile * f, files_.Open(file));
    const JsonlLineIndex::Checkpoint& cp = indexes_[file]->checkpoints()[c];
    const uint64_t start = cp.offset > 0 ? cp.offset - 1 : 0;
    scanner_.Reset(
        [f, offset = start](char* dst, size_t n) mutable -> absl::StatusOr<size_t> {
          ASSIGN_OR_RETURN(size_t done, f->ReadAt(offset, dst, n));
          offset += done;
          return done;
        },
        start, cp.offset > 0 ? cp.line - 2 : 0);
    cursor_file_ = static_cast<int64_t>(file);
    cursor_element_ = cp.element;
    next_check_ = c;
    if (cp.offset == 0) return absl::OkStatus();
    JsonlLineScanner::Line before;
    bool have = false;
    RETURN_IF_ERROR(scanner_.Next(0, &before, &have));
    if (!have || scanner_.next_offset() != cp.offset) {
      return Changed(absl::StrCat("line ", cp.line, " no longer starts at byte offset ",
                                  cp.offset));
    }
    return absl::OkStatus();
  }

  // Each checkpoint passed must still start its element's line.
  absl::Status CheckCheckpoint(const JsonlLineIndex& idx, const JsonlLineScanner::Line& line) {
    const auto& cps = idx.checkpoints();
    if (next_check_ >= cps.size() || cps[next_check_].element != cursor_element_) {
      return absl::OkStatus();
    }
    const JsonlLineIndex::Checkpoint& cp = cps[next_check_++];
    if (line.offset != cp.offset || line.number != cp.line) {
      return Changed(absl::StrCat("its element ", cp.element, " was line ", cp.line,
                                  " at byte offset ", cp.offset, " and is now line ",
                                  line.number, " at byte offset ", line.offset));
    }
    return absl::OkStatus();
  }

  JsonlLineParser parser_;
  FileHandles files_;
  const std::vector<std::shared_ptr<const JsonlLineIndex>> indexes_;
  const FileLayout layout_;
  JsonlLineScanner scanner_{kBlockBytes};
  int64_t cursor_file_ = -1;    // the file the scanner reads, -1: none (the next Get seeks)
  int64_t cursor_element_ = 0;  // the element the scanner's next non-blank line is
  size_t next_check_ = 0;       // the next checkpoint of cursor_file_ to check
};

absl::StatusOr<int64_t> RangeSize(const proto::RangeSource& r) {
  if (r.step() == 0) return absl::InvalidArgumentError("range: step must not be 0");
  __int128 start = r.start(), stop = r.stop(), step = r.step();
  __int128 n = step > 0 ? (stop > start ? (stop - start - 1) / step + 1 : 0)
                        : (start > stop ? (start - stop - 1) / -step + 1 : 0);
  if (n > std::numeric_limits<int64_t>::max()) {
    return absl::InvalidArgumentError("range: more than 2^63 - 1 elements");
  }
  return static_cast<int64_t>(n);
}

absl::StatusOr<Element> DecodeElement(const proto::ElementProto& p, absl::string_view what) {
  absl::StatusOr<Element> e = ElementFromProto(p);
  if (!e.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": bad element: ", e.status().message()));
  }
  return e;
}

absl::StatusOr<std::unique_ptr<RandomAccessSource>> OpenSlices(
    const proto::FromTensorSlicesSource& s) {
  ASSIGN_OR_RETURN(Element e, DecodeElement(s.element(), "from_tensor_slices"));
  std::vector<Tensor> leaves = e.Flatten();
  if (leaves.empty()) {
    return absl::InvalidArgumentError("from_tensor_slices: the element has no tensors");
  }
  const int64_t rows = leaves[0].shape().rank() > 0 ? leaves[0].shape().dim(0) : -1;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i].shape().rank() == 0 || leaves[i].shape().dim(0) != rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "from_tensor_slices: component ", i, " is a scalar or differs in dimension 0"));
    }
  }
  return std::unique_ptr<RandomAccessSource>(new SlicesAccess(std::move(e), rows));
}

absl::StatusOr<std::unique_ptr<RandomAccessSource>> OpenTFRecord(
    const proto::TFRecordSource& s, const RecordIndexOptions& index_options) {
  RETURN_IF_ERROR(ValidateTFRecordSource(s));
  std::vector<std::string> files(s.filenames().begin(), s.filenames().end());
  std::vector<std::shared_ptr<const RecordIndex>> indexes;
  FileLayout layout;
  IndexCache<RecordIndex>& cache = IndexCache<RecordIndex>::Get();
  const uint64_t use = cache.NewUse();
  for (const std::string& f : files) {
    ASSIGN_OR_RETURN(std::shared_ptr<const RecordIndex> index,
                     cache.LoadOrBuild(f, absl::StrCat(f, std::string(1, '\0'),
                                                       index_options.cache_dir),
                                       [&] { return RecordIndex::LoadOrBuild(f, index_options); },
                                       use));
    layout.AddFile(index->num_records());
    indexes.push_back(std::move(index));
  }
  if (s.has_record_range()) {
    layout.Restrict(s.record_range());
  } else {
    layout.Unrestricted();
  }
  return std::unique_ptr<RandomAccessSource>(
      new TFRecordAccess(std::move(files), std::move(indexes), std::move(layout)));
}

absl::StatusOr<std::unique_ptr<RandomAccessSource>> OpenFixedLength(
    const proto::FixedLengthRecordSource& s) {
  RETURN_IF_ERROR(ValidateFixedLengthRecordSource(s));
  FixedLengthRecordOptions o;
  o.record_bytes = s.record_bytes();
  o.header_bytes = s.header_bytes();
  o.footer_bytes = s.footer_bytes();
  std::vector<std::string> files(s.filenames().begin(), s.filenames().end());
  FileLayout layout;
  for (const std::string& f : files) {
    // Open checks the body is a whole number of records (TF's message) and counts them.
    ASSIGN_OR_RETURN(std::unique_ptr<FixedLengthRecordReader> r,
                     FixedLengthRecordReader::Open(f, o));
    layout.AddFile(r->num_records().value_or(0));
  }
  if (s.has_record_range()) {
    layout.Restrict(s.record_range());
  } else {
    layout.Unrestricted();
  }
  return std::unique_ptr<RandomAccessSource>(new FixedLengthAccess(
      std::move(files), s.header_bytes(), s.record_bytes(), std::move(layout)));
}

absl::StatusOr<std::unique_ptr<RandomAccessSource>> OpenNpy(const proto::NpySource& s) {
  if (s.filenames_size() == 0) return absl::InvalidArgumentError("npy_dataset: no files given");
  const DType dtype = static_cast<DType>(s.dtype());
  if (dtype == DType::kInvalid || dtype == DType::kString) {
    return absl::InvalidArgumentError("npy_dataset: dtype is not set");
  }
  const Shape row_shape(std::vector<int64_t>(s.row_shape().begin(), s.row_shape().end()));
  std::vector<std::string> files(s.filenames().begin(), s.filenames().end());
  std::vector<NpyHeader> headers;
  FileLayout layout;
  const uint64_t row_bytes = static_cast<uint64_t>(row_shape.num_elements()) * DTypeSize(dtype);
  for (const std::string& f : files) {
    ASSIGN_OR_RETURN(NpyHeader h, ReadNpyHeader(f));
    if (h.dtype != dtype || h.shape.DropFirst() != row_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "npy file '", f, "' holds ", DTypeName(h.dtype), " rows of shape ",
          h.shape.DropFirst().ToString(), " but the dataset's are ", DTypeName(dtype),
          " of shape ", row_shape.ToString(), " (from the first file)"));
    }
    ASSIGN_OR_RETURN(FileStat st, StatFile(f));
    const int64_t rows = h.shape.dim(0);
    const uint64_t need = h.data_offset + static_cast<uint64_t>(rows) * row_bytes;
    if (st.size < need) {
      return absl::InvalidArgumentError(absl::StrCat("npy file '", f,
                                                     "' is truncated: the header describes ",
                                                     need, " bytes but the file has ", st.size));
    }
    layout.AddFile(rows);
    headers.push_back(std::move(h));
  }
  layout.Unrestricted();
  return std::unique_ptr<RandomAccessSource>(new NpyAccess(
      std::move(files), std::move(headers), dtype, row_shape, std::move(layout)));
}

absl::StatusOr<std::unique_ptr<RandomAccessSource>> OpenJsonl(const proto::JsonlSource& s) {
  RETURN_IF_ERROR(JsonlSourceSpec(s).status());
  std::vector<std::string> files(s.filenames().begin(), s.filenames().end());
  std::vector<std::shared_ptr<const JsonlLineIndex>> indexes;
  FileLayout layout;
  IndexCache<JsonlLineIndex>& cache = IndexCache<JsonlLineIndex>::Get();
  const uint64_t use = cache.NewUse();
  for (const std::string& f : files) {
    ASSIGN_OR_RETURN(std::shared_ptr<const JsonlLineIndex> index,
                     cache.LoadOrBuild(f, f, [&] { return JsonlLineIndex::Build(f); }, use));
    layout.AddFile(index->num_elements());
    indexes.push_back(std::move(index));
  }
  layout.Unrestricted();
  return std::unique_ptr<RandomAccessSource>(
      new JsonlAccess(s, std::move(files), std::move(indexes), std::move(layout)));
}

}  // namespace

absl::Status CheckUncompressedRandomAccess(const proto::SourceDef& source,
                                           const std::string& compression_type) {
  return CheckUncompressed(source, compression_type);
}

absl::Status CheckRandomAccess(const proto::SourceDef& source) {
  if (source.kind_case() == proto::SourceDef::KIND_NOT_SET) {
    return absl::FailedPreconditionError("random access: the dataset has no source");
  }
  // Each source says whether it has random access (SourceRegistration::random_access).
  absl::StatusOr<const SourceRegistration*> r = FindSourceRegistration(source);
  if (!r.ok()) return absl::FailedPreconditionError(r.status().message());
  if ((*r)->random_access) return (*r)->random_access(source);
  return NoRandomAccess(source, (*r)->no_random_access);
}

absl::StatusOr<std::unique_ptr<RandomAccessSource>> RandomAccessSource::Open(
    const proto::SourceDef& source) {
  return Open(source, RecordIndexOptions());
}

absl::StatusOr<std::unique_ptr<RandomAccessSource>> RandomAccessSource::Open(
    const proto::SourceDef& source, const RecordIndexOptions& index_options) {
  RETURN_IF_ERROR(CheckRandomAccess(source));
  switch (source.kind_case()) {
    case proto::SourceDef::kRange: {
      ASSIGN_OR_RETURN(int64_t n, RangeSize(source.range()));
      return std::unique_ptr<RandomAccessSource>(
          new RangeAccess(source.range().start(), source.range().step(), n));
    }
    case proto::SourceDef::kFromTensors: {
      ASSIGN_OR_RETURN(Element e, DecodeElement(source.from_tensors().element(), "from_tensors"));
      return std::unique_ptr<RandomAccessSource>(new TensorsAccess(std::move(e)));
    }
    case proto::SourceDef::kFromTensorSlices:
      return OpenSlices(source.from_tensor_slices());
    case proto::SourceDef::kTfRecord:
      return OpenTFRecord(source.tf_record(), index_options);
    case proto::SourceDef::kFixedLengthRecord:
      return OpenFixedLength(source.fixed_length_record());
    case proto::SourceDef::kNpy:
      return OpenNpy(source.npy());
    case proto::SourceDef::kJsonl:
      return OpenJsonl(source.jsonl());
    default:
      break;
  }
  // Not reached: only these sources register random_access (ops/<name>_op.cc).
  return absl::InternalError("random access: unhandled source kind");
}

}  // namespace sluice
