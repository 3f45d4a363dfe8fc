#include "core/rpc/shm_ring.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

constexpr uint64_t RoundUp64(uint64_t n) { return (n + 63) / 64 * 64; }

std::atomic<int64_t> g_frames_written{0};
std::atomic<int64_t> g_frames_read{0};
std::atomic<int64_t> g_writers{0};
std::atomic<int64_t> g_readers{0};

}  // namespace

ShmRingCounts ProcessShmRingCounts() {
  return ShmRingCounts{g_frames_written.load(), g_frames_read.load(), g_writers.load(),
                       g_readers.load()};
}

ShmRingWriter::ShmRingWriter(std::shared_ptr<ShmSegment> segment)
    : segment_(std::move(segment)) {
  g_writers.fetch_add(1);
}

ShmRingWriter::~ShmRingWriter() { g_writers.fetch_sub(1); }

uint8_t* ShmRingWriter::Reserve(size_t bytes, proto::ShmPayload* out) {
  const uint64_t size = segment_->size();
  const uint64_t n = RoundUp64(bytes);
  if (bytes == 0 || n > size) return nullptr;
  const uint64_t offset = written_ % size;
  const uint64_t pad = offset + n > size ? size - offset : 0;
  if (written_ + pad + n - released_ > size) return nullptr;  // would overwrite a held region
  const uint64_t start = written_ + pad;
  written_ = start + n;
  out->set_offset(start % size);
  out->set_bytes(bytes);
  out->set_ring_end(written_);
  g_frames_written.fetch_add(1, std::memory_order_relaxed);
  return segment_->data() + start % size;
}

absl::Status ShmRingWriter::Release(uint64_t position) {
  if (position < released_ || position > written_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StreamSteps: shared memory released up to ", position, ", but ", released_,
        " was released before and ", written_, " written"));
  }
  released_ = position;
  return absl::OkStatus();
}

struct ShmRingReader::State {
  State(std::shared_ptr<ShmSegment> s, std::shared_ptr<DeviceMemory> p)
      : segment(std::move(s)), pin(std::move(p)) {
    if (pin != nullptr && !pin->RegisterHostMemory(segment->data(), segment->size()).ok()) {
      pin = nullptr;
    }
  }
  // Unlocked before the segment (a member, destroyed after this body) is unmapped.
  ~State() {
    if (pin != nullptr) pin->UnregisterHostMemory(segment->data());
  }
  const std::shared_ptr<ShmSegment> segment;
  std::shared_ptr<DeviceMemory> pin;  // set while the segment is page-locked
  mutable absl::Mutex mu;
  // Resolved regions in ring order: their ring_end, and whether released.
  struct Held {
    uint64_t end;
    bool released;
  };
  std::deque<Held> held ABSL_GUARDED_BY(mu);
  uint64_t last_end ABSL_GUARDED_BY(mu) = 0;
  uint64_t released ABSL_GUARDED_BY(mu) = 0;

  void Release(uint64_t end) {
    absl::MutexLock lock(&mu);
    for (Held& h : held) {
      if (h.end == end) {
        h.released = true;
        break;
      }
    }
    while (!held.empty() && held.front().released) {
      released = held.front().end;
      held.pop_front();
    }
  }
};

class ShmRingReader::Region : public TensorBuffer {
 public:
  Region(std::shared_ptr<State> state, uint8_t* data, size_t size, uint64_t end)
      : state_(std::move(state)), data_(data), size_(size), end_(end) {}
  ~Region() override { state_->Release(end_); }
  void* data() override { return data_; }
  size_t size() const override { return size_; }
  MemorySpace space() const override {
    return state_->pin != nullptr ? MemorySpace::kPinnedHost : MemorySpace::kHost;
  }

 private:
  const std::shared_ptr<State> state_;
  uint8_t* const data_;
  const size_t size_;
  const uint64_t end_;
};

ShmRingReader::ShmRingReader(std::shared_ptr<ShmSegment> segment,
                             std::shared_ptr<DeviceMemory> pin)
    : state_(std::make_shared<State>(std::move(segment), std::move(pin))) {
  g_readers.fetch_add(1);
}

ShmRingReader::~ShmRingReader() { g_readers.fetch_sub(1); }

absl::StatusOr<std::shared_ptr<TensorBuffer>> ShmRingReader::Resolve(
    const proto::ShmPayload& payload) {
  const uint64_t size = state_->segment->size();
  const uint64_t offset = payload.offset();
  const uint64_t bytes = payload.bytes();
  const uint64_t end = payload.ring_end();
  auto bad = [&](const char* why) {
    return absl::DataLossError(absl::StrCat("step frame: shared memory region at offset ",
                                            offset, " of ", bytes, " bytes ending at ring ",
                                            "position ", end, " ", why, " (segment of ", size,
                                            " bytes)"));
  };
  if (bytes == 0 || offset % 64 != 0 || offset >= size || bytes > size - offset) {
    return bad("lies outside the segment");
  }
  absl::MutexLock lock(&state_->mu);
  const uint64_t n = RoundUp64(bytes);
  if (end < n || end <= state_->last_end || (end - n) % size != offset ||
      end - n < state_->last_end) {
    return bad("does not follow the last region");
  }
  // The regions held, this one included, must fit the segment: else the worker wrote over one.
  const uint64_t oldest = state_->held.empty() ? end - n : state_->released;
  if (end - oldest > size) return bad("overlaps a region still held");
  state_->last_end = end;
  state_->held.push_back(State::Held{end, false});
  g_frames_read.fetch_add(1, std::memory_order_relaxed);
  return std::make_shared<Region>(state_, state_->segment->data() + offset, bytes, end);
}

bool ShmRingReader::pinned() const { return state_->pin != nullptr; }

uint64_t ShmRingReader::released() const {
  absl::MutexLock lock(&state_->mu);
  return state_->released;
}

size_t ShmRingReader::held() const {
  absl::MutexLock lock(&state_->mu);
  return state_->held.size();
}

}  // namespace sluice
