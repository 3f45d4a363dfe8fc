#include "core/data/ops/snapshot_chunk.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/ops/snapshot_manifest.h"
#include "core/io/confined_open.h"
#include "core/io/file_system.h"
#include "core/io/input_stream.h"
#include "core/io/mapped_file.h"
#include "core/tensor/element_wire.h"
#include "core/tensor/proto_convert.h"
#include "core/tensor/raw_element.h"
#include "core/util/crc32c.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

std::atomic<uint64_t> chunk_temp_counter{0};

// Whether `format_version` is raw element records (2) or ElementProto records (0 or 1: a graph
// written before the field existed means the only format there was).
absl::StatusOr<bool> IsRawFormat(int64_t format_version, const std::string& filename) {
  if (format_version >= 0 && format_version <= kSnapshotFormatVersion) return format_version == 2;
  return absl::InvalidArgumentError(absl::StrCat("snapshot chunk '", filename,
                                                 "': unknown record format ", format_version));
}

absl::Status ChunkCorrupt(const std::string& filename, int64_t index, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("snapshot chunk '", filename, "': element ", index,
                                          " ", what));
}

// OK when `e` has the structure of `spec` and each leaf is compatible with its spec.
absl::Status CheckSpec(const Element& e, const ElementSpec& spec, const std::string& filename,
                       int64_t index) {
  bool ok = e.SameStructure(spec);
  if (ok) {
    const std::vector<Tensor> leaves = e.Flatten();
    const std::vector<TensorSpec> specs = spec.Flatten();
    for (size_t i = 0; ok && i < leaves.size(); ++i) ok = specs[i].IsCompatibleWith(leaves[i]);
  }
  if (ok) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "snapshot chunk '", filename, "': element ", index, " does not match the snapshot's "
      "element spec (the chunk was written by another pipeline?)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SnapshotChunkWriter>> SnapshotChunkWriter::Create(
    const std::string& directory, const std::string& name, Compression compression,
    int64_t format_version) {
  RETURN_IF_ERROR(CheckSnapshotWritable(directory));
  if (!IsLocalPath(directory)) {
    // An object store: the chunk is uploaded under its final name and appears whole at
    // Commit() (no temporary object, no rename).
    const std::string final_name = absl::StrCat(SnapshotChunksDirectory(directory), "/", name);
    ASSIGN_OR_RETURN(const bool raw, IsRawFormat(format_version, final_name));
    ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor(final_name));
    ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                     fs->NewWritableFile(final_name, WritableFileOptions()));
    ASSIGN_OR_RETURN(std::unique_ptr<TFRecordWriter> writer,
                     TFRecordWriter::ToFile(std::move(file), compression));
    return std::unique_ptr<SnapshotChunkWriter>(
        new SnapshotChunkWriter("", final_name, std::move(writer), -1, raw));
  }
  const std::string chunks = LocalPathOf(SnapshotChunksDirectory(directory));
  const std::string final_name = absl::StrCat(chunks, "/", name);
  ASSIGN_OR_RETURN(const bool raw, IsRawFormat(format_version, final_name));
  const std::string temp = absl::StrCat(chunks, "/.tmp-", name, "-", ::getpid(), "-",
                                        chunk_temp_counter.fetch_add(1));
  ASSIGN_OR_RETURN(int fd, OpenLocalFile(temp, O_WRONLY | O_CREAT | O_EXCL, 0644));
  const int sync_fd = ::dup(fd);
  if (sync_fd < 0) {
    const int err = errno;
    ::close(fd);
    std::remove(temp.c_str());
    return FileError(err, "dup", temp);
  }
  absl::StatusOr<std::unique_ptr<TFRecordWriter>> writer =
      TFRecordWriter::FromDescriptor(temp, fd, compression);
  if (!writer.ok()) {
    ::close(sync_fd);
    std::remove(temp.c_str());
    return writer.status();
  }
  return std::unique_ptr<SnapshotChunkWriter>(
      new SnapshotChunkWriter(temp, final_name, *std::move(writer), sync_fd, raw));
}

SnapshotChunkWriter::~SnapshotChunkWriter() {
  // An upload's writer is dropped without Close(), which would commit a part of the chunk.
  if (writer_ != nullptr && !temp_.empty()) writer_->Close().IgnoreError();
  writer_.reset();
  if (sync_fd_ >= 0) ::close(sync_fd_);
  if (!committed_ && !temp_.empty()) std::remove(temp_.c_str());
}

absl::Status SnapshotChunkWriter::Append(const Element& element) {
  if (raw_) {
    SerializeRawElement(element, &record_);
  } else {
    SerializeElementProto(element, &record_);
  }
  RETURN_IF_ERROR(writer_->Write(record_));
  ++num_elements_;
  unsynced_bytes_ += record_.size();
  if (sync_fd_ >= 0 && unsynced_bytes_ >= kWritebackEveryBytes) {
    // Starts the write-back of what the file holds so far without waiting for it, so that the
    // disk works while the next elements are produced and Commit()'s fsync finds little left
    // to write. Advisory: a failure here is reported by that fsync, which checks every byte.
    ::sync_file_range(sync_fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
    unsynced_bytes_ = 0;
  }
  return absl::OkStatus();
}

absl::Status SnapshotChunkWriter::Commit() {
  if (temp_.empty()) {
    // An upload: closing it completes the object under its final name, atomically.
    RETURN_IF_ERROR(writer_->Close());
    writer_.reset();
    committed_ = true;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(writer_->Close());
  writer_.reset();
  if (::fsync(sync_fd_) != 0) return FileError(errno, "fsync", temp_);
  ::close(sync_fd_);
  sync_fd_ = -1;
  if (std::rename(temp_.c_str(), final_.c_str()) != 0) {
    return FileError(errno, absl::StrCat("rename to ", final_), temp_);
  }
  committed_ = true;
  return SyncLocalPath(final_.substr(0, final_.rfind('/')));
}

namespace {

absl::Status CheckChunkSize(const std::string& filename, uint64_t size, int64_t expected) {
  if (expected < 0 || size == static_cast<uint64_t>(expected)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("snapshot chunk '", filename, "' has ", size,
                                          " bytes but its manifest says ", expected,
                                          " (truncated or replaced?)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SnapshotChunkReader>> SnapshotChunkReader::Open(
    const std::string& filename, Compression compression, int64_t format_version,
    ElementSpec spec, const SnapshotChunkReadOptions& options) {
  ASSIGN_OR_RETURN(const bool raw, IsRawFormat(format_version, filename));
  TFRecordReaderOptions read;
  read.compression = compression;
  read.map_local_file = options.map;  // map = false: always read (TFRecordReader maps otherwise)
  ASSIGN_OR_RETURN(std::unique_ptr<TFRecordReader> reader, TFRecordReader::Open(filename, read));
  if (reader->mapped()) {
    // The size mapped is the size read: no window between a stat and the open.
    RETURN_IF_ERROR(CheckChunkSize(filename, reader->mapped_file()->size(), options.expected_bytes));
  } else if (options.expected_bytes >= 0) {
    ASSIGN_OR_RETURN(FileStat st, StatFile(filename));
    RETURN_IF_ERROR(CheckChunkSize(filename, st.size, options.expected_bytes));
  }
  return std::unique_ptr<SnapshotChunkReader>(
      new SnapshotChunkReader(filename, std::move(reader), raw, std::move(spec)));
}

absl::Status SnapshotChunkReader::Next(Element* out, bool* end_of_chunk) {
  if (mapped()) {
    // The checksum pass and the parse in one (ParseRawElementInPlace's crc), checked before
    // the element is handed out.
    FramedRecord record;
    RETURN_IF_ERROR(NextRecord(&record, end_of_chunk));
    if (*end_of_chunk) return absl::OkStatus();
    uint32_t crc = 0;
    absl::StatusOr<Element> e =
        ParseRawElementInPlace(record.data, mapped_file_, spec_, filename(), &crc);
    if (e.ok() && crc == crc32c::Unmask(record.unchecked.masked_crc)) {
      *out = *std::move(e);
      return absl::OkStatus();
    }
    // A corrupt record is a checksum error, as when the checksum was verified first; the
    // parse's error (another spec, the budget) only for a record whose checksum holds.
    RETURN_IF_ERROR(VerifyRecord(record));
    ASSIGN_OR_RETURN(*out, RawError(std::move(e).status(), record.index));
    return absl::OkStatus();
  }
  absl::Status s = reader_->ReadRecord(&record_);
  if (absl::IsOutOfRange(s)) {
    *end_of_chunk = true;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(s);
  ASSIGN_OR_RETURN(*out, Decode(record_, num_read_));
  *end_of_chunk = false;
  ++num_read_;
  return absl::OkStatus();
}

absl::Status SnapshotChunkReader::NextRecord(FramedRecord* out, bool* end_of_chunk) {
  absl::Status s = reader_->ReadRecordView(&out->data, &out->unchecked, &view_owner_);
  if (absl::IsOutOfRange(s)) {
    *end_of_chunk = true;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(s);
  out->index = num_read_++;
  *end_of_chunk = false;
  return absl::OkStatus();
}

absl::Status SnapshotChunkReader::VerifyRecord(const FramedRecord& record) const {
  absl::Status s = TFRecordReader::CheckData(record.data, record.unchecked, filename());
  if (s.ok()) return s;
  // As the reader explains a mismatch it finds itself: zeros past a new end of the file.
  absl::StatusOr<FileStat> now = StatFile(filename());
  if (now.ok() && mapped_file_ != nullptr && now->size < mapped_file_->size()) {
    return absl::DataLossError(absl::StrCat("file ", filename(),
                                            " was truncated while it was read (found at byte "
                                            "offset ",
                                            record.unchecked.offset, ")"));
  }
  return s;
}

absl::StatusOr<Element> SnapshotChunkReader::RawError(absl::Status s, int64_t index) const {
  if (s.ok()) {  // the fused checksum failed, the second pass held: bytes changed meanwhile
    return ChunkCorrupt(filename(), index, "changed while it was read (rewritten in place?)");
  }
  if (absl::IsResourceExhausted(s)) return s;
  if (absl::IsFailedPrecondition(s)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "snapshot chunk '", filename(), "': element ", index, " does not match the "
        "snapshot's element spec (the chunk was written by another pipeline?): ",
        s.message()));
  }
  return ChunkCorrupt(filename(), index, s.message());
}

absl::StatusOr<Element> SnapshotChunkReader::Decode(absl::string_view record,
                                                    int64_t index) const {
  if (raw_) {
    absl::StatusOr<Element> e =
        mapped() ? ParseRawElementInPlace(record, mapped_file_, spec_, filename())
                           : ParseRawElement(record, spec_, filename());
    if (e.ok()) return e;
    return RawError(std::move(e).status(), index);
  }
  proto::ElementProto p;
  if (!p.ParseFromArray(record.data(), static_cast<int>(record.size()))) {
    return ChunkCorrupt(filename(), index, "is not a serialized ElementProto");
  }
  absl::StatusOr<Element> e = ConsumeElementProto(&p);
  if (!e.ok()) return ChunkCorrupt(filename(), index, e.status().message());
  RETURN_IF_ERROR(CheckSpec(*e, spec_, filename(), index));
  return e;
}

absl::StatusOr<int64_t> CountSnapshotChunkRecords(const std::string& filename,
                                                  Compression compression) {
  TFRecordReaderOptions options;
  options.compression = compression;
  ASSIGN_OR_RETURN(std::unique_ptr<TFRecordReader> reader,
                   TFRecordReader::Open(filename, options));
  int64_t n = 0;
  while (true) {
    absl::Status s = reader->SkipRecord();
    if (absl::IsOutOfRange(s)) return n;
    RETURN_IF_ERROR(s);
    ++n;
  }
}

}  // namespace sluice
