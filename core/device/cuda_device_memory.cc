// Compiled only with SLUICE_HAVE_CUDA (the sluice_cuda object library, core/CMakeLists.txt).
#include "core/device/cuda_device_memory.h"

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace sluice {
namespace {

std::string Describe(cudaError_t err) {
  return absl::StrCat(cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

absl::Status CudaError(cudaError_t err, const std::string& what, int device) {
  std::string message = absl::StrCat(what, " on GPU:", device, " failed: ", Describe(err));
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

// cudaHostAlloc'd page-locked memory.
class PinnedBuffer : public TensorBuffer {
 public:
  PinnedBuffer(void* data, size_t size) : data_(data), size_(size) {}
  ~PinnedBuffer() override {
    // At process exit the runtime may already be unloaded; nothing useful to do about errors.
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  void* data() override { return data_; }
  size_t size() const override { return size_; }
  MemorySpace space() const override { return MemorySpace::kPinnedHost; }

 private:
  void* data_;
  size_t size_;
};

// cudaMalloc'd memory on one device.
class CudaBuffer : public TensorBuffer {
 public:
  CudaBuffer(int device, void* data, size_t size) : device_(device), data_(data), size_(size) {}
  ~CudaBuffer() override {
    if (data_ == nullptr) return;
    int previous = -1;
    cudaGetDevice(&previous);
    cudaSetDevice(device_);
    cudaFree(data_);
    if (previous >= 0) cudaSetDevice(previous);
  }
  void* data() override { return data_; }
  size_t size() const override { return size_; }
  MemorySpace space() const override { return MemorySpace::kDevice; }
  int device() const override { return device_; }

 private:
  int device_;
  void* data_;
  size_t size_;
};

class CudaEvent : public DeviceEvent {
 public:
  CudaEvent(int device, cudaEvent_t event, cudaStream_t stream)
      : device_(device), event_(event), stream_(stream) {}
  ~CudaEvent() override { cudaEventDestroy(event_); }

  absl::Status Record() override {
    cudaError_t err = cudaSetDevice(device_);
    if (err == cudaSuccess) err = cudaEventRecord(event_, stream_);
    if (err != cudaSuccess) return CudaError(err, "cudaEventRecord", device_);
    return absl::OkStatus();
  }
  bool IsReady() override { return cudaEventQuery(event_) != cudaErrorNotReady; }
  absl::Status Wait() override {
    cudaError_t err = cudaEventSynchronize(event_);
    if (err != cudaSuccess) return CudaError(err, "waiting for a host-to-device copy", device_);
    return absl::OkStatus();
  }
  void* native_handle() const override { return static_cast<void*>(event_); }

 private:
  int device_;
  cudaEvent_t event_;
  cudaStream_t stream_;
};

class CudaDeviceMemory : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(int num_devices)
      : num_devices_(num_devices), streams_(static_cast<size_t>(num_devices), nullptr) {}
  // Streams are never destroyed: the instance lives for the process (DefaultDeviceMemory), and
  // destroying a stream during exit races the runtime's own teardown.

  std::string name() const override { return "cuda"; }
  int num_devices() const override { return num_devices_; }
  bool device_is_host() const override { return false; }
  bool prefers_pinned_source() const override { return true; }

  absl::StatusOr<std::shared_ptr<TensorBuffer>> AllocatePinnedHost(size_t bytes) override {
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cudaHostAlloc of ", bytes, " bytes of pinned host memory failed: ", Describe(err)));
    }
    return std::shared_ptr<TensorBuffer>(std::make_shared<PinnedBuffer>(p, bytes));
  }

  absl::Status RegisterHostMemory(void* p, size_t bytes) override {
    cudaError_t err = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    if (err != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaHostRegister of ", bytes,
                                              " bytes failed: ", Describe(err)));
    }
    return absl::OkStatus();
  }
  void UnregisterHostMemory(void* p) override { cudaHostUnregister(p); }

  absl::StatusOr<std::shared_ptr<TensorBuffer>> AllocateDevice(int device, size_t bytes) override {
    if (absl::Status s = CheckOrdinal(device); !s.ok()) return s;
    cudaError_t err = cudaSetDevice(device);
    void* p = nullptr;
    if (err == cudaSuccess) err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    if (err != cudaSuccess) {
      return CudaError(err, absl::StrCat("cudaMalloc of ", bytes, " bytes"), device);
    }
    return std::shared_ptr<TensorBuffer>(std::make_shared<CudaBuffer>(device, p, bytes));
  }

  absl::Status CopyToDeviceAsync(int device, const void* src, void* dst, size_t bytes) override {
    if (absl::Status s = CheckOrdinal(device); !s.ok()) return s;
    if (bytes == 0) return absl::OkStatus();
    cudaStream_t s = nullptr;
    if (absl::Status st = Stream(device, &s); !st.ok()) return st;
    cudaError_t err = cudaSetDevice(device);
    if (err == cudaSuccess) err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s);
    if (err != cudaSuccess) {
      return CudaError(err, absl::StrCat("cudaMemcpyAsync of ", bytes, " bytes to the device"),
                       device);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<DeviceEvent>> CreateEvent(int device) override {
    if (absl::Status s = CheckOrdinal(device); !s.ok()) return s;
    cudaStream_t s = nullptr;
    if (absl::Status st = Stream(device, &s); !st.ok()) return st;
    cudaEvent_t event = nullptr;
    cudaError_t err = cudaSetDevice(device);
    if (err == cudaSuccess) {
      err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync);
    }
    if (err != cudaSuccess) return CudaError(err, "cudaEventCreateWithFlags", device);
    return std::unique_ptr<DeviceEvent>(std::make_unique<CudaEvent>(device, event, s));
  }

  absl::StatusOr<std::unique_ptr<DeviceEvent>> RecordOnStream(int device, void* stream) override {
    if (absl::Status s = CheckOrdinal(device); !s.ok()) return s;
    cudaEvent_t event = nullptr;
    cudaError_t err = cudaSetDevice(device);
    if (err == cudaSuccess) {
      err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync);
    }
    if (err != cudaSuccess) return CudaError(err, "cudaEventCreateWithFlags", device);
    auto recorded =
        std::make_unique<CudaEvent>(device, event, static_cast<cudaStream_t>(stream));
    if (absl::Status s = recorded->Record(); !s.ok()) return s;
    return std::unique_ptr<DeviceEvent>(std::move(recorded));
  }

  absl::Status CopyToHost(int device, const void* src, void* dst, size_t bytes) override {
    if (absl::Status s = CheckOrdinal(device); !s.ok()) return s;
    if (bytes == 0) return absl::OkStatus();
    cudaError_t err = cudaSetDevice(device);
    // cudaMemcpyDefault: with unified addressing the runtime tells device from host pointers,
    // so this also serves pinned "device" buffers.
    if (err == cudaSuccess) err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
    if (err != cudaSuccess) {
      return CudaError(err, absl::StrCat("cudaMemcpy of ", bytes, " bytes to the host"), device);
    }
    return absl::OkStatus();
  }

  void* stream(int device) override {
    cudaStream_t s = nullptr;
    if (!CheckOrdinal(device).ok() || !Stream(device, &s).ok()) return nullptr;
    return static_cast<void*>(s);
  }

 private:
  absl::Status CheckOrdinal(int device) const {
    if (device < 0 || device >= num_devices_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GPU:", device, " does not exist; this process sees ", num_devices_, " CUDA device(s)"));
    }
    return absl::OkStatus();
  }

  // The copy stream of `device`, created on first use. Requires a valid ordinal.
  absl::Status Stream(int device, cudaStream_t* out) {
    absl::MutexLock lock(&mu_);
    cudaStream_t& s = streams_[static_cast<size_t>(device)];
    if (s == nullptr) {
      cudaError_t err = cudaSetDevice(device);
      if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      if (err != cudaSuccess) {
        s = nullptr;
        return CudaError(err, "cudaStreamCreateWithFlags", device);
      }
    }
    *out = s;
    return absl::OkStatus();
  }

  const int num_devices_;
  absl::Mutex mu_;
  std::vector<cudaStream_t> streams_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the error so that later calls are not confused by it
    return 0;
  }
  return n;
}

absl::StatusOr<std::shared_ptr<DeviceMemory>> CreateCudaDeviceMemory() {
  int n = CudaDeviceCount();
  if (n <= 0) {
    return absl::FailedPreconditionError("no CUDA device is available to this process");
  }
  return std::shared_ptr<DeviceMemory>(std::make_shared<CudaDeviceMemory>(n));
}

}  // namespace sluice
