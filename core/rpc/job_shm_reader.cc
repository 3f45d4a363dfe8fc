#include "core/rpc/job_shm_reader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice {

// A frame's region: keeps the reader (and so the mapping) alive, and reports its offset
// released when the frame's last tensor goes.
class JobShmReader::Region : public TensorBuffer {
 public:
  Region(std::shared_ptr<JobShmReader> reader, uint64_t offset, size_t size)
      : reader_(std::move(reader)), offset_(offset), size_(size) {}
  ~Region() override { reader_->Released(offset_); }
  void* data() override { return reader_->segment()->data() + offset_; }
  size_t size() const override { return size_; }

 private:
  const std::shared_ptr<JobShmReader> reader_;
  const uint64_t offset_;
  const size_t size_;
};

absl::StatusOr<std::shared_ptr<TensorBuffer>> JobShmReader::Resolve(
    const proto::JobShmPayload& payload) {
  const uint64_t size = segment_->size();
  if (payload.segment_id() != segment_id_ || payload.bytes() == 0 ||
      payload.offset() % TensorBuffer::kAlignment != 0 || payload.offset() >= size ||
      payload.bytes() > size - payload.offset()) {
    return absl::DataLossError(absl::StrCat(
        "step frame: job segment region {segment ", payload.segment_id(), ", offset ",
        payload.offset(), ", ", payload.bytes(), " bytes} is not one of segment ", segment_id_,
        " (", size, " bytes, regions 64-byte aligned)"));
  }
  {
    absl::MutexLock lock(&mu_);
    ++held_;
  }
  return std::shared_ptr<TensorBuffer>(std::make_shared<Region>(
      shared_from_this(), payload.offset(), static_cast<size_t>(payload.bytes())));
}

void JobShmReader::Released(uint64_t offset) {
  absl::MutexLock lock(&mu_);
  --held_;
  released_.push_back(offset);
}

void JobShmReader::TakeReleased(size_t max, std::vector<uint64_t>* out) {
  absl::MutexLock lock(&mu_);
  const size_t n = std::min(max, released_.size());
  out->insert(out->end(), released_.begin(), released_.begin() + n);
  released_.erase(released_.begin(), released_.begin() + n);
}

size_t JobShmReader::held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

std::shared_ptr<JobShmReader> JobShmReaders::Find(const std::string& address,
                                                  const std::string& socket_name, uint64_t id,
                                                  size_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = readers_.find(Key{address, socket_name, id});
  if (it == readers_.end()) return nullptr;
  std::shared_ptr<JobShmReader> reader = it->second.lock();
  if (reader == nullptr || reader->segment()->size() != bytes) {
    readers_.erase(it);
    return nullptr;
  }
  return reader;
}

void JobShmReaders::Put(const std::string& address, const std::string& socket_name,
                        const std::shared_ptr<JobShmReader>& reader) {
  absl::MutexLock lock(&mu_);
  // Forget readers that are gone, so that the map stays as small as the live ones.
  for (auto it = readers_.begin(); it != readers_.end();) {
    it = it->second.expired() ? readers_.erase(it) : std::next(it);
  }
  readers_[Key{address, socket_name, reader->segment_id()}] = reader;
}

JobShmReaders& ProcessJobShmReaders() {
  static auto* readers = new JobShmReaders;
  return *readers;
}

}  // namespace sluice
