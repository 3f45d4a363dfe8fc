#include "core/io/input_stream.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/io/file_system.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

class StringStream : public InputStream {
 public:
  StringStream(std::string name, std::string data)
      : name_(std::move(name)), data_(std::move(data)) {}

  absl::StatusOr<size_t> Read(char* dst, size_t n) override {
    size_t k = std::min(n, data_.size() - pos_);
    std::memcpy(dst, data_.data() + pos_, k);
    pos_ += k;
    return k;
  }
  absl::Status Seek(uint64_t offset) override {
    pos_ = static_cast<size_t>(std::min<uint64_t>(offset, data_.size()));
    return absl::OkStatus();
  }
  const std::string& name() const override { return name_; }

 private:
  const std::string name_;
  const std::string data_;
  size_t pos_ = 0;
};

}  // namespace

absl::Status FileError(int err, absl::string_view what, const std::string& filename) {
  std::string message = absl::StrCat("could not ", what, " file ", filename, ": ", strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EISDIR:
    case EINVAL:
      return absl::InvalidArgumentError(message);
    case ENOSPC:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::UnknownError(message);
  }
}

absl::StatusOr<std::unique_ptr<InputStream>> OpenFileStream(const std::string& filename) {
  ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor(filename));
  return fs->NewInputStream(filename);
}

std::unique_ptr<InputStream> NewStringStream(std::string name, std::string data) {
  return std::make_unique<StringStream>(std::move(name), std::move(data));
}

absl::StatusOr<FileStat> StatFile(const std::string& filename) {
  ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor(filename));
  return fs->Stat(filename);
}

}  // namespace sluice
