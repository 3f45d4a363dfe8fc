// CudaDeviceMemory: DeviceMemory (device_memory.h) on CUDA devices.
//
//   - AllocatePinnedHost: cudaHostAlloc (portable: usable as a DMA source for every device).
//   - AllocateDevice: cudaMalloc on the device.
//   - CopyToDeviceAsync: cudaMemcpyAsync on the device's copy stream, one per device, created
//     with cudaStreamNonBlocking so that it never serialises with the legacy default stream the
//     trainer's kernels may use.
//   - Events: cudaEvent with timing disabled and blocking sync (a waiting thread sleeps instead
//     of spinning a core).
//
// This header has no CUDA types and may be included anywhere; the implementation is compiled
// only when the build found the CUDA toolkit (CMake target sluice_cuda, folded into
// sluice::core). Without it, CudaDeviceCount() is 0 and CreateCudaDeviceMemory() UNIMPLEMENTED.
// Thread-safe.
#ifndef SLUICE_CORE_CUDA_DEVICE_MEMORY_H_
#define SLUICE_CORE_CUDA_DEVICE_MEMORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/device/device_memory.h"

namespace sluice {

// cudaGetDeviceCount(), with an error (no driver, no device) counted as 0. Asks every call.
int CudaDeviceCount();

// The CUDA implementation over every visible device. FAILED_PRECONDITION when there is no
// device, UNIMPLEMENTED in a build without CUDA.
absl::StatusOr<std::shared_ptr<DeviceMemory>> CreateCudaDeviceMemory();

}  // namespace sluice

#endif  // SLUICE_CORE_CUDA_DEVICE_MEMORY_H_
