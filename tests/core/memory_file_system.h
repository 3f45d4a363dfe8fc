// MemoryFileSystem: an in-memory FileSystem for tests. Register it under a scheme
// (RegisterFileSystem("mem", fs)) and every reader and list_files read "mem://..." names from
// it; it counts the operations so that a test can tell its reads went through the interface.
//
// Thread safety: thread-safe.
#ifndef SLUICE_TESTS_CORE_MEMORY_FILE_SYSTEM_H_
#define SLUICE_TESTS_CORE_MEMORY_FILE_SYSTEM_H_

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/io/file_system.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace testing_util {

class MemoryFileSystem : public FileSystem {
 public:
  void Put(const std::string& url, std::string bytes) {
    absl::MutexLock lock(&mu_);
    files_[url] = std::make_shared<const std::string>(std::move(bytes));
  }

  int64_t opens() const { return opens_.load(); }
  int64_t stats() const { return stats_.load(); }
  int64_t globs() const { return globs_.load(); }

  absl::StatusOr<std::unique_ptr<InputStream>> NewInputStream(const std::string& url) override {
    ASSIGN_OR_RETURN(std::shared_ptr<const std::string> data, Find(url));
    ++opens_;
    return NewStringStream(url, *data);
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& url) override {
    ASSIGN_OR_RETURN(std::shared_ptr<const std::string> data, Find(url));
    ++opens_;
    return std::unique_ptr<RandomAccessFile>(new File(url, std::move(data)));
  }

  absl::StatusOr<FileStat> Stat(const std::string& url) override {
    ASSIGN_OR_RETURN(std::shared_ptr<const std::string> data, Find(url));
    ++stats_;
    FileStat st;
    st.size = data->size();
    st.mtime_ns = 1;
    return st;
  }

  absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) override {
    ++globs_;
    const std::string prefix = GlobListPrefix(pattern);
    std::vector<std::string> out;
    absl::MutexLock lock(&mu_);
    for (const auto& [name, unused] : files_) {
      if (absl::StartsWith(name, prefix) && GlobMatches(pattern, name)) out.push_back(name);
    }
    return out;  // std::map keeps them sorted
  }

 private:
  class File : public RandomAccessFile {
   public:
    File(std::string name, std::shared_ptr<const std::string> data)
        : name_(std::move(name)), data_(std::move(data)) {}
    absl::StatusOr<size_t> ReadAt(uint64_t offset, char* dst, size_t n) const override {
      if (offset >= data_->size()) return 0;
      const size_t k = std::min<size_t>(n, data_->size() - offset);
      std::memcpy(dst, data_->data() + offset, k);
      return k;
    }
    const std::string& name() const override { return name_; }

   private:
    const std::string name_;
    const std::shared_ptr<const std::string> data_;
  };

  absl::StatusOr<std::shared_ptr<const std::string>> Find(const std::string& url) {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(url);
    if (it == files_.end()) return absl::NotFoundError(absl::StrCat(url, ": no such object"));
    return it->second;
  }

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const std::string>> files_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> opens_{0};
  std::atomic<int64_t> stats_{0};
  std::atomic<int64_t> globs_{0};
};

}  // namespace testing_util
}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_MEMORY_FILE_SYSTEM_H_
