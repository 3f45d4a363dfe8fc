#include "client/device_prefetcher.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

constexpr size_t kAlign = TensorBuffer::kAlignment;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

bool IsNumeric(const Tensor& t) { return t.valid() && t.dtype() != DType::kString; }

}  // namespace

// One replica's ring of slots. A slot is either free (here) or owned by a RingBuffer (queued
// in the prefetcher or held by the trainer), which gives it back when the last Tensor on it is
// dropped. Thread-safe.
class DevicePrefetcher::Ring : public std::enable_shared_from_this<Ring> {
 public:
  struct Slot {
    std::shared_ptr<TensorBuffer> device;   // capacity bytes on the device
    std::shared_ptr<TensorBuffer> staging;  // pinned, capacity bytes; only when needed
    size_t capacity = 0;
    std::shared_ptr<DeviceEvent> event;  // the last copy into the slot
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
    // from or into them is in flight.
    RETURN_IF_ERROR(slot->event->Wait());
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

  void AddStats(Stats* stats) const {
    absl::MutexLock lock(&mu_);
    stats->device_allocations += device_allocations_;
    stats->pinned_allocations += pinned_allocations_;
    stats->slots += slots_;
  }

 private:
  const ReplicaPlacement placement_;
  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Slot>> free_ ABSL_GUARDED_BY(mu_);
  int64_t slots_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t device_allocations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pinned_allocations_ ABSL_GUARDED_BY(mu_) = 0;
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
    if (std::shared_ptr<DevicePrefetcher::Ring> ring = ring_.lock()) {
      ring->Release(std::move(slot_));
    }
  }

 private:
  std::unique_ptr<DevicePrefetcher::Ring::Slot> slot_;
  std::weak_ptr<DevicePrefetcher::Ring> ring_;
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
  return Next(/*padded=*/false, replicas, end_of_data);
}

absl::Status DevicePrefetcher::GetNextStepPadded(std::vector<Element>* replicas,
                                                 bool* end_of_data) {
  return Next(/*padded=*/true, replicas, end_of_data);
}

absl::Status DevicePrefetcher::Next(bool padded, std::vector<Element>* replicas,
                                    bool* end_of_data) {
  Entry entry;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return failed_;
    padded_ = padded;
    if (!started_) {
      started_ = true;
      thread_ = std::thread([this] { Run(); });
    }
    while (queue_.empty()) ready_.Wait(&mu_);
    const Entry& front = queue_.front();
    if (front.terminal) {
      *end_of_data = front.end_of_data;
      return front.status;
    }
    entry = std::move(queue_.front());
    queue_.pop_front();
    space_.Signal();
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
      while (!stop_ && queue_.size() >= depth) space_.Wait(&mu_);
      if (stop_) return;
      padded = padded_;
    }
    std::vector<Element> step;
    bool end = false;
    absl::Status s =
        padded ? inner_->GetNextStepPadded(&step, &end) : inner_->GetNextStep(&step, &end);
    Entry entry;
    bool pulled = false;
    if (!s.ok()) {
      entry.terminal = true;
      entry.status = std::move(s);
    } else if (end) {
      entry.terminal = true;
      entry.end_of_data = true;
    } else {
      pulled = true;
      absl::Status staged = Stage(std::move(step), &entry);
      if (!staged.ok()) {
        WaitAll(entry);
        entry = Entry();
        entry.terminal = true;
        entry.status = std::move(staged);
      }
    }
    absl::MutexLock lock(&mu_);
    if (pulled) ++steps_pulled_;
    const bool terminal = entry.terminal;
    queue_.push_back(std::move(entry));
    ready_.Signal();
    if (terminal) return;
  }
}

void DevicePrefetcher::WaitAll(Entry& entry) {
  for (const std::shared_ptr<DeviceEvent>& event : entry.events) event->Wait().IgnoreError();
}

absl::Status DevicePrefetcher::Stage(std::vector<Element> step, Entry* entry) {
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
    RETURN_IF_ERROR(StageReplica(r, std::move(step[r]), entry, &entry->replicas[r]));
  }
  return absl::OkStatus();
}

absl::Status DevicePrefetcher::StageReplica(size_t r, Element element, Entry* entry, Element* out) {
  Ring& ring = *rings_[r];
  DeviceMemory* memory = ring.memory();
  const int device = ring.device();
  std::vector<Tensor> leaves = element.Flatten();

  // Layout: every numeric leaf at a 64-byte aligned offset, in flatten order.
  std::vector<size_t> offsets(leaves.size(), 0);
  size_t total = 0;
  bool any_numeric = false;
  bool staging = false;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Tensor& t = leaves[i];
    if (!IsNumeric(t)) continue;
    if (t.buffer() != nullptr && t.buffer()->space() == MemorySpace::kDevice) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DevicePrefetcher: component ", i, " of replica ", r,
          "'s element is already in device memory; the input must produce host tensors"));
    }
    any_numeric = true;
    offsets[i] = total;
    total += RoundUp(t.byte_size(), kAlign);
    if (memory->prefers_pinned_source() && t.byte_size() > 0 &&
        t.buffer()->space() != MemorySpace::kPinnedHost) {
      staging = true;
    }
  }
  if (!any_numeric) {
    *out = std::move(element);
    return absl::OkStatus();
  }

  ASSIGN_OR_RETURN(std::unique_ptr<Ring::Slot> slot, ring.Acquire(total, staging));
  char* dst = static_cast<char*>(slot->device->data());
  char* stage = staging ? static_cast<char*>(slot->staging->data()) : nullptr;

  // Staged leaves are memcpy'd into the pinned buffer at their offsets and leave in one copy
  // per contiguous run; the others are copied from their own (pinned or host) memory.
  absl::Status copied;
  size_t run_begin = 0, run_end = 0;
  auto flush = [&]() {
    if (copied.ok() && run_end > run_begin) {
      copied = memory->CopyToDeviceAsync(device, stage + run_begin, dst + run_begin,
                                         run_end - run_begin);
    }
    run_begin = run_end = 0;
  };
  for (size_t i = 0; i < leaves.size() && copied.ok(); ++i) {
    const Tensor& t = leaves[i];
    if (!IsNumeric(t) || t.byte_size() == 0) continue;
    const bool stage_this = staging && t.buffer()->space() != MemorySpace::kPinnedHost;
    if (stage_this) {
      std::memcpy(stage + offsets[i], t.raw_data(), t.byte_size());
      if (run_end == run_begin) run_begin = offsets[i];
      run_end = offsets[i] + t.byte_size();
      continue;
    }
    flush();
    if (!copied.ok()) break;
    copied = memory->CopyToDeviceAsync(device, t.raw_data(), dst + offsets[i], t.byte_size());
    entry->sources.push_back(t);  // read by the copy until the event is ready
  }
  flush();
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
