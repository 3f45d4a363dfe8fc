// A step the step buffer lets go of (worker/step_buffer.h) is destroyed after the buffer's lock
// is released, on every path that drops one: released by every consumer, pushed out of the
// retention window, kept for a reconnect and then acknowledged (coordinated), acknowledged
// (independent). Freeing a step runs its buffers' destructors (a shared-memory region's
// bookkeeping, a pool, a device registration): under the lock they held the producer and the
// task's other streams off the buffer for per-step work (at 1 KiB steps most of the time the
// lock was held), and a destructor that asked the buffer anything deadlocked.
//
// Each step's tensor views a ProbeBuffer: when it is destroyed, a second thread asks the
// buffer for its stats (which takes the lock) and the destructor waits for the answer; it
// comes at once when the lock is free, never while the destroying thread holds it.
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "worker/step_buffer.h"

namespace sluice {
namespace {

// How long a probe waits for the buffer's lock before it counts the step as destroyed under
// it: an uncontended lock is a matter of microseconds; this only bounds a broken run.
constexpr absl::Duration kLockWait = absl::Seconds(10);

// What the probes saw, and their threads (joined by the test once its calls returned: a
// probe stuck behind the lock of the call that destroyed its step finishes after that call).
struct Probes {
  // The buffer to ask; null once the test is done with it (steps still held go with it, unprobed).
  std::atomic<StepBuffer*> buffer{nullptr};
  absl::Mutex mu;
  std::vector<std::thread> threads ABSL_GUARDED_BY(mu);
  std::atomic<int> destroyed{0};
  std::atomic<int> under_lock{0};

  ~Probes() { JoinAll(); }
  void JoinAll() {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu);
      threads.swap(this->threads);
    }
    for (std::thread& t : threads) t.join();
  }
};

class ProbeBuffer : public TensorBuffer {
 public:
  explicit ProbeBuffer(Probes* probes) : probes_(probes) {}
  ~ProbeBuffer() override {
    StepBuffer* buffer = probes_->buffer.load();
    if (buffer == nullptr) return;
    auto answered = std::make_shared<absl::Notification>();
    std::thread probe([buffer, answered] {
      buffer->stats();  // takes the buffer's lock
      answered->Notify();
    });
    if (!answered->WaitForNotificationWithTimeout(kLockWait)) probes_->under_lock.fetch_add(1);
    probes_->destroyed.fetch_add(1);
    absl::MutexLock lock(&probes_->mu);
    probes_->threads.push_back(std::move(probe));
  }
  void* data() override { return &value_; }
  size_t size() const override { return sizeof(value_); }

 private:
  Probes* const probes_;
  int64_t value_ = 0;
};

// Task step i, one int64 scalar viewing a ProbeBuffer; `bytes` against the buffer's budget.
std::shared_ptr<const TaskStep> ProbeStep(int64_t i, Probes* probes, size_t bytes = 100) {
  auto s = std::make_shared<TaskStep>();
  s->task_step = i;
  s->num_real_pieces = 1;
  absl::StatusOr<Tensor> t =
      Tensor::Wrap(DType::kInt64, Shape(), std::make_shared<ProbeBuffer>(probes));
  EXPECT_TRUE(t.ok()) << t.status();
  s->pieces = {{*std::move(t)}};
  s->bytes = bytes;
  return s;
}

// Reads the next step of `consumer` within `limits` and drops it at once: the buffer's own
// references are then the step's last ones. Returns its task step (-1: none).
int64_t ReadAndDrop(StepBuffer* b, int64_t consumer, int64_t generation,
                    const StepLimits& limits) {
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  absl::Status s = b->Next(consumer, generation, limits, absl::Now() + kLockWait, &steps, &end);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(steps.size(), 1u);
  return steps.empty() ? -1 : steps[0]->task_step;
}

// Pushes task steps 0..n-1 viewing ProbeBuffers.
void PushProbeSteps(StepBuffer* b, int64_t n, Probes* probes) {
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(b->Push(ProbeStep(i, probes)).ok());
}

// Once the test's calls returned: `destroyed` steps went, none of them under the buffer's lock;
// steps still held go with the buffer, unprobed.
void ExpectDestroyedOffTheLock(Probes* probes, int destroyed) {
  probes->JoinAll();
  EXPECT_EQ(probes->destroyed.load(), destroyed);
  EXPECT_EQ(probes->under_lock.load(), 0);
  probes->buffer = nullptr;
}

TEST(StepBufferDropTest, StepsPushedOutOfTheRetentionWindowAreDestroyedOffTheLock) {
  constexpr int64_t kSteps = 6;
  Probes probes;
  // A window of one step: reading step i releases it into the window and drops step i - 1.
  StepBuffer b({.max_bytes = 1 << 20, .retention_bytes = 100});
  probes.buffer = &b;
  auto g = b.Attach(0, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  PushProbeSteps(&b, kSteps, &probes);
  for (int64_t i = 0; i < kSteps; ++i) EXPECT_EQ(ReadAndDrop(&b, 0, *g, StepLimits{}), i);
  ExpectDestroyedOffTheLock(&probes, kSteps - 1);  // the last one is still in the window
}

TEST(StepBufferDropTest, StepsReleasedByALateConsumerLeavingAreDestroyedOffTheLock) {
  constexpr int64_t kSteps = 4;
  Probes probes;
  // No window: consumer 0 read and dropped every step; consumer 1 held them back, and its
  // Detach releases them all (the buffer's references their last ones).
  StepBuffer b({.max_bytes = 1 << 20, .num_consumers = 2});
  probes.buffer = &b;
  auto g0 = b.Attach(0, 0);
  auto g1 = b.Attach(1, 0);
  ASSERT_TRUE(g0.ok() && g1.ok());
  PushProbeSteps(&b, kSteps, &probes);
  for (int64_t i = 0; i < kSteps; ++i) EXPECT_EQ(ReadAndDrop(&b, 0, *g0, StepLimits{}), i);
  EXPECT_EQ(probes.destroyed.load(), 0);
  b.Detach(1);
  ExpectDestroyedOffTheLock(&probes, kSteps);
}

TEST(StepBufferDropTest, StepsKeptForAReconnectAreDestroyedOffTheLockWhenAcknowledged) {
  constexpr int64_t kSteps = 5;
  Probes probes;
  StepBuffer b({.max_bytes = 1 << 20});
  probes.buffer = &b;
  auto g = b.Attach(0, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  PushProbeSteps(&b, kSteps, &probes);
  // A stream's window of unacknowledged steps: two steps. Reading step i drops step i - 2 from
  // the in-flight steps (KeepInFlight); acknowledging drops the rest.
  StepLimits limits;
  limits.unacked_bytes = 200;
  for (int64_t i = 0; i < kSteps; ++i) EXPECT_EQ(ReadAndDrop(&b, 0, *g, limits), i);
  b.Acknowledge(0, kSteps);
  ExpectDestroyedOffTheLock(&probes, kSteps);
}

TEST(StepBufferDropTest, IndependentStepsAreDestroyedOffTheLockWhenAcknowledged) {
  constexpr int64_t kSteps = 4;
  constexpr int64_t kConsumerKey = 7;
  Probes probes;
  StepBuffer b({.max_bytes = 1 << 20, .independent = true});
  probes.buffer = &b;
  auto g = b.Attach(kConsumerKey, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  PushProbeSteps(&b, kSteps, &probes);
  for (int64_t i = 0; i < kSteps; ++i) {
    EXPECT_EQ(ReadAndDrop(&b, kConsumerKey, *g, StepLimits{}), i);
  }
  b.Acknowledge(kConsumerKey, kSteps);
  ExpectDestroyedOffTheLock(&probes, kSteps);
}

}  // namespace
}  // namespace sluice
