// Device buffers go back to the prefetch ring only after the consumer's stream is done with
// them (DeviceTensorBuffer::ReleaseAfter, what Python's __dlpack__(stream=) does): a consumer
// "kernel" still queued on its stream when the step's last Tensor is dropped reads that step's
// bytes, never the next step's. The "device" is host memory whose consumer streams are fakes:
// a kernel runs only when an event recorded after it is waited for (or the test drains the
// stream), so a ring that did not wait would visibly hand the slot to the next step first.
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/device_prefetcher.h"
#include "core/device/device_memory.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

// A consumer's stream: kernels run in launch order, lazily (when an event after them is waited
// for, or on Drain()). Thread-safe.
class FakeStream {
 public:
  void Launch(std::function<void()> kernel) {
    absl::MutexLock lock(&mu_);
    kernels_.push_back(std::move(kernel));
  }
  int64_t launched() {
    absl::MutexLock lock(&mu_);
    return ran_ + static_cast<int64_t>(kernels_.size());
  }
  int64_t ran() {
    absl::MutexLock lock(&mu_);
    return ran_;
  }
  // Runs the kernels launched before the `mark`-th.
  void RunUpTo(int64_t mark) {
    absl::MutexLock lock(&mu_);
    while (ran_ < mark && !kernels_.empty()) {
      kernels_.front()();
      kernels_.pop_front();
      ++ran_;
    }
  }
  void Drain() { RunUpTo(launched()); }

 private:
  absl::Mutex mu_;
  std::deque<std::function<void()>> kernels_ ABSL_GUARDED_BY(mu_);
  int64_t ran_ ABSL_GUARDED_BY(mu_) = 0;
};

class StreamEvent : public DeviceEvent {
 public:
  StreamEvent(FakeStream* stream, int64_t mark) : stream_(stream), mark_(mark) {}
  absl::Status Record() override { return absl::OkStatus(); }
  bool IsReady() override { return stream_->ran() >= mark_; }
  absl::Status Wait() override {
    stream_->RunUpTo(mark_);  // the "device" finishes the work before the event
    return absl::OkStatus();
  }

 private:
  FakeStream* stream_;
  int64_t mark_;
};

// Host memory as the device, with FakeStreams as the consumers' streams.
class StreamedHostMemory : public HostDeviceMemory {
 public:
  absl::StatusOr<std::unique_ptr<DeviceEvent>> RecordOnStream(int /*device*/,
                                                              void* stream) override {
    auto* s = static_cast<FakeStream*>(stream);
    ++recorded;
    return std::unique_ptr<DeviceEvent>(std::make_unique<StreamEvent>(s, s->launched()));
  }
  std::atomic<int> recorded{0};
};

// Steps 0, 1, 2, ...: one float32 tensor of `n` elements, all equal to the step number.
class CountingSource : public StepSource {
 public:
  explicit CountingSource(int64_t n) : n_(n) {}
  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override {
    std::vector<float> values(static_cast<size_t>(n_), static_cast<float>(next_++));
    replicas->assign(1, Element(Tensor::FromVector(values)));
    *end_of_data = false;
    return absl::OkStatus();
  }

 private:
  int64_t n_;
  int next_ = 0;
};

std::unique_ptr<StepSource> Prefetcher(std::shared_ptr<DeviceMemory> memory, int64_t n) {
  DevicePrefetchOptions options;
  options.replicas = {ReplicaPlacement{std::move(memory), 0}};
  options.buffer_size = 1;
  absl::StatusOr<std::unique_ptr<StepSource>> source =
      DevicePrefetcher::Wrap(std::make_unique<CountingSource>(n), options);
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? *std::move(source) : nullptr;
}

// Runs the scenario: the consumer queues a kernel reading step 0, says ReleaseAfter (or not)
// and drops step 0; steps 1 and 2 are fetched while it holds them (one of them goes into step
// 0's slot, the only free one). Returns what the kernel read.
std::vector<float> KernelReadOfStep0(bool release_after) {
  auto memory = std::make_shared<StreamedHostMemory>();
  FakeStream stream;
  std::unique_ptr<StepSource> source = Prefetcher(memory, 256);
  std::vector<float> read;
  if (source == nullptr) return read;
  std::vector<Element> step0, step1, step2;
  bool end = false;
  EXPECT_TRUE(source->GetNextStep(&step0, &end).ok());
  Tensor t = step0[0].leaf();
  const DeviceTensorBuffer* d = DeviceBufferOf(t);
  EXPECT_NE(d, nullptr);
  if (d == nullptr) return read;
  const float* bytes = t.data<float>();
  const int64_t n = t.num_elements();
  stream.Launch([&read, bytes, n] { read.assign(bytes, bytes + n); });
  if (release_after) {
    EXPECT_TRUE(d->ReleaseAfter(&stream).ok());
  }
  step0.clear();
  t = Tensor();  // the last reference to step 0's slot
  EXPECT_TRUE(source->GetNextStep(&step1, &end).ok());
  EXPECT_TRUE(source->GetNextStep(&step2, &end).ok());
  EXPECT_EQ(step2[0].leaf().data<float>()[0], 2.0f);
  stream.Drain();  // the kernel runs now if the ring did not wait for it
  return read;
}

TEST(DeviceReleaseTest, AKernelStillReadingWhenTheStepDiesSeesThatStepsBytes) {
  for (int run = 0; run < 5; ++run) {
    const std::vector<float> read = KernelReadOfStep0(/*release_after=*/true);
    ASSERT_EQ(read.size(), 256u);
    for (float v : read) {
      ASSERT_EQ(v, 0.0f) << "run " << run;
    }
  }
}

TEST(DeviceReleaseTest, WithoutReleaseAfterTheSlotIsReusedAtOnce) {
  // The control: the same consumer without ReleaseAfter reads a later step's bytes, which is
  // what the test above would see if the ring ignored the fences.
  const std::vector<float> read = KernelReadOfStep0(/*release_after=*/false);
  ASSERT_EQ(read.size(), 256u);
  EXPECT_NE(read[0], 0.0f);
}

TEST(DeviceReleaseTest, FencesOfABufferWithoutARingAreWaitedForBeforeItIsFreed) {
  auto memory = std::make_shared<StreamedHostMemory>();
  FakeStream stream;
  bool ran = false;
  {
    auto storage = *memory->AllocateDevice(0, 64);
    DeviceTensorBuffer buffer(memory, 0, storage, nullptr);
    stream.Launch([&ran] { ran = true; });
    ASSERT_TRUE(buffer.ReleaseAfter(&stream).ok());
    EXPECT_FALSE(ran);
  }
  EXPECT_TRUE(ran);  // the destructor waited for the stream's work before freeing
  EXPECT_EQ(memory->recorded.load(), 1);
}

TEST(DeviceReleaseTest, HostMemoryHasNothingToWaitFor) {
  std::shared_ptr<DeviceMemory> host = HostMemoryAsDevice();
  absl::StatusOr<std::unique_ptr<DeviceEvent>> event = host->RecordOnStream(0, nullptr);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_TRUE((*event)->IsReady());
  EXPECT_TRUE(absl::IsInvalidArgument(host->RecordOnStream(-1, nullptr).status()));
}

}  // namespace
}  // namespace sluice
