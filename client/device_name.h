// Parsing TensorFlow device names ("GPU:0", "/gpu:1", "/device:CPU:0",
// "/job:worker/replica:0/task:0/device:GPU:0") into a Device, and finding out how many CUDA
// devices this process can use. Internal to the client library.
#ifndef SLUICE_CLIENT_DEVICE_NAME_H_
#define SLUICE_CLIENT_DEVICE_NAME_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/strategy.h"

namespace sluice {

// The device named by `name` (type "CPU" or "GPU", any case on input; host_memory true).
// Accepts an optional job/replica/task prefix, as tf.DeviceSpec does, but the device part is
// required and its index must be a non-negative integer. INVALID_ARGUMENT naming `name`
// otherwise.
absl::StatusOr<Device> ParseDeviceName(absl::string_view name);

// How many CUDA devices this process sees: cudaGetDeviceCount() in a build with CUDA (an error,
// such as no driver, counts as 0), else 0. Computed once per process; thread-safe.
int NumCudaDevices();

// Marks each GPU in `devices` with an index below `num_gpus` as device memory and the others as
// host memory; the first time in the process that some GPU falls back to host memory, prints
// one warning on stderr ("sluice: no GPU available; GPU:0, GPU:1 use host memory"). Returns
// the warning text (empty if none was needed), whether or not it was printed.
std::string AssignDeviceMemory(std::vector<Device>* devices, int num_gpus);

}  // namespace sluice

#endif  // SLUICE_CLIENT_DEVICE_NAME_H_
