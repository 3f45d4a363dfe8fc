#include "core/data/ops/cache_iterator.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_iterator.h"
#include "core/io/confined_open.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// fopen(3) through the process's data-root confinement (core/io/confined_open.h), so that a
// cache file's name cannot be turned into a symbolic link out of the roots after the graph was
// checked. Null with errno set on failure (EACCES when confinement refused it).
std::FILE* OpenCacheFile(const std::string& name, bool write) {
  absl::StatusOr<int> fd = OpenLocalFile(
      name, write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY, 0644);
  if (!fd.ok()) {
    errno = absl::IsPermissionDenied(fd.status()) ? EACCES
            : absl::IsNotFound(fd.status())       ? ENOENT
                                                  : EIO;
    return nullptr;
  }
  std::FILE* f = ::fdopen(*fd, write ? "wb" : "rb");
  if (f == nullptr) ::close(*fd);
  return f;
}

constexpr char kMagic[16] = {'S', 'L', 'U', 'I', 'C', 'E', 'C', 'A',
                             'C', 'H', 'E', '1', '\n', 0, 0, 0};
constexpr char kEndMagic[16] = {'S', 'L', 'U', 'I', 'C', 'E', 'C', 'A',
                                'C', 'H', 'E', 'E', 'N', 'D', 0, 0};
constexpr uint64_t kEndMarker = ~uint64_t{0};
constexpr size_t kFooterBytes = 8 + 8 + sizeof(kEndMagic);
// No element record may claim more than this; a larger length means a corrupt file.
constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 40;

uint64_t Fnv1a(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string ErrnoText() { return std::strerror(errno); }

// Reads the header; returns false unless it is a cache header with `fingerprint`.
bool ReadHeader(std::FILE* f, const std::string& fingerprint) {
  char magic[sizeof(kMagic)];
  if (std::fread(magic, 1, sizeof(magic), f) != sizeof(magic)) return false;
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) return false;
  unsigned char len[4];
  if (std::fread(len, 1, 4, f) != 4) return false;
  const uint32_t n = len[0] | (len[1] << 8) | (len[2] << 16) | (uint32_t{len[3]} << 24);
  if (n != fingerprint.size()) return false;
  std::string fp(n, '\0');
  if (n > 0 && std::fread(fp.data(), 1, n, f) != n) return false;
  return fp == fingerprint;
}

class MemoryCacheIterator : public OpIterator {
 public:
  MemoryCacheIterator(std::string label, std::shared_ptr<CacheStore> store,
                      std::function<std::unique_ptr<Iterator>()> input)
      : OpIterator(std::move(label)),
        store_(std::move(store)),
        make_input_(std::move(input)),
        held_(std::make_unique<MemoryReservation>(OpIterator::label())) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (!started_) {
      started_ = true;
      cached_ = store_->Get();
      if (cached_ == nullptr) input_ = make_input_();
    }
    if (cached_ != nullptr) {
      if (next_ >= cached_->size()) {
        *end_of_sequence = true;
        return absl::OkStatus();
      }
      *out = (*cached_)[next_++];
      return absl::OkStatus();
    }
    absl::Status s = input_->GetNext(out, end_of_sequence);
    if (!s.ok()) return s;
    if (*end_of_sequence) {
      store_->Complete(std::move(pending_), std::move(held_));
      pending_.clear();
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(held_->Grow(ElementOverhead(*out)));  // the payload is the allocator's
    pending_.push_back(*out);
    return absl::OkStatus();
  }

 private:
  const std::shared_ptr<CacheStore> store_;
  const std::function<std::unique_ptr<Iterator>()> make_input_;
  bool started_ = false;
  std::shared_ptr<const std::vector<Element>> cached_;
  size_t next_ = 0;
  std::unique_ptr<Iterator> input_;
  std::vector<Element> pending_;
  std::unique_ptr<MemoryReservation> held_;  // pending_'s bytes, then the store's
};

std::atomic<uint64_t> temp_counter{0};

class FileCacheIterator : public OpIterator {
 public:
  FileCacheIterator(std::string label, std::string filename, std::string fingerprint,
                    std::function<std::unique_ptr<Iterator>()> input)
      : OpIterator(std::move(label)),
        filename_(std::move(filename)),
        fingerprint_(std::move(fingerprint)),
        make_input_(std::move(input)) {}

  ~FileCacheIterator() override {
    if (file_ != nullptr) std::fclose(file_);
    if (!temp_.empty()) std::remove(temp_.c_str());  // an unfinished pass leaves nothing
  }
  FileCacheIterator(const FileCacheIterator&) = delete;
  FileCacheIterator& operator=(const FileCacheIterator&) = delete;

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (!started_) {
      started_ = true;
      if (IsCompleteCacheFile(filename_, fingerprint_)) {
        reading_ = true;
        file_ = OpenCacheFile(filename_, /*write=*/false);
        if (file_ == nullptr || !ReadHeader(file_, fingerprint_)) {
          return OpError(absl::StatusCode::kDataLoss,
                         absl::StrCat("cannot read cache file '", filename_, "'"));
        }
        offset_ = static_cast<uint64_t>(std::ftell(file_));
      } else {
        temp_ = absl::StrCat(filename_, ".tmp-", ::getpid(), "-", temp_counter.fetch_add(1));
        file_ = OpenCacheFile(temp_, /*write=*/true);
        if (file_ == nullptr) {
          const int err = errno;
          temp_.clear();
          return OpError(absl::ErrnoToStatusCode(err),
                         absl::StrCat("cannot create cache file '", filename_, "' (writing ",
                                      filename_, ".tmp-*): ", std::strerror(err)));
        }
        std::string header(kMagic, sizeof(kMagic));
        const uint32_t n = static_cast<uint32_t>(fingerprint_.size());
        for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>(n >> (8 * i)));
        header += fingerprint_;
        if (!Write(header)) return WriteError();
        input_ = make_input_();
      }
    }
    return reading_ ? ReadNext(out, end_of_sequence) : WriteNext(out, end_of_sequence);
  }

 private:
  absl::Status ReadNext(Element* out, bool* end_of_sequence) {
    unsigned char len[8];
    if (std::fread(len, 1, 8, file_) != 8) return Corrupt("truncated record length");
    const uint64_t n = GetU64(len);
    if (n == kEndMarker) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    if (n > kMaxRecordBytes) return Corrupt(absl::StrCat("record length ", n, " is too large"));
    std::string bytes(n, '\0');
    unsigned char sum[8];
    if ((n > 0 && std::fread(bytes.data(), 1, n, file_) != n) ||
        std::fread(sum, 1, 8, file_) != 8) {
      return Corrupt("truncated record");
    }
    if (GetU64(sum) != Fnv1a(bytes)) return Corrupt("record checksum mismatch");
    proto::ElementProto p;
    if (!p.ParseFromString(bytes)) return Corrupt("record does not parse");
    absl::StatusOr<Element> e = ElementFromProto(p);
    if (!e.ok()) return Corrupt(e.status().message());
    offset_ += 16 + n;
    *out = *std::move(e);
    return absl::OkStatus();
  }

  absl::Status WriteNext(Element* out, bool* end_of_sequence) {
    absl::Status s = input_->GetNext(out, end_of_sequence);
    if (!s.ok()) return s;
    if (*end_of_sequence) return Finish();
    std::string bytes;
    ElementToProto(*out).SerializeToString(&bytes);
    std::string record;
    PutU64(&record, bytes.size());
    record += bytes;
    PutU64(&record, Fnv1a(bytes));
    if (!Write(record)) return WriteError();
    ++count_;
    return absl::OkStatus();
  }

  absl::Status Finish() {
    std::string footer;
    PutU64(&footer, kEndMarker);
    PutU64(&footer, count_);
    footer.append(kEndMagic, sizeof(kEndMagic));
    if (!Write(footer) || std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) {
      return WriteError();
    }
    std::fclose(file_);
    file_ = nullptr;
    if (std::rename(temp_.c_str(), filename_.c_str()) != 0) {
      const int err = errno;
      return OpError(absl::ErrnoToStatusCode(err),
                     absl::StrCat("cannot rename cache file '", temp_, "' to '", filename_,
                                  "': ", std::strerror(err)));
    }
    temp_.clear();
    return absl::OkStatus();
  }

  bool Write(const std::string& bytes) {
    return std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size();
  }
  absl::Status WriteError() {
    return OpError(absl::StatusCode::kInternal,
                   absl::StrCat("cannot write cache file '", temp_, "': ", ErrnoText()));
  }
  absl::Status Corrupt(absl::string_view why) {
    return OpError(absl::StatusCode::kDataLoss,
                   absl::StrCat("cache file '", filename_, "' is corrupt at byte offset ",
                                offset_, ": ", why));
  }

  const std::string filename_;
  const std::string fingerprint_;
  const std::function<std::unique_ptr<Iterator>()> make_input_;
  bool started_ = false;
  bool reading_ = false;
  std::FILE* file_ = nullptr;
  std::string temp_;  // the file being written, until renamed
  uint64_t offset_ = 0;
  uint64_t count_ = 0;
  std::unique_ptr<Iterator> input_;
};

}  // namespace

std::shared_ptr<const std::vector<Element>> CacheStore::Get() const {
  absl::MutexLock lock(&mu_);
  return elements_;
}

void CacheStore::Complete(std::vector<Element> elements,
                          std::unique_ptr<MemoryReservation> held) {
  absl::MutexLock lock(&mu_);
  if (elements_ == nullptr) {
    elements_ = std::make_shared<const std::vector<Element>>(std::move(elements));
    held_ = std::move(held);
  }
}

bool IsCompleteCacheFile(const std::string& filename, const std::string& fingerprint) {
  std::FILE* f = OpenCacheFile(filename, /*write=*/false);
  if (f == nullptr) return false;
  bool ok = ReadHeader(f, fingerprint);
  if (ok) {
    const long header_end = std::ftell(f);
    unsigned char footer[kFooterBytes];
    ok = std::fseek(f, -static_cast<long>(kFooterBytes), SEEK_END) == 0 &&
         std::ftell(f) >= header_end &&
         std::fread(footer, 1, kFooterBytes, f) == kFooterBytes &&
         GetU64(footer) == kEndMarker &&
         std::memcmp(footer + 16, kEndMagic, sizeof(kEndMagic)) == 0;
  }
  std::fclose(f);
  return ok;
}

std::unique_ptr<Iterator> NewMemoryCacheIterator(
    std::string label, std::shared_ptr<CacheStore> store,
    std::function<std::unique_ptr<Iterator>()> input) {
  return std::make_unique<MemoryCacheIterator>(std::move(label), std::move(store),
                                               std::move(input));
}

std::unique_ptr<Iterator> NewFileCacheIterator(std::string label, std::string filename,
                                               std::string fingerprint,
                                               std::function<std::unique_ptr<Iterator>()> input) {
  return std::make_unique<FileCacheIterator>(std::move(label), std::move(filename),
                                             std::move(fingerprint), std::move(input));
}

}  // namespace sluice
