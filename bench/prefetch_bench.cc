// prefetch_bench: host -> device prefetch bandwidth of the DevicePrefetcher against the raw
// cudaMemcpyAsync peak, measured in the same run on the same device.
//
//   prefetch_bench [--mib_per_step=64 | --bytes_per_step=N] [--steps=48] [--depth=2]
//                  [--replicas=1]
//
// Small steps (issue 13, 1 KiB into device memory):
//   prefetch_bench --bytes_per_step=1024 --steps=200000 --depth=64
//
// Rows (bandwidth = payload bytes delivered / wall time, GB/s = 1e9 bytes/s):
//   raw peak   back-to-back cudaMemcpyAsync of one pinned buffer to the device on the copy stream
//              (DeviceMemory::CopyToDeviceAsync), synchronised once at the end;
//   pinned     the prefetcher fed steps whose tensors already live in pinned memory (what the
//              service's receive path produces with PinnedReceiveAllocator): one async copy
//              per step and replica, no staging;
//   pageable   the prefetcher fed ordinary host tensors (a local pipeline): memcpy into the
//              pinned staging buffer, then the async copy;
//   pinned, one copy per step   the pinned row with DevicePrefetchOptions::stage_below_bytes =
//              0: no staging of small pinned tensors, no batching of small steps (what the
//              prefetcher did before issue 13); differs from `pinned` only for small steps.
// Small steps (under 64 KiB per replica) share batch slots, several leaving in one copy.
// The trainer side takes each step as soon as it is handed out (a trainer faster than its
// input), so the figure is the prefetcher's ceiling. The input steps are made before timing and
// cycled, so the pipeline costs nothing. Without a GPU the same rows run on host memory and the
// output says so: then they measure memcpy, not a device copy.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "client/device_prefetcher.h"
#include "core/device/cuda_device_memory.h"
#include "core/device/device_memory.h"
#include "core/util/status_macros.h"

ABSL_FLAG(int64_t, mib_per_step, 64, "MiB of tensor payload per replica per step");
ABSL_FLAG(int64_t, bytes_per_step, 0,
          "bytes of tensor payload per replica per step (a multiple of 4); 0: --mib_per_step");
ABSL_FLAG(int, steps, 48, "timed steps per row (after 4 warm-up steps)");
ABSL_FLAG(int64_t, depth, 2, "per-replica buffer size of the prefetcher");
ABSL_FLAG(int, replicas, 1, "local replicas (one device each; at most the number of devices)");

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Cycles through premade steps; never ends before `steps`.
class PremadeSource : public StepSource {
 public:
  PremadeSource(std::vector<std::vector<Element>> steps, int count)
      : steps_(std::move(steps)), count_(count) {}
  absl::Status GetNextStep(std::vector<Element>* out, bool* end_of_data) override {
    *end_of_data = next_ == count_;
    if (!*end_of_data) *out = steps_[static_cast<size_t>(next_++) % steps_.size()];
    return absl::OkStatus();
  }

 private:
  std::vector<std::vector<Element>> steps_;
  int count_;
  int next_ = 0;
};

// Four premade steps of `replicas` float32 tensors of `bytes` each, in pinned memory from
// `pinned` or (null) in ordinary host memory.
std::vector<std::vector<Element>> MakeSteps(int replicas, size_t bytes, DeviceMemory* pinned) {
  std::vector<std::vector<Element>> steps;
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  for (int s = 0; s < 4; ++s) {
    std::vector<Element> step;
    for (int r = 0; r < replicas; ++r) {
      std::shared_ptr<TensorBuffer> b = pinned != nullptr ? *pinned->AllocatePinnedHost(bytes)
                                                          : TensorBuffer::AllocateHost(bytes);
      std::memset(b->data(), s + r, bytes);
      step.push_back(Element(*Tensor::Wrap(DType::kFloat32, Shape({n}), b)));
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

// GB/s of the raw copy: `steps` copies of `bytes` from one pinned buffer to each replica's
// device, one event wait at the end.
absl::StatusOr<double> RawPeak(DeviceMemory* memory, int replicas, size_t bytes, int steps) {
  std::vector<std::shared_ptr<TensorBuffer>> src, dst;
  std::vector<std::unique_ptr<DeviceEvent>> events;
  for (int r = 0; r < replicas; ++r) {
    ASSIGN_OR_RETURN(std::shared_ptr<TensorBuffer> p, memory->AllocatePinnedHost(bytes));
    ASSIGN_OR_RETURN(std::shared_ptr<TensorBuffer> d, memory->AllocateDevice(r, bytes));
    ASSIGN_OR_RETURN(std::unique_ptr<DeviceEvent> e, memory->CreateEvent(r));
    std::memset(p->data(), 1, bytes);
    src.push_back(std::move(p));
    dst.push_back(std::move(d));
    events.push_back(std::move(e));
  }
  auto run = [&](int n) -> absl::Status {
    for (int i = 0; i < n; ++i) {
      for (int r = 0; r < replicas; ++r) {
        RETURN_IF_ERROR(memory->CopyToDeviceAsync(r, src[static_cast<size_t>(r)]->data(),
                                                  dst[static_cast<size_t>(r)]->data(), bytes));
      }
    }
    for (auto& e : events) RETURN_IF_ERROR(e->Record());
    for (auto& e : events) RETURN_IF_ERROR(e->Wait());
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(run(4));
  Clock::time_point start = Clock::now();
  RETURN_IF_ERROR(run(steps));
  return static_cast<double>(bytes) * replicas * steps / Seconds(start, Clock::now()) / 1e9;
}

// GB/s delivered by a prefetcher over premade steps.
absl::StatusOr<double> Prefetch(std::shared_ptr<DeviceMemory> memory, int replicas, size_t bytes,
                                int steps, int64_t depth, bool pinned_sources,
                                bool one_copy_per_step = false) {
  DevicePrefetchOptions options;
  options.buffer_size = depth;
  if (one_copy_per_step) options.stage_below_bytes = 0;
  for (int r = 0; r < replicas; ++r) options.replicas.push_back(ReplicaPlacement{memory, r});
  const int warmup = 4;
  ASSIGN_OR_RETURN(
      std::unique_ptr<StepSource> source,
      DevicePrefetcher::Wrap(
          std::make_unique<PremadeSource>(
              MakeSteps(replicas, bytes, pinned_sources ? memory.get() : nullptr), warmup + steps),
          options));
  std::vector<Element> step;
  bool end = false;
  for (int i = 0; i < warmup; ++i) RETURN_IF_ERROR(source->GetNextStep(&step, &end));
  Clock::time_point start = Clock::now();
  for (int i = 0; i < steps; ++i) {
    step.clear();  // the previous step's slots go back to the ring
    RETURN_IF_ERROR(source->GetNextStep(&step, &end));
    if (end) return absl::InternalError("the premade source ended early");
  }
  return static_cast<double>(bytes) * replicas * steps / Seconds(start, Clock::now()) / 1e9;
}

int Main() {
  const size_t bytes = absl::GetFlag(FLAGS_bytes_per_step) > 0
                           ? static_cast<size_t>(absl::GetFlag(FLAGS_bytes_per_step))
                           : static_cast<size_t>(absl::GetFlag(FLAGS_mib_per_step)) << 20;
  const int steps = absl::GetFlag(FLAGS_steps);
  const int64_t depth = absl::GetFlag(FLAGS_depth);
  std::shared_ptr<DeviceMemory> memory = DefaultDeviceMemory();
  const bool gpu = memory->name() == "cuda";
  int replicas = absl::GetFlag(FLAGS_replicas);
  if (gpu && replicas > memory->num_devices()) replicas = memory->num_devices();
  std::printf("prefetch_bench: %s; CUDA compiled in: %s, devices: %d\n",
              gpu ? "GPU path (CUDA)" : "NO GPU: host path (device memory is host memory)",
              CudaCompiledIn() ? "yes" : "no", CudaDeviceCount());
  std::printf("%d replica(s) x %zu bytes per step, %d timed steps, depth %lld\n\n", replicas,
              bytes, steps, static_cast<long long>(depth));
  absl::StatusOr<double> raw = RawPeak(memory.get(), replicas, bytes, steps);
  absl::StatusOr<double> pinned = Prefetch(memory, replicas, bytes, steps, depth, true);
  absl::StatusOr<double> pageable = Prefetch(memory, replicas, bytes, steps, depth, false);
  absl::StatusOr<double> per_step = Prefetch(memory, replicas, bytes, steps, depth, true, true);
  auto row = [&](const char* name, const absl::StatusOr<double>& v) {
    if (!v.ok()) {
      std::printf("| %-34s | error: %s |\n", name, std::string(v.status().message()).c_str());
      return;
    }
    std::printf("| %-34s | %8.2f GB/s | %10.0f | %5.1f%% of raw |\n", name, *v,
                *v * 1e9 / (static_cast<double>(bytes) * replicas),
                raw.ok() ? 100.0 * *v / *raw : 0.0);
  };
  std::printf("| what | bandwidth | steps/s | vs raw |\n|---|---|---|---|\n");
  row(gpu ? "raw cudaMemcpyAsync (pinned -> GPU)" : "raw copy (memcpy, host path)", raw);
  row("prefetcher, pinned sources", pinned);
  row("prefetcher, pageable sources", pageable);
  row("prefetcher, pinned, 1 copy/step", per_step);
  return raw.ok() && pinned.ok() && pageable.ok() && per_step.ok() ? 0 : 1;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return sluice::Main();
}
