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

namespace {

// The first record after byte `bad` (looked for at every byte offset) whose checksum holds and
// that says more than `bad` bytes were synced: evidence that the bad record at `bad` was
// synced, so it is corruption, not a torn tail. Returns {its offset, its synced_bytes}.
std::optional<std::pair<uint64_t, uint64_t>> LaterSyncEvidence(
    absl::string_view data, uint64_t bad, const SyncedBytesOf& synced_bytes_of) {
  const uint64_t size = data.size();
  for (uint64_t p = bad + 1; p + kJournalRecordHeaderBytes <= size; ++p) {
    const uint64_t length = GetU32(data.data() + p);
    if (length > size - p - kJournalRecordHeaderBytes) continue;
    absl::string_view payload = data.substr(p + kJournalRecordHeaderBytes, length);
    if (crc32c::Unmask(GetU32(data.data() + p + 4)) != crc32c::Value(payload)) continue;
    std::optional<uint64_t> synced = synced_bytes_of(payload);
    if (synced.has_value() && *synced > bad) return std::make_pair(p, *synced);
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> JournalRecordSyncedBytes(absl::string_view payload) {
  proto::JournalRecord record;
  if (!record.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return std::nullopt;
  }
  return record.synced_bytes();
}

absl::StatusOr<DecodedJournalFile> DecodeJournalRecords(absl::string_view data,
                                                        const std::string& name,
                                                        bool allow_torn_tail,
                                                        const SyncedBytesOf& synced_bytes_of) {
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
          // file before the data reached it leaves zeros instead; and records written after
          // the last sync may reach the disk in any order.
          if (end == size || AllZero(data.substr(offset))) {
            torn = "a last record whose checksum does not match";
          } else if (allow_torn_tail && synced_bytes_of) {
            torn = absl::StrCat("a record whose checksum does not match, after the last synced "
                                "byte (no later record says it was synced)");
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
    if (synced_bytes_of) {
      if (auto evidence = LaterSyncEvidence(data, offset, synced_bytes_of)) {
        return absl::DataLossError(absl::StrCat(
            "journal file ", name, ": corrupt record at byte offset ", offset, ": ", torn,
            ", but the record at byte offset ", evidence->first, " says the file was synced to byte ",
            evidence->second, ": a record that was synced (and answered) is damaged"));
      }
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
  // What was replayed may be a killed process's writes that never reached the disk: synced
  // before anything is answered from it.
  RETURN_IF_ERROR(j->file_->Sync());
  j->commit_.Opened(j->file_, j->size_);
  return j;
}

absl::Status Journal::Reload(CoordinatorState* state) {
  return Load(state, /*repair=*/false).status();
}

absl::StatusOr<Journal::Loaded> Journal::Load(CoordinatorState* state, bool repair) {
  absl::MutexLock files_lock(&files_mu_);
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
                     DecodeJournalRecords(data, path, /*allow_torn_tail=*/last,
                                          JournalRecordSyncedBytes));
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
                       " bytes of a torn tail at byte offset ", file.valid_bytes,
                       " (records written after the last sync, cut short by a crash; their "
                       "requests were never answered)"));
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

absl::Status Journal::Broken() const {
  absl::Status error = commit_.error();
  if (error.ok()) return error;
  return absl::FailedPreconditionError(absl::StrCat(
      "journal ", options_.dir, " is unusable after a failed sync (", error.message(),
      "): unsynced records may be lost; restart the coordinator (it replays the journal)"));
}

absl::StatusOr<uint64_t> Journal::Write(absl::Span<const proto::Update> updates) {
  RETURN_IF_ERROR(Broken());
  proto::JournalRecord record;
  for (const proto::Update& u : updates) *record.add_updates() = u;
  record.set_synced_bytes(commit_.durable_bytes());
  const std::string data = EncodeJournalRecord(record.SerializeAsString());
  absl::Status s = file_->Append(data);
  if (!s.ok()) {
    absl::Status undo = file_->Truncate(size_);
    if (!undo.ok()) {
      // The segment may end in part of this record and the undo's sync failed: its pages, and
      // those of records not yet synced, may be lost whatever a later sync says.
      commit_.Fail(absl::Status(
          undo.code(), absl::StrCat("journal ", segment_path(), ": a failed append (",
                                    s.message(), ") could not be undone (", undo.message(),
                                    ")")));
    }
    // The record is undone (or the failure is sticky): the request changed nothing, and the
    // disk's trouble is no fault of the caller's, who may retry.
    return absl::UnavailableError(absl::StrCat("journal append to ", segment_path(),
                                               " failed, the request changed nothing (retry): ",
                                               s.ToString()));
  }
  size_ += data.size();
  ++records_since_snapshot_;
  return commit_.Written(file_, size_);
}

absl::StatusOr<int64_t> Journal::StartSnapshot() {
  RETURN_IF_ERROR(Broken());
  // The current segment is whole before the next one begins: replay tolerates a torn tail in
  // the last segment only.
  absl::Status s = file_->Sync();
  if (!s.ok()) {
    s = absl::Status(s.code(), absl::StrCat("journal sync of ", segment_path(),
                                            " before a snapshot: ", s.message()));
    commit_.Fail(s);
    return s;
  }
  commit_.AllDurable();
  const int64_t next = seq_ + 1;
  absl::StatusOr<std::unique_ptr<AppendFile>> file = fs_->OpenAppend(Path(SegmentName(next)));
  if (!file.ok()) {
    // Nothing changed: an empty segment left behind (if any) is harmless.
    records_since_snapshot_ = 0;  // try again later
    return absl::Status(file.status().code(),
                        absl::StrCat("journal: cannot start segment ", SegmentName(next),
                                     " for a snapshot: ", file.status().message()));
  }
  file_ = *std::move(file);
  seq_ = next;
  size_ = 0;
  records_since_snapshot_ = 0;
  snapshot_in_flight_.store(true);
  return next;
}

absl::Status Journal::InstallSnapshot(int64_t seq, const proto::StateSnapshot& snapshot) {
  struct ClearInFlight {
    std::atomic<bool>* flag;
    ~ClearInFlight() { flag->store(false); }
  } clear{&snapshot_in_flight_};
  const std::string path = Path(SnapshotName(seq));
  const std::string tmp = absl::StrCat(path, kTmpSuffix);
  absl::Status s = fs_->WriteFile(tmp, EncodeJournalRecord(snapshot.SerializeAsString()));
  if (s.ok()) s = fs_->Rename(tmp, path);
  if (!s.ok()) {
    // No snapshot: the segments still hold every record. (A failed fsync of the temporary
    // file is not sticky: the file is discarded and never read.)
    absl::Status d = fs_->Delete(tmp);
    if (!d.ok()) Log(absl::StrCat("journal: cannot delete ", tmp, ": ", d.message()));
    return absl::Status(s.code(), absl::StrCat("journal snapshot ", path, ": ", s.message()));
  }
  s = fs_->SyncDir(options_.dir);
  if (!s.ok()) {
    // The rename may or may not survive a crash; either way replay is whole (see above), as
    // long as no older file is deleted. The failed sync sticks.
    s = absl::Status(s.code(), absl::StrCat("journal snapshot ", path,
                                            ": sync of the directory after the rename: ",
                                            s.message()));
    commit_.Fail(s);
    return s;
  }
  Log(absl::StrCat("journal: wrote snapshot ", path, " (", snapshot.updates_size(),
                   " updates)"));
  // Everything older is covered by the snapshot. A failure here only leaves stale files,
  // which the next start deletes.
  absl::MutexLock files_lock(&files_mu_);
  absl::StatusOr<std::vector<std::string>> names = fs_->ListDir(options_.dir);
  absl::Status d = names.status();
  if (names.ok()) {
    for (const std::string& name : *names) {
      const int64_t old = std::max(SeqOf(name, kSnapshotPrefix), SeqOf(name, kSegmentPrefix));
      if (old >= 0 && old < seq && d.ok()) d = fs_->Delete(Path(name));
    }
  }
  if (!d.ok()) Log(absl::StrCat("journal: cannot delete old files: ", d.message()));
  return absl::OkStatus();
}

absl::Status Journal::WriteSnapshot(const proto::StateSnapshot& snapshot) {
  ASSIGN_OR_RETURN(int64_t seq, StartSnapshot());
  return InstallSnapshot(seq, snapshot);
}

}  // namespace sluice
