#include "client/device_name.h"

#include <atomic>
#include <cstdio>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#ifdef SLUICE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace sluice {
namespace {

absl::Status Malformed(absl::string_view name, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed device name \"", name, "\": ", why,
                   " (expected e.g. \"GPU:0\", \"/gpu:1\", \"/device:CPU:0\" or "
                   "\"/job:worker/replica:0/task:0/device:GPU:0\")"));
}

bool ParseIndex(absl::string_view text, int* out) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(text, out) && *out >= 0;
}

bool ParseType(absl::string_view text, std::string* out) {
  std::string upper = absl::AsciiStrToUpper(text);
  if (upper != "CPU" && upper != "GPU") return false;
  *out = std::move(upper);
  return true;
}

}  // namespace

absl::StatusOr<Device> ParseDeviceName(absl::string_view name) {
  if (name.empty()) return Malformed(name, "empty");
  absl::string_view rest = name;
  if (rest.front() == '/') rest.remove_prefix(1);
  bool have_device = false, have_job = false, have_replica = false, have_task = false;
  Device device;
  for (absl::string_view part : absl::StrSplit(rest, '/')) {
    std::vector<absl::string_view> fields = absl::StrSplit(part, ':');
    std::string key = absl::AsciiStrToLower(fields[0]);
    int index = 0;
    if (fields.size() == 2 && key == "job") {
      if (have_job || fields[1].empty()) return Malformed(name, "bad or repeated job");
      have_job = true;
    } else if (fields.size() == 2 && (key == "replica" || key == "task")) {
      bool& seen = key == "replica" ? have_replica : have_task;
      if (seen || !ParseIndex(fields[1], &index)) {
        return Malformed(name, absl::StrCat("bad or repeated ", key));
      }
      seen = true;
    } else if ((fields.size() == 3 && key == "device") || fields.size() == 2) {
      absl::string_view type = fields.size() == 3 ? fields[1] : fields[0];
      absl::string_view idx = fields.size() == 3 ? fields[2] : fields[1];
      if (have_device) return Malformed(name, "more than one device part");
      if (!ParseType(type, &device.type)) {
        return Malformed(name, absl::StrCat("unknown device type \"", type,
                                            "\" (only CPU and GPU are supported)"));
      }
      if (!ParseIndex(idx, &device.index)) {
        return Malformed(name, absl::StrCat("bad device index \"", idx, "\""));
      }
      have_device = true;
    } else {
      return Malformed(name, absl::StrCat("cannot parse \"", part, "\""));
    }
  }
  if (!have_device) return Malformed(name, "no device type and index");
  device.host_memory = true;
  return device;
}

int NumCudaDevices() {
  static const int count = [] {
#ifdef SLUICE_HAVE_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so that later CUDA calls are not confused
      return 0;
    }
    return n;
#else
    return 0;
#endif
  }();
  return count;
}

std::string AssignDeviceMemory(std::vector<Device>* devices, int num_gpus) {
  std::vector<std::string> fallback;
  for (Device& d : *devices) {
    if (d.type != "GPU") {
      d.host_memory = true;
      continue;
    }
    d.host_memory = d.index >= num_gpus;
    if (d.host_memory) fallback.push_back(d.name());
  }
  if (fallback.empty()) return "";
  std::string message =
      num_gpus == 0
          ? absl::StrCat("sluice: no GPU available; ", absl::StrJoin(fallback, ", "),
                         fallback.size() == 1 ? " uses" : " use", " host memory")
          : absl::StrCat("sluice: only ", num_gpus, " GPU(s) available; ",
                         absl::StrJoin(fallback, ", "), fallback.size() == 1 ? " uses" : " use",
                         " host memory");
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) std::fprintf(stderr, "%s\n", message.c_str());
  return message;
}

}  // namespace sluice
