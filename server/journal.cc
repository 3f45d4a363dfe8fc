#include "server/journal.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/crc32c.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

constexpr char kSnapshotPrefix[] = "snapshot-";
constexpr char kSegmentPrefix[] = "journal-";
constexpr char kTmpSuffix[] = ".tmp";

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

bool AllZero(absl::string_view data) {
  return std::all_of(data.begin(), data.end(), [](char c) { return c == 0; });
}

// The sequence number of a file named prefix + 20 digits, or -1.
int64_t SeqOf(absl::string_view name, absl::string_view prefix) {
  if (!absl::StartsWith(name, prefix)) return -1;
  absl::string_view digits = name.substr(prefix.size());
  if (digits.size() != 20) return -1;
  int64_t seq = 0;
  if (!absl::SimpleAtoi(digits, &seq) || seq < 0) return -1;
  return seq;
}

}  // namespace

std::string EncodeJournalRecord(absl::string_view payload) {
  std::string out;
  out.reserve(kJournalRecordHeaderBytes + payload.size());
  PutU32(&out, static_cast<uint32_t>(payload.size()));
  PutU32(&out, crc32c::Mask(crc32c::Value(payload)));
  out.append(payload.data(), payload.size());
  return out;
}

absl::StatusOr<DecodedJournalFile> DecodeJournalRecords(absl::string_view data,
                                                        const std::string& name,
                                                        bool allow_torn_tail) {
  DecodedJournalFile out;
  uint64_t offset = 0;
  const uint64_t size = data.size();
  while (offset < size) {
    const uint64_t left = size - offset;
    std::string torn;  // why the rest of the file is a torn tail, if it is one
    if (left < kJournalRecordHeaderBytes) {
      torn = absl::StrCat("a record header cut short (", left, " of ",
                          kJournalRecordHeaderBytes, " bytes)");
    } else {
      const uint64_t length = GetU32(data.data() + offset);
      const uint32_t stored = GetU32(data.data() + offset + 4);
      if (length > left - kJournalRecordHeaderBytes) {
        torn = absl::StrCat("a record of ", length, " bytes cut short (",
                            left - kJournalRecordHeaderBytes, " bytes left)");
      } else {
        absl::string_view payload = data.substr(offset + kJournalRecordHeaderBytes, length);
        const uint64_t end = offset + kJournalRecordHeaderBytes + length;
        if (crc32c::Unmask(stored) != crc32c::Value(payload)) {
          // Only the file's last record can be half-written; a file system that extended the
          // file before the data reached it leaves zeros instead.
          if (end == size || AllZero(data.substr(offset))) {
            torn = "a last record whose checksum does not match";
          } else {
            return absl::DataLossError(absl::StrCat(
                "journal file ", name, ": corrupt record at byte offset ", offset,
                ": checksum mismatch (", length, "-byte record ending at byte ", end, " of ",
                size, "; only a torn last record can be dropped)"));
          }
        } else {
          out.records.push_back({offset, payload});
          offset = end;
          continue;
        }
      }
    }
    if (!allow_torn_tail) {
      return absl::DataLossError(absl::StrCat("journal file ", name, ": corrupt record at byte offset ",
                                              offset, ": ", torn));
    }
    out.valid_bytes = offset;
    out.dropped_bytes = size - offset;
    return out;
  }
  out.valid_bytes = offset;
  return out;
}

std::string Journal::SnapshotName(int64_t seq) {
  return absl::StrFormat("%s%020d", kSnapshotPrefix, seq);
}

std::string Journal::SegmentName(int64_t seq) {
  return absl::StrFormat("%s%020d", kSegmentPrefix, seq);
}

Journal::Journal(JournalOptions options)
    : options_(std::move(options)),
      fs_(options_.fs != nullptr ? options_.fs : RealJournalFileSystem()) {}

std::string Journal::Path(const std::string& name) const {
  return absl::StrCat(options_.dir, "/", name);
}

std::string Journal::segment_path() const { return Path(SegmentName(seq_)); }

void Journal::Log(absl::string_view line) const {
  if (options_.log) options_.log(line);
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(JournalOptions options,
                                                       CoordinatorState* state) {
  if (options.dir.empty()) return absl::InvalidArgumentError("journal: the work directory is empty");
  if (options.snapshot_every < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("journal: snapshot_every must be at least 1, got ", options.snapshot_every));
  }
  std::unique_ptr<Journal> j(new Journal(std::move(options)));
  RETURN_IF_ERROR(j->fs_->CreateDir(j->options_.dir));
  ASSIGN_OR_RETURN(Loaded loaded, j->Load(state, /*repair=*/true));
  j->seq_ = loaded.seq;
  j->size_ = loaded.segment_exists ? loaded.size : 0;
  j->records_since_snapshot_ = loaded.records;
  ASSIGN_OR_RETURN(j->file_, j->fs_->OpenAppend(j->segment_path()));
  return j;
}

absl::Status Journal::Reload(CoordinatorState* state) {
  return Load(state, /*repair=*/false).status();
}

absl::StatusOr<Journal::Loaded> Journal::Load(CoordinatorState* state, bool repair) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, fs_->ListDir(options_.dir));
  std::map<int64_t, std::string> snapshots, segments;
  for (const std::string& name : names) {
    if (absl::EndsWith(name, kTmpSuffix)) {
      // A snapshot whose write did not finish.
      if (repair && SeqOf(name.substr(0, name.size() - strlen(kTmpSuffix)), kSnapshotPrefix) >= 0) {
        RETURN_IF_ERROR(fs_->Delete(Path(name)));
      }
      continue;
    }
    if (int64_t seq = SeqOf(name, kSnapshotPrefix); seq >= 0) snapshots[seq] = name;
    if (int64_t seq = SeqOf(name, kSegmentPrefix); seq >= 0) segments[seq] = name;
  }

  Loaded loaded;
  int64_t first = 0;
  if (!snapshots.empty()) {
    const auto& [seq, name] = *snapshots.rbegin();
    const std::string path = Path(name);
    ASSIGN_OR_RETURN(std::string data, fs_->ReadFile(path));
    ASSIGN_OR_RETURN(DecodedJournalFile file,
                     DecodeJournalRecords(data, path, /*allow_torn_tail=*/false));
    proto::StateSnapshot snapshot;
    if (file.records.size() != 1 ||
        !snapshot.ParseFromArray(file.records[0].payload.data(),
                                 static_cast<int>(file.records[0].payload.size()))) {
      return absl::DataLossError(absl::StrCat("journal snapshot ", path,
                                              ": not one StateSnapshot record (",
                                              file.records.size(), " records)"));
    }
    absl::Status s = state->Restore(snapshot);
    if (!s.ok()) {
      return absl::DataLossError(
          absl::StrCat("journal snapshot ", path, " does not restore: ", s.message()));
    }
    first = seq;
  } else if (!segments.empty() && segments.begin()->first != 0) {
    return absl::DataLossError(absl::StrCat("journal directory ", options_.dir, ": segment ",
                                            segments.begin()->second,
                                            " is not the first and no snapshot precedes it"));
  }
  loaded.seq = first;

  int64_t expected = first;
  for (auto it = segments.lower_bound(first); it != segments.end(); ++it) {
    const auto& [seq, name] = *it;
    const std::string path = Path(name);
    if (seq != expected) {
      return absl::DataLossError(absl::StrCat("journal directory ", options_.dir, ": segment ",
                                              SegmentName(expected), " is missing before ",
                                              name));
    }
    ++expected;
    const bool last = std::next(it) == segments.end();
    ASSIGN_OR_RETURN(std::string data, fs_->ReadFile(path));
    ASSIGN_OR_RETURN(DecodedJournalFile file,
                     DecodeJournalRecords(data, path, /*allow_torn_tail=*/last));
    for (const DecodedJournalFile::Record& r : file.records) {
      proto::JournalRecord record;
      if (!record.ParseFromArray(r.payload.data(), static_cast<int>(r.payload.size()))) {
        return absl::DataLossError(absl::StrCat("journal file ", path, ": record at byte offset ",
                                                r.offset, " does not parse as a JournalRecord"));
      }
      for (int i = 0; i < record.updates_size(); ++i) {
        absl::Status s = state->Apply(record.updates(i));
        if (!s.ok()) {
          return absl::DataLossError(absl::StrCat("journal file ", path, ": record at byte offset ",
                                                  r.offset, ", update ", i,
                                                  " does not apply: ", s.message()));
        }
      }
      ++loaded.records;
    }
    if (file.dropped_bytes > 0 && repair) {
      Log(absl::StrCat("journal ", path, ": dropped ", file.dropped_bytes,
                       " bytes of a torn last record at byte offset ", file.valid_bytes,
                       " (a write cut short by a crash; its request was never answered)"));
      RETURN_IF_ERROR(fs_->Truncate(path, file.valid_bytes));
    }
    loaded.seq = seq;
    loaded.segment_exists = true;
    loaded.size = file.valid_bytes;
  }

  if (repair) {
    for (const auto& [seq, name] : snapshots) {
      if (seq < first) RETURN_IF_ERROR(fs_->Delete(Path(name)));
    }
    for (const auto& [seq, name] : segments) {
      if (seq < first) RETURN_IF_ERROR(fs_->Delete(Path(name)));
    }
    if (!snapshots.empty() || !segments.empty()) {
      Log(absl::StrCat("journal ", options_.dir, ": replayed ",
                       snapshots.empty() ? std::string("no snapshot")
                                         : absl::StrCat("snapshot ", snapshots.rbegin()->second),
                       " and ", loaded.records, " records"));
    }
  }
  return loaded;
}

absl::Status Journal::Append(absl::Span<const proto::Update> updates) {
  absl::StatusOr<uint64_t> seq = Write(updates);
  if (!seq.ok()) return seq.status();
  return WaitDurable(*seq);
}

absl::StatusOr<uint64_t> Journal::Write(absl::Span<const proto::Update> updates) {
  if (!broken_.ok()) return broken_;
  proto::JournalRecord record;
  for (const proto::Update& u : updates) *record.add_updates() = u;
  const std::string data = EncodeJournalRecord(record.SerializeAsString());
  absl::Status s = file_->Append(data);
  if (!s.ok()) {
    absl::Status undo = file_->Truncate(size_);
    if (!undo.ok()) {
      broken_ = absl::FailedPreconditionError(absl::StrCat(
          "journal ", segment_path(), " is unusable: a failed append (", s.message(),
          ") could not be undone (", undo.message(), "); restart the coordinator"));
    }
    return absl::Status(s.code(), absl::StrCat("journal append to ", segment_path(), ": ",
                                               s.message()));
  }
  size_ += data.size();
  ++records_since_snapshot_;
  return commit_.Written(file_);
}

absl::Status Journal::WriteSnapshot(const proto::StateSnapshot& snapshot) {
  if (!broken_.ok()) return broken_;
  const int64_t next = seq_ + 1;
  const std::string snapshot_path = Path(SnapshotName(next));
  absl::Status s =
      fs_->WriteFileAtomically(snapshot_path, EncodeJournalRecord(snapshot.SerializeAsString()));
  absl::StatusOr<std::unique_ptr<AppendFile>> file;
  if (s.ok()) {
    file = fs_->OpenAppend(Path(SegmentName(next)));
    if (!file.ok()) {
      s = file.status();
      // Without its segment the snapshot would hide the records still appended to this one.
      absl::Status undo = fs_->Delete(snapshot_path);
      if (!undo.ok()) {
        broken_ = absl::FailedPreconditionError(absl::StrCat(
            "journal ", options_.dir, " is unusable: snapshot ", snapshot_path,
            " has no segment (", s.message(), ") and cannot be removed (", undo.message(),
            "); restart the coordinator"));
      }
    }
  }
  if (!s.ok()) {
    records_since_snapshot_ = 0;  // try again later
    return absl::Status(s.code(), absl::StrCat("journal snapshot ", snapshot_path, ": ",
                                               s.message()));
  }
  const int64_t old = seq_;
  file_ = *std::move(file);
  commit_.AllDurable();  // the snapshot, synced, holds every record written so far
  seq_ = next;
  size_ = 0;
  records_since_snapshot_ = 0;
  Log(absl::StrCat("journal: wrote snapshot ", snapshot_path, " (", snapshot.updates_size(),
                   " updates)"));
  // Everything older is covered by the snapshot. A failure here only leaves stale files,
  // which the next start deletes.
  absl::Status d = fs_->Delete(Path(SegmentName(old)));
  if (d.ok()) d = fs_->Delete(Path(SnapshotName(old)));
  if (!d.ok()) Log(absl::StrCat("journal: cannot delete old files: ", d.message()));
  return absl::OkStatus();
}

}  // namespace sluice
