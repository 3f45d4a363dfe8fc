#include "core/data/ops/record_iterators.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/format/python_literal.h"
#include "core/data/ops/source_iterators.h"
#include "core/data/absorbed_op_error.h"
#include "core/data/deferred_check_blocks.h"
#include "core/io/fixed_length_record_reader.h"
#include "core/data/ops/interleave_iterator.h"
#include "core/data/ops/decode_raw_byte_order.h"
#include "core/data/op_iterator.h"
#include "core/data/shape_limits.h"
#include "core/tensor/host_memory.h"
#include "core/tensor/step_output_allocator.h"
#include "core/tensor/uninitialized_tensor.h"
#include "core/util/status_context.h"
#include "core/util/status_macros.h"
#include "core/util/thread_pool.h"
#include "core/io/tfrecord_reader.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view m) { return absl::InvalidArgumentError(std::string(m)); }

absl::Status ValidateRange(const proto::RecordRange& r) {
  if (r.start() < 0) return Invalid(absl::StrCat("start_record must be >= 0, got ", r.start()));
  if (r.count() < -1) {
    return Invalid(absl::StrCat("num_records must be >= 0 or -1 (all), got ", r.count()));
  }
  return absl::OkStatus();
}

// A record read without verifying its data (RecordFile::ReadView): what verifies it.
struct UncheckedRecord {
  bool unchecked = false;  // false: verified already, or the format has nothing to verify
  TFRecordReader::UncheckedData data;
  std::shared_ptr<const std::string> filename;  // the file's, as its reader names it
};

// A record framed under the read lock and copied out (and verified) later, off it: a view into
// a read buffer, or the record itself when its format copied it already.
struct RecordView {
  absl::string_view data;  // valid while the block holds the buffer's owner; unused if has_owned
  std::string owned;
  bool has_owned = false;
};

// One file's records, whatever the format.
class RecordFile {
 public:
  virtual ~RecordFile() = default;
  virtual absl::Status Read(std::string* record) = 0;  // OUT_OF_RANGE at the end
  // As Read, leaving checks of the record's data to the caller, as *unchecked says, and the
  // copy out of the read buffer too: *view views the record in a buffer that *owner keeps
  // alive (TFRecordReader::ReadRecordView), or owns the record.
  virtual absl::Status ReadView(RecordView* view, std::shared_ptr<const void>* owner,
                                UncheckedRecord* unchecked) {
    (void)owner;
    unchecked->unchecked = false;
    view->has_owned = true;
    return Read(&view->owned);
  }
  // As Read, into memory `destination(size)` gives once the record's size is known
  // (FixedLengthRecordReader::ReadRecordInto's contract). The default reads and copies.
  virtual absl::Status ReadInto(FixedLengthRecordReader::RecordDestination destination) {
    std::string record;
    RETURN_IF_ERROR(Read(&record));
    ASSIGN_OR_RETURN(char* to, destination(record.size()));
    std::memcpy(to, record.data(), record.size());
    return absl::OkStatus();
  }
  // As Read, without the record (its bytes not copied out, not read where the format can
  // pass over them). The default reads it.
  virtual absl::Status SkipRecord() {
    std::string record;
    return Read(&record);
  }
  virtual absl::Status SeekToRecord(int64_t i) = 0;
  // Pages of the file to fault in ahead of the reads (TFRecordReader::TakePagesAhead).
  virtual std::optional<TFRecordReader::PagesAhead> TakePagesAhead() { return std::nullopt; }
  // Whether FrameViews can frame this file's next records (a mapped TFRecord file).
  virtual bool FramesInBulk() const { return false; }
  // As up to `max_records` ReadView calls, in one pass (TFRecordReader::FrameMappedRecords):
  // appends the records to *out, viewing the buffer *owner keeps alive, their data unchecked
  // (unchecked->filename names their file), stopping after the one whose data brings *bytes
  // (added to) over `max_bytes`. OK at a limit, OUT_OF_RANGE at the end of the file, or the
  // error of the record that stopped it; the records appended before it are good either way.
  virtual absl::Status FrameViews(int64_t /*max_records*/, int64_t /*max_bytes*/,
                                  std::vector<TFRecordReader::FramedRecord>* /*out*/,
                                  int64_t* /*bytes*/, std::shared_ptr<const void>* /*owner*/,
                                  UncheckedRecord* /*unchecked*/) {
    return absl::UnimplementedError("FrameViews on a file that does not frame in bulk");
  }
};

class TFRecordFile : public RecordFile {
 public:
  TFRecordFile(std::unique_ptr<TFRecordReader> r, std::optional<RecordIndex> index)
      : reader_(std::move(r)),
        index_(std::move(index)),
        filename_(std::make_shared<const std::string>(reader_->filename())) {}
  absl::Status Read(std::string* record) override { return reader_->ReadRecord(record); }
  absl::Status ReadView(RecordView* view, std::shared_ptr<const void>* owner,
                        UncheckedRecord* unchecked) override {
    unchecked->unchecked = true;
    if (unchecked->filename != filename_) unchecked->filename = filename_;
    view->has_owned = false;
    return reader_->ReadRecordView(&view->data, &unchecked->data, owner);
  }
  bool FramesInBulk() const override { return reader_->mapped(); }
  absl::Status FrameViews(int64_t max_records, int64_t max_bytes,
                          std::vector<TFRecordReader::FramedRecord>* out, int64_t* bytes,
                          std::shared_ptr<const void>* owner,
                          UncheckedRecord* unchecked) override {
    unchecked->unchecked = true;
    if (unchecked->filename != filename_) unchecked->filename = filename_;
    return reader_->FrameMappedRecords(max_records, max_bytes, out, bytes, owner);
  }
  std::optional<TFRecordReader::PagesAhead> TakePagesAhead() override {
    return reader_->TakePagesAhead();
  }
  absl::Status SeekToRecord(int64_t i) override {
    if (index_.has_value()) {
      if (i >= index_->num_records()) {
        // Past the end: position at the end of the indexed records.
        if (index_->num_records() == 0) return absl::OkStatus();
        RETURN_IF_ERROR(reader_->Seek(index_->offset(index_->num_records() - 1)));
        return reader_->SkipRecord();
      }
      return reader_->Seek(index_->offset(i));
    }
    for (int64_t k = 0; k < i; ++k) {
      absl::Status s = reader_->SkipRecord();
      if (absl::IsOutOfRange(s)) return absl::OkStatus();
      RETURN_IF_ERROR(s);
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<TFRecordReader> reader_;
  std::optional<RecordIndex> index_;
  const std::shared_ptr<const std::string> filename_;
};

class FixedLengthFile : public RecordFile {
 public:
  explicit FixedLengthFile(std::unique_ptr<FixedLengthRecordReader> r) : reader_(std::move(r)) {}
  absl::Status Read(std::string* record) override { return reader_->ReadRecord(record); }
  absl::Status ReadInto(FixedLengthRecordReader::RecordDestination destination) override {
    return reader_->ReadRecordInto(destination);
  }
  absl::Status SkipRecord() override { return reader_->SkipRecord(); }
  absl::Status SeekToRecord(int64_t i) override { return reader_->SeekToRecord(i); }

 private:
  std::unique_ptr<FixedLengthRecordReader> reader_;
};

// Opens file `i` of the source; counts its records.
class RecordFormat {
 public:
  virtual ~RecordFormat() = default;
  virtual absl::StatusOr<std::unique_ptr<RecordFile>> Open(const std::string& f,
                                                           bool want_index) = 0;
  virtual absl::StatusOr<int64_t> Count(const std::string& f) = 0;
  // Files opened from now on are unmapped on `pool` (TFRecordReaderOptions::unmap_pool).
  virtual void UnmapOn(ThreadPool* /*pool*/) {}
};

class TFRecordFormat : public RecordFormat {
 public:
  TFRecordFormat(Compression c, size_t buffer_size, RecordIndexOptions index_options)
      : compression_(c), buffer_size_(buffer_size), index_options_(std::move(index_options)) {}
  absl::StatusOr<std::unique_ptr<RecordFile>> Open(const std::string& f,
                                                   bool want_index) override {
    TFRecordReaderOptions o;
    o.compression = compression_;
    o.buffer_size = buffer_size_;
    o.unmap_pool = unmap_pool_;
    ASSIGN_OR_RETURN(std::unique_ptr<TFRecordReader> r, TFRecordReader::Open(f, o));
    std::optional<RecordIndex> index;
    if (want_index && compression_ == Compression::kNone) {
      ASSIGN_OR_RETURN(index, RecordIndex::LoadOrBuild(f, index_options_));
    }
    return std::unique_ptr<RecordFile>(new TFRecordFile(std::move(r), std::move(index)));
  }
  absl::StatusOr<int64_t> Count(const std::string& f) override {
    return CountTFRecords(f, compression_, index_options_);
  }
  void UnmapOn(ThreadPool* pool) override { unmap_pool_ = pool; }

 private:
  ThreadPool* unmap_pool_ = nullptr;
  const Compression compression_;
  const size_t buffer_size_;
  const RecordIndexOptions index_options_;
};

class FixedLengthFormat : public RecordFormat {
 public:
  explicit FixedLengthFormat(FixedLengthRecordOptions o) : options_(o) {}
  absl::StatusOr<std::unique_ptr<RecordFile>> Open(const std::string& f, bool) override {
    ASSIGN_OR_RETURN(auto r, FixedLengthRecordReader::Open(f, options_));
    return std::unique_ptr<RecordFile>(new FixedLengthFile(std::move(r)));
  }
  absl::StatusOr<int64_t> Count(const std::string& f) override {
    ASSIGN_OR_RETURN(auto r, FixedLengthRecordReader::Open(f, options_));
    if (r->num_records().has_value()) return *r->num_records();
    std::string rec;
    int64_t n = 0;
    for (;;) {
      absl::Status s = r->ReadRecord(&rec);
      if (absl::IsOutOfRange(s)) return n;
      RETURN_IF_ERROR(s);
      ++n;
    }
  }

 private:
  const FixedLengthRecordOptions options_;
};

// Files in order, optionally limited to a record range.
// Implements DeferredCheckBlockSource: a parallel map pulling its blocks does only the framing
// under its read lock (one read() per buffer, or none for a mapped file; record boundaries,
// length checksums: for a mapped file one pass over the block's headers,
// TFRecordReader::FrameMappedRecords, which leaves even the data checksums stored after each
// record to be read off the lock); copying the records out of the buffers and verifying their data
// checksums is the block's BlockCheck, run outside the lock, which also faults in the pages of
// a mapped file that the next reads will touch (TFRecordReader::TakePagesAhead) and closes the
// files the block's reads finished. Such a map's pool also unmaps the files opened from its
// first pull on (TFRecordReaderOptions::unmap_pool): a file's munmap (~1 ms for 50 MB of mapped
// pages) would otherwise run in the job that drops its last view, before that job's block is
// done, and in input order every later block waits for it (measured: one core idle for most of
// each munmap, bench/RESULTS.md "recsteady").
class SequentialRecordIterator : public OpIterator, public DeferredCheckBlockSource {
 public:
  SequentialRecordIterator(std::string label, std::vector<std::string> files,
                           std::unique_ptr<RecordFormat> format,
                           std::optional<proto::RecordRange> range)
      : OpIterator(std::move(label)),
        files_(std::move(files)),
        format_(std::move(format)),
        range_(std::move(range)) {
    if (range_.has_value()) remaining_ = range_->count();
  }

 protected:
  // The bulk path: runs of records as 1-D string tensors, read exactly as GetNext reads them.
  bool SupportsBlocks() const override { return true; }
  // Reads only files: a parallel map may pull its blocks on the pool (core/data/iterator.h).
  bool BlocksPullableOnPool() const override { return true; }

  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    std::string record;
    RETURN_IF_ERROR(Read(&record, end_of_sequence));
    if (!*end_of_sequence) *out = Element(Tensor::StringScalar(std::move(record)));
    return absl::OkStatus();
  }

  // A read error after some records of the block ends the block there; the error comes on the
  // next call, after those records, where the per-element path returns it.
  absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence) override {
    return ReadBlock(max_elements, out, n, end_of_sequence);
  }

 public:
  // Called only by a map that pulls this source on the pool, which stops at the first error or
  // end (OpIterator's stickiness is not needed there).
  absl::Status GetNextBlockDeferringChecks(int64_t max_elements, Element* out, int64_t* n,
                                           bool* end_of_sequence, BlockCheck* check) override {
    if (!unmapping_on_pool_) {
      // Running on the pool, which therefore started.
      if (absl::StatusOr<ThreadPool*> pool = ProcessThreadPool(); pool.ok()) {
        format_->UnmapOn(*pool);
      }
      unmapping_on_pool_ = true;
    }
    *check = nullptr;
    *n = 0;
    *end_of_sequence = false;
    ViewBlock views;
    absl::Status s = ReadViews(max_elements, &views, end_of_sequence);
    if (!s.ok() || *end_of_sequence) return s;
    *n = static_cast<int64_t>(views.rows.size());
    *out = Element();
    *check = [views = std::move(views), label = label()](
                 Element* block, int64_t* good_rows, const SerializedRowsFn& map_rows,
                 bool* mapped) mutable {
      // Off the read lock: the next blocks' pages, and the files read to their end.
      if (views.ahead.has_value()) TFRecordReader::FaultIn(*views.ahead);
      views.ahead.reset();
      views.finished.clear();
      *mapped = map_rows != nullptr && MapRowsInPlace(&views, label, map_rows, block, good_rows);
      if (*mapped) return views.pending;
      return BuildBlock(&views, label, block, good_rows);
    };
    return absl::OkStatus();
  }

 private:
  // A row of a block read as a view: the record, where its bytes live (`owner` indexes the
  // block's owners) and, when its data is still to verify, its checksum (`file` indexes the
  // block's filenames).
  struct ViewRow {
    RecordView record;
    size_t owner = 0;
    bool unchecked = false;
    TFRecordReader::UncheckedData data;
    size_t file = 0;
  };
  // A block framed but not copied: its rows, the buffers they view and the files they came
  // from (one reference per buffer and per file, not per row: no reference count touched per
  // record on the reading and the copying threads).
  struct ViewBlock {
    std::vector<ViewRow> rows;
    std::vector<std::shared_ptr<const void>> owners;
    std::vector<std::shared_ptr<const std::string>> filenames;
    absl::Status pending;  // MapRowsInPlace: the bad row's error, after the mapped rows
    // Work the read lock need not wait for, done by the check: pages of the file to fault in
    // before later blocks' reads touch them, and the files the block's reads finished, whose
    // closing (a munmap of the whole file) would otherwise run under the lock.
    std::optional<TFRecordReader::PagesAhead> ahead;
    std::vector<std::shared_ptr<RecordFile>> finished;
  };

  // The data checksum of row i of the block, verified once (the row is then marked checked):
  // OK, or its DATA_LOSS.
  static absl::Status CheckRow(ViewBlock* views, const std::string& label, size_t i) {
    ViewRow& r = views->rows[i];
    if (!r.unchecked) return absl::OkStatus();
    const absl::string_view d = r.record.has_owned ? r.record.owned : r.record.data;
    absl::Status c = TFRecordReader::CheckData(d, r.data, *views->filenames[r.file]);
    if (!c.ok()) return WithContext(label, c);
    r.unchecked = false;
    return absl::OkStatus();
  }

  // The data checksum of the block's rows, in order, up to the first bad one: the rows' views
  // (the good ones, marked checked) and that row's DATA_LOSS, OK when every row is good.
  static absl::Status CheckRows(ViewBlock* views, const std::string& label,
                                std::vector<absl::string_view>* good) {
    good->reserve(views->rows.size());
    for (size_t i = 0; i < views->rows.size(); ++i) {
      RETURN_IF_ERROR(CheckRow(views, label, i));
      const ViewRow& r = views->rows[i];
      good->push_back(r.record.has_owned ? r.record.owned : r.record.data);
    }
    return absl::OkStatus();
  }

  // The map-and-parse fusion of BlockCheck (core/data/deferred_check_blocks.h): maps the rows
  // with map_rows straight from the read buffers, with no copy of them, each row verified just
  // before map_rows reads it (its bytes are then in the L1 cache when the parse reads them);
  // true with *block the result, *good_rows their count and views->pending the bad row's error
  // (OK if none: then the rows before it were mapped again, on their own); the buffers are
  // released. False when map_rows fails on good rows or no row is good (the rows already
  // verified stay marked so): BuildBlock then builds the rows' block.
  static bool MapRowsInPlace(ViewBlock* views, const std::string& label,
                             const SerializedRowsFn& map_rows, Element* block,
                             int64_t* good_rows) {
    std::vector<absl::string_view> rows;
    rows.reserve(views->rows.size());
    for (const ViewRow& r : views->rows) {
      rows.push_back(r.record.has_owned ? r.record.owned : r.record.data);
    }
    absl::StatusOr<Element> mapped =
        map_rows(rows, [views, &label](size_t i) { return CheckRow(views, label, i); });
    // Rows map_rows did not verify (it failed before them, or does not call its check).
    std::vector<absl::string_view> good;
    views->pending = CheckRows(views, label, &good);
    if (good.empty()) return false;
    if (!views->pending.ok()) mapped = map_rows(good, nullptr);  // the rows before the bad one
    if (!mapped.ok()) return false;
    *block = *std::move(mapped);
    *good_rows = static_cast<int64_t>(good.size());
    views->rows.clear();
    views->owners.clear();
    return true;
  }

  // The BlockCheck of GetNextBlockDeferringChecks: copies the rows out of their buffers,
  // verifying each one's data before it, into *block (a 1-D string tensor, charged to the
  // memory budget), and drops the block's references to the buffers. On a corrupted record the
  // block holds the rows before it (*good_rows of them) and its DATA_LOSS is returned; when the
  // allocator refuses the tensor, *good_rows is 0 and its RESOURCE_EXHAUSTED is returned.
  static absl::Status BuildBlock(ViewBlock* views, const std::string& label, Element* block,
                                 int64_t* good_rows) {
    std::vector<absl::string_view> good;
    const absl::Status bad = CheckRows(views, label, &good);
    std::vector<std::string> records;
    records.reserve(good.size());
    for (size_t i = 0; i < good.size(); ++i) {
      ViewRow& r = views->rows[i];
      if (r.record.has_owned) {
        records.push_back(std::move(r.record.owned));
      } else {
        records.emplace_back(good[i]);
      }
    }
    // The buffers go back to the budget as soon as their records are copied.
    views->rows.clear();
    views->owners.clear();
    *good_rows = static_cast<int64_t>(records.size());
    if (records.empty()) return bad;
    absl::StatusOr<Tensor> t =
        Tensor::TryFromStrings(std::move(records), Shape({*good_rows}), label);
    if (!t.ok()) {
      *good_rows = 0;
      return t.status();
    }
    *block = Element(*std::move(t));
    return bad;
  }

  // GetNextBlockInternal's reads as views: up to max_elements rows, fewer when they hold more
  // than an element's bytes, or when a read error came after some (then pending_). A file that
  // frames in bulk (a mapped TFRecord file) is framed a run of records at a time.
  absl::Status ReadViews(int64_t max_elements, ViewBlock* views, bool* end_of_sequence) {
    if (!pending_.ok()) return pending_;
    views->rows.reserve(static_cast<size_t>(std::min<int64_t>(max_elements, 4096)));
    const int64_t element_limit = ProcessMemoryBudget().limits().element_bytes;
    int64_t bytes = 0;
    UncheckedRecord check;
    std::shared_ptr<const void> owner;
    std::vector<TFRecordReader::FramedRecord> framed;
    while (static_cast<int64_t>(views->rows.size()) < max_elements && bytes <= element_limit) {
      bool end = false;
      absl::Status s = OpenCurrent(&end);
      if (s.ok() && !end && current_->FramesInBulk()) {
        s = FrameInBulk(max_elements - static_cast<int64_t>(views->rows.size()), element_limit,
                        views, &bytes, &owner, &check, &framed);
        if (absl::IsOutOfRange(s)) {  // the file's end: on to the next file
          FinishCurrent(&views->finished);
          continue;
        }
      } else if (s.ok() && !end) {
        ViewRow row;
        s = ReadWith([&](RecordFile* f) { return f->ReadView(&row.record, &owner, &check); },
                     &end, &views->finished);
        if (s.ok() && !end) {
          bytes += static_cast<int64_t>(row.record.has_owned ? row.record.owned.size()
                                                              : row.record.data.size());
          AppendRow(std::move(row), owner, check, views);
        }
      }
      if (!s.ok()) {
        if (views->rows.empty()) return s;
        pending_ = s;
        break;
      }
      if (end) break;
    }
    if (current_ != nullptr) views->ahead = current_->TakePagesAhead();
    if (views->rows.empty()) *end_of_sequence = true;
    return absl::OkStatus();
  }

  // Up to `most` records of current_ (fewer at the range's end) framed in one pass
  // (RecordFile::FrameViews) into views->rows; *bytes as ReadViews counts them. FrameViews'
  // status, its errors labeled.
  absl::Status FrameInBulk(int64_t most, int64_t element_limit, ViewBlock* views, int64_t* bytes,
                           std::shared_ptr<const void>* owner, UncheckedRecord* check,
                           std::vector<TFRecordReader::FramedRecord>* framed) {
    if (remaining_ >= 0) most = std::min(most, remaining_);
    framed->clear();
    absl::Status s = current_->FrameViews(most, element_limit, framed, bytes, owner, check);
    if (remaining_ > 0) remaining_ -= static_cast<int64_t>(framed->size());
    for (const TFRecordReader::FramedRecord& f : *framed) {
      ViewRow row;
      row.record.data = f.data;
      check->data = f.unchecked;
      AppendRow(std::move(row), *owner, *check, views);
    }
    if (s.ok() || absl::IsOutOfRange(s)) return s;
    return Labeled(s);
  }

  // Appends `row`, read as a view of a buffer `owner` keeps (unless it owns its record), its
  // data to verify as `check` says, to the block.
  static void AppendRow(ViewRow row, const std::shared_ptr<const void>& owner,
                        const UncheckedRecord& check, ViewBlock* views) {
    if (!row.record.has_owned) {
      if (views->owners.empty() || views->owners.back() != owner) {
        views->owners.push_back(owner);
      }
      row.owner = views->owners.size() - 1;
    }
    if (check.unchecked) {
      if (views->filenames.empty() || views->filenames.back() != check.filename) {
        views->filenames.push_back(check.filename);
      }
      row.unchecked = true;
      row.data = check.data;
      row.file = views->filenames.size() - 1;
    }
    views->rows.push_back(std::move(row));
  }

  absl::Status ReadBlock(int64_t max_elements, Element* out, int64_t* n, bool* end_of_sequence) {
    if (!pending_.ok()) return pending_;
    std::vector<std::string> records;
    records.reserve(static_cast<size_t>(std::min<int64_t>(max_elements, 4096)));
    const int64_t element_limit = ProcessMemoryBudget().limits().element_bytes;
    int64_t bytes = 0;
    while (static_cast<int64_t>(records.size()) < max_elements) {
      std::string record;
      bool end = false;
      absl::Status s = Read(&record, &end);
      if (!s.ok()) {
        if (records.empty()) return s;
        pending_ = s;
        break;
      }
      if (end) break;
      bytes += static_cast<int64_t>(record.size());
      records.push_back(std::move(record));
      // A block is at most one element's worth (the batch it goes to checks the element limit
      // on what it gathers): a huge max_elements does not read the file into memory.
      if (bytes > element_limit) break;
    }
    if (records.empty()) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    *n = static_cast<int64_t>(records.size());
    absl::StatusOr<Tensor> block =
        Tensor::TryFromStrings(std::move(records), Shape({*n}), label());
    if (!block.ok()) return block.status();
    *out = Element(*std::move(block));
    return absl::OkStatus();
  }

 protected:
  // The next record, or *end at the end of the files (or of the range).
  absl::Status Read(std::string* record, bool* end) {
    return ReadWith([record](RecordFile* f) { return f->Read(record); }, end);
  }

  // Makes current_ the file the next record comes from, opening the next file when none is
  // open (after positioning a range's start), or sets *end at the end of the files (or of the
  // range).
  absl::Status OpenCurrent(bool* end) {
    if (range_.has_value() && !positioned_) {
      RETURN_IF_ERROR(Position());
      positioned_ = true;
    }
    if (remaining_ == 0 || next_file_ > files_.size() ||
        (current_ == nullptr && next_file_ == files_.size())) {
      *end = true;
      return absl::OkStatus();
    }
    if (current_ == nullptr) {
      absl::StatusOr<std::unique_ptr<RecordFile>> f = format_->Open(files_[next_file_], false);
      if (!f.ok()) return Labeled(f.status());
      current_ = *std::move(f);
      ++next_file_;
    }
    return absl::OkStatus();
  }

  // current_, read to its end, is closed, or moved to *finished for the caller to close later
  // (off its lock) when `finished` is not null.
  void FinishCurrent(std::vector<std::shared_ptr<RecordFile>>* finished) {
    if (finished != nullptr) finished->push_back(std::move(current_));
    current_.reset();
  }

  // The next record read from its file by `read` (a RecordFile method), or *end at the end of
  // the files (or of the range). A file read to its end is finished (FinishCurrent).
  template <typename ReadFn>
  absl::Status ReadWith(const ReadFn& read, bool* end,
                        std::vector<std::shared_ptr<RecordFile>>* finished = nullptr) {
    for (;;) {
      RETURN_IF_ERROR(OpenCurrent(end));
      if (*end) return absl::OkStatus();
      absl::Status s = read(current_.get());
      if (absl::IsOutOfRange(s)) {
        FinishCurrent(finished);
        continue;
      }
      if (!s.ok()) return Labeled(s);
      if (remaining_ > 0) --remaining_;
      return absl::OkStatus();
    }
  }

  absl::Status Labeled(const absl::Status& s) const {
    return WithContext(label(), s);
  }

 private:
  // Skips whole files before range_->start using their counts, then seeks inside the file.
  absl::Status Position() {
    int64_t skip = range_->start();
    while (next_file_ < files_.size()) {
      const std::string& f = files_[next_file_];
      absl::StatusOr<int64_t> n = format_->Count(f);
      if (!n.ok()) return Labeled(n.status());
      if (skip < *n) {
        absl::StatusOr<std::unique_ptr<RecordFile>> file = format_->Open(f, skip > 0);
        if (!file.ok()) return Labeled(file.status());
        current_ = *std::move(file);
        ++next_file_;
        absl::Status s = current_->SeekToRecord(skip);
        if (!s.ok()) return Labeled(s);
        return absl::OkStatus();
      }
      skip -= *n;
      ++next_file_;
    }
    return absl::OkStatus();  // the range starts past the last record: nothing to read
  }

  const std::vector<std::string> files_;
  std::unique_ptr<RecordFormat> format_;
  const std::optional<proto::RecordRange> range_;
  int64_t remaining_ = -1;  // records left in the range; -1: unlimited
  bool positioned_ = false;
  bool unmapping_on_pool_ = false;  // format_->UnmapOn(the pool) called (deferred checks)
  size_t next_file_ = 0;
  std::unique_ptr<RecordFile> current_;
  absl::Status pending_;  // a read error after the last block's records (bulk path)
};

// fixed_length_record_dataset fused with the map(decode_raw) after it (record_iterators.h:
// DecodedRecords): each record read straight into its decoded tensor. Not a block source: its
// elements are no longer the records the block paths hand out.
class DecodedFixedLengthRecordIterator : public SequentialRecordIterator {
 public:
  DecodedFixedLengthRecordIterator(std::string label, std::vector<std::string> files,
                                   std::unique_ptr<RecordFormat> format,
                                   std::optional<proto::RecordRange> range,
                                   DecodedRecords decoded)
      : SequentialRecordIterator(std::move(label), std::move(files), std::move(format),
                                 std::move(range)),
        decoded_(std::move(decoded)),
        width_(DTypeSize(decoded_.out_type)),
        swap_(DecodeRawSwaps(width_, decoded_.big_endian)) {}

 protected:
  bool SupportsBlocks() const override { return false; }
  bool BlocksPullableOnPool() const override { return false; }

  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    Tensor decoded;
    absl::Status refused;  // the decoded tensor's allocation: the map's element error
    const auto destination = [&](size_t bytes) -> absl::StatusOr<char*> {
      absl::StatusOr<Tensor> t = Allocate(bytes);
      if (!t.ok()) return refused = t.status();
      decoded = *std::move(t);
      return static_cast<char*>(decoded.mutable_raw_data());
    };
    // A refused record counts as read (the unfused source read it, its map failed on it).
    RETURN_IF_ERROR(ReadWith(
        [&](RecordFile* f) {
          absl::Status s = f->ReadInto(destination);
          return refused.ok() ? s : absl::OkStatus();
        },
        end_of_sequence));
    if (!refused.ok()) {
      // Raised at the map's place, after the ops between have counted the record as apart
      // (core/data/absorbed_op_error.h): a stand-in until then.
      DeferAbsorbedOpError(MarkElementError(WithContext(
          decoded_.map_label, WithContext(absl::StrCat(decoded_.fn, " (string [])"), refused))));
      *out = Element();
      return absl::OkStatus();
    }
    if (*end_of_sequence) return absl::OkStatus();
    if (swap_) {
      ReverseEachValue(static_cast<char*>(decoded.mutable_raw_data()), decoded.byte_size(),
                       width_);
    }
    *out = Element(std::move(decoded));
    return absl::OkStatus();
  }

  // The records skip() or shard() before the map drop (the executor keeps a Skip from after
  // the map from reaching here: AbsorbedOpPlace): passed over, never decoded, so never
  // allocated or refused, as apart, where the map never sees them.
  absl::Status SkipInternal(int64_t count, int64_t* skipped, bool* end_of_sequence) override {
    for (*skipped = 0; *skipped < count; ++*skipped) {
      RETURN_IF_ERROR(
          ReadWith([](RecordFile* f) { return f->SkipRecord(); }, end_of_sequence));
      if (*end_of_sequence) break;
    }
    return absl::OkStatus();
  }

 private:
  // The decoded tensor of a record of `bytes`: in the step's place when it has one, else
  // charged to the memory budget (not zero-filled: the record overwrites it whole).
  absl::StatusOr<Tensor> Allocate(size_t bytes) const {
    const Shape shape({static_cast<int64_t>(bytes / width_)});
    if (decoded_.to_step) {
      if (std::shared_ptr<TensorBuffer> b = AllocateStepOutput(bytes)) {
        return Tensor::Wrap(decoded_.out_type, shape, std::move(b));
      }
    }
    return TryAllocateUninitialized(decoded_.out_type, shape, "its output");
  }

  const DecodedRecords decoded_;
  const size_t width_;
  const bool swap_;
};

// An iterator whose arguments were bad: fails with that status.
class FailingIterator : public Iterator {
 public:
  explicit FailingIterator(absl::Status s) : s_(std::move(s)) {}
  absl::Status GetNext(Element*, bool*) override { return s_; }

 private:
  const absl::Status s_;
};

// The buffer sizes a client chose for a reader (its buffer_size, a record's record_bytes),
// against the element limit before a byte of them is allocated: RESOURCE_EXHAUSTED naming the
// argument, or OK.
absl::Status CheckClientBufferSizes(
    const std::string& label, std::initializer_list<std::pair<const char*, int64_t>> sizes) {
  for (const auto& [name, bytes] : sizes) {
    RETURN_IF_ERROR(
        CheckAllocation(absl::StrCat(label, ": ", name, "=", bytes), DType::kUInt8, {bytes}));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTFRecordSource(const proto::TFRecordSource& source) {
  if (source.filenames_size() == 0) return Invalid("filenames must not be empty");
  RETURN_IF_ERROR(ParseCompressionType(source.compression_type()).status());
  if (source.buffer_size() < 0) {
    return Invalid(absl::StrCat("buffer_size must be >= 0, got ", source.buffer_size()));
  }
  if (source.num_parallel_reads() < -1) {
    return Invalid(absl::StrCat("num_parallel_reads must be positive or -1 (AUTOTUNE), got ",
                                source.num_parallel_reads()));
  }
  if (source.has_record_range()) {
    RETURN_IF_ERROR(ValidateRange(source.record_range()));
    if (source.num_parallel_reads() > 1 || source.num_parallel_reads() == -1) {
      return Invalid("a record range reads files in order: num_parallel_reads must be unset");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFixedLengthRecordSource(const proto::FixedLengthRecordSource& source) {
  if (source.filenames_size() == 0) return Invalid("filenames must not be empty");
  RETURN_IF_ERROR(ParseCompressionType(source.compression_type()).status());
  if (source.record_bytes() <= 0) {
    return Invalid(absl::StrCat("record_bytes must be positive, got ", source.record_bytes()));
  }
  if (source.header_bytes() < 0 || source.footer_bytes() < 0 || source.buffer_size() < 0) {
    return Invalid("header_bytes, footer_bytes and buffer_size must be >= 0");
  }
  if (source.has_record_range()) RETURN_IF_ERROR(ValidateRange(source.record_range()));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CountTFRecords(const std::string& filename, Compression compression,
                                       const RecordIndexOptions& index_options) {
  if (compression == Compression::kNone) {
    ASSIGN_OR_RETURN(RecordIndex index, RecordIndex::LoadOrBuild(filename, index_options));
    return index.num_records();
  }
  TFRecordReaderOptions o;
  o.compression = compression;
  ASSIGN_OR_RETURN(std::unique_ptr<TFRecordReader> r, TFRecordReader::Open(filename, o));
  int64_t n = 0;
  for (;;) {
    absl::Status s = r->SkipRecord();
    if (absl::IsOutOfRange(s)) return n;
    RETURN_IF_ERROR(s);
    ++n;
  }
}

std::unique_ptr<Iterator> NewTFRecordIterator(std::string label, proto::TFRecordSource source,
                                              RecordIndexOptions index_options) {
  absl::Status valid = ValidateTFRecordSource(source);
  if (!valid.ok()) {
    return std::make_unique<FailingIterator>(
        absl::InvalidArgumentError(absl::StrCat(label, ": ", valid.message())));
  }
  if (absl::Status fits = CheckClientBufferSizes(label, {{"buffer_size", source.buffer_size()}});
      !fits.ok()) {
    return std::make_unique<FailingIterator>(fits);
  }
  Compression c = *ParseCompressionType(source.compression_type());
  auto format = std::make_unique<TFRecordFormat>(c, static_cast<size_t>(source.buffer_size()),
                                                 index_options);
  std::vector<std::string> files(source.filenames().begin(), source.filenames().end());
  int64_t parallel = source.num_parallel_reads();
  if (parallel == -1) parallel = static_cast<int64_t>(files.size());
  if (parallel > 1 && !source.has_record_range()) {
    // TF's TFRecordDataset does interleave(cycle_length=n, block_length=1,
    // num_parallel_calls=n) over the files: the same order, each open file read ahead by its
    // own thread.
    const int64_t n = static_cast<int64_t>(files.size());
    absl::StatusOr<std::unique_ptr<Iterator>> names =
        NewFromTensorSlicesIterator(label, Element(Tensor::FromStrings(files, Shape({n}))));
    if (!names.ok()) return std::make_unique<FailingIterator>(names.status());
    const size_t buffer_size = static_cast<size_t>(source.buffer_size());
    InterleaveInputFn make = [label, c, buffer_size, index_options](
                                 const Element& e) -> absl::StatusOr<std::unique_ptr<Iterator>> {
      return std::unique_ptr<Iterator>(new SequentialRecordIterator(
          label, {e.leaf().string_at(0)},
          std::make_unique<TFRecordFormat>(c, buffer_size, index_options), std::nullopt));
    };
    return NewInterleaveIterator(std::move(label), *std::move(names), std::move(make), parallel,
                                 /*block_length=*/1, /*num_parallel_calls=*/parallel,
                                 /*deterministic=*/true);
  }
  std::optional<proto::RecordRange> range;
  if (source.has_record_range()) range = source.record_range();
  return std::make_unique<SequentialRecordIterator>(std::move(label), std::move(files),
                                                    std::move(format), std::move(range));
}

namespace {

// The fixed-length source's iterator: a SequentialRecordIterator, or with `decoded` a
// DecodedFixedLengthRecordIterator over the same files; a FailingIterator for bad arguments.
std::unique_ptr<Iterator> FixedLengthIterator(std::string label,
                                              const proto::FixedLengthRecordSource& source,
                                              std::optional<DecodedRecords> decoded) {
  absl::Status valid = ValidateFixedLengthRecordSource(source);
  if (!valid.ok()) {
    return std::make_unique<FailingIterator>(
        absl::InvalidArgumentError(absl::StrCat(label, ": ", valid.message())));
  }
  if (absl::Status fits = CheckClientBufferSizes(label, {{"record_bytes", source.record_bytes()},
                                                         {"buffer_size", source.buffer_size()}});
      !fits.ok()) {
    return std::make_unique<FailingIterator>(fits);
  }
  FixedLengthRecordOptions o;
  o.record_bytes = source.record_bytes();
  o.header_bytes = source.header_bytes();
  o.footer_bytes = source.footer_bytes();
  o.compression = *ParseCompressionType(source.compression_type());
  o.buffer_size = static_cast<size_t>(source.buffer_size());
  std::vector<std::string> files(source.filenames().begin(), source.filenames().end());
  std::optional<proto::RecordRange> range;
  if (source.has_record_range()) range = source.record_range();
  auto format = std::make_unique<FixedLengthFormat>(o);
  if (decoded.has_value()) {
    return std::make_unique<DecodedFixedLengthRecordIterator>(
        std::move(label), std::move(files), std::move(format), std::move(range),
        *std::move(decoded));
  }
  return std::make_unique<SequentialRecordIterator>(std::move(label), std::move(files),
                                                    std::move(format), std::move(range));
}

}  // namespace

std::unique_ptr<Iterator> NewFixedLengthRecordIterator(std::string label,
                                                       proto::FixedLengthRecordSource source) {
  return FixedLengthIterator(std::move(label), source, std::nullopt);
}

std::unique_ptr<Iterator> NewDecodedFixedLengthRecordIterator(
    std::string label, proto::FixedLengthRecordSource source, DecodedRecords decoded) {
  return FixedLengthIterator(std::move(label), source, std::move(decoded));
}

namespace {

std::string FileList(const google::protobuf::RepeatedPtrField<std::string>& files) {
  std::vector<std::string> names;
  for (const std::string& f : files) names.push_back(PythonStringLiteral(f));
  return absl::StrCat("[", absl::StrJoin(names, ", "), "]");
}

void AppendRange(bool has, const proto::RecordRange& r, std::string* out) {
  if (!has) return;
  absl::StrAppend(out, ", start_record=", r.start(), ", num_records=", r.count());
}

}  // namespace

std::string TFRecordSourceExpression(const proto::TFRecordSource& s) {
  std::string out = absl::StrCat("tf_record_dataset(", FileList(s.filenames()));
  if (!s.compression_type().empty()) {
    absl::StrAppend(&out, ", compression_type=", PythonStringLiteral(s.compression_type()));
  }
  if (s.buffer_size() != 0) absl::StrAppend(&out, ", buffer_size=", s.buffer_size());
  if (s.num_parallel_reads() != 0) {
    absl::StrAppend(&out, ", num_parallel_reads=", s.num_parallel_reads());
  }
  AppendRange(s.has_record_range(), s.record_range(), &out);
  out.push_back(')');
  return out;
}

std::string FixedLengthRecordSourceExpression(const proto::FixedLengthRecordSource& s) {
  std::string out = absl::StrCat("fixed_length_record_dataset(", FileList(s.filenames()), ", ",
                                 s.record_bytes());
  if (s.header_bytes() != 0) absl::StrAppend(&out, ", header_bytes=", s.header_bytes());
  if (s.footer_bytes() != 0) absl::StrAppend(&out, ", footer_bytes=", s.footer_bytes());
  if (s.buffer_size() != 0) absl::StrAppend(&out, ", buffer_size=", s.buffer_size());
  if (!s.compression_type().empty()) {
    absl::StrAppend(&out, ", compression_type=", PythonStringLiteral(s.compression_type()));
  }
  AppendRange(s.has_record_range(), s.record_range(), &out);
  out.push_back(')');
  return out;
}

}  // namespace sluice
