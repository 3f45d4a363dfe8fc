#include "core/rpc/shm_ring.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tensor/aligned_size.h"

namespace sluice {
namespace {

std::atomic<int64_t> g_frames_written{0};
std::atomic<int64_t> g_frames_in_place{0};
std::atomic<int64_t> g_frames_read{0};
std::atomic<int64_t> g_writers{0};
std::atomic<int64_t> g_readers{0};

// The most bytes of the next region that Allocate asks the cache for (State::PrefetchNext).
constexpr uint64_t kPrefetchBytes = 16 * 1024;

}  // namespace

ShmRingCounts ProcessShmRingCounts() {
  return ShmRingCounts{g_frames_written.load(), g_frames_in_place.load(), g_frames_read.load(),
                       g_writers.load(), g_readers.load()};
}

// The writer's bookkeeping, shared with the buffers it allocated (they may outlive it).
struct ShmRingWriter::State {
  State(std::shared_ptr<ShmSegment> s, size_t span) : segment(std::move(s)), wrap_span(span) {}
  const std::shared_ptr<ShmSegment> segment;
  const uint64_t wrap_span;  // see ShmRingWriter's constructor
  mutable absl::Mutex mu;
  uint64_t written ABSL_GUARDED_BY(mu) = 0;   // the ring position after the last region
  uint64_t released ABSL_GUARDED_BY(mu) = 0;  // what the consumer released
  uint64_t sent ABSL_GUARDED_BY(mu) = 0;      // the end of the last region sent
  // The early wrap's bookkeeping: the bytes skipped at the last lap's end, and the most bytes
  // held at once in this lap.
  uint64_t skipped ABSL_GUARDED_BY(mu) = 0;
  uint64_t lap_held ABSL_GUARDED_BY(mu) = 0;
  // Allocate's regions in ring order while the oldest of them lives (dead ones behind a
  // live one wait for it): their start, and whether a buffer still views them.
  struct Allocated {
    uint64_t start;
    bool alive;
  };
  std::deque<Allocated> allocated ABSL_GUARDED_BY(mu);
  size_t live ABSL_GUARDED_BY(mu) = 0;

  // Where free space begins: nothing the consumer holds, nor a buffer the worker holds, is
  // reused.
  uint64_t FreeFrom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return allocated.empty() ? released : std::min(released, allocated.front().start);
  }

  // A region of `bytes` (> 0): its ring position, or nullopt when there is no room.
  std::optional<uint64_t> Take(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const uint64_t size = segment->size();
    const uint64_t n = AlignedSize(bytes);
    if (bytes == 0 || n > size) return std::nullopt;
    const uint64_t free_from = FreeFrom();
    const uint64_t offset = written % size;
    const uint64_t lap_start = written - offset;
    // The bytes held now: positions [free_from, written), less the part of the last lap's
    // skipped rest among them (positions span at most one lap's start; all of the rest unless
    // the consumer released up to a position inside it, which Release accepts: never more than
    // lies between free_from and the lap's start).
    const uint64_t held =
        written - free_from - (free_from < lap_start ? std::min(skipped, lap_start - free_from) : 0);
    lap_held = std::max(lap_held, held);
    // Back to the segment's start (the rest of the lap skipped) when the region does not fit
    // before its end, or early: once the lap is long enough (ShmRingWriter's constructor) and
    // the start is free.
    const bool early =
        offset >= std::max({wrap_span, kLapRegions * n, kLapHeld * lap_held}) &&
        free_from >= lap_start + n;
    const uint64_t pad = early || offset + n > size ? size - offset : 0;
    if (written + pad + n - free_from > size) return std::nullopt;  // would overwrite a held one
    const uint64_t start = written + pad;
    written = start + n;
    // A new lap: after the skipped rest of the last one, or next, this region having ended
    // exactly at the segment's end (then nothing before the next lap is skipped: an older
    // lap's rest must not count).
    if (pad > 0 || written % size == 0) {
      skipped = written % size == 0 ? 0 : pad;
      lap_held = held;
    }
    return start;
  }

  // Asks for the lines of the next region of `bytes`, at `written` (Allocate's, a small one:
  // up to kPrefetchBytes). The ring's lines were last written a lap ago, long out of the
  // cache: a small region's copy then waits for their reads for ownership (the first locked
  // instruction after it drains the stores; 12% of the worker's CPU at 1 KiB steps). Asked a
  // region ahead, they are in the cache by the time it is copied. Large regions are written
  // with non-temporal stores (core/util/streaming_copy.h), which read nothing.
  void PrefetchNext(uint64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (bytes > kPrefetchBytes) return;
    const uint64_t size = segment->size();
    const uint64_t offset = written % size;
    const uint64_t n = std::min(bytes, size - offset);  // not past the segment's end
    const uint8_t* next = segment->data() + offset;
    for (uint64_t i = 0; i < n; i += 64) __builtin_prefetch(next + i, 1);
  }

  // Whether a live Allocate buffer lies at or after the end of the last region sent.
  bool PlacedAhead() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (auto it = allocated.rbegin(); it != allocated.rend() && it->start >= sent; ++it) {
      if (it->alive) return true;
    }
    return false;
  }

  void Free(uint64_t start) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    // Regions are allocated at increasing ring positions, so `allocated` is sorted by start: a
    // binary search, not a scan (a 1 KiB step's buffer freed behind a long-lived oldest one
    // scanned up to the ring's ~100k regions per free, most of the worker's CPU at 1 KiB).
    // Steps are mostly freed in the order they were built: the oldest region first, no search.
    auto it = !allocated.empty() && allocated.front().start == start
                  ? allocated.begin()
                  : std::lower_bound(allocated.begin(), allocated.end(), start,
                                     [](const Allocated& a, uint64_t s) { return a.start < s; });
    if (it != allocated.end() && it->start == start) it->alive = false;
    --live;
    while (!allocated.empty() && !allocated.front().alive) allocated.pop_front();
  }
};

class ShmRingWriter::RingBuffer : public TensorBuffer {
 public:
  RingBuffer(std::shared_ptr<State> state, uint64_t start, size_t size)
      : state_(std::move(state)),
        start_(start),
        data_(state_->segment->data() + start % state_->segment->size()),
        size_(size) {}
  ~RingBuffer() override { state_->Free(start_); }
  void* data() override { return data_; }
  size_t size() const override { return size_; }
  const State* state() const { return state_.get(); }
  uint64_t start() const { return start_; }

 private:
  const std::shared_ptr<State> state_;
  const uint64_t start_;
  uint8_t* const data_;
  const size_t size_;
};

ShmRingWriter::ShmRingWriter(std::shared_ptr<ShmSegment> segment, size_t wrap_span)
    : segment_(segment), state_(std::make_shared<State>(std::move(segment), wrap_span)) {
  g_writers.fetch_add(1);
}

ShmRingWriter::~ShmRingWriter() { g_writers.fetch_sub(1); }

uint8_t* ShmRingWriter::Reserve(size_t bytes, proto::ShmPayload* out) {
  absl::MutexLock lock(&state_->mu);
  // A step built in the ring and not sent yet would have to be copied too once this region
  // went past it (regions go in ring order): this frame goes inline instead.
  if (state_->PlacedAhead()) return nullptr;
  std::optional<uint64_t> start = state_->Take(bytes);
  if (!start.has_value()) return nullptr;
  const uint64_t size = segment_->size();
  out->set_offset(*start % size);
  out->set_bytes(bytes);
  out->set_ring_end(state_->written);
  state_->sent = state_->written;
  g_frames_written.fetch_add(1, std::memory_order_relaxed);
  return segment_->data() + *start % size;
}

std::shared_ptr<TensorBuffer> ShmRingWriter::Allocate(size_t bytes) {
  absl::MutexLock lock(&state_->mu);
  std::optional<uint64_t> start = state_->Take(bytes);
  if (!start.has_value()) return nullptr;
  state_->allocated.push_back(State::Allocated{*start, true});
  ++state_->live;
  state_->PrefetchNext(AlignedSize(bytes));
  return std::make_shared<RingBuffer>(state_, *start, bytes);
}

std::optional<uint64_t> ShmRingWriter::Locate(absl::Span<const Tensor* const> tensors,
                                              absl::Span<const size_t> at, size_t extent) const {
  if (tensors.empty() || tensors.size() != at.size() || at[0] != 0) return std::nullopt;
  uint64_t first = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto* ring = dynamic_cast<const RingBuffer*>(tensors[i]->buffer().get());
    if (ring == nullptr || ring->state() != state_.get()) return std::nullopt;
    const uint64_t position = ring->start() + tensors[i]->buffer_offset();
    if (i == 0) first = position;
    if (position != first + at[i]) return std::nullopt;
  }
  // One region that does not wrap (consecutive allocations across the segment's end do not
  // lie at consecutive offsets: the padding between them breaks the layout above).
  const uint64_t size = segment_->size();
  if (first % size + AlignedSize(extent) > size) return std::nullopt;
  return first;
}

bool ShmRingWriter::Holds(const Tensor& t) const {
  const auto* ring = dynamic_cast<const RingBuffer*>(t.buffer().get());
  return ring != nullptr && ring->state() == state_.get();
}

bool ShmRingWriter::InPlace(absl::Span<const Tensor* const> tensors,
                            absl::Span<const size_t> at, size_t extent, proto::ShmPayload* out) {
  std::optional<uint64_t> first = Locate(tensors, at, extent);
  if (!first.has_value()) return false;
  absl::MutexLock lock(&state_->mu);
  if (*first < state_->sent) return false;  // the consumer takes regions in ring order
  const uint64_t end = *first + AlignedSize(extent);
  out->set_offset(*first % segment_->size());
  out->set_bytes(extent);
  out->set_ring_end(end);
  state_->sent = end;
  g_frames_written.fetch_add(1, std::memory_order_relaxed);
  g_frames_in_place.fetch_add(1, std::memory_order_relaxed);
  return true;
}

absl::Status ShmRingWriter::Release(uint64_t position) {
  absl::MutexLock lock(&state_->mu);
  if (position < state_->released || position > state_->sent) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StreamSteps: shared memory released up to ", position, ", but ", state_->released,
        " was released before and ", state_->sent, " sent"));
  }
  state_->released = position;
  return absl::OkStatus();
}

uint64_t ShmRingWriter::written() const {
  absl::MutexLock lock(&state_->mu);
  return state_->written;
}

uint64_t ShmRingWriter::released() const {
  absl::MutexLock lock(&state_->mu);
  return state_->released;
}

size_t ShmRingWriter::live_buffers() const {
  absl::MutexLock lock(&state_->mu);
  return state_->live;
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
  if (bytes == 0 || offset % TensorBuffer::kAlignment != 0 || offset >= size ||
      bytes > size - offset) {
    return bad("lies outside the segment");
  }
  absl::MutexLock lock(&state_->mu);
  const uint64_t n = AlignedSize(bytes);
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
