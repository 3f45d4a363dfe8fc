// GPU checks of device memory and the device prefetcher on real CUDA devices. Every test but
// the build check skips without a device (CTest label `gpu`; tests/gpu/run.sh runs them).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "client/device_prefetcher.h"
#include "core/device/cuda_device_memory.h"
#include "sluice/dataset.h"
#include "core/device/device_memory.h"
#include "core/rpc/shm_ring.h"
#include "core/rpc/shm_segment.h"
#include "gtest/gtest.h"
#include "sluice/strategy.h"

#if SLUICE_EXPECT_CUDA
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>
#endif

namespace sluice {
namespace {

#define SKIP_WITHOUT_GPU()                                                        \
  do {                                                                            \
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device on this machine"; \
  } while (0)

const DType kNumericDTypes[] = {DType::kBool,   DType::kInt8,    DType::kInt16,    DType::kInt32,
                                DType::kInt64,  DType::kUInt8,   DType::kUInt16,   DType::kUInt32,
                                DType::kUInt64, DType::kFloat16, DType::kBFloat16, DType::kFloat32,
                                DType::kFloat64};

// A tensor of `dtype` and `shape` whose bytes all differ from their neighbours' (bools 0/1).
Tensor Patterned(DType dtype, const Shape& shape, int seed) {
  Tensor t = Tensor::Allocate(dtype, shape);
  auto* bytes = static_cast<unsigned char*>(t.mutable_raw_data());
  for (size_t i = 0; i < t.byte_size(); ++i) {
    bytes[i] = static_cast<unsigned char>(dtype == DType::kBool ? (i + seed) % 2
                                                                : (i * 131 + seed * 7) % 251);
  }
  return t;
}

std::shared_ptr<DeviceMemory> Cuda() {
  absl::StatusOr<std::shared_ptr<DeviceMemory>> cuda = CreateCudaDeviceMemory();
  EXPECT_TRUE(cuda.ok()) << cuda.status();
  return cuda.ok() ? *cuda : nullptr;
}

TEST(GpuBuildTest, CudaIsCompiledInWhenTheToolkitWasFound) {
  // SLUICE_EXPECT_CUDA comes from tests/gpu/CMakeLists.txt: 1 when CMake found the toolkit.
  EXPECT_EQ(CudaCompiledIn(), SLUICE_EXPECT_CUDA == 1);
  if (!CudaCompiledIn()) {
    EXPECT_EQ(CudaDeviceCount(), 0);
    EXPECT_TRUE(absl::IsUnimplemented(CreateCudaDeviceMemory().status()));
  }
  // Without a device the process falls back to host memory; with one it uses CUDA.
  EXPECT_EQ(DefaultDeviceMemory()->name(), CudaDeviceCount() > 0 ? "cuda" : "host");
}

TEST(CudaDeviceMemoryTest, DeviceContentsEqualHostContentsForEveryDtype) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<DeviceMemory> cuda = Cuda();
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->name(), "cuda");
  EXPECT_NE(cuda->stream(0), nullptr);
  for (DType dtype : kNumericDTypes) {
    for (int64_t rows : {0, 1, 7, 4096, 1 << 18}) {
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " x " << rows);
      Tensor host = Patterned(dtype, Shape({rows, 3}), static_cast<int>(rows));
      const size_t n = host.byte_size();
      absl::StatusOr<std::shared_ptr<TensorBuffer>> pinned = cuda->AllocatePinnedHost(n);
      absl::StatusOr<std::shared_ptr<TensorBuffer>> device = cuda->AllocateDevice(0, n);
      ASSERT_TRUE(pinned.ok()) << pinned.status();
      ASSERT_TRUE(device.ok()) << device.status();
      EXPECT_EQ((*pinned)->space(), MemorySpace::kPinnedHost);
      EXPECT_EQ((*device)->space(), MemorySpace::kDevice);
      EXPECT_EQ((*device)->device(), 0);
      if (n > 0) std::memcpy((*pinned)->data(), host.raw_data(), n);
      ASSERT_TRUE(cuda->CopyToDeviceAsync(0, (*pinned)->data(), (*device)->data(), n).ok());
      absl::StatusOr<std::unique_ptr<DeviceEvent>> event = cuda->CreateEvent(0);
      ASSERT_TRUE(event.ok()) << event.status();
      EXPECT_NE((*event)->native_handle(), nullptr);
      ASSERT_TRUE((*event)->Record().ok());
      ASSERT_TRUE((*event)->Wait().ok());
      EXPECT_TRUE((*event)->IsReady());
      Tensor back = Tensor::Allocate(dtype, host.shape());
      ASSERT_TRUE(cuda->CopyToHost(0, (*device)->data(), back.mutable_raw_data(), n).ok());
      EXPECT_TRUE(back.Equals(host));
    }
  }
}

// A shared-memory segment (core/rpc/shm_ring.h) page-locked with cudaHostRegister: its regions
// are pinned buffers (the prefetcher copies from them with no staging) and a device copy from
// one gives its bytes. Without a device, nothing is locked and the regions stay kHost.
TEST(CudaDeviceMemoryTest, SharedMemorySegmentIsRegisteredAndCopiesWithoutStaging) {
  auto segment = ShmSegment::Create(size_t{4} << 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  ShmRingWriter writer(*segment);
  if (CudaDeviceCount() == 0) {
    ShmRingReader host_reader(*segment, DefaultDeviceMemory());
    EXPECT_FALSE(host_reader.pinned());
    GTEST_SKIP() << "no CUDA device on this machine";
  }
  std::shared_ptr<DeviceMemory> cuda = Cuda();
  ASSERT_NE(cuda, nullptr);
  ShmRingReader reader(*segment, cuda);
  ASSERT_TRUE(reader.pinned());
  proto::ShmPayload payload;
  uint8_t* p = writer.Reserve(size_t{1} << 20, &payload);
  ASSERT_NE(p, nullptr);
  for (size_t i = 0; i < (size_t{1} << 20); ++i) p[i] = static_cast<uint8_t>(i * 13 + 5);
  absl::StatusOr<std::shared_ptr<TensorBuffer>> region = reader.Resolve(payload);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->space(), MemorySpace::kPinnedHost);
  absl::StatusOr<std::shared_ptr<TensorBuffer>> device = cuda->AllocateDevice(0, payload.bytes());
  ASSERT_TRUE(device.ok()) << device.status();
  ASSERT_TRUE(
      cuda->CopyToDeviceAsync(0, (*region)->data(), (*device)->data(), payload.bytes()).ok());
  absl::StatusOr<std::unique_ptr<DeviceEvent>> event = cuda->CreateEvent(0);
  ASSERT_TRUE(event.ok());
  ASSERT_TRUE((*event)->Record().ok());
  ASSERT_TRUE((*event)->Wait().ok());
  std::vector<uint8_t> back(payload.bytes());
  ASSERT_TRUE(cuda->CopyToHost(0, (*device)->data(), back.data(), back.size()).ok());
  EXPECT_EQ(std::memcmp(back.data(), p, back.size()), 0);
}

TEST(CudaDeviceMemoryTest, BadOrdinalsAreInvalidArguments) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<DeviceMemory> cuda = Cuda();
  ASSERT_NE(cuda, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(cuda->AllocateDevice(cuda->num_devices(), 16).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(cuda->AllocateDevice(-1, 16).status()));
}

// One replica per visible device (at most 2); every step is one tensor of every numeric dtype,
// plus a string that must stay on the host.
class EveryDtypeSource : public StepSource {
 public:
  EveryDtypeSource(int replicas, int steps, int64_t rows, TensorAllocator pinned)
      : replicas_(replicas), steps_(steps), rows_(rows), pinned_(std::move(pinned)) {}
  absl::Status GetNextStep(std::vector<Element>* out, bool* end_of_data) override {
    *end_of_data = next_ == steps_;
    if (*end_of_data) return absl::OkStatus();
    out->clear();
    for (int r = 0; r < replicas_; ++r) out->push_back(Make(next_, r, rows_, pinned_));
    ++next_;
    return absl::OkStatus();
  }

  // Even steps in pageable memory (staged), odd steps in pinned memory (copied directly).
  static Element Make(int step, int replica, int64_t rows, const TensorAllocator& pinned) {
    std::vector<Element> parts;
    for (DType d : kNumericDTypes) {
      Tensor t = Patterned(d, Shape({rows, 2}), step * 10 + replica);
      if (pinned && step % 2 == 1) {
        std::shared_ptr<TensorBuffer> b = pinned(t.byte_size());
        if (t.byte_size() > 0) std::memcpy(b->data(), t.raw_data(), t.byte_size());
        t = *Tensor::Wrap(d, t.shape(), b);
      }
      parts.push_back(Element(t));
    }
    parts.push_back(Element(Tensor::StringScalar("host")));
    return Element::Tuple(std::move(parts));
  }

 private:
  int replicas_, steps_;
  int64_t rows_;
  TensorAllocator pinned_;
  int next_ = 0;
};

TEST(GpuPrefetcherTest, DeviceContentsEqualHostContentsForEveryDtype) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<DeviceMemory> cuda = Cuda();
  ASSERT_NE(cuda, nullptr);
  const int replicas = std::min(cuda->num_devices(), 2);
  DevicePrefetchOptions options;
  options.buffer_size = 2;
  for (int r = 0; r < replicas; ++r) options.replicas.push_back(ReplicaPlacement{cuda, r});
  TensorAllocator pinned = PinnedReceiveAllocator(cuda);
  absl::StatusOr<std::unique_ptr<StepSource>> source = DevicePrefetcher::Wrap(
      std::make_unique<EveryDtypeSource>(replicas, 8, 1000, pinned), options);
  ASSERT_TRUE(source.ok()) << source.status();
  for (int s = 0; s < 8; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE((*source)->GetNextStep(&step, &end).ok());
    ASSERT_FALSE(end);
    for (int r = 0; r < replicas; ++r) {
      std::vector<Tensor> got = step[static_cast<size_t>(r)].Flatten();
      std::vector<Tensor> want = EveryDtypeSource::Make(s, r, 1000, nullptr).Flatten();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE(testing::Message()
                     << "step " << s << " replica " << r << " " << DTypeName(want[i].dtype()));
        if (want[i].dtype() == DType::kString) {
          EXPECT_EQ(DeviceBufferOf(got[i]), nullptr);
          EXPECT_TRUE(got[i].Equals(want[i]));
          continue;
        }
        const DeviceTensorBuffer* d = DeviceBufferOf(got[i]);
        ASSERT_NE(d, nullptr);
        EXPECT_EQ(d->space(), MemorySpace::kDevice);
        EXPECT_EQ(d->device(), r);
        EXPECT_TRUE(d->ReadyEvent()->IsReady());
        absl::StatusOr<Tensor> host = CopyTensorToHost(got[i]);
        ASSERT_TRUE(host.ok()) << host.status();
        EXPECT_TRUE(host->Equals(want[i]));
      }
    }
  }
}

// Large steps (64 MiB per replica) so that copies take long enough for a premature hand-out to
// show: every step handed out has its event complete and exactly its own bytes, and steps the
// trainer still holds are not overwritten by later ones.
class BigSource : public StepSource {
 public:
  static constexpr int64_t kElems = 16 << 20;  // uint32 x 16 Mi = 64 MiB
  explicit BigSource(int steps) : steps_(steps) {}
  absl::Status GetNextStep(std::vector<Element>* out, bool* end_of_data) override {
    *end_of_data = next_ == steps_;
    if (*end_of_data) return absl::OkStatus();
    Tensor t = Tensor::Allocate(DType::kUInt32, Shape({kElems}));
    uint32_t* p = t.mutable_data<uint32_t>();
    for (int64_t i = 0; i < kElems; ++i) p[i] = static_cast<uint32_t>(next_ * 1000003 + i);
    *out = {Element(t)};
    ++next_;
    return absl::OkStatus();
  }
  static bool Check(const Tensor& host, int step) {
    const uint32_t* p = host.data<uint32_t>();
    for (int64_t i = 0; i < kElems; ++i) {
      if (p[i] != static_cast<uint32_t>(step * 1000003 + i)) return false;
    }
    return true;
  }

 private:
  int steps_;
  int next_ = 0;
};

TEST(GpuPrefetcherTest, TheRingNeverHandsOutABufferStillBeingWritten) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<DeviceMemory> cuda = Cuda();
  ASSERT_NE(cuda, nullptr);
  DevicePrefetchOptions options;
  options.buffer_size = 2;
  options.replicas.push_back(ReplicaPlacement{cuda, 0});
  absl::StatusOr<std::unique_ptr<StepSource>> source =
      DevicePrefetcher::Wrap(std::make_unique<BigSource>(12), options);
  ASSERT_TRUE(source.ok()) << source.status();
  std::vector<std::pair<int, Tensor>> held;
  for (int s = 0; s < 12; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE((*source)->GetNextStep(&step, &end).ok());
    const Tensor& t = step[0].leaf();
    const DeviceTensorBuffer* d = DeviceBufferOf(t);
    ASSERT_NE(d, nullptr);
    // Complete at hand-out: querying the event does not wait.
    EXPECT_TRUE(d->ReadyEvent()->IsReady()) << "step " << s;
    absl::StatusOr<Tensor> host = CopyTensorToHost(t);
    ASSERT_TRUE(host.ok());
    EXPECT_TRUE(BigSource::Check(*host, s)) << "step " << s << " has bytes of another step";
    if (s % 4 == 0) held.emplace_back(s, t);  // keep some steps while later ones arrive
  }
  for (const auto& [s, t] : held) {
    absl::StatusOr<Tensor> host = CopyTensorToHost(t);
    ASSERT_TRUE(host.ok());
    EXPECT_TRUE(BigSource::Check(*host, s)) << "held step " << s << " was overwritten";
  }
  // Destroying the prefetcher with copies in flight is clean; held buffers stay valid.
  source->reset();
  for (const auto& [s, t] : held) {
    absl::StatusOr<Tensor> host = CopyTensorToHost(t);
    ASSERT_TRUE(host.ok());
    EXPECT_TRUE(BigSource::Check(*host, s));
  }
}

// Small steps on a real device: several small tensors per replica (pageable and pinned), 400
// steps with a deep queue, so that small steps share batch slots and several leave in one copy;
// every value read back from the device equals what the source made, and there are fewer
// copies than replica elements.
TEST(GpuPrefetcherTest, SmallStepsLeaveTogetherInFewCopiesWithTheirValues) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<DeviceMemory> cuda = Cuda();
  ASSERT_NE(cuda, nullptr);
  const int replicas = std::min(cuda->num_devices(), 2);
  DevicePrefetchOptions options;
  options.buffer_size = 16;
  for (int r = 0; r < replicas; ++r) options.replicas.push_back(ReplicaPlacement{cuda, r});
  TensorAllocator pinned = PinnedReceiveAllocator(cuda);
  constexpr int kSteps = 400;
  absl::StatusOr<std::unique_ptr<StepSource>> wrapped = DevicePrefetcher::Wrap(
      std::make_unique<EveryDtypeSource>(replicas, kSteps, 4, pinned), options);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  StepSource* source = wrapped->get();
  for (int s = 0; s < kSteps; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    ASSERT_FALSE(end);
    for (int r = 0; r < replicas; ++r) {
      std::vector<Tensor> got = step[static_cast<size_t>(r)].Flatten();
      std::vector<Tensor> want = EveryDtypeSource::Make(s, r, 4, nullptr).Flatten();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        if (want[i].dtype() == DType::kString) continue;
        const DeviceTensorBuffer* d = DeviceBufferOf(got[i]);
        ASSERT_NE(d, nullptr);
        EXPECT_EQ(d->space(), MemorySpace::kDevice);
        EXPECT_TRUE(d->ReadyEvent()->IsReady());
        absl::StatusOr<Tensor> host = CopyTensorToHost(got[i]);
        ASSERT_TRUE(host.ok()) << host.status();
        ASSERT_TRUE(host->Equals(want[i])) << "step " << s << " replica " << r << " leaf " << i;
      }
    }
  }
  DevicePrefetcher::Stats stats = dynamic_cast<DevicePrefetcher*>(source)->stats();
  EXPECT_EQ(stats.batched_steps, int64_t{kSteps} * replicas);
  EXPECT_LE(stats.copies, int64_t{kSteps} * replicas);
  std::printf("small steps: %lld replica elements in %lld host-to-device copies\n",
              static_cast<long long>(stats.batched_steps), static_cast<long long>(stats.copies));
}

TEST(GpuStrategyTest, MirroredStrategyOnGpusYieldsDeviceTensors) {
  SKIP_WITHOUT_GPU();
  absl::StatusOr<MirroredStrategy> strategy = MirroredStrategy::Create({"GPU:0"});
  ASSERT_TRUE(strategy.ok());
  ASSERT_FALSE(strategy->devices()[0].host_memory);
  absl::StatusOr<Dataset> ds =
      Dataset::Parse("from_tensor_slices([1, 2, 3, 4]).repeat(2).batch(2)");
  ASSERT_TRUE(ds.ok());
  absl::StatusOr<DistributedDataset> dist = strategy->ExperimentalDistributeDataset(*ds);
  ASSERT_TRUE(dist.ok()) << dist.status();
  absl::StatusOr<DistributedIterator> it = dist->MakeIterator();
  ASSERT_TRUE(it.ok());
  for (int s = 0; s < 4; ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    ASSERT_TRUE(x.ok()) << x.status();
    const Tensor& t = x->values()[0].leaf();
    const DeviceTensorBuffer* d = DeviceBufferOf(t);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->space(), MemorySpace::kDevice);
    absl::StatusOr<Tensor> host = CopyTensorToHost(t);
    ASSERT_TRUE(host.ok());
    const int32_t first = 1 + 2 * (s % 2);
    EXPECT_TRUE(host->Equals(Tensor::FromVector<int32_t>({first, first + 1})));
  }
  EXPECT_TRUE(absl::IsOutOfRange(it->GetNext().status()));
}

#if SLUICE_EXPECT_CUDA
// Steps 0, 1, 2, ...: one float32 tensor of 1 MiB, every element equal to the step number.
class StepNumberSource : public StepSource {
 public:
  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override {
    std::vector<float> values(size_t{1} << 18, static_cast<float>(next_++));
    replicas->assign(1, Element(Tensor::FromVector(values)));
    *end_of_data = false;
    return absl::OkStatus();
  }

 private:
  int next_ = 0;
};

// A host function enqueued on a stream: the stream stops there until the test opens the gate.
void CUDART_CB WaitForGate(void* gate) {
  auto* open = static_cast<std::atomic<bool>*>(gate);
  while (!open->load()) std::this_thread::yield();
}

TEST(GpuPrefetcherTest, ASlotIsRefilledOnlyAfterTheConsumersStreamIsDoneWithIt) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<DeviceMemory> cuda = Cuda();
  ASSERT_NE(cuda, nullptr);
  DevicePrefetchOptions options;
  options.buffer_size = 1;
  options.replicas = {ReplicaPlacement{cuda, 0}};
  absl::StatusOr<std::unique_ptr<StepSource>> wrapped =
      DevicePrefetcher::Wrap(std::make_unique<StepNumberSource>(), options);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  StepSource* source = wrapped->get();
  auto* prefetcher = dynamic_cast<DevicePrefetcher*>(source);
  ASSERT_NE(prefetcher, nullptr);

  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  std::atomic<bool> gate{false};
  std::vector<float> read(size_t{1} << 18, -1.0f);
  {
    std::vector<Element> step0;
    bool end = false;
    ASSERT_TRUE(source->GetNextStep(&step0, &end).ok());
    const Tensor& t = step0[0].leaf();
    const DeviceTensorBuffer* d = DeviceBufferOf(t);
    ASSERT_NE(d, nullptr);
    // The consumer's "kernel": held at the gate, then reads step 0's bytes.
    ASSERT_EQ(cudaLaunchHostFunc(consumer, &WaitForGate, &gate), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(read.data(), t.raw_data(), t.byte_size(), cudaMemcpyDeviceToHost,
                              consumer),
              cudaSuccess);
    ASSERT_TRUE(d->ReleaseAfter(consumer).ok());
  }  // step 0 dropped while its reader has not run
  std::vector<Element> step1;
  bool end = false;
  ASSERT_TRUE(source->GetNextStep(&step1, &end).ok());
  // Step 2 would go into step 0's slot. Without the fence its copy would be enqueued now; give
  // it the chance (bounded), then open the gate.
  std::thread fetch2([&] {
    std::vector<Element> step2;
    bool end2 = false;
    EXPECT_TRUE(source->GetNextStep(&step2, &end2).ok());
  });
  for (int i = 0; i < 200 && prefetcher->stats().copies < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  gate.store(true);
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  fetch2.join();
  for (float v : read) {
    ASSERT_EQ(v, 0.0f);
  }
  cudaStreamDestroy(consumer);
}
#endif  // SLUICE_EXPECT_CUDA

}  // namespace
}  // namespace sluice
