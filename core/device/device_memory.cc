#include "core/device/device_memory.h"

#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/device/cuda_device_memory.h"

namespace sluice {
namespace {

// Host memory labelled with a memory space (pinned or not): what HostDeviceMemory allocates.
class LabelledHostBuffer : public TensorBuffer {
 public:
  LabelledHostBuffer(std::shared_ptr<TensorBuffer> host, MemorySpace space)
      : host_(std::move(host)), space_(space) {}
  void* data() override { return host_->data(); }
  size_t size() const override { return host_->size(); }
  MemorySpace space() const override { return space_; }

 private:
  std::shared_ptr<TensorBuffer> host_;
  MemorySpace space_;
};

// Copies are done before CopyToDeviceAsync returns, so there is never anything to wait for.
class ReadyHostEvent : public DeviceEvent {
 public:
  absl::Status Record() override { return absl::OkStatus(); }
  bool IsReady() override { return true; }
  absl::Status Wait() override { return absl::OkStatus(); }
};

absl::Status CheckOrdinal(int device) {
  if (device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("host device memory: device ordinal ", device, " is negative"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<TensorBuffer>> HostDeviceMemory::AllocatePinnedHost(size_t bytes) {
  return std::shared_ptr<TensorBuffer>(std::make_shared<LabelledHostBuffer>(
      TensorBuffer::AllocateHost(bytes), MemorySpace::kPinnedHost));
}

absl::StatusOr<std::shared_ptr<TensorBuffer>> HostDeviceMemory::AllocateDevice(int device,
                                                                               size_t bytes) {
  if (absl::Status s = CheckOrdinal(device); !s.ok()) return s;
  return TensorBuffer::AllocateHost(bytes);
}

absl::Status HostDeviceMemory::CopyToDeviceAsync(int device, const void* src, void* dst,
                                                 size_t bytes) {
  if (absl::Status s = CheckOrdinal(device); !s.ok()) return s;
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceEvent>> HostDeviceMemory::CreateEvent(int device) {
  if (absl::Status s = CheckOrdinal(device); !s.ok()) return s;
  return std::unique_ptr<DeviceEvent>(std::make_unique<ReadyHostEvent>());
}

absl::Status HostDeviceMemory::CopyToHost(int device, const void* src, void* dst, size_t bytes) {
  if (absl::Status s = CheckOrdinal(device); !s.ok()) return s;
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceEvent>> DeviceMemory::RecordOnStream(int device,
                                                                          void* /*stream*/) {
  if (device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), " device memory: device ordinal ", device, " is negative"));
  }
  return std::unique_ptr<DeviceEvent>(std::make_unique<ReadyHostEvent>());
}

std::shared_ptr<DeviceMemory> HostMemoryAsDevice() {
  static const auto* const memory =
      new std::shared_ptr<DeviceMemory>(std::make_shared<HostDeviceMemory>());
  return *memory;
}

std::shared_ptr<DeviceMemory> DefaultDeviceMemory() {
  // Never destroyed: buffers released during static destruction must find it alive.
  static const auto* const memory = []() {
    if (CudaDeviceCount() > 0) {
      absl::StatusOr<std::shared_ptr<DeviceMemory>> cuda = CreateCudaDeviceMemory();
      if (cuda.ok()) return new std::shared_ptr<DeviceMemory>(*std::move(cuda));
      std::fprintf(stderr, "sluice: CUDA devices found but unusable (%s); using host memory\n",
                   std::string(cuda.status().message()).c_str());
    }
    return new std::shared_ptr<DeviceMemory>(HostMemoryAsDevice());
  }();
  return *memory;
}

#if SLUICE_HAVE_CUDA
bool CudaCompiledIn() { return true; }
#else
bool CudaCompiledIn() { return false; }
int CudaDeviceCount() { return 0; }
absl::StatusOr<std::shared_ptr<DeviceMemory>> CreateCudaDeviceMemory() {
  return absl::UnimplementedError("this build of Sluice has no CUDA support (no toolkit found)");
}
#endif

DeviceTensorBuffer::~DeviceTensorBuffer() {
  for (const std::shared_ptr<DeviceEvent>& fence : TakeReleaseFences()) {
    fence->Wait().IgnoreError();  // a failed stream has nothing left to read the bytes
  }
}

absl::Status DeviceTensorBuffer::ReleaseAfter(void* stream) const {
  absl::StatusOr<std::unique_ptr<DeviceEvent>> event = memory_->RecordOnStream(device_, stream);
  if (!event.ok()) return event.status();
  AddReleaseFence(*std::move(event));
  return absl::OkStatus();
}

void DeviceTensorBuffer::AddReleaseFence(std::shared_ptr<DeviceEvent> event) const {
  absl::MutexLock lock(&fences_mu_);
  fences_.push_back(std::move(event));
}

std::vector<std::shared_ptr<DeviceEvent>> DeviceTensorBuffer::TakeReleaseFences() const {
  absl::MutexLock lock(&fences_mu_);
  return std::move(fences_);
}

absl::Status DeviceTensorBuffer::WaitReady() const {
  if (ready_ == nullptr) return absl::OkStatus();
  return ready_->Wait();
}

absl::Status DeviceTensorBuffer::CopyToHost(size_t offset, void* dst, size_t bytes) const {
  if (offset > storage_->size() || bytes > storage_->size() - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceTensorBuffer::CopyToHost: bytes [", offset, ", ", offset + bytes,
        ") are outside the buffer of ", storage_->size(), " bytes on device ", device_));
  }
  if (absl::Status s = WaitReady(); !s.ok()) return s;
  if (bytes == 0) return absl::OkStatus();
  return memory_->CopyToHost(device_, static_cast<const char*>(storage_->data()) + offset, dst,
                             bytes);
}

const DeviceTensorBuffer* DeviceBufferOf(const Tensor& t) {
  if (!t.valid() || t.dtype() == DType::kString || t.buffer() == nullptr) return nullptr;
  return dynamic_cast<const DeviceTensorBuffer*>(t.buffer().get());
}

absl::StatusOr<Tensor> CopyTensorToHost(const Tensor& t) {
  const DeviceTensorBuffer* d = DeviceBufferOf(t);
  if (d == nullptr || d->space() != MemorySpace::kDevice) return t;
  Tensor host = Tensor::Allocate(t.dtype(), t.shape());
  if (absl::Status s = d->CopyToHost(t.buffer_offset(), host.mutable_raw_data(), t.byte_size());
      !s.ok()) {
    return s;
  }
  return host;
}

}  // namespace sluice
