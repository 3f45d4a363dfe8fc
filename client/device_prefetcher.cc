#include "client/device_prefetcher.h"
#include "client/read_ahead_source.h"
#include "client/service_step_source.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/start_thread.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

constexpr size_t kAlign = TensorBuffer::kAlignment;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

bool IsNumeric(const Tensor& t) { return t.valid() && t.dtype() != DType::kString; }

void WaitFences(std::vector<std::shared_ptr<DeviceEvent>>& fences) {
  for (const std::shared_ptr<DeviceEvent>& fence : fences) fence->Wait().IgnoreError();
  fences.clear();
}

}  // namespace

// Small steps of one ring staged since its last copy; `event` is recorded after the copy that
// takes them to the device. `flushed` is guarded by the ring's mutex.
struct DevicePrefetcher::FlushGroup {
  std::shared_ptr<DeviceEvent> event;
  bool flushed = false;
};

// One replica's ring of slots. A slot is either free (here), or owned by a RingBuffer (one
// step's, queued in the prefetcher or held by the trainer), or a batch slot owned by a Shared
// (small steps, see Reserve) that the ring's open pointer and every step in it refer to; the
// owner gives it back when the last Tensor on it is dropped. Thread-safe.
class DevicePrefetcher::Ring : public std::enable_shared_from_this<Ring> {
 public:
  struct Slot {
    std::shared_ptr<TensorBuffer> device;   // capacity bytes on the device
    std::shared_ptr<TensorBuffer> staging;  // pinned, capacity bytes; only when needed
    size_t capacity = 0;
    std::shared_ptr<DeviceEvent> event;  // the last copy into the slot
    // The consumers' streams' work on the slot's last step (DeviceTensorBuffer::ReleaseAfter):
    // waited for before the slot is written again or freed.
    std::vector<std::shared_ptr<DeviceEvent>> fences;
    ~Slot() { WaitFences(fences); }
  };

  explicit Ring(ReplicaPlacement placement) : placement_(std::move(placement)) {}

  DeviceMemory* memory() const { return placement_.memory.get(); }
  const std::shared_ptr<DeviceMemory>& shared_memory() const { return placement_.memory; }
  int device() const { return placement_.device; }

  // A free slot of at least `bytes` (with a staging buffer as large when `staging`): a free one
  // that fits, else a free one grown, else a new one. The slot's previous copy has completed.
  absl::StatusOr<std::unique_ptr<Slot>> Acquire(size_t bytes, bool staging) {
    std::unique_ptr<Slot> slot;
    {
      absl::MutexLock lock(&mu_);
      auto fits = std::find_if(free_.begin(), free_.end(),
                               [bytes](const auto& s) { return s->capacity >= bytes; });
      if (fits == free_.end()) fits = free_.begin();
      if (fits != free_.end()) {
        slot = std::move(*fits);
        free_.erase(fits);
      }
    }
    if (slot == nullptr) {
      slot = std::make_unique<Slot>();
      ASSIGN_OR_RETURN(std::unique_ptr<DeviceEvent> event,
                       placement_.memory->CreateEvent(placement_.device));
      slot->event = std::move(event);
      absl::MutexLock lock(&mu_);
      ++slots_;
    }
    // Nothing may write the staging buffer, nor may the device buffer be freed, while a copy
    // from or into them is in flight, nor while a consumer's stream may still read the slot's
    // last step.
    RETURN_IF_ERROR(slot->event->Wait());
    WaitFences(slot->fences);
    // A new slot has no device buffer yet even when the step needs no bytes (all pieces of
    // size 0): allocate one then too, since the step's tensors point into it.
    if (slot->device == nullptr || slot->capacity < bytes) {
      // Grow geometrically so that slowly growing steps do not reallocate every time.
      size_t capacity =
          std::max(RoundUp(std::max<size_t>(bytes, 1), 4096), slot->capacity + slot->capacity / 2);
      slot->device.reset();
      slot->staging.reset();
      slot->capacity = 0;
      absl::StatusOr<std::shared_ptr<TensorBuffer>> device =
          placement_.memory->AllocateDevice(placement_.device, capacity);
      if (!device.ok()) {
        Release(std::move(slot));
        return device.status();
      }
      slot->device = *std::move(device);
      slot->capacity = capacity;
      absl::MutexLock lock(&mu_);
      ++device_allocations_;
    }
    if (staging && (slot->staging == nullptr || slot->staging->size() < slot->capacity)) {
      slot->staging.reset();
      absl::StatusOr<std::shared_ptr<TensorBuffer>> pinned =
          placement_.memory->AllocatePinnedHost(slot->capacity);
      if (!pinned.ok()) {
        Release(std::move(slot));
        return pinned.status();
      }
      slot->staging = *std::move(pinned);
      absl::MutexLock lock(&mu_);
      ++pinned_allocations_;
    }
    return slot;
  }

  void Release(std::unique_ptr<Slot> slot) {
    absl::MutexLock lock(&mu_);
    free_.push_back(std::move(slot));
  }

  // --- Small steps: the batch slot they share -----------------------------------------------

  // A batch slot, given back to the ring (if it still exists) when the ring has moved on to
  // another and the last step in it is dropped.
  class Shared {
   public:
    Shared(std::unique_ptr<Slot> slot, std::weak_ptr<Ring> ring)
        : slot_(std::move(slot)), ring_(std::move(ring)) {}
    ~Shared() {
      {
        absl::MutexLock lock(&mu_);
        for (auto& f : fences_) slot_->fences.push_back(std::move(f));
      }
      if (std::shared_ptr<Ring> ring = ring_.lock()) ring->Release(std::move(slot_));
    }
    Slot* slot() const { return slot_.get(); }
    // Release fences of a step in the slot, kept until the slot is given back.
    void AddFences(std::vector<std::shared_ptr<DeviceEvent>> fences) {
      absl::MutexLock lock(&mu_);
      for (auto& f : fences) fences_.push_back(std::move(f));
    }

   private:
    std::unique_ptr<Slot> slot_;
    std::weak_ptr<Ring> ring_;
    absl::Mutex mu_;
    std::vector<std::shared_ptr<DeviceEvent>> fences_ ABSL_GUARDED_BY(mu_);
  };

  // Where a small step of `bytes` goes: `offset` into the open batch slot, its staging and
  // device addresses there.
  struct Reservation {
    char* stage = nullptr;
    char* dst = nullptr;
    size_t offset = 0;
    std::shared_ptr<Shared> slot;
  };

  // Room for `bytes` (a multiple of the alignment) at the end of the open batch slot; when it
  // does not fit, the open slot's pending bytes are copied and a new slot of at least
  // `slot_bytes` is opened. Called by the prefetch thread only (one reservation at a time).
  absl::StatusOr<Reservation> Reserve(size_t bytes, size_t slot_bytes) {
    std::shared_ptr<Shared> closed;  // released outside mu_ (its destructor takes mu_)
    {
      absl::MutexLock lock(&mu_);
      if (open_ != nullptr && open_->slot()->capacity - committed_ >= bytes) {
        return ReservationLocked();
      }
      RETURN_IF_ERROR(FlushLocked());
      closed = std::move(open_);
    }
    closed.reset();
    ASSIGN_OR_RETURN(std::unique_ptr<Slot> slot, Acquire(std::max(bytes, slot_bytes), true));
    auto shared = std::make_shared<Shared>(std::move(slot), weak_from_this());
    absl::MutexLock lock(&mu_);
    open_ = std::move(shared);
    committed_ = flushed_ = 0;
    return ReservationLocked();
  }

  // The reserved bytes at `offset` are staged: they join the group of the next copy, returned.
  absl::StatusOr<std::shared_ptr<FlushGroup>> Commit(size_t offset, size_t bytes) {
    absl::MutexLock lock(&mu_);
    committed_ = offset + bytes;
    ++batched_steps_;
    if (group_ == nullptr) {
      ASSIGN_OR_RETURN(std::unique_ptr<DeviceEvent> event,
                       placement_.memory->CreateEvent(placement_.device));
      group_ = std::make_shared<FlushGroup>();
      group_->event = std::move(event);
    }
    return group_;
  }

  // Enqueues one copy of every committed byte not yet copied and records the group's event.
  // Thread-safe (the prefetch thread and the trainer both flush).
  absl::Status Flush() {
    absl::MutexLock lock(&mu_);
    return FlushLocked();
  }
  // Flushes unless `group` has been already (groups are flushed in order).
  absl::Status FlushIfPending(const FlushGroup& group) {
    absl::MutexLock lock(&mu_);
    if (group.flushed) return absl::OkStatus();
    return FlushLocked();
  }

  void CountCopies(int64_t n) {
    absl::MutexLock lock(&mu_);
    copies_ += n;
  }

  void AddStats(Stats* stats) const {
    absl::MutexLock lock(&mu_);
    stats->device_allocations += device_allocations_;
    stats->pinned_allocations += pinned_allocations_;
    stats->slots += slots_;
    stats->copies += copies_;
    stats->batched_steps += batched_steps_;
  }

 private:
  Reservation ReservationLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Slot* s = open_->slot();
    return Reservation{static_cast<char*>(s->staging->data()) + committed_,
                       static_cast<char*>(s->device->data()) + committed_, committed_, open_};
  }

  absl::Status FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (group_ == nullptr) return absl::OkStatus();  // nothing committed since the last flush
    Slot* s = open_->slot();
    if (committed_ > flushed_) {
      RETURN_IF_ERROR(placement_.memory->CopyToDeviceAsync(
          placement_.device, static_cast<char*>(s->staging->data()) + flushed_,
          static_cast<char*>(s->device->data()) + flushed_, committed_ - flushed_));
      ++copies_;
      flushed_ = committed_;
    }
    RETURN_IF_ERROR(group_->event->Record());
    // Reusing the slot waits for its last copy.
    s->event = group_->event;
    group_->flushed = true;
    group_.reset();
    return absl::OkStatus();
  }

  const ReplicaPlacement placement_;
  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Slot>> free_ ABSL_GUARDED_BY(mu_);
  int64_t slots_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t device_allocations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pinned_allocations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t copies_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t batched_steps_ ABSL_GUARDED_BY(mu_) = 0;
  // The open batch slot: [0, flushed_) copied, [flushed_, committed_) staged and waiting for
  // the copy of group_ (null when nothing waits).
  std::shared_ptr<Shared> open_ ABSL_GUARDED_BY(mu_);
  size_t committed_ ABSL_GUARDED_BY(mu_) = 0;
  size_t flushed_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<FlushGroup> group_ ABSL_GUARDED_BY(mu_);
};

namespace {

// The buffer behind the tensors of one replica's element in one step: a ring slot, given back
// to its ring (if the prefetcher still exists) when the last Tensor on it is dropped.
class RingBuffer : public DeviceTensorBuffer {
 public:
  RingBuffer(std::unique_ptr<DevicePrefetcher::Ring::Slot> slot,
             std::shared_ptr<DevicePrefetcher::Ring> ring)
      : DeviceTensorBuffer(ring->shared_memory(), ring->device(), slot->device, slot->event),
        slot_(std::move(slot)),
        ring_(ring) {}
  ~RingBuffer() override {
    // The slot (back in the ring, or freed with it) carries the consumers' release fences.
    for (auto& f : TakeReleaseFences()) slot_->fences.push_back(std::move(f));
    if (std::shared_ptr<DevicePrefetcher::Ring> ring = ring_.lock()) {
      ring->Release(std::move(slot_));
    }
  }

 private:
  std::unique_ptr<DevicePrefetcher::Ring::Slot> slot_;
  std::weak_ptr<DevicePrefetcher::Ring> ring_;
};

// The buffer behind the tensors of one small step in a batch slot: the slot's device memory
// (the tensors are views at their offsets), ready when its group's copy is done. Keeps the slot
// from going back to the ring while the step lives.
class BatchView : public DeviceTensorBuffer {
 public:
  BatchView(std::shared_ptr<DeviceMemory> memory, int device,
            std::shared_ptr<DevicePrefetcher::Ring::Shared> slot,
            std::shared_ptr<DeviceEvent> ready)
      : DeviceTensorBuffer(std::move(memory), device, slot->slot()->device, std::move(ready)),
        slot_(std::move(slot)) {}
  ~BatchView() override { slot_->AddFences(TakeReleaseFences()); }

 private:
  std::shared_ptr<DevicePrefetcher::Ring::Shared> slot_;
};

}  // namespace

DevicePrefetchOptions DevicePrefetchOptionsFor(const std::vector<Device>& devices,
                                               const InputOptions& options) {
  DevicePrefetchOptions out;
  out.buffer_size = options.experimental_per_replica_buffer_size;
  out.fetch_to_device = options.experimental_fetch_to_device;
  for (const Device& d : devices) {
    ReplicaPlacement p;
    if (d.type == "GPU") {
      p.memory = d.host_memory ? HostMemoryAsDevice() : DefaultDeviceMemory();
      p.device = d.index;
    }
    out.replicas.push_back(std::move(p));
  }
  return out;
}

bool ShouldPrefetchToDevices(const std::vector<Device>& devices, const InputOptions& options) {
  if (options.experimental_per_replica_buffer_size <= 0) return false;
  return std::any_of(devices.begin(), devices.end(),
                     [](const Device& d) { return d.type == "GPU"; });
}

StepSourceFactory WithDevicePrefetch(StepSourceFactory inner, DevicePrefetchOptions options) {
  return [inner = std::move(inner),
          options = std::move(options)]() -> absl::StatusOr<std::unique_ptr<StepSource>> {
    ASSIGN_OR_RETURN(std::unique_ptr<StepSource> source, inner());
    return DevicePrefetcher::Wrap(std::move(source), options);
  };
}

StepSourceFactory PrefetchToDevices(StepSourceFactory factory, const std::vector<Device>& devices,
                                    const InputOptions& options) {
  if (!ShouldPrefetchToDevices(devices, options)) return factory;
  return WithDevicePrefetch(std::move(factory), DevicePrefetchOptionsFor(devices, options));
}

TensorAllocator ReceiveAllocatorFor(const std::vector<Device>& devices,
                                    const InputOptions& options) {
  const bool real_gpu = std::any_of(devices.begin(), devices.end(), [](const Device& d) {
    return d.type == "GPU" && !d.host_memory;
  });
  if (!real_gpu || !options.experimental_fetch_to_device ||
      !ShouldPrefetchToDevices(devices, options)) {
    return nullptr;
  }
  std::shared_ptr<DeviceMemory> memory = DefaultDeviceMemory();
  if (memory->device_is_host()) return nullptr;
  return PinnedReceiveAllocator(std::move(memory));
}

namespace {

// Free pinned buffers by size class; see PinnedReceiveAllocator.
class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  PinnedPool(std::shared_ptr<DeviceMemory> memory, size_t max_pooled_bytes)
      : memory_(std::move(memory)), max_pooled_bytes_(max_pooled_bytes) {}

  std::shared_ptr<TensorBuffer> Allocate(size_t bytes) {
    size_t size_class = 4096;
    while (size_class < bytes) size_class *= 2;
    std::shared_ptr<TensorBuffer> buffer;
    {
      absl::MutexLock lock(&mu_);
      auto it = free_.find(size_class);
      if (it != free_.end() && !it->second.empty()) {
        buffer = std::move(it->second.back());
        it->second.pop_back();
        pooled_bytes_ -= size_class;
      }
    }
    if (buffer == nullptr) {
      absl::StatusOr<std::shared_ptr<TensorBuffer>> fresh = memory_->AllocatePinnedHost(size_class);
      if (!fresh.ok()) return nullptr;  // the decoder reports RESOURCE_EXHAUSTED
      buffer = *std::move(fresh);
    }
    return std::make_shared<Pooled>(std::move(buffer), bytes, size_class, weak_from_this());
  }

 private:
  // A pool buffer lent out with the size that was asked for.
  class Pooled : public TensorBuffer {
   public:
    Pooled(std::shared_ptr<TensorBuffer> buffer, size_t size, size_t size_class,
           std::weak_ptr<PinnedPool> pool)
        : buffer_(std::move(buffer)),
          size_(size),
          size_class_(size_class),
          pool_(std::move(pool)) {}
    ~Pooled() override {
      if (std::shared_ptr<PinnedPool> pool = pool_.lock())
        pool->Return(std::move(buffer_), size_class_);
    }
    void* data() override { return buffer_->data(); }
    size_t size() const override { return size_; }
    MemorySpace space() const override { return buffer_->space(); }
    int device() const override { return buffer_->device(); }

   private:
    std::shared_ptr<TensorBuffer> buffer_;
    size_t size_;
    size_t size_class_;
    std::weak_ptr<PinnedPool> pool_;
  };

  void Return(std::shared_ptr<TensorBuffer> buffer, size_t size_class) {
    absl::MutexLock lock(&mu_);
    if (pooled_bytes_ + size_class > max_pooled_bytes_) return;  // freed
    pooled_bytes_ += size_class;
    free_[size_class].push_back(std::move(buffer));
  }

  const std::shared_ptr<DeviceMemory> memory_;
  const size_t max_pooled_bytes_;
  absl::Mutex mu_;
  std::map<size_t, std::vector<std::shared_ptr<TensorBuffer>>> free_ ABSL_GUARDED_BY(mu_);
  size_t pooled_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

TensorAllocator PinnedReceiveAllocator(std::shared_ptr<DeviceMemory> memory,
                                       size_t max_pooled_bytes) {
  auto pool = std::make_shared<PinnedPool>(std::move(memory), max_pooled_bytes);
  return [pool](size_t bytes) { return pool->Allocate(bytes); };
}

absl::StatusOr<std::unique_ptr<StepSource>> DevicePrefetcher::Wrap(
    std::unique_ptr<StepSource> inner, DevicePrefetchOptions options) {
  if (inner == nullptr) {
    return absl::InvalidArgumentError("DevicePrefetcher: the inner step source is null");
  }
  if (options.buffer_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DevicePrefetcher: per-replica buffer size must be >= 0, got ", options.buffer_size));
  }
  if (options.buffer_size == 0) return inner;
  return std::unique_ptr<StepSource>(new DevicePrefetcher(std::move(inner), std::move(options)));
}

DevicePrefetcher::DevicePrefetcher(std::unique_ptr<StepSource> inner, DevicePrefetchOptions options)
    : options_(std::move(options)), inner_(std::move(inner)) {
  for (const ReplicaPlacement& p : options_.replicas) {
    rings_.push_back(options_.fetch_to_device && p.memory != nullptr ? std::make_shared<Ring>(p)
                                                                     : nullptr);
  }
  // Nothing to copy over a source that reads ahead by itself: no thread of ours in between.
  direct_ = dynamic_cast<ReadAheadSource*>(inner_.get()) != nullptr &&
            std::all_of(rings_.begin(), rings_.end(), [](const auto& ring) { return !ring; });
  // Our thread would read ahead; the trainer's waits are then timed here. Direct calls are the
  // trainer's own: the service source times them itself.
  if (auto* service = dynamic_cast<ServiceStepSource*>(inner_.get());
      service != nullptr && !direct_) {
    wait_meter_ = service->TakeOverWaitMeter();
  }
}

DevicePrefetcher::~DevicePrefetcher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    space_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  // Copies still in flight write into slots (and read pinned sources) freed below.
  absl::MutexLock lock(&mu_);
  for (Entry& e : queue_) WaitAll(e);
  queue_.clear();
}

absl::Status DevicePrefetcher::GetNextStep(std::vector<Element>* replicas, bool* end_of_data) {
  // The trainer's wait is its wait here, not the read-ahead's (docs/AUTOSCALING.md): Next
  // starts it when the queue is empty, EndCall ends it.
  absl::Status s = Next(/*padded=*/false, replicas, end_of_data);
  if (wait_meter_ != nullptr) wait_meter_->EndCall(s.ok() && !*end_of_data);
  return s;
}

absl::Status DevicePrefetcher::GetNextStepPadded(std::vector<Element>* replicas,
                                                 bool* end_of_data) {
  absl::Status s = Next(/*padded=*/true, replicas, end_of_data);
  if (wait_meter_ != nullptr) wait_meter_->EndCall(s.ok() && !*end_of_data);
  return s;
}

absl::Status DevicePrefetcher::Next(bool padded, std::vector<Element>* replicas,
                                    bool* end_of_data) {
  if (direct_) return NextDirect(padded, replicas, end_of_data);
  Entry entry;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return failed_;
    padded_ = padded;
    if (!started_) {
      started_ = true;
      absl::StatusOr<std::thread> thread =
          StartThread("the device prefetcher's copies", [this] { Run(); });
      if (!thread.ok()) {
        failed_ = thread.status();
        return failed_;
      }
      thread_ = *std::move(thread);
    }
    waiting_ = true;
    if (queue_.empty() && wait_meter_ != nullptr) wait_meter_->BeginWait();
    while (queue_.empty()) ready_.Wait(&mu_);
    waiting_ = false;
    const Entry& front = queue_.front();
    if (front.terminal) {
      *end_of_data = front.end_of_data;
      return front.status;
    }
    entry = std::move(queue_.front());
    queue_.pop_front();
    space_.Signal();
  }
  // Small steps whose bytes have not left yet leave now, with every step staged after them.
  for (const auto& [ring, group] : entry.groups) {
    absl::Status s = ring->FlushIfPending(*group);
    if (!s.ok()) {
      WaitAll(entry);
      absl::MutexLock lock(&mu_);
      failed_ = s;
      return s;
    }
  }
  // Hand out only what is completely written.
  for (const std::shared_ptr<DeviceEvent>& event : entry.events) {
    absl::Status s = event->Wait();
    if (!s.ok()) {
      WaitAll(entry);
      absl::MutexLock lock(&mu_);
      failed_ = s;
      return s;
    }
  }
  entry.sources.clear();
  *replicas = std::move(entry.replicas);
  *end_of_data = false;
  return absl::OkStatus();
}

void DevicePrefetcher::Run() {
  const size_t depth = static_cast<size_t>(options_.buffer_size);
  for (;;) {
    bool padded = false;
    {
      absl::MutexLock lock(&mu_);
      if (queue_.size() >= depth) {
        // Full. Small steps are refilled once a quarter of the queue has been taken, so that
        // several of them gather into one copy; others as soon as one has.
        const size_t resume = batching_ ? depth - std::max<size_t>(1, depth / 4) : depth - 1;
        while (!stop_ && queue_.size() > resume) space_.Wait(&mu_);
      }
      if (stop_) return;
      padded = padded_;
    }
    bool pulled = false;
    bool batched = false;
    Entry entry = Pull(padded, &pulled, &batched);
    bool terminal = false;
    bool flush = false;
    {
      absl::MutexLock lock(&mu_);
      if (pulled) ++steps_pulled_;
      batching_ = batched;
      terminal = entry.terminal;
      queue_.push_back(std::move(entry));
      ready_.Signal();
      // The staged small steps leave now if nothing more is coming soon or someone waits.
      flush = terminal || waiting_ || queue_.size() >= depth;
    }
    // A failed copy is reported by Next(), which flushes a step's group again before use.
    if (flush) FlushAll().IgnoreError();
    if (terminal) return;
  }
}

DevicePrefetcher::Entry DevicePrefetcher::Pull(bool padded, bool* pulled, bool* batched) {
  std::vector<Element> step;
  bool end = false;
  absl::Status s =
      padded ? inner_->GetNextStepPadded(&step, &end) : inner_->GetNextStep(&step, &end);
  Entry entry;
  *pulled = false;
  *batched = false;
  if (!s.ok()) {
    entry.terminal = true;
    entry.status = std::move(s);
  } else if (end) {
    entry.terminal = true;
    entry.end_of_data = true;
  } else {
    *pulled = true;
    absl::Status staged = Stage(std::move(step), &entry, batched);
    if (!staged.ok()) {
      WaitAll(entry);
      entry = Entry();
      entry.terminal = true;
      entry.status = std::move(staged);
    }
  }
  return entry;
}

absl::Status DevicePrefetcher::NextDirect(bool padded, std::vector<Element>* replicas,
                                          bool* end_of_data) {
  {
    absl::MutexLock lock(&mu_);
    if (!queue_.empty()) {  // the end or the error, repeated
      *end_of_data = queue_.front().end_of_data;
      return queue_.front().status;
    }
  }
  bool pulled = false;
  bool batched = false;  // no rings: never
  Entry entry = Pull(padded, &pulled, &batched);
  absl::MutexLock lock(&mu_);
  if (pulled) ++steps_pulled_;
  if (entry.terminal) {
    *end_of_data = entry.end_of_data;
    absl::Status status = entry.status;
    queue_.push_back(std::move(entry));
    return status;
  }
  *replicas = std::move(entry.replicas);
  *end_of_data = false;
  return absl::OkStatus();
}

absl::Status DevicePrefetcher::FlushAll() {
  for (const std::shared_ptr<Ring>& ring : rings_) {
    if (ring != nullptr) RETURN_IF_ERROR(ring->Flush());
  }
  return absl::OkStatus();
}

void DevicePrefetcher::WaitAll(Entry& entry) {
  for (const std::shared_ptr<DeviceEvent>& event : entry.events) event->Wait().IgnoreError();
}

absl::Status DevicePrefetcher::Stage(std::vector<Element> step, Entry* entry, bool* batched) {
  *batched = false;
  if (!options_.fetch_to_device) {
    entry->replicas = std::move(step);
    return absl::OkStatus();
  }
  if (step.size() != rings_.size()) {
    return absl::InternalError(absl::StrCat("DevicePrefetcher: the input produced a step of ",
                                            step.size(), " replica element(s) for ", rings_.size(),
                                            " local replica(s)"));
  }
  entry->replicas.resize(step.size());
  for (size_t r = 0; r < step.size(); ++r) {
    if (rings_[r] == nullptr) {
      entry->replicas[r] = std::move(step[r]);
      continue;
    }
    bool replica_batched = false;
    RETURN_IF_ERROR(
        StageReplica(r, std::move(step[r]), entry, &entry->replicas[r], &replica_batched));
    *batched = *batched || replica_batched;
  }
  return absl::OkStatus();
}

absl::Status DevicePrefetcher::StageReplica(size_t r, Element element, Entry* entry, Element* out,
                                            bool* batched) {
  *batched = false;
  Ring& ring = *rings_[r];
  DeviceMemory* memory = ring.memory();
  const int device = ring.device();
  std::vector<Tensor> leaves = element.Flatten();
  const bool pinned_path = memory->prefers_pinned_source();

  // Which leaves are staged: memcpy'd into the pinned staging buffer and copied together (small
  // ones, and pageable ones when the device prefers pinned sources); the others are copied
  // from their own memory.
  std::vector<bool> staged(leaves.size(), false);
  bool any_numeric = false;
  bool all_staged = true;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Tensor& t = leaves[i];
    if (!IsNumeric(t)) continue;
    if (t.buffer() != nullptr && t.buffer()->space() == MemorySpace::kDevice) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DevicePrefetcher: component ", i, " of replica ", r,
          "'s element is already in device memory; the input must produce host tensors"));
    }
    any_numeric = true;
    const size_t n = t.byte_size();
    if (n == 0) continue;
    staged[i] = pinned_path && (n < options_.stage_below_bytes ||
                                t.buffer()->space() != MemorySpace::kPinnedHost);
    all_staged = all_staged && staged[i];
  }
  if (!any_numeric) {
    *out = std::move(element);
    return absl::OkStatus();
  }

  // Layout: 64-byte aligned offsets, the staged leaves first (one contiguous run), then the
  // others, each in flatten order.
  std::vector<size_t> offsets(leaves.size(), 0);
  size_t total = 0;
  for (bool staged_pass : {true, false}) {
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!IsNumeric(leaves[i]) || staged[i] != staged_pass) continue;
      offsets[i] = total;
      total += RoundUp(leaves[i].byte_size(), kAlign);
    }
    if (staged_pass) {
      // `total` is now the end of the staged run.
      if (pinned_path && all_staged && total > 0 && total <= options_.stage_below_bytes) {
        // A small step: appended to the ring's open batch slot, it leaves with its group.
        ASSIGN_OR_RETURN(Ring::Reservation at,
                         ring.Reserve(total, std::max(options_.batch_slot_bytes, total)));
        for (size_t i = 0; i < leaves.size(); ++i) {
          if (staged[i]) std::memcpy(at.stage + offsets[i], leaves[i].raw_data(),
                                     leaves[i].byte_size());
        }
        ASSIGN_OR_RETURN(std::shared_ptr<FlushGroup> group, ring.Commit(at.offset, total));
        entry->events.push_back(group->event);
        entry->groups.emplace_back(&ring, group);
        auto view = std::make_shared<BatchView>(ring.shared_memory(), device, at.slot,
                                                group->event);
        for (size_t i = 0; i < leaves.size(); ++i) {
          if (!IsNumeric(leaves[i])) continue;
          // Size-zero leaves sit at the end of the step's bytes.
          const size_t offset = at.offset + (leaves[i].byte_size() == 0 ? total : offsets[i]);
          ASSIGN_OR_RETURN(leaves[i],
                           Tensor::Wrap(leaves[i].dtype(), leaves[i].shape(), view, offset));
        }
        ASSIGN_OR_RETURN(*out, Element::Pack(element, std::move(leaves)));
        *batched = true;
        return absl::OkStatus();
      }
    }
  }
  size_t staged_end = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (staged[i]) staged_end = std::max(staged_end, offsets[i] + leaves[i].byte_size());
  }

  ASSIGN_OR_RETURN(std::unique_ptr<Ring::Slot> slot, ring.Acquire(total, staged_end > 0));
  char* dst = static_cast<char*>(slot->device->data());
  absl::Status copied;
  int64_t copies = 0;
  if (staged_end > 0) {
    char* stage = static_cast<char*>(slot->staging->data());
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (staged[i]) std::memcpy(stage + offsets[i], leaves[i].raw_data(), leaves[i].byte_size());
    }
    copied = memory->CopyToDeviceAsync(device, stage, dst, staged_end);
    ++copies;
  }
  for (size_t i = 0; i < leaves.size() && copied.ok(); ++i) {
    const Tensor& t = leaves[i];
    if (!IsNumeric(t) || t.byte_size() == 0 || staged[i]) continue;
    copied = memory->CopyToDeviceAsync(device, t.raw_data(), dst + offsets[i], t.byte_size());
    ++copies;
    entry->sources.push_back(t);  // read by the copy until the event is ready
  }
  ring.CountCopies(copies);
  absl::Status recorded = slot->event->Record();
  if (!copied.ok() || !recorded.ok()) {
    slot->event->Wait().IgnoreError();
    ring.Release(std::move(slot));
    return copied.ok() ? recorded : copied;
  }
  entry->events.push_back(slot->event);
  auto buffer = std::make_shared<RingBuffer>(std::move(slot), rings_[r]);
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!IsNumeric(leaves[i])) continue;
    ASSIGN_OR_RETURN(leaves[i],
                     Tensor::Wrap(leaves[i].dtype(), leaves[i].shape(), buffer, offsets[i]));
  }
  ASSIGN_OR_RETURN(*out, Element::Pack(element, std::move(leaves)));
  return absl::OkStatus();
}

DevicePrefetcher::Stats DevicePrefetcher::stats() const {
  Stats stats;
  {
    absl::MutexLock lock(&mu_);
    stats.steps_pulled = steps_pulled_;
  }
  for (const std::shared_ptr<Ring>& ring : rings_) {
    if (ring != nullptr) ring->AddStats(&stats);
  }
  return stats;
}

}  // namespace sluice
