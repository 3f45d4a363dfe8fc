#include "client/device_prefetcher.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/read_ahead_source.h"
#include "core/device/cuda_device_memory.h"
#include "core/device/device_memory.h"
#include "core/format/tensor_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/strategy.h"

namespace sluice {
namespace {

// ---------------------------------------------------------------------------------------------
// A DeviceMemory whose "device" is host memory labelled kDevice, with copies that can be
// delayed, so that the tests can see what is in flight:
//   kImmediate: a copy is done before CopyToDeviceAsync returns;
//   kEngine:    a "DMA engine" thread runs the copies in order after random short delays, and
//               events become ready only when the copies before them ran;
//   kGated:     like kEngine, but the engine runs copies only when the test releases them;
//   kBlocking:  CopyToDeviceAsync blocks (mid-copy) until the test releases it.
// It records allocations, which device buffers are alive and which copies are pending, and
// flags a copy into a freed buffer.
class FakeDeviceMemory : public DeviceMemory,
                         public std::enable_shared_from_this<FakeDeviceMemory> {
 public:
  enum class Mode { kImmediate, kEngine, kGated, kBlocking };

  explicit FakeDeviceMemory(Mode mode = Mode::kImmediate, bool prefers_pinned = true)
      : mode_(mode), prefers_pinned_(prefers_pinned) {
    if (mode_ == Mode::kEngine || mode_ == Mode::kGated) {
      engine_ = std::thread([this] { Engine(); });
    }
  }
  ~FakeDeviceMemory() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      released_ = 1 << 30;
    }
    if (engine_.joinable()) engine_.join();
  }

  std::string name() const override { return "fake"; }
  int num_devices() const override { return 4; }
  bool device_is_host() const override { return false; }
  bool prefers_pinned_source() const override { return prefers_pinned_; }

  absl::StatusOr<std::shared_ptr<TensorBuffer>> AllocatePinnedHost(size_t bytes) override {
    absl::MutexLock lock(&mu_);
    ++pinned_allocations_;
    return std::shared_ptr<TensorBuffer>(std::make_shared<Buffer>(
        nullptr, -1, MemorySpace::kPinnedHost, TensorBuffer::AllocateHost(bytes)));
  }
  absl::StatusOr<std::shared_ptr<TensorBuffer>> AllocateDevice(int device, size_t bytes) override {
    auto buffer = std::make_shared<Buffer>(this, device, MemorySpace::kDevice,
                                           TensorBuffer::AllocateHost(bytes));
    absl::MutexLock lock(&mu_);
    ++device_allocations_;
    live_[static_cast<const char*>(buffer->data())] = bytes;
    return std::shared_ptr<TensorBuffer>(buffer);
  }

  absl::Status CopyToDeviceAsync(int device, const void* src, void* dst, size_t bytes) override {
    absl::MutexLock lock(&mu_);
    ++copies_;
    if (mode_ == Mode::kImmediate || mode_ == Mode::kBlocking) {
      if (mode_ == Mode::kBlocking) {
        ++blocked_;
        mu_.Await(absl::Condition(
            +[](FakeDeviceMemory* m)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu_) { return m->released_ > 0; },
            this));
        --released_;
        --blocked_;
      }
      Execute(Copy{device, src, dst, bytes, 0});
      return absl::OkStatus();
    }
    pending_.push_back(Copy{device, src, dst, bytes, ++enqueued_});
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<DeviceEvent>> CreateEvent(int device) override {
    return std::unique_ptr<DeviceEvent>(std::make_unique<Event>(this, device));
  }
  absl::Status CopyToHost(int, const void* src, void* dst, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }

  // Lets `n` gated or blocking copies run.
  void Release(int n) {
    absl::MutexLock lock(&mu_);
    released_ += n;
  }
  // Blocks until a kBlocking copy is waiting (bounded: fails the test after ~10 s).
  bool WaitUntilBlocked() {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(
                                    +[](FakeDeviceMemory* m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu_) {
                                      return m->blocked_ > 0;
                                    },
                                    this),
                                absl::Seconds(10));
  }
  // Pending (enqueued, not yet run) copies into [p, p + n).
  int PendingInto(const void* p, size_t n) {
    absl::MutexLock lock(&mu_);
    int count = 0;
    const char* b = static_cast<const char*>(p);
    for (const Copy& c : pending_) {
      const char* d = static_cast<const char*>(c.dst);
      if (d < b + n && b < d + c.bytes) ++count;
    }
    return count;
  }
  int pending() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(pending_.size());
  }
  int64_t device_allocations() {
    absl::MutexLock lock(&mu_);
    return device_allocations_;
  }
  int64_t pinned_allocations() {
    absl::MutexLock lock(&mu_);
    return pinned_allocations_;
  }
  int64_t copies() {
    absl::MutexLock lock(&mu_);
    return copies_;
  }
  // Blocks until at least `n` copies were enqueued (bounded: false after ~10 s).
  bool WaitForCopies(int64_t n) {
    struct Arg {
      FakeDeviceMemory* m;
      int64_t n;
    } arg{this, n};
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(
                                    +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                      return a->m->copies_ >= a->n;
                                    },
                                    &arg),
                                absl::Seconds(10));
  }
  size_t live_device_buffers() {
    absl::MutexLock lock(&mu_);
    return live_.size();
  }
  int64_t copies_into_freed_memory() {
    absl::MutexLock lock(&mu_);
    return bad_copies_;
  }

 private:
  struct Copy {
    int device;
    const void* src;
    void* dst;
    size_t bytes;
    int64_t seq;
  };

  class Buffer : public TensorBuffer {
   public:
    Buffer(FakeDeviceMemory* owner, int device, MemorySpace space,
           std::shared_ptr<TensorBuffer> host)
        : owner_(owner), device_(device), space_(space), host_(std::move(host)) {}
    ~Buffer() override {
      if (owner_ != nullptr) owner_->Freed(host_->data());
    }
    void* data() override { return host_->data(); }
    size_t size() const override { return host_->size(); }
    MemorySpace space() const override { return space_; }
    int device() const override { return space_ == MemorySpace::kDevice ? device_ : -1; }

   private:
    FakeDeviceMemory* owner_;
    int device_;
    MemorySpace space_;
    std::shared_ptr<TensorBuffer> host_;
  };

  class Event : public DeviceEvent {
   public:
    Event(FakeDeviceMemory* owner, int device) : owner_(owner), device_(device) {}
    absl::Status Record() override {
      absl::MutexLock lock(&owner_->mu_);
      seq_ = owner_->enqueued_;
      return absl::OkStatus();
    }
    bool IsReady() override {
      absl::MutexLock lock(&owner_->mu_);
      return owner_->completed_ >= seq_;
    }
    absl::Status Wait() override {
      absl::MutexLock lock(&owner_->mu_);
      while (owner_->completed_ < seq_) owner_->done_.Wait(&owner_->mu_);
      return absl::OkStatus();
    }

   private:
    FakeDeviceMemory* owner_;
    int device_;
    int64_t seq_ = 0;
  };

  void Freed(void* p) {
    absl::MutexLock lock(&mu_);
    live_.erase(static_cast<const char*>(p));
  }

  void Execute(const Copy& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // The whole destination must lie inside one live device buffer.
    const char* dst = static_cast<const char*>(c.dst);
    auto it = live_.upper_bound(dst);
    bool live = false;
    if (it != live_.begin()) {
      --it;
      live = dst + c.bytes <= it->first + it->second;
    }
    if (!live) {
      ++bad_copies_;
      return;
    }
    std::memcpy(c.dst, c.src, c.bytes);
  }

  void Engine() {
    std::mt19937 rng(42);
    absl::MutexLock lock(&mu_);
    for (;;) {
      mu_.Await(absl::Condition(
          +[](FakeDeviceMemory* m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu_) {
            return m->stop_ ||
                   (!m->pending_.empty() && (m->mode_ == Mode::kEngine || m->released_ > 0));
          },
          this));
      if (pending_.empty() && stop_) return;
      if (pending_.empty()) continue;
      Copy c = pending_.front();
      if (mode_ == Mode::kGated) --released_;
      if (mode_ == Mode::kEngine) {
        int delay_us = static_cast<int>(rng() % 300);
        mu_.Unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
        mu_.Lock();
      }
      Execute(c);
      pending_.pop_front();
      completed_ = c.seq;
      done_.SignalAll();
    }
  }

  const Mode mode_;
  const bool prefers_pinned_;
  absl::Mutex mu_;
  absl::CondVar done_;
  std::deque<Copy> pending_ ABSL_GUARDED_BY(mu_);
  int64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t released_ ABSL_GUARDED_BY(mu_) = 0;
  int blocked_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::map<const char*, size_t> live_ ABSL_GUARDED_BY(mu_);
  int64_t device_allocations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pinned_allocations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t copies_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bad_copies_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread engine_;
};

// ---------------------------------------------------------------------------------------------
// A StepSource yielding `steps` steps of `replicas` replicas, then the end of data or `error`.
// Replica r of step s is (float32[rows] of s*100 + r + i/1000, int64 scalar s, string "s/r"),
// with rows = rows_of(s). Called from the prefetcher's thread: counters are atomic.
class ScriptedSource : public StepSource {
 public:
  struct Options {
    int steps = 10;
    int replicas = 2;
    absl::Status error;  // after the steps; OK: end of data
    std::function<int(int)> rows_of = [](int) { return 8; };
    // Allocates the float tensors' buffers (pinned memory, say); empty: host memory.
    std::function<std::shared_ptr<TensorBuffer>(size_t)> allocator;
  };
  explicit ScriptedSource(Options options, std::shared_ptr<std::atomic<int>> pulls = nullptr,
                          std::shared_ptr<std::atomic<int>> padded_pulls = nullptr)
      : options_(std::move(options)),
        pulls_(pulls ? pulls : std::make_shared<std::atomic<int>>(0)),
        padded_pulls_(padded_pulls ? padded_pulls : std::make_shared<std::atomic<int>>(0)) {}

  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override {
    ++*pulls_;
    if (next_ >= options_.steps) {
      if (!options_.error.ok()) return options_.error;
      *end_of_data = true;
      return absl::OkStatus();
    }
    replicas->clear();
    for (int r = 0; r < options_.replicas; ++r) replicas->push_back(Make(next_, r));
    ++next_;
    *end_of_data = false;
    return absl::OkStatus();
  }
  absl::Status GetNextStepPadded(std::vector<Element>* replicas, bool* end_of_data) override {
    ++*padded_pulls_;
    return GetNextStep(replicas, end_of_data);
  }

  Element Make(int s, int r) const {
    const int rows = options_.rows_of(s);
    std::vector<float> values(static_cast<size_t>(rows));
    for (int i = 0; i < rows; ++i) values[static_cast<size_t>(i)] = Value(s, r, i);
    Tensor f;
    if (options_.allocator) {
      std::shared_ptr<TensorBuffer> b = options_.allocator(values.size() * sizeof(float));
      std::memcpy(b->data(), values.data(), values.size() * sizeof(float));
      f = *Tensor::Wrap(DType::kFloat32, Shape({rows}), b);
    } else {
      f = Tensor::FromVector(values);
    }
    return Element::Tuple(
        {Element(f), Element(Tensor::Scalar<int64_t>(s)),
         Element(Tensor::StringScalar(std::to_string(s) + "/" + std::to_string(r)))});
  }
  static float Value(int s, int r, int i) {
    return static_cast<float>(s * 100 + r) + static_cast<float>(i) / 1000.0f;
  }

  std::shared_ptr<std::atomic<int>> pulls() const { return pulls_; }

 private:
  Options options_;
  std::shared_ptr<std::atomic<int>> pulls_;
  std::shared_ptr<std::atomic<int>> padded_pulls_;
  int next_ = 0;
};

DevicePrefetchOptions Placed(std::shared_ptr<DeviceMemory> memory, int replicas, int64_t depth) {
  DevicePrefetchOptions o;
  o.buffer_size = depth;
  for (int r = 0; r < replicas; ++r) o.replicas.push_back(ReplicaPlacement{memory, r});
  return o;
}

// Placed, with small steps neither batched nor pinned tensors staged: exactly one copy per
// replica per step (of ScriptedSource's pageable tensors), for tests that count copies in
// flight.
DevicePrefetchOptions PlacedOneCopyPerStep(std::shared_ptr<DeviceMemory> memory, int replicas,
                                           int64_t depth) {
  DevicePrefetchOptions o = Placed(std::move(memory), replicas, depth);
  o.stage_below_bytes = 0;
  return o;
}

std::unique_ptr<StepSource> WrapOrDie(std::unique_ptr<StepSource> inner,
                                      DevicePrefetchOptions options) {
  absl::StatusOr<std::unique_ptr<StepSource>> s =
      DevicePrefetcher::Wrap(std::move(inner), std::move(options));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

DevicePrefetcher* AsPrefetcher(StepSource* s) { return dynamic_cast<DevicePrefetcher*>(s); }

// Checks replica r's element of step s: values, where the tensors live, nothing still being
// written into them.
void ExpectStep(const std::vector<Element>& step, int s, int rows, FakeDeviceMemory* fake) {
  for (size_t r = 0; r < step.size(); ++r) {
    SCOPED_TRACE(testing::Message() << "step " << s << " replica " << r);
    std::vector<Tensor> leaves = step[r].Flatten();
    ASSERT_EQ(leaves.size(), 3u);
    const Tensor& f = leaves[0];
    ASSERT_EQ(f.shape(), Shape({rows}));
    const DeviceTensorBuffer* d = DeviceBufferOf(f);
    ASSERT_NE(d, nullptr) << "a float tensor was not put on the device";
    EXPECT_EQ(d->ordinal(), static_cast<int>(r));
    EXPECT_EQ(f.buffer()->space(), MemorySpace::kDevice);
    EXPECT_EQ(f.buffer()->device(), static_cast<int>(r));
    ASSERT_NE(d->ReadyEvent(), nullptr);
    EXPECT_TRUE(d->ReadyEvent()->IsReady()) << "handed out before its copy completed";
    if (fake != nullptr) {
      EXPECT_EQ(fake->PendingInto(f.raw_data(), f.byte_size()), 0);
    }
    for (int i = 0; i < rows; ++i) {
      ASSERT_EQ(f.data<float>()[i], ScriptedSource::Value(s, static_cast<int>(r), i)) << i;
    }
    ASSERT_NE(DeviceBufferOf(leaves[1]), nullptr);
    EXPECT_EQ(*leaves[1].data<int64_t>(), s);
    // Strings stay on the host, as TF keeps them.
    EXPECT_EQ(leaves[2].dtype(), DType::kString);
    EXPECT_EQ(leaves[2].string_at(0), std::to_string(s) + "/" + std::to_string(r));
  }
}

// ---------------------------------------------------------------------------------------------

TEST(DevicePrefetcherTest, DeliversEveryStepInOrderOnItsReplicasDevice) {
  for (int64_t depth : {1, 2, 5}) {
    SCOPED_TRACE(depth);
    auto fake = std::make_shared<FakeDeviceMemory>();
    ScriptedSource::Options so;
    so.steps = 20;
    auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), Placed(fake, 2, depth));
    ASSERT_NE(AsPrefetcher(source.get()), nullptr);
    for (int s = 0; s < 20; ++s) {
      std::vector<Element> step;
      bool end = true;
      ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
      ASSERT_FALSE(end);
      ASSERT_EQ(step.size(), 2u);
      ExpectStep(step, s, 8, fake.get());
    }
    std::vector<Element> step;
    bool end = false;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    EXPECT_TRUE(end);
    // The end of data repeats.
    end = false;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    EXPECT_TRUE(end);
    // Every numeric tensor of a replica travels in one copy from its pinned staging buffer,
    // and small steps share copies: at most one per replica per step, at least one per
    // `depth` steps (a group never holds more than the queue).
    EXPECT_LE(fake->copies(), 20 * 2);
    EXPECT_GE(fake->copies(), 2 * ((20 + depth - 1) / depth));
    EXPECT_EQ(AsPrefetcher(source.get())->stats().batched_steps, 20 * 2);
    EXPECT_EQ(AsPrefetcher(source.get())->stats().copies, fake->copies());
  }
  // Without batching: exactly one copy per replica per step.
  auto fake = std::make_shared<FakeDeviceMemory>();
  ScriptedSource::Options so;
  so.steps = 20;
  auto source =
      WrapOrDie(std::make_unique<ScriptedSource>(so), PlacedOneCopyPerStep(fake, 2, 3));
  for (int s = 0; s < 20; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    ExpectStep(step, s, 8, fake.get());
  }
  EXPECT_EQ(fake->copies(), 20 * 2);
  EXPECT_EQ(AsPrefetcher(source.get())->stats().batched_steps, 0);
}

TEST(DevicePrefetcherTest, ReusesItsBuffersInsteadOfAllocatingPerStep) {
  for (int64_t depth : {1, 3}) {
    SCOPED_TRACE(depth);
    auto fake = std::make_shared<FakeDeviceMemory>();
    ScriptedSource::Options so;
    so.steps = 60;
    so.replicas = 1;
    auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), Placed(fake, 1, depth));
    std::set<const void*> seen;
    for (int s = 0; s < 60; ++s) {
      std::vector<Element> step;
      bool end = true;
      ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
      ExpectStep(step, s, 8, fake.get());
      seen.insert(step[0].Flatten()[0].buffer()->data());
      // `step` is dropped here, before the next call: its slot goes back to the ring.
    }
    // The trainer holds one step while `depth` more are prefetched: depth + 1 slots at most,
    // each allocated once (device and pinned staging), then reused.
    EXPECT_LE(seen.size(), static_cast<size_t>(depth + 1));
    DevicePrefetcher::Stats stats = AsPrefetcher(source.get())->stats();
    EXPECT_LE(stats.slots, depth + 1);
    EXPECT_EQ(stats.device_allocations, stats.slots);
    EXPECT_EQ(stats.pinned_allocations, stats.slots);
    EXPECT_EQ(fake->device_allocations(), stats.slots);
  }
}

TEST(DevicePrefetcherTest, HeldStepsAreNeverOverwrittenAndTheRingGrowsInstead) {
  auto fake = std::make_shared<FakeDeviceMemory>(FakeDeviceMemory::Mode::kEngine);
  ScriptedSource::Options so;
  so.steps = 12;
  auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), Placed(fake, 2, 2));
  std::vector<std::vector<Element>> held;
  for (int s = 0; s < 12; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    held.push_back(std::move(step));
  }
  // Every step is intact although the trainer kept them all: no slot was reused under it.
  for (int s = 0; s < 12; ++s) ExpectStep(held[static_cast<size_t>(s)], s, 8, fake.get());
  source.reset();
  // The trainer's buffers outlive the prefetcher, and are freed with the last reference.
  for (int s = 0; s < 12; ++s) ExpectStep(held[static_cast<size_t>(s)], s, 8, fake.get());
  held.clear();
  EXPECT_EQ(fake->live_device_buffers(), 0u);
  EXPECT_EQ(fake->copies_into_freed_memory(), 0);
}

TEST(DevicePrefetcherTest, GrowsASlotWhenABiggerStepComesAndKeepsItAfterwards) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  ScriptedSource::Options so;
  so.steps = 8;
  so.replicas = 1;
  so.rows_of = [](int s) { return s == 3 ? 5000 : (s == 6 ? 2 : 8); };
  // One slot per step (batch slots are large enough for all of these steps).
  auto source =
      WrapOrDie(std::make_unique<ScriptedSource>(so), PlacedOneCopyPerStep(fake, 1, 1));
  for (int s = 0; s < 8; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    ExpectStep(step, s, so.rows_of(s), fake.get());
  }
  DevicePrefetcher::Stats stats = AsPrefetcher(source.get())->stats();
  // At most two slots (depth 1 + the one held), allocated once each, and at most one
  // allocation more: a slot grown once for step 3 (when both slots already held an 8-row step;
  // when the trainer released each step before the next was placed, the second slot is first
  // allocated for step 3 at its size and nothing grows); the smaller steps after it fit.
  EXPECT_LE(stats.slots, 2);
  EXPECT_GE(stats.device_allocations, stats.slots);
  EXPECT_LE(stats.device_allocations, stats.slots + 1);
}

TEST(DevicePrefetcherTest, NeverPullsMoreThanItsDepthAhead) {
  for (int64_t depth : {1, 3}) {
    SCOPED_TRACE(depth);
    auto fake = std::make_shared<FakeDeviceMemory>();
    ScriptedSource::Options so;
    so.steps = 100;
    auto inner = std::make_unique<ScriptedSource>(so);
    std::shared_ptr<std::atomic<int>> pulls = inner->pulls();
    auto source = WrapOrDie(std::move(inner), Placed(fake, 2, depth));
    // Nothing is pulled before the first call.
    EXPECT_EQ(pulls->load(), 0);
    for (int taken = 1; taken <= 4; ++taken) {
      std::vector<Element> step;
      bool end = true;
      ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
      const int expected = taken + static_cast<int>(depth);
      for (int i = 0; i < 10000 && pulls->load() < expected; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ASSERT_EQ(pulls->load(), expected);
      // Give an over-eager thread the chance to pull one more.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_EQ(pulls->load(), expected) << "pulled beyond the buffer";
    }
  }
}

TEST(DevicePrefetcherTest, NeverHandsOutABufferStillBeingWritten) {
  // Copies complete asynchronously after random delays; every step handed out must already be
  // complete, with nothing pending into its buffers, for 200 steps.
  auto fake = std::make_shared<FakeDeviceMemory>(FakeDeviceMemory::Mode::kEngine);
  ScriptedSource::Options so;
  so.steps = 200;
  so.rows_of = [](int s) { return 1 + (s * 37) % 300; };
  auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), Placed(fake, 2, 3));
  for (int s = 0; s < 200; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    ExpectStep(step, s, so.rows_of(s), fake.get());
  }
  EXPECT_EQ(fake->copies_into_freed_memory(), 0);
}

TEST(DevicePrefetcherTest, ShutdownInTheMiddleOfACopyWaitsForItThenFreesEverything) {
  auto fake = std::make_shared<FakeDeviceMemory>(FakeDeviceMemory::Mode::kBlocking);
  ScriptedSource::Options so;
  so.steps = 50;
  auto source =
      WrapOrDie(std::make_unique<ScriptedSource>(so), PlacedOneCopyPerStep(fake, 2, 2));
  fake->Release(4);  // the first two steps' copies
  std::vector<Element> first;
  bool end = true;
  ASSERT_TRUE(source->GetNextStep(&first, &end).ok());
  ExpectStep(first, 0, 8, fake.get());
  // The thread is now stuck inside a copy of a later step.
  ASSERT_TRUE(fake->WaitUntilBlocked());
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    source.reset();
    destroyed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(destroyed.load()) << "the prefetcher went away while its copy was running";
  fake->Release(1000);
  destroyer.join();
  EXPECT_TRUE(destroyed.load());
  // The step the trainer holds survived the shutdown; everything else is freed.
  ExpectStep(first, 0, 8, fake.get());
  first.clear();
  EXPECT_EQ(fake->live_device_buffers(), 0u);
  EXPECT_EQ(fake->copies_into_freed_memory(), 0);
}

TEST(DevicePrefetcherTest, ShutdownWithCopiesStillQueuedWaitsForThem) {
  auto fake = std::make_shared<FakeDeviceMemory>(FakeDeviceMemory::Mode::kGated);
  ScriptedSource::Options so;
  so.steps = 50;
  auto source =
      WrapOrDie(std::make_unique<ScriptedSource>(so), PlacedOneCopyPerStep(fake, 2, 3));
  fake->Release(2);  // step 0's two copies
  std::vector<Element> step;
  bool end = true;
  ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
  ExpectStep(step, 0, 8, fake.get());
  step.clear();
  // Steps 1..3 are enqueued on the (gated) copy engine and not done.
  for (int i = 0; i < 10000 && fake->pending() < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(fake->pending(), 6);
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    source.reset();
    destroyed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(destroyed.load()) << "device buffers freed under in-flight copies";
  fake->Release(1000);
  destroyer.join();
  EXPECT_EQ(fake->pending(), 0);
  EXPECT_EQ(fake->live_device_buffers(), 0u);
  EXPECT_EQ(fake->copies_into_freed_memory(), 0);
}

TEST(DevicePrefetcherTest, DestroyedBeforeFirstUseOrMidStreamIsClean) {
  auto fake = std::make_shared<FakeDeviceMemory>(FakeDeviceMemory::Mode::kEngine);
  ScriptedSource::Options so;
  so.steps = 1000;
  { auto unused = WrapOrDie(std::make_unique<ScriptedSource>(so), Placed(fake, 2, 2)); }
  {
    auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), Placed(fake, 2, 4));
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
  }
  EXPECT_EQ(fake->live_device_buffers(), 0u);
  EXPECT_EQ(fake->copies_into_freed_memory(), 0);
}

TEST(DevicePrefetcherTest, FetchToDeviceFalseKeepsTheHostTensorsAsTheyAre) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  ScriptedSource::Options so;
  so.steps = 5;
  // The source's float buffers come from here, so that the test can recognise them.
  std::set<const void*> made;
  absl::Mutex made_mu;
  so.allocator = [&](size_t bytes) {
    std::shared_ptr<TensorBuffer> b = TensorBuffer::AllocateHost(bytes);
    absl::MutexLock lock(&made_mu);
    made.insert(b->data());
    return b;
  };
  auto inner = std::make_unique<ScriptedSource>(so);
  std::shared_ptr<std::atomic<int>> pulls = inner->pulls();
  DevicePrefetchOptions options = Placed(fake, 2, 2);
  options.fetch_to_device = false;
  auto source = WrapOrDie(std::move(inner), options);
  for (int s = 0; s < 5; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    for (size_t r = 0; r < 2; ++r) {
      const Tensor f = step[r].Flatten()[0];
      EXPECT_EQ(DeviceBufferOf(f), nullptr);
      EXPECT_EQ(f.buffer()->space(), MemorySpace::kHost);
      absl::MutexLock lock(&made_mu);
      EXPECT_TRUE(made.count(f.buffer()->data())) << "not the source's own buffer";
      EXPECT_EQ(f.data<float>()[1], ScriptedSource::Value(s, static_cast<int>(r), 1));
    }
  }
  EXPECT_EQ(fake->device_allocations(), 0);
  EXPECT_EQ(fake->pinned_allocations(), 0);
  EXPECT_EQ(fake->copies(), 0);
  // Still prefetched on the host: the source runs ahead to its end without being asked.
  for (int i = 0; i < 10000 && pulls->load() < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(pulls->load(), 6);
}

TEST(DevicePrefetcherTest, BufferSizeZeroReturnsTheInnerSourceItself) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  auto inner = std::make_unique<ScriptedSource>(ScriptedSource::Options{});
  StepSource* raw = inner.get();
  auto source = WrapOrDie(std::move(inner), Placed(fake, 2, 0));
  EXPECT_EQ(source.get(), raw);
  auto bad = DevicePrefetcher::Wrap(std::make_unique<ScriptedSource>(ScriptedSource::Options{}),
                                    Placed(fake, 2, -1));
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_TRUE(
      absl::IsInvalidArgument(DevicePrefetcher::Wrap(nullptr, Placed(fake, 2, 1)).status()));
}

TEST(DevicePrefetcherTest, ErrorsComeAfterTheStepsBeforeThemAndRepeat) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  ScriptedSource::Options so;
  so.steps = 3;
  so.error = absl::DataLossError("corrupt record in /data/x.tfrecord at byte 1234");
  // Depth 5: the error is pulled before the trainer has taken the steps before it.
  auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), Placed(fake, 2, 5));
  for (int s = 0; s < 3; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok()) << s;
    ExpectStep(step, s, 8, fake.get());
  }
  for (int i = 0; i < 2; ++i) {
    std::vector<Element> step;
    bool end = false;
    absl::Status s = source->GetNextStep(&step, &end);
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("x.tfrecord at byte 1234"));
  }
}

TEST(DevicePrefetcherTest, PinnedSourcesAreCopiedFromDirectlyWithoutStaging) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  ScriptedSource::Options so;
  so.steps = 10;
  TensorAllocator pinned = PinnedReceiveAllocator(fake);
  so.allocator = pinned;
  // Every pinned tensor counts as large here.
  auto source =
      WrapOrDie(std::make_unique<ScriptedSource>(so), PlacedOneCopyPerStep(fake, 2, 2));
  for (int s = 0; s < 10; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    ExpectStep(step, s, 8, fake.get());
  }
  DevicePrefetcher::Stats stats = AsPrefetcher(source.get())->stats();
  // The int64 scalar is pageable and is staged; the float tensor, already pinned, is not.
  EXPECT_EQ(stats.pinned_allocations, stats.slots);
  EXPECT_EQ(fake->copies(), 10 * 2 * 2);
}

// Passes `allowed` pulls through to the inner source; a later pull waits until the test allows
// more (bounded: after 10 s it goes on, and the test fails on its counts).
class GatedSource : public StepSource {
 public:
  explicit GatedSource(std::unique_ptr<StepSource> inner) : inner_(std::move(inner)) {}
  void Allow(int n) {
    absl::MutexLock lock(&mu_);
    allowed_ = n;
  }
  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override {
    Gate();
    return inner_->GetNextStep(replicas, end_of_data);
  }
  absl::Status GetNextStepPadded(std::vector<Element>* replicas, bool* end_of_data) override {
    Gate();
    return inner_->GetNextStepPadded(replicas, end_of_data);
  }

 private:
  void Gate() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](GatedSource* g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g->mu_) {
                               return g->pulls_ < g->allowed_;
                             },
                             this),
                         absl::Seconds(10));
    ++pulls_;
  }

  std::unique_ptr<StepSource> inner_;
  absl::Mutex mu_;
  int allowed_ ABSL_GUARDED_BY(mu_) = 0;
  int pulls_ ABSL_GUARDED_BY(mu_) = 0;
};

// Yields the given steps, then the end of data.
class ListSource : public StepSource {
 public:
  explicit ListSource(std::vector<std::vector<Element>> steps) : steps_(std::move(steps)) {}
  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override {
    *end_of_data = next_ == steps_.size();
    if (!*end_of_data) *replicas = steps_[next_++];
    return absl::OkStatus();
  }
  absl::Status GetNextStepPadded(std::vector<Element>* replicas, bool* end_of_data) override {
    return GetNextStep(replicas, end_of_data);
  }

 private:
  std::vector<std::vector<Element>> steps_;
  size_t next_ = 0;
};

TEST(DevicePrefetcherTest, SmallStepsOfSeveralStepsLeaveInOneCopy) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  ScriptedSource::Options so;
  so.steps = 30;
  auto gated = std::make_unique<GatedSource>(std::make_unique<ScriptedSource>(so));
  GatedSource* gate = gated.get();
  gate->Allow(1);
  auto source = WrapOrDie(std::move(gated), Placed(fake, 2, 4));
  std::vector<std::vector<Element>> held(5);
  bool end = true;
  ASSERT_TRUE(source->GetNextStep(&held[0], &end).ok());
  ExpectStep(held[0], 0, 8, fake.get());
  // Step 0 left alone (the trainer was waiting for it): one copy per replica.
  EXPECT_EQ(fake->copies(), 2);
  // Steps 1..4 gather while the trainer is away; the queue is full at 4 and they leave
  // together: one more copy per replica for all four.
  gate->Allow(5);
  ASSERT_TRUE(fake->WaitForCopies(4));
  for (int s = 1; s <= 4; ++s) {
    ASSERT_TRUE(source->GetNextStep(&held[static_cast<size_t>(s)], &end).ok());
    ExpectStep(held[static_cast<size_t>(s)], s, 8, fake.get());
  }
  EXPECT_EQ(fake->copies(), 4);
  // Each replica's steps are views into one device buffer, one after the other at aligned
  // offsets: float32[8] (32 bytes, padded to 64) then the int64 scalar, 128 bytes a step.
  for (size_t r = 0; r < 2; ++r) {
    const void* base = held[0][r].Flatten()[0].buffer()->data();
    for (size_t s = 0; s < 5; ++s) {
      std::vector<Tensor> leaves = held[s][r].Flatten();
      EXPECT_EQ(leaves[0].buffer()->data(), base) << s;
      EXPECT_EQ(leaves[0].buffer_offset(), 128 * s);
      EXPECT_EQ(leaves[1].buffer_offset(), 128 * s + 64);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(leaves[0].raw_data()) % 64, 0u);
    }
  }
  gate->Allow(1000);
  for (int s = 5; s < 30; ++s) {
    std::vector<Element> step;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    ASSERT_FALSE(end);
    ExpectStep(step, s, 8, fake.get());
  }
  std::vector<Element> step;
  ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
  EXPECT_TRUE(end);
  DevicePrefetcher::Stats stats = AsPrefetcher(source.get())->stats();
  EXPECT_EQ(stats.batched_steps, 30 * 2);
  EXPECT_EQ(stats.copies, fake->copies());
  EXPECT_LT(fake->copies(), 30 * 2);
  // Held steps were never overwritten by the later ones.
  for (int s = 0; s < 5; ++s) ExpectStep(held[static_cast<size_t>(s)], s, 8, fake.get());
}

TEST(DevicePrefetcherTest, SmallTensorsOfAStepLeaveInOneCopyAndLargeOnesDirectly) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  TensorAllocator pinned = PinnedReceiveAllocator(fake);
  auto pinned_copy = [&](const Tensor& t) {
    std::shared_ptr<TensorBuffer> b = pinned(t.byte_size());
    std::memcpy(b->data(), t.raw_data(), t.byte_size());
    return *Tensor::Wrap(t.dtype(), t.shape(), b);
  };
  constexpr int64_t kLarge = 100000;  // over the default 64 KiB: copied from where it is
  auto make = [&](int s, bool with_large) {
    std::vector<uint8_t> large(static_cast<size_t>(kLarge));
    for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<uint8_t>(i * 7 + s);
    std::vector<Element> parts = {
        Element(Tensor::FromVector<int32_t>({s, s + 1, s + 2})),  // pageable
        Element(pinned_copy(Tensor::FromVector<float>(std::vector<float>(10, s * 0.5f)))),
        Element(Tensor::Scalar<int64_t>(s)),
        Element(Tensor::StringScalar("host")),
    };
    if (with_large) parts.push_back(Element(pinned_copy(Tensor::FromVector(large))));
    return Element::Tuple(std::move(parts));
  };
  for (bool with_large : {true, false}) {
    SCOPED_TRACE(with_large ? "with a large tensor" : "small tensors only");
    auto memory = std::make_shared<FakeDeviceMemory>();
    std::vector<std::vector<Element>> steps;
    for (int s = 0; s < 4; ++s) steps.push_back({make(s, with_large)});
    auto source =
        WrapOrDie(std::make_unique<ListSource>(steps), Placed(memory, 1, 1));
    for (int s = 0; s < 4; ++s) {
      std::vector<Element> step;
      bool end = true;
      ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
      ASSERT_FALSE(end);
      std::vector<Tensor> got = step[0].Flatten();
      std::vector<Tensor> want = steps[static_cast<size_t>(s)][0].Flatten();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(got[i].Equals(want[i])) << "step " << s << " leaf " << i;
        if (got[i].dtype() == DType::kString) continue;
        ASSERT_NE(DeviceBufferOf(got[i]), nullptr) << i;
        EXPECT_EQ(got[i].buffer()->data(), got[0].buffer()->data()) << "one device buffer";
      }
      // The small tensors side by side at aligned offsets, the large one after them.
      const size_t base = got[0].buffer_offset();
      EXPECT_EQ(got[1].buffer_offset(), base + 64);
      EXPECT_EQ(got[2].buffer_offset(), base + 128);
      if (with_large) {
        EXPECT_EQ(got[4].buffer_offset(), base + 192);
      }
    }
    DevicePrefetcher::Stats stats = AsPrefetcher(source.get())->stats();
    if (with_large) {
      // Per step: the three small tensors in one copy from the staging buffer, the large one
      // straight from its pinned buffer.
      EXPECT_EQ(memory->copies(), 4 * 2);
      EXPECT_EQ(stats.batched_steps, 0);
    } else {
      EXPECT_EQ(memory->copies(), 4);
      EXPECT_EQ(stats.batched_steps, 4);
    }
  }
}

TEST(DevicePrefetcherTest, BatchSlotsAreReusedAndNeverOverwrittenUnderHeldSteps) {
  // Copies complete asynchronously after random delays; slots of 1 KiB hold a few steps each, so
  // the rings move from slot to slot and reuse them while the trainer keeps some steps.
  auto fake = std::make_shared<FakeDeviceMemory>(FakeDeviceMemory::Mode::kEngine);
  ScriptedSource::Options so;
  so.steps = 300;
  so.rows_of = [](int s) { return 1 + (s * 37) % 40; };
  DevicePrefetchOptions options = Placed(fake, 2, 8);
  options.batch_slot_bytes = 1024;
  auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), options);
  std::vector<std::pair<int, std::vector<Element>>> held;
  for (int s = 0; s < 300; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    ExpectStep(step, s, so.rows_of(s), fake.get());
    if (s % 25 == 0) held.emplace_back(s, std::move(step));
  }
  for (const auto& [s, step] : held) ExpectStep(step, s, so.rows_of(s), fake.get());
  DevicePrefetcher::Stats stats = AsPrefetcher(source.get())->stats();
  EXPECT_EQ(stats.batched_steps, 300 * 2);
  EXPECT_LT(stats.slots, 100) << "slots were not reused";
  source.reset();
  for (const auto& [s, step] : held) ExpectStep(step, s, so.rows_of(s), fake.get());
  held.clear();
  EXPECT_EQ(fake->live_device_buffers(), 0u);
  EXPECT_EQ(fake->copies_into_freed_memory(), 0);
}

TEST(DevicePrefetcherTest, HostMemoryDevicesNeedNoStaging) {
  auto fake = std::make_shared<FakeDeviceMemory>(FakeDeviceMemory::Mode::kImmediate,
                                                 /*prefers_pinned=*/false);
  ScriptedSource::Options so;
  so.steps = 6;
  auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), Placed(fake, 2, 1));
  for (int s = 0; s < 6; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    ExpectStep(step, s, 8, fake.get());
  }
  EXPECT_EQ(fake->pinned_allocations(), 0);
}

TEST(DevicePrefetcherTest, ReplicasWithoutADeviceStayOnTheHost) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  ScriptedSource::Options so;
  so.steps = 3;
  DevicePrefetchOptions options = Placed(fake, 2, 1);
  options.replicas[1].memory = nullptr;  // a CPU replica
  auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), options);
  std::vector<Element> step;
  bool end = true;
  ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
  EXPECT_NE(DeviceBufferOf(step[0].Flatten()[0]), nullptr);
  EXPECT_EQ(DeviceBufferOf(step[1].Flatten()[0]), nullptr);
  EXPECT_EQ(step[1].Flatten()[0].data<float>()[2], ScriptedSource::Value(0, 1, 2));
}

TEST(DevicePrefetcherTest, AStepWithTheWrongReplicaCountIsAnError) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  ScriptedSource::Options so;
  so.replicas = 3;
  auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), Placed(fake, 2, 1));
  std::vector<Element> step;
  bool end = true;
  absl::Status s = source->GetNextStep(&step, &end);
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("3 replica element(s) for 2"));
}

// A ReadAheadSource (as the service's source is) yielding ScriptedSource's steps: records the
// thread and the mode of every call.
class ReadAheadScriptedSource : public ReadAheadSource {
 public:
  struct Call {
    std::thread::id thread;
    bool padded = false;
  };
  explicit ReadAheadScriptedSource(ScriptedSource::Options options)
      : scripted_(std::move(options)) {}
  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override {
    Record(/*padded=*/false);
    return scripted_.GetNextStep(replicas, end_of_data);
  }
  absl::Status GetNextStepPadded(std::vector<Element>* replicas, bool* end_of_data) override {
    Record(/*padded=*/true);
    return scripted_.GetNextStep(replicas, end_of_data);
  }
  std::vector<Call> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  void Record(bool padded) {
    absl::MutexLock lock(&mu_);
    calls_.push_back(Call{std::this_thread::get_id(), padded});
  }
  ScriptedSource scripted_;
  mutable absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
};

// The host path over a source that reads ahead by itself: each call takes its step from the
// source on the caller's thread, in the call's mode, with nothing read ahead; the end or an error
// is taken once and repeated.
TEST(DevicePrefetcherTest, HostPathOverAReadAheadSourceTakesEachStepOnTheCallersThread) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  DevicePrefetchOptions on_the_cpu;
  on_the_cpu.replicas.resize(2);
  on_the_cpu.buffer_size = 2;
  DevicePrefetchOptions not_fetched = Placed(fake, 2, 2);
  not_fetched.fetch_to_device = false;
  for (const absl::Status& last : {absl::OkStatus(), absl::DataLossError("bad frame from w0")}) {
    for (const DevicePrefetchOptions& options : {on_the_cpu, not_fetched}) {
      SCOPED_TRACE(testing::Message() << "fetch_to_device " << options.fetch_to_device
                                      << ", last " << last);
      ScriptedSource::Options so;
      so.steps = 4;
      so.error = last;
      auto inner = std::make_unique<ReadAheadScriptedSource>(so);
      ReadAheadScriptedSource* source = inner.get();
      auto prefetcher = WrapOrDie(std::move(inner), options);
      ASSERT_NE(AsPrefetcher(prefetcher.get()), nullptr);
      for (int s = 0; s < 4; ++s) {
        std::vector<Element> step;
        bool end = true;
        const bool padded = s % 2 == 1;
        absl::Status status = padded ? prefetcher->GetNextStepPadded(&step, &end)
                                     : prefetcher->GetNextStep(&step, &end);
        ASSERT_TRUE(status.ok()) << status;
        ASSERT_FALSE(end);
        ASSERT_EQ(step.size(), 2u);
        for (int r = 0; r < 2; ++r) {
          std::vector<Tensor> leaves = step[static_cast<size_t>(r)].Flatten();
          ASSERT_EQ(leaves.size(), 3u);
          EXPECT_EQ(DeviceBufferOf(leaves[0]), nullptr);
          EXPECT_EQ(leaves[0].data<float>()[1], ScriptedSource::Value(s, r, 1));
          EXPECT_EQ(*leaves[1].data<int64_t>(), s);
        }
        std::vector<ReadAheadScriptedSource::Call> calls = source->calls();
        ASSERT_EQ(calls.size(), static_cast<size_t>(s + 1)) << "read ahead of the caller";
        EXPECT_EQ(calls.back().thread, std::this_thread::get_id());
        EXPECT_EQ(calls.back().padded, padded);
        EXPECT_EQ(AsPrefetcher(prefetcher.get())->stats().steps_pulled, s + 1);
      }
      for (int i = 0; i < 3; ++i) {
        std::vector<Element> step;
        bool end = false;
        absl::Status status = prefetcher->GetNextStep(&step, &end);
        EXPECT_EQ(status, last);
        EXPECT_EQ(end, last.ok());
      }
      EXPECT_EQ(source->calls().size(), 5u) << "the end or error was asked for again";
    }
  }
}

// With copies to make, the thread reads a ReadAheadSource ahead as any other: the copies
// overlap the trainer's work.
TEST(DevicePrefetcherTest, DeviceCopiesOverAReadAheadSourceKeepTheThread) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  DevicePrefetchOptions one_on_a_device = Placed(fake, 2, 2);
  one_on_a_device.replicas[1].memory = nullptr;  // replica 1 stays on the CPU
  for (const DevicePrefetchOptions& options : {Placed(fake, 2, 2), one_on_a_device}) {
    ScriptedSource::Options so;
    so.steps = 3;
    auto inner = std::make_unique<ReadAheadScriptedSource>(so);
    ReadAheadScriptedSource* source = inner.get();
    auto prefetcher = WrapOrDie(std::move(inner), options);
    for (int s = 0; s < 3; ++s) {
      std::vector<Element> step;
      bool end = true;
      ASSERT_TRUE(prefetcher->GetNextStep(&step, &end).ok());
      ASSERT_FALSE(end);
      ASSERT_EQ(step.size(), 2u);
      ExpectStep({step[0]}, s, 8, fake.get());
    }
    for (const ReadAheadScriptedSource::Call& call : source->calls()) {
      EXPECT_NE(call.thread, std::this_thread::get_id());
    }
  }
}

TEST(DevicePrefetcherTest, PullsAheadInTheModeOfTheLatestCall) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  ScriptedSource::Options so;
  so.steps = 3;
  auto padded = std::make_shared<std::atomic<int>>(0);
  auto pulls = std::make_shared<std::atomic<int>>(0);
  auto source = WrapOrDie(std::make_unique<ScriptedSource>(so, pulls, padded), Placed(fake, 2, 1));
  std::vector<Element> step;
  bool end = false;
  int steps = 0;
  while (true) {
    ASSERT_TRUE(source->GetNextStepPadded(&step, &end).ok());
    if (end) break;
    ++steps;
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(padded->load(), 4);
  EXPECT_EQ(pulls->load(), 4);
}

// One tensor of every numeric dtype (3 x 5, bytes 0, 1, 2, ... so that every byte differs) and
// a string.
Element EveryDtype(int seed) {
  std::vector<Element> parts;
  for (DType d : {DType::kBool, DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64,
                  DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64, DType::kFloat16,
                  DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    Tensor t = Tensor::Allocate(d, Shape({3, 5}));
    auto* bytes = static_cast<unsigned char*>(t.mutable_raw_data());
    for (size_t i = 0; i < t.byte_size(); ++i) {
      bytes[i] = static_cast<unsigned char>(d == DType::kBool ? (i + seed) % 2 : i * 7 + seed);
    }
    parts.push_back(Element(t));
  }
  parts.push_back(Element(Tensor::StringScalar("text")));
  return Element::Tuple(std::move(parts));
}

// Yields EveryDtype(step) for one replica.
class EveryDtypeSource : public StepSource {
 public:
  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override {
    *end_of_data = next_ == 5;
    if (!*end_of_data) *replicas = {EveryDtype(next_++)};
    return absl::OkStatus();
  }

 private:
  int next_ = 0;
};

TEST(DevicePrefetcherTest, DeviceContentsEqualHostContentsForEveryDtype) {
  auto fake = std::make_shared<FakeDeviceMemory>(FakeDeviceMemory::Mode::kEngine);
  auto source = WrapOrDie(std::make_unique<EveryDtypeSource>(), Placed(fake, 1, 2));
  for (int s = 0; s < 5; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    ASSERT_FALSE(end);
    std::vector<Tensor> got = step[0].Flatten();
    std::vector<Tensor> want = EveryDtype(s).Flatten();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(DTypeName(want[i].dtype()));
      EXPECT_EQ(got[i].dtype(), want[i].dtype());
      EXPECT_EQ(got[i].shape(), want[i].shape());
      if (want[i].dtype() != DType::kString) {
        EXPECT_NE(DeviceBufferOf(got[i]), nullptr);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(got[i].raw_data()) % TensorBuffer::kAlignment, 0u);
      }
      absl::StatusOr<Tensor> host = CopyTensorToHost(got[i]);
      ASSERT_TRUE(host.ok());
      EXPECT_TRUE(host->Equals(want[i]));
    }
  }
}

TEST(DevicePrefetcherTest, SizeZeroDummyStepsPassThrough) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  ScriptedSource::Options so;
  so.steps = 4;
  so.rows_of = [](int s) { return s == 3 ? 0 : 8; };
  auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), Placed(fake, 2, 2));
  for (int s = 0; s < 4; ++s) {
    std::vector<Element> step;
    bool end = true;
    ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
    ExpectStep(step, s, so.rows_of(s), fake.get());
  }
}

// A new slot for a step whose pieces are all empty (the partial last step of a dataset, or its
// first) still gets a device buffer: the step's tensors point into it.
TEST(DevicePrefetcherTest, ASizeZeroStepInANewSlotGetsABufferToo) {
  for (int64_t depth : {1, 3}) {
    SCOPED_TRACE(depth);
    auto fake = std::make_shared<FakeDeviceMemory>();
    ScriptedSource::Options so;
    so.steps = 3;
    so.rows_of = [](int s) { return s == 0 ? 0 : 8; };
    auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), Placed(fake, 2, depth));
    for (int s = 0; s < 3; ++s) {
      std::vector<Element> step;
      bool end = true;
      ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
      ASSERT_FALSE(end);
      ExpectStep(step, s, so.rows_of(s), fake.get());
    }
  }
}

// ---------------------------------------------------------------------------------------------

TEST(PinnedReceiveAllocatorTest, ReusesReleasedBuffersOfTheSameSizeClass) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  TensorAllocator allocate = PinnedReceiveAllocator(fake);
  std::shared_ptr<TensorBuffer> a = allocate(10000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->size(), 10000u);
  EXPECT_EQ(a->space(), MemorySpace::kPinnedHost);
  void* p = a->data();
  a.reset();
  std::shared_ptr<TensorBuffer> b = allocate(12000);  // the same 16 KiB class
  EXPECT_EQ(b->data(), p);
  std::shared_ptr<TensorBuffer> c = allocate(12000);  // b is in use: a new one
  EXPECT_NE(c->data(), p);
  EXPECT_EQ(fake->pinned_allocations(), 2);
}

TEST(HostDeviceMemoryTest, CopiesAreDoneAndEventsReady) {
  std::shared_ptr<DeviceMemory> host = HostMemoryAsDevice();
  EXPECT_TRUE(host->device_is_host());
  absl::StatusOr<std::shared_ptr<TensorBuffer>> pinned = host->AllocatePinnedHost(64);
  absl::StatusOr<std::shared_ptr<TensorBuffer>> device = host->AllocateDevice(1, 64);
  ASSERT_TRUE(pinned.ok() && device.ok());
  EXPECT_EQ((*pinned)->space(), MemorySpace::kPinnedHost);
  EXPECT_EQ((*device)->space(), MemorySpace::kHost);
  std::memset((*pinned)->data(), 7, 64);
  ASSERT_TRUE(host->CopyToDeviceAsync(1, (*pinned)->data(), (*device)->data(), 64).ok());
  absl::StatusOr<std::unique_ptr<DeviceEvent>> event = host->CreateEvent(1);
  ASSERT_TRUE(event.ok());
  ASSERT_TRUE((*event)->Record().ok());
  EXPECT_TRUE((*event)->IsReady());
  EXPECT_EQ(static_cast<unsigned char*>((*device)->data())[63], 7);
  EXPECT_TRUE(absl::IsInvalidArgument(host->AllocateDevice(-1, 8).status()));
}

TEST(DeviceMemoryHostPathTest, DefaultIsHostMemoryWithoutADevice) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_EQ(DefaultDeviceMemory()->name(), "host");
}

TEST(DeviceMemoryHostPathTest, CopyTensorToHostReadsDeviceTensors) {
  auto fake = std::make_shared<FakeDeviceMemory>();
  ScriptedSource::Options so;
  so.replicas = 1;
  auto source = WrapOrDie(std::make_unique<ScriptedSource>(so), Placed(fake, 1, 1));
  std::vector<Element> step;
  bool end = true;
  ASSERT_TRUE(source->GetNextStep(&step, &end).ok());
  const Tensor f = step[0].Flatten()[0];
  absl::StatusOr<Tensor> host = CopyTensorToHost(f);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(DeviceBufferOf(*host), nullptr);
  EXPECT_TRUE(host->Equals(f));
  // Device tensors print with their values, as TF prints a GPU tensor.
  const Tensor i = step[0].Flatten()[1];
  EXPECT_EQ(i.buffer()->space(), MemorySpace::kDevice);
  EXPECT_EQ(FormatTensor(i), "tf.Tensor(0, shape=(), dtype=int64)");
  // A host tensor is returned as it is.
  Tensor plain = Tensor::FromVector<int32_t>({1, 2});
  EXPECT_EQ(CopyTensorToHost(plain)->buffer(), plain.buffer());
}

// ---------------------------------------------------------------------------------------------
// Through MirroredStrategy: GPU devices get the prefetcher (on host memory here when there is
// no GPU), CPU devices and buffer size 0 do not.

TEST(StrategyDevicePrefetchTest, GpuReplicasGetDeviceTensorsWithTheSeedValues) {
  absl::StatusOr<MirroredStrategy> strategy = MirroredStrategy::Create({"GPU:0", "GPU:1"});
  ASSERT_TRUE(strategy.ok());
  absl::StatusOr<Dataset> ds =
      Dataset::Parse("from_tensor_slices([1, 2, 3, 4]).repeat(3).batch(4)");
  ASSERT_TRUE(ds.ok());
  absl::StatusOr<DistributedDataset> dist = strategy->ExperimentalDistributeDataset(*ds);
  ASSERT_TRUE(dist.ok()) << dist.status();
  absl::StatusOr<DistributedIterator> it = dist->MakeIterator();
  ASSERT_TRUE(it.ok());
  int steps = 0;
  for (;; ++steps) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (absl::IsOutOfRange(x.status())) break;
    ASSERT_TRUE(x.ok()) << x.status();
    for (int r = 0; r < 2; ++r) {
      const Tensor& t = x->values()[static_cast<size_t>(r)].leaf();
      const DeviceTensorBuffer* d = DeviceBufferOf(t);
      ASSERT_NE(d, nullptr);
      EXPECT_EQ(d->ordinal(), r);
      absl::StatusOr<Tensor> host = CopyTensorToHost(t);
      ASSERT_TRUE(host.ok());
      EXPECT_TRUE(host->Equals(Tensor::FromVector<int32_t>({1 + 2 * r, 2 + 2 * r})));
    }
  }
  EXPECT_EQ(steps, 3);
}

TEST(StrategyDevicePrefetchTest, CpuDevicesAndBufferSizeZeroKeepHostTensors) {
  absl::StatusOr<Dataset> ds = Dataset::Parse("from_tensor_slices([1, 2, 3, 4]).batch(4)");
  ASSERT_TRUE(ds.ok());
  absl::StatusOr<MirroredStrategy> cpu = MirroredStrategy::Create({"CPU:0"});
  absl::StatusOr<MirroredStrategy> gpu = MirroredStrategy::Create({"GPU:0", "GPU:1"});
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  InputOptions off;
  off.experimental_per_replica_buffer_size = 0;
  InputOptions host_only;
  host_only.experimental_fetch_to_device = false;
  struct Case {
    const MirroredStrategy* strategy;
    InputOptions options;
  };
  for (const Case& c : {Case{&*cpu, {}}, Case{&*gpu, off}, Case{&*gpu, host_only}}) {
    absl::StatusOr<DistributedDataset> dist =
        c.strategy->ExperimentalDistributeDataset(*ds, c.options);
    ASSERT_TRUE(dist.ok()) << dist.status();
    absl::StatusOr<DistributedIterator> it = dist->MakeIterator();
    ASSERT_TRUE(it.ok());
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    ASSERT_TRUE(x.ok()) << x.status();
    for (const Element& e : x->values()) EXPECT_EQ(DeviceBufferOf(e.leaf()), nullptr);
  }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(ReceiveAllocatorForTest, PinnedOnlyWhenCopyingToARealGpu) {
  Device host_gpu{"GPU", 0, /*host_memory=*/true};
  Device cpu{"CPU", 0, true};
  // No real GPU: received tensors go to ordinary host memory (the default allocator).
  EXPECT_FALSE(ReceiveAllocatorFor({host_gpu}, InputOptions{}));
  EXPECT_FALSE(ReceiveAllocatorFor({cpu}, InputOptions{}));
  if (CudaDeviceCount() > 0) {
    Device gpu{"GPU", 0, false};
    TensorAllocator allocate = ReceiveAllocatorFor({gpu}, InputOptions{});
    ASSERT_TRUE(allocate);
    EXPECT_EQ(allocate(100)->space(), MemorySpace::kPinnedHost);
    InputOptions host_only;
    host_only.experimental_fetch_to_device = false;
    EXPECT_FALSE(ReceiveAllocatorFor({gpu}, host_only));
  }
}

}  // namespace
}  // namespace sluice
