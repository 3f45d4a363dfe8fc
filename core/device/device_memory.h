// Device memory in the tensor model: where a tensor's bytes live and how they get there.
//
// A DeviceMemory allocates pinned host and device buffers as TensorBuffers, enqueues host ->
// device copies on one copy stream per device, and records DeviceEvents that say when the
// copies enqueued before them have completed. Two implementations:
//
//   - CudaDeviceMemory (cuda_device_memory.h): cudaMallocHost / cudaMalloc, cudaMemcpyAsync on a
//     cudaStreamNonBlocking stream per device, cudaEvent. Compiled when the CUDA toolkit is
//     found; used only when cudaGetDeviceCount() > 0.
//   - HostDeviceMemory (below): "device" buffers are host memory, a copy is a memcpy done
//     before CopyToDeviceAsync returns and events are always ready. A machine without a GPU
//     runs the same prefetch code through it.
//
// A tensor that was copied to a device carries a DeviceTensorBuffer: Tensor::raw_data() is then
// the device pointer (host memory with HostDeviceMemory), and ReadyEvent()/WaitReady() say what
// to wait on before reading it:
//
//   const Tensor& t = per_replica[0].leaf();
//   if (const DeviceTensorBuffer* d = DeviceBufferOf(t)) {
//     // Either block the host ...
//     RETURN_IF_ERROR(d->WaitReady());
//     // ... or order the trainer's own stream after the copy (CUDA):
//     //   cudaStreamWaitEvent(my_stream, (cudaEvent_t)d->ReadyEvent()->native_handle(), 0);
//     launch_kernel(t.raw_data(), ...);  // a device pointer when d->space() == kDevice
//     // The kernel may still be reading when `t` is dropped: the buffer (a prefetch ring slot)
//     // must not be refilled before it is done. Say so before dropping the last Tensor:
//     RETURN_IF_ERROR(d->ReleaseAfter(my_stream));
//   }
//
// The release contract: a DeviceTensorBuffer's storage is reused (a prefetch ring slot gets a
// later step's bytes) or freed once the last Tensor on it is dropped AND every event passed to
// it through ReleaseAfter() has completed. A consumer that reads the bytes asynchronously on
// its own stream either keeps the Tensor alive until that work is done or calls ReleaseAfter
// with that stream; Python's __dlpack__(stream=s) does the latter when the last view dies.
//
// Thread safety: DeviceMemory implementations and DeviceTensorBuffer are thread-safe.
// A DeviceEvent may be waited on from many threads; Record() needs one writer at a time.
#ifndef SLUICE_CORE_DEVICE_MEMORY_H_
#define SLUICE_CORE_DEVICE_MEMORY_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sluice/tensor.h"

namespace sluice {

// A point in one device's copy stream.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  // Marks the point after everything enqueued so far on the device's copy stream. INTERNAL
  // naming the device if the device refuses.
  virtual absl::Status Record() = 0;
  // True once the work before the last Record() has completed (true if never recorded). Never
  // blocks.
  virtual bool IsReady() = 0;
  // Blocks until IsReady(). INTERNAL naming the device if the work failed.
  virtual absl::Status Wait() = 0;
  // The cudaEvent_t (as void*) for cudaStreamWaitEvent on a trainer's own stream; nullptr for
  // host memory.
  virtual void* native_handle() const { return nullptr; }
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // "cuda" or "host" (tests' fakes say what they are).
  virtual std::string name() const = 0;
  // How many devices the implementation serves; device ordinals are 0..num_devices()-1.
  // HostDeviceMemory serves any ordinal >= 0.
  virtual int num_devices() const = 0;
  // True when device buffers are ordinary host memory (the host implementation): a tensor in
  // them can be read on the host like any other.
  virtual bool device_is_host() const = 0;
  // True when host -> device copies are faster, and truly asynchronous, from pinned memory, so
  // that pageable sources are worth staging through a pinned buffer first (CUDA: yes).
  virtual bool prefers_pinned_source() const = 0;

  // `bytes` of page-locked host memory (MemorySpace::kPinnedHost), the DMA source of copies;
  // contents unspecified. RESOURCE_EXHAUSTED when the allocation fails.
  virtual absl::StatusOr<std::shared_ptr<TensorBuffer>> AllocatePinnedHost(size_t bytes) = 0;
  // `bytes` of memory on `device` (MemorySpace::kDevice, TensorBuffer::device() == device, for
  // CUDA); contents unspecified. INVALID_ARGUMENT for a bad ordinal, RESOURCE_EXHAUSTED when
  // the device is out of memory.
  virtual absl::StatusOr<std::shared_ptr<TensorBuffer>> AllocateDevice(int device,
                                                                       size_t bytes) = 0;

  // Enqueues a copy of `bytes` from host `src` to device `dst` on `device`'s copy stream and
  // returns without waiting for it (unless `src` is pageable memory, which CUDA copies through
  // its own staging). Both must stay valid and `src` unchanged until an event recorded after
  // this call is ready. Errors: INTERNAL naming the device.
  virtual absl::Status CopyToDeviceAsync(int device, const void* src, void* dst, size_t bytes) = 0;
  // A new event on `device`'s copy stream; ready until first recorded.
  virtual absl::StatusOr<std::unique_ptr<DeviceEvent>> CreateEvent(int device) = 0;
  // Copies `bytes` from `src` on `device` to host `dst` and returns when done (printing,
  // checks). Errors: INTERNAL naming the device.
  virtual absl::Status CopyToHost(int device, const void* src, void* dst, size_t bytes) = 0;
  // The copy stream of `device` (a cudaStream_t as void*), created on first use; nullptr for
  // host memory or on error.
  virtual void* stream(int /*device*/) { return nullptr; }
  // An event recorded now on `stream`, a stream of the consumer's on `device` (a cudaStream_t
  // as void*; cudaStreamLegacy (void*)1 and cudaStreamPerThread (void*)2 included): ready once
  // the work enqueued on that stream so far has completed. What ReleaseAfter waits for.
  // Errors: INVALID_ARGUMENT for a bad ordinal, INTERNAL naming the device if it refuses.
  // The default (no streams) returns an event that is always ready.
  virtual absl::StatusOr<std::unique_ptr<DeviceEvent>> RecordOnStream(int device, void* stream);
  // Page-locks `bytes` of existing host memory at `p` (CUDA: cudaHostRegister, portable), so
  // that copies from it need no staging (a shared-memory segment, core/rpc/shm_ring.h); undo
  // with UnregisterHostMemory before the memory goes. UNIMPLEMENTED where there is nothing to
  // lock for (host memory); INTERNAL naming the call when the driver refuses.
  virtual absl::Status RegisterHostMemory(void* /*p*/, size_t /*bytes*/) {
    return absl::UnimplementedError("no device to register host memory with");
  }
  virtual void UnregisterHostMemory(void* /*p*/) {}
};

// Host memory standing in for devices: allocations are 64-byte aligned host memory (pinned ones
// report kPinnedHost, device ones kHost so they stay readable everywhere), copies are memcpy,
// events always ready. Stateless and thread-safe.
class HostDeviceMemory : public DeviceMemory {
 public:
  std::string name() const override { return "host"; }
  int num_devices() const override { return 0; }
  bool device_is_host() const override { return true; }
  bool prefers_pinned_source() const override { return false; }
  absl::StatusOr<std::shared_ptr<TensorBuffer>> AllocatePinnedHost(size_t bytes) override;
  absl::StatusOr<std::shared_ptr<TensorBuffer>> AllocateDevice(int device, size_t bytes) override;
  absl::Status CopyToDeviceAsync(int device, const void* src, void* dst, size_t bytes) override;
  absl::StatusOr<std::unique_ptr<DeviceEvent>> CreateEvent(int device) override;
  absl::Status CopyToHost(int device, const void* src, void* dst, size_t bytes) override;
};

// The process-wide HostDeviceMemory.
std::shared_ptr<DeviceMemory> HostMemoryAsDevice();

// The process's device memory: the CUDA implementation when this build has CUDA and
// cudaGetDeviceCount() > 0 (an error such as a missing driver counts as none), else
// HostMemoryAsDevice(). Decided once per process; thread-safe; never destroyed.
std::shared_ptr<DeviceMemory> DefaultDeviceMemory();

// True when the CUDA implementation is compiled into this build (SLUICE_HAVE_CUDA).
bool CudaCompiledIn();

// The buffer of a tensor that was copied to a device: the device's storage, which device it
// belongs to, and the event that must be waited on before reading it. Releasing the last
// reference returns the storage to its owner (see subclasses; the device prefetcher reuses it).
class DeviceTensorBuffer : public TensorBuffer {
 public:
  // `storage` from memory->AllocateDevice(device, ...); `ready` may be null (nothing pending).
  DeviceTensorBuffer(std::shared_ptr<DeviceMemory> memory, int device,
                     std::shared_ptr<TensorBuffer> storage, std::shared_ptr<DeviceEvent> ready)
      : memory_(std::move(memory)),
        device_(device),
        storage_(std::move(storage)),
        ready_(std::move(ready)) {}
  // Waits for the release fences no owner took (TakeReleaseFences) before the storage goes.
  ~DeviceTensorBuffer() override;

  void* data() override { return storage_->data(); }
  size_t size() const override { return storage_->size(); }
  // kDevice for CUDA memory; kHost when the "device" is host memory (HostDeviceMemory).
  MemorySpace space() const override { return storage_->space(); }
  int device() const override { return storage_->device(); }

  // The device ordinal the buffer belongs to, also when its memory is host memory.
  int ordinal() const { return device_; }
  // What to wait on before reading data(); null when nothing is pending.
  DeviceEvent* ReadyEvent() const { return ready_.get(); }
  // Blocks until the bytes are written. INTERNAL naming the device if the copy failed.
  absl::Status WaitReady() const;
  // Waits for the bytes, then copies [offset, offset + bytes) to host `dst`. INVALID_ARGUMENT
  // for a range outside the buffer.
  absl::Status CopyToHost(size_t offset, void* dst, size_t bytes) const;
  DeviceMemory* memory() const { return memory_.get(); }

  // The storage is not to be reused or freed before the work enqueued on `stream` (a consumer's
  // stream on this buffer's device, as DeviceMemory::RecordOnStream takes it) so far has
  // completed: records an event there and keeps it as a release fence. For consumers that
  // drop their Tensors while their own kernels may still read the bytes; call it before the
  // last Tensor is dropped. Errors: those of RecordOnStream (nothing is recorded then, and the
  // caller must keep the Tensor until its work is done). Thread-safe.
  absl::Status ReleaseAfter(void* stream) const;
  // Adds `event` as a release fence (what ReleaseAfter records). Thread-safe.
  void AddReleaseFence(std::shared_ptr<DeviceEvent> event) const;
  // The release fences so far, moved out: for an owner that recycles the storage (the
  // prefetch ring waits for them before the slot's next copy). Thread-safe.
  std::vector<std::shared_ptr<DeviceEvent>> TakeReleaseFences() const;

 private:
  std::shared_ptr<DeviceMemory> memory_;
  int device_;
  std::shared_ptr<TensorBuffer> storage_;
  std::shared_ptr<DeviceEvent> ready_;
  mutable absl::Mutex fences_mu_;
  mutable std::vector<std::shared_ptr<DeviceEvent>> fences_ ABSL_GUARDED_BY(fences_mu_);
};

// The DeviceTensorBuffer behind `t`, or nullptr when `t` was never copied to a device.
const DeviceTensorBuffer* DeviceBufferOf(const Tensor& t);

// A host tensor with `t`'s value: `t` itself when its bytes are host-readable (host memory,
// pinned memory, HostDeviceMemory "devices", strings), else a copy made after waiting for its
// ready event. Errors: those of the copy.
absl::StatusOr<Tensor> CopyTensorToHost(const Tensor& t);

}  // namespace sluice

#endif  // SLUICE_CORE_DEVICE_MEMORY_H_
