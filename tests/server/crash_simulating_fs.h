// CrashSimulatingFileSystem: an in-memory JournalFileSystem that knows what a power loss would
// keep (LevelDB's FaultInjectionTestEnv is the model) and can produce that image at any
// operation of a run, for the journal's crash tests.
//
// Model: files are inodes named by directory entries. A file's bytes are durable up to its last
// sync (Sync, Truncate, WriteFile sync); a directory's entries (creations, renames, deletions)
// are durable after SyncDir of it (OpenAppend of a new file syncs its directory, as the real
// one does). CrashImage() gives the files a crash leaves:
//   - kDropUnsynced: every byte after the last sync is gone, every unsynced entry change undone;
//   - kTornPages: as kDropUnsynced, but each page (page_bytes, at file offsets) of the unsynced
//     bytes reached the disk or not, drawn from a seed, independently and in any order; lost
//     pages before the last kept one read as zeros (or as garbage, with garbage_pages), and the
//     last kept page may itself be cut short;
//   - kKeepEntries: bytes as kDropUnsynced, but the directory as it is now (renames and
//     deletions reached the disk although not synced).
// CrashAtOperation(k) freezes the image taken just before the k-th operation that changes
// anything (0: before the first); the run goes on normally and CrashImageAtOperation() returns
// the frozen one (or the image now, if the run had fewer operations).
//
// Thread safety: thread-safe.
#ifndef SLUICE_TESTS_SERVER_CRASH_SIMULATING_FS_H_
#define SLUICE_TESTS_SERVER_CRASH_SIMULATING_FS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/journal_file.h"

namespace sluice {
namespace journal_test {

enum class CrashMode { kDropUnsynced, kTornPages, kKeepEntries };

struct CrashOptions {
  CrashMode mode = CrashMode::kDropUnsynced;
  uint64_t seed = 1;          // kTornPages
  size_t page_bytes = 64;     // kTornPages: small, so that records span pages
  bool garbage_pages = false;  // kTornPages: lost pages read as random bytes, not zeros
};

class CrashSimulatingFileSystem : public JournalFileSystem {
 public:
  // The files of a crash image: path -> content.
  using Image = std::map<std::string, std::string>;

  CrashSimulatingFileSystem() = default;
  // A file system holding `image` (every byte and entry durable).
  explicit CrashSimulatingFileSystem(const Image& image) {
    for (const auto& [path, data] : image) {
      auto inode = std::make_shared<Inode>();
      inode->data = data;
      inode->synced = data.size();
      live_[path] = durable_[path] = inode;
      dirs_.insert(Parent(path));
    }
  }

  absl::Status CreateDir(const std::string& dir) override {
    absl::MutexLock lock(&mu_);
    dirs_.insert(dir);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    absl::MutexLock lock(&mu_);
    if (!dirs_.contains(dir)) return absl::NotFoundError(absl::StrCat("no directory ", dir));
    std::vector<std::string> out;
    for (const auto& [path, inode] : live_) {
      if (Parent(path) == dir) out.push_back(path.substr(dir.size() + 1));
    }
    return out;
  }
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    absl::MutexLock lock(&mu_);
    auto it = live_.find(path);
    if (it == live_.end()) return absl::NotFoundError(absl::StrCat("no file ", path));
    return it->second->data;
  }
  absl::StatusOr<std::unique_ptr<AppendFile>> OpenAppend(const std::string& path) override {
    absl::MutexLock lock(&mu_);
    if (!live_.contains(path)) {
      Operation();
      auto inode = std::make_shared<Inode>();
      live_[path] = inode;
      durable_[path] = inode;  // a new file's directory is synced
    }
    return std::unique_ptr<AppendFile>(new File(this, live_.at(path)));
  }
  absl::Status Truncate(const std::string& path, uint64_t size) override {
    absl::MutexLock lock(&mu_);
    auto it = live_.find(path);
    if (it == live_.end()) return absl::NotFoundError(absl::StrCat("no file ", path));
    Operation();
    TruncateLocked(*it->second, size);
    return absl::OkStatus();
  }
  absl::Status WriteFile(const std::string& path, absl::string_view data) override {
    absl::MutexLock lock(&mu_);
    Operation();
    std::shared_ptr<Inode>& inode = live_[path];
    if (inode == nullptr) inode = std::make_shared<Inode>();  // after Operation(): never seen null
    inode->data = std::string(data);
    inode->synced = data.size();
    return absl::OkStatus();
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    absl::MutexLock lock(&mu_);
    auto it = live_.find(from);
    if (it == live_.end()) return absl::NotFoundError(absl::StrCat("no file ", from));
    Operation();
    live_[to] = it->second;
    live_.erase(from);
    return absl::OkStatus();
  }
  absl::Status SyncDir(const std::string& dir) override {
    absl::MutexLock lock(&mu_);
    Operation();
    for (auto it = durable_.begin(); it != durable_.end();) {
      if (Parent(it->first) == dir) {
        it = durable_.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& [path, inode] : live_) {
      if (Parent(path) == dir) durable_[path] = inode;
    }
    return absl::OkStatus();
  }
  absl::Status Delete(const std::string& path) override {
    absl::MutexLock lock(&mu_);
    if (!live_.contains(path)) return absl::OkStatus();
    Operation();
    live_.erase(path);
    return absl::OkStatus();
  }

  // Freezes the image just before the k-th operation (see above), taken with `options`.
  void CrashAtOperation(int64_t k, CrashOptions options) {
    absl::MutexLock lock(&mu_);
    crash_at_ = k;
    crash_options_ = options;
    frozen_.reset();
    if (ops_ == k) frozen_ = ImageLocked(options);
  }
  Image CrashImageAtOperation() {
    absl::MutexLock lock(&mu_);
    if (frozen_.has_value()) return *frozen_;
    return ImageLocked(crash_options_);
  }
  // What a crash now leaves.
  Image CrashImage(CrashOptions options) {
    absl::MutexLock lock(&mu_);
    return ImageLocked(options);
  }
  // Operations that changed anything so far.
  int64_t operations() const {
    absl::MutexLock lock(&mu_);
    return ops_;
  }
  // The live files (what a process reading them now sees).
  Image files() const {
    absl::MutexLock lock(&mu_);
    Image out;
    for (const auto& [path, inode] : live_) out[path] = inode->data;
    return out;
  }

 private:
  struct Inode {
    std::string data;
    uint64_t synced = 0;  // data[0, synced) is durable
  };

  class File : public AppendFile {
   public:
    File(CrashSimulatingFileSystem* fs, std::shared_ptr<Inode> inode)
        : fs_(fs), inode_(std::move(inode)) {}
    absl::Status Append(absl::string_view data) override {
      absl::MutexLock lock(&fs_->mu_);
      fs_->Operation();
      inode_->data.append(data.data(), data.size());
      return absl::OkStatus();
    }
    absl::Status Sync() override {
      absl::MutexLock lock(&fs_->mu_);
      fs_->Operation();
      inode_->synced = inode_->data.size();
      return absl::OkStatus();
    }
    absl::Status Truncate(uint64_t size) override {
      absl::MutexLock lock(&fs_->mu_);
      fs_->Operation();
      TruncateLocked(*inode_, size);
      return absl::OkStatus();
    }

   private:
    CrashSimulatingFileSystem* const fs_;
    const std::shared_ptr<Inode> inode_;
  };

  static std::string Parent(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
  }
  static void TruncateLocked(Inode& inode, uint64_t size) {
    inode.data.resize(std::min<uint64_t>(size, inode.data.size()));
    inode.synced = inode.data.size();  // truncation syncs
  }

  // Counts an operation that changes anything; freezes the crash image before the chosen one.
  void Operation() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ops_ == crash_at_ && !frozen_.has_value()) frozen_ = ImageLocked(crash_options_);
    ++ops_;
  }

  Image ImageLocked(const CrashOptions& o) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::mt19937_64 rng(o.seed);
    const auto& entries = o.mode == CrashMode::kKeepEntries ? live_ : durable_;
    Image out;
    for (const auto& [path, inode] : entries) {
      std::string data = inode->data.substr(0, inode->synced);
      if (o.mode == CrashMode::kTornPages && inode->data.size() > inode->synced) {
        const std::string& all = inode->data;
        // Pages at file offsets; the first may start inside synced bytes, which stay.
        const uint64_t page = std::max<size_t>(o.page_bytes, 1);
        uint64_t kept_end = inode->synced;
        std::string torn = all;
        for (uint64_t start = inode->synced / page * page; start < all.size(); start += page) {
          const uint64_t from = std::max<uint64_t>(start, inode->synced);
          const uint64_t end = std::min<uint64_t>(start + page, all.size());
          if (std::bernoulli_distribution(0.5)(rng)) {
            kept_end = end;
          } else {
            for (uint64_t i = from; i < end; ++i) {
              torn[i] = o.garbage_pages ? static_cast<char>(rng() & 0xff) : '\0';
            }
          }
        }
        // The last kept page may be cut short too.
        if (kept_end > inode->synced && std::bernoulli_distribution(0.5)(rng)) {
          kept_end -= std::uniform_int_distribution<uint64_t>(
              0, std::min<uint64_t>(kept_end - inode->synced, page) - 1)(rng);
        }
        data = torn.substr(0, kept_end);
      }
      out[path] = std::move(data);
    }
    return out;
  }

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Inode>> live_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Inode>> durable_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirs_ ABSL_GUARDED_BY(mu_);
  int64_t ops_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t crash_at_ ABSL_GUARDED_BY(mu_) = -1;
  CrashOptions crash_options_ ABSL_GUARDED_BY(mu_);
  std::optional<Image> frozen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace journal_test
}  // namespace sluice

#endif  // SLUICE_TESTS_SERVER_CRASH_SIMULATING_FS_H_
