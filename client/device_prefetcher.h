// DevicePrefetcher: a StepSource decorator that puts each local replica's next batches into its
// device's memory ahead of the trainer (TF's MultiDeviceIterator with per-device prefetch).
//
// One background thread pulls steps from the inner StepSource (local pipelines or the service)
// while the trainer works, and for each replica placed on a device:
//
//   1. takes a free slot of that replica's ring: a device buffer (and a pinned staging buffer
//      when the source is pageable memory and the device prefers pinned sources). Slots are
//      allocated once and reused; a slot smaller than the step is grown (reallocated) at once;
//   2. packs every numeric tensor of the replica's element into the slot (64-byte aligned
//      offsets): the staged tensors first, then the direct ones. A tensor is staged (memcpy'd
//      into the slot's pinned staging buffer) when it is small (under stage_below_bytes) or
//      pageable; a large pinned tensor (the service's receive path writes straight into pinned
//      buffers from PinnedReceiveAllocator) is copied from where it is. So the staged tensors
//      of one replica's element leave in ONE asynchronous copy on the device's copy stream,
//      and each large pinned tensor in one copy of its own;
//   3. records the slot's ready event.
//
// Small steps (a replica's numeric tensors all staged and at most stage_below_bytes in all)
// share a slot of batch_slot_bytes instead: each is staged at the end of the previous one and
// their bytes leave together, in one copy per flush. A flush happens when the queue is full,
// when the trainer is waiting, at the end of data, or at the latest when the trainer asks for a
// step whose bytes have not left yet (it then issues the copy itself). To let several steps
// gather, a full queue of small steps is refilled only once a quarter of it (at least one step)
// has been taken. Memory devices that do not prefer pinned sources (host memory) need none of
// this: every tensor is copied directly.
//
// String tensors stay on the host, as TF keeps them. At most `buffer_size` steps are ahead of
// the trainer: the inner source is never asked for step k + buffer_size + 1 before the trainer
// has taken step k + 1 (backpressure into the pipeline or the service's credit window).
//
// GetNextStep hands a step out only after its ready events have completed, so a handed-out
// buffer is never still being written (with depth >= 1 the copy normally finished long before).
// Each tensor's buffer is a DeviceTensorBuffer (core/device/device_memory.h): Tensor::raw_data() is the
// device pointer, ReadyEvent() the (completed) event. A slot goes back to its ring when the last
// Tensor referring to it is dropped and the release fences the consumers set on it have
// completed: a trainer that launches asynchronous device work reading a batch either keeps the
// batch's Tensors alive until that work has completed, or calls
// DeviceBufferOf(t)->ReleaseAfter(its_stream) before dropping them (Python's
// __dlpack__(stream=) does so when the last view dies); the ring then waits for that stream's
// work before the slot's next copy. A trainer that keeps many steps alive makes the ring grow
// (it never blocks waiting for the trainer to let go).
//
// Errors and the end of data come out in order, after the steps before them, and are then
// repeated on every call. Steps pulled ahead use the mode (padded or not) of the latest call;
// the two differ only at the partial last step of a dataset with fully static shapes, where an
// iterator that switches between GetNext and GetNextAsOptional there gets the mode of its
// previous call.
//
// fetch_to_device = false keeps every tensor exactly as the inner source made it (same
// buffers), still prefetched `buffer_size` steps ahead on the host. buffer_size = 0 disables
// the prefetcher: Wrap returns the inner source itself.
//
// Over a source that reads ahead by itself (a ReadAheadSource, client/read_ahead_source.h: the
// service's ServiceStepSource, whose streams receive within the credit window) with nothing to
// copy (fetch_to_device = false, or no replica placed on a device), there is no thread: each
// call takes the next step straight from the source, on the caller's thread. A thread in
// between would add no read-ahead, only a hand-off per step (a sleep and a wake-up on one side
// or the other: half of a remote consumer's context switches, bench/RESULTS.md "Issue 28 part
// prefhand"). What is said above holds with these readings: steps, errors and the end come in
// the source's order, the end and errors repeated by this prefetcher (the source is not asked
// again); the prefetcher itself holds no step ahead of the caller (the source's window is the
// read-ahead, so the inner source is asked for step k + 1 only once the trainer has taken step
// k); each call gets its own mode (padded or not); the source's input wait meter
// (docs/AUTOSCALING.md) stays the source's, since its calls are the trainer's; steps_pulled
// counts the steps taken from the source. Over any other source, or when some replica's
// tensors are copied, the thread reads ahead as described above.
//
// Destruction stops the thread, waits for the inner call or copy in progress and for every
// enqueued copy, then frees the rings; buffers still held by the trainer stay valid.
//
// Thread safety: like any StepSource, one caller at a time.
#ifndef SLUICE_CLIENT_DEVICE_PREFETCHER_H_
#define SLUICE_CLIENT_DEVICE_PREFETCHER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/input_wait_meter.h"
#include "core/device/device_memory.h"
#include "sluice/element.h"
#include "core/rpc/step_frame.h"
#include "sluice/distributed_dataset.h"
#include "sluice/input_options.h"
#include "sluice/strategy.h"

namespace sluice {

// Where one local replica's tensors go.
struct ReplicaPlacement {
  // Null: the replica's tensors stay where the inner source put them (a CPU device).
  std::shared_ptr<DeviceMemory> memory;
  int device = 0;  // the ordinal in `memory`
};

struct DevicePrefetchOptions {
  // One per local replica, in replica order.
  std::vector<ReplicaPlacement> replicas;
  // InputOptions.experimental_per_replica_buffer_size: steps prefetched ahead; 0 disables.
  int64_t buffer_size = 1;
  // InputOptions.experimental_fetch_to_device: false prefetches on the host without copies.
  bool fetch_to_device = true;
  // A numeric tensor of fewer bytes is staged through pinned memory even when it is pinned
  // already; a replica element of at most this many (aligned) bytes, all staged, is a small
  // step that shares a batch slot with others. 0: only pageable tensors are staged, no step is
  // batched (one copy per replica per step).
  size_t stage_below_bytes = size_t{64} << 10;
  // The size of the slots small steps share (a slot holds as many as fit).
  size_t batch_slot_bytes = size_t{1} << 20;
};

// The placement of a strategy's replicas: a GPU with device memory goes to
// DefaultDeviceMemory(), a GPU that fell back to host memory goes through HostMemoryAsDevice()
// (the same code path, host memory), a CPU stays on the host.
DevicePrefetchOptions DevicePrefetchOptionsFor(const std::vector<Device>& devices,
                                               const InputOptions& options);

// True when the strategy's iterators should be wrapped: some device is a GPU and the buffer
// size is positive.
bool ShouldPrefetchToDevices(const std::vector<Device>& devices, const InputOptions& options);

// `inner` wrapped in a DevicePrefetcher for every iterator it makes.
StepSourceFactory WithDevicePrefetch(StepSourceFactory inner, DevicePrefetchOptions options);

// What a DistributedDataset over `devices` uses: `factory` wrapped when
// ShouldPrefetchToDevices(devices, options), else `factory` itself.
StepSourceFactory PrefetchToDevices(StepSourceFactory factory, const std::vector<Device>& devices,
                                    const InputOptions& options);

// A TensorAllocator (for the service's receive path, ServiceOptions::allocator) handing out
// pinned host buffers of `memory` from a pool: a released buffer goes back to the pool and is
// reused for a request of the same size class (powers of two from 4 KiB), so that steady-state
// streaming allocates nothing. The pool keeps at most `max_pooled_bytes` of free buffers.
// Thread-safe.
TensorAllocator PinnedReceiveAllocator(std::shared_ptr<DeviceMemory> memory,
                                       size_t max_pooled_bytes = size_t{1} << 30);

// The receive allocator for a service dataset over `devices`: a PinnedReceiveAllocator of
// DefaultDeviceMemory() when tensors will be copied to a real GPU (some GPU device has device
// memory, fetch_to_device is on and the buffer size positive), so that the copies start from
// pinned memory with no staging copy; else empty (ordinary host memory).
TensorAllocator ReceiveAllocatorFor(const std::vector<Device>& devices,
                                    const InputOptions& options);

class DevicePrefetcher : public StepSource {
 public:
  // `inner` itself when options.buffer_size == 0, else a prefetcher over it (its thread, when it
  // has one, starts at the first GetNextStep). INVALID_ARGUMENT for a null inner source or a
  // negative buffer size. The inner source's steps must have one element per placement
  // (INTERNAL otherwise, at that step).
  static absl::StatusOr<std::unique_ptr<StepSource>> Wrap(std::unique_ptr<StepSource> inner,
                                                          DevicePrefetchOptions options);
  ~DevicePrefetcher() override;
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override;
  absl::Status GetNextStepPadded(std::vector<Element>* replicas, bool* end_of_data) override;
  // The inner source's: the caller's count of steps is what matters, not how far ahead the
  // rings have read.
  absl::StatusOr<IteratorCheckpoint> CheckpointAfter(int64_t steps_returned) const override {
    return inner_->CheckpointAfter(steps_returned);
  }

  // What the rings have allocated so far (for tests and metrics).
  struct Stats {
    int64_t steps_pulled = 0;        // steps taken from the inner source
    int64_t device_allocations = 0;  // device buffers allocated (grown slots count again)
    int64_t pinned_allocations = 0;  // pinned staging buffers allocated
    int64_t slots = 0;               // ring slots over all replicas
    int64_t copies = 0;              // host -> device copies enqueued
    int64_t batched_steps = 0;       // replica elements that went through a batch slot
  };
  Stats stats() const;

  class Ring;  // one replica's slots (internal)
  struct FlushGroup;  // small steps of one ring whose bytes leave in one copy (internal)

 private:
  // A step pulled ahead: its elements (tensors wrapped on ring slots), the events to wait on,
  // the pinned source tensors the copies read from (kept alive until the events are done), and
  // the batch groups its small replica elements belong to (flushed before hand-out).
  struct Entry {
    std::vector<Element> replicas;
    std::vector<std::shared_ptr<DeviceEvent>> events;
    std::vector<Tensor> sources;
    std::vector<std::pair<Ring*, std::shared_ptr<FlushGroup>>> groups;
    bool terminal = false;  // end of data or an error: repeated forever
    bool end_of_data = false;
    absl::Status status;
  };

  DevicePrefetcher(std::unique_ptr<StepSource> inner, DevicePrefetchOptions options);
  absl::Status Next(bool padded, std::vector<Element>* replicas, bool* end_of_data);
  // Next without the thread (direct_): the step straight from the inner source; a terminal
  // entry is kept in queue_ and repeated.
  absl::Status NextDirect(bool padded, std::vector<Element>* replicas, bool* end_of_data);
  void Run();
  // Takes the next step from the inner source in the given mode and stages it: its entry, or a
  // terminal one (the source's end or error, or the staging's error). `pulled`: a step was
  // taken from the source; `batched`: see Stage.
  Entry Pull(bool padded, bool* pulled, bool* batched);
  // Copies the step into ring slots, filling entry->replicas/events/sources.
  // `batched`: some replica element went through a batch slot.
  absl::Status Stage(std::vector<Element> step, Entry* entry, bool* batched);
  absl::Status StageReplica(size_t r, Element element, Entry* entry, Element* out,
                            bool* batched);
  // Enqueues the copies of every ring's staged, not yet copied small steps. Thread-safe.
  absl::Status FlushAll();
  void WaitAll(Entry& entry);

  const DevicePrefetchOptions options_;
  // Used by the thread only, once started, or by the caller when direct_ (but CheckpointAfter,
  // thread-safe, from any).
  std::unique_ptr<StepSource> inner_;
  // Autoscaling (docs/AUTOSCALING.md): when inner_ is a ServiceStepSource read by the thread,
  // its input wait meter, which this prefetcher's callers' waits feed instead of its own
  // read-ahead reads (null when direct_: the source's calls are the callers').
  InputWaitMeter* wait_meter_ = nullptr;
  std::vector<std::shared_ptr<Ring>> rings_;  // one per replica
  // No thread: the inner source is a ReadAheadSource and no replica has a ring (set once, in
  // the constructor).
  bool direct_ = false;

  mutable absl::Mutex mu_;
  std::deque<Entry> queue_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool padded_ ABSL_GUARDED_BY(mu_) = false;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;   // the trainer waits for a step
  bool batching_ ABSL_GUARDED_BY(mu_) = false;  // the latest step went through batch slots
  // A copy that failed at hand-out, or its thread that could not start; repeated.
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  absl::CondVar ready_;                       // queue_ became non-empty
  absl::CondVar space_;                       // queue_ shrank, or stop_
  int64_t steps_pulled_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_DEVICE_PREFETCHER_H_
