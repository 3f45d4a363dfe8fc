// The job segment (core/rpc/job_shm_segment.h, job_shm_reader.h): co-located trainers of a
// shared job read one copy of each step, strings included, byte for byte what TCP brings; a
// region is reused only once the step is gone and every consumer process that received it
// released it or exited; hostile offsets and releases are refused.
#include "core/rpc/job_shm_segment.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rpc/job_shm_reader.h"
#include "core/rpc/shared_step_payload.h"
#include "core/rpc/shm_fd_passing.h"
#include "core/rpc/step_frame.h"
#include "gtest/gtest.h"
#include "tests/worker/shm_handover_test_util.h"
#include "tests/worker/step_frame_test_util.h"
#include "tests/worker/task_step_test_util.h"
#include "worker/consumer_frame.h"

namespace sluice {
namespace {

constexpr size_t kImageBytes = 3072;
constexpr int64_t kBatch = 8;

// A step like the TFRecord parse pipeline's: image strings, labels, a float feature tensor.
std::shared_ptr<TaskStep> ImageStep(int64_t task_step) {
  auto step = std::make_shared<TaskStep>();
  step->task_step = task_step;
  step->num_real_pieces = 1;
  std::vector<std::string> images;
  for (int64_t i = 0; i < kBatch; ++i) {
    images.push_back(std::string(kImageBytes + i, static_cast<char>('a' + (task_step + i) % 26)));
  }
  Tensor labels = Tensor::Allocate(DType::kInt64, Shape({kBatch}));
  for (int64_t i = 0; i < kBatch; ++i) labels.mutable_data<int64_t>()[i] = task_step * 100 + i;
  Tensor features = Tensor::Allocate(DType::kFloat32, Shape({kBatch, 64}));
  for (int64_t i = 0; i < kBatch * 64; ++i) {
    features.mutable_data<float>()[i] = 0.5f * static_cast<float>(i + task_step);
  }
  step->pieces.push_back(
      {Tensor::FromStrings(std::move(images), Shape({kBatch})), labels, features});
  step->shared_payload = std::make_shared<const SharedStepPayload>();
  return step;
}

// What a frame of `steps` decodes to over TCP (no shared memory of any kind).
StepFrame OverTcp(const std::vector<std::shared_ptr<const TaskStep>>& steps) {
  StepFrameEncoder encoder;
  grpc::ByteBuffer bb;
  EXPECT_TRUE(encoder.Encode(WholeStepViews(steps), false, absl::OkStatus(), &bb).ok());
  StepFrameDecoder decoder(nullptr, nullptr);
  StepFrame out;
  EXPECT_TRUE(decoder.Decode(bb, &out).ok());
  return out;
}

// One co-located consumer process: its hand-over of the segment (watched by `segment` as the
// process `pid`), its reader, its stream's encoder (worker side) and decoder. `consumer`
// (a consumer_id; 0: none) and `start_step`: its stream's, whose frames the segment logs.
struct Trainer {
  Trainer(ShmFdServer& server, const std::shared_ptr<JobShmSegment>& segment, std::string key,
          int pid = 0, uint64_t consumer = 0, int64_t start_step = 0)
      : key(key), sink(std::make_unique<JobShmStreamSink>(segment, key, consumer, start_step)) {
    const std::string token = server.Offer(
        segment->segment(), [segment, key, pid](int) { segment->WatchHolder(key, pid); });
    reader = std::make_shared<JobShmReader>(
        TakeHandedSegment(server.name(), token, segment->segment()->size()), segment->id());
    encoder.set_job_payload(sink.get());
    decoder.set_job_payload(reader.get());
  }
  // Sends `steps` in one frame (as the stream does: reported to the sink) and drops it, as a
  // call that broke with the frame in flight.
  void Lose(const std::vector<std::shared_ptr<const TaskStep>>& steps) {
    grpc::ByteBuffer bb;
    EXPECT_TRUE(encoder.Encode(WholeStepViews(steps), false, absl::OkStatus(), &bb).ok());
    EXPECT_TRUE(encoder.last_job_placed());
    sink->Sent(steps.size());
  }
  // A new call of the same consumer process: a new stream's sink and encoder.
  void CallAgain(const std::shared_ptr<JobShmSegment>& segment, uint64_t consumer,
                 int64_t start_step) {
    sink = std::make_unique<JobShmStreamSink>(segment, key, consumer, start_step);
    encoder.set_job_payload(sink.get());
  }
  // Sends `steps` in one frame and decodes it; *placed: whether it named a region.
  absl::Status Receive(const std::vector<std::shared_ptr<const TaskStep>>& steps, StepFrame* out,
                       bool* placed = nullptr, size_t* frame_bytes = nullptr) {
    grpc::ByteBuffer bb;
    absl::Status s = encoder.Encode(WholeStepViews(steps), false, absl::OkStatus(), &bb);
    if (!s.ok()) return s;
    if (placed != nullptr) *placed = encoder.last_job_placed();
    if (frame_bytes != nullptr) *frame_bytes = bb.Length();
    sink->Sent(steps.size());
    return decoder.Decode(bb, out);
  }
  // Reports what the reader released (as the next CreditGrant does).
  absl::Status ReportReleases(JobShmSegment& segment) {
    std::vector<uint64_t> released;
    reader->TakeReleased(4096, &released);
    return segment.Release(key, released);
  }

  std::string key;
  std::unique_ptr<JobShmStreamSink> sink;
  std::shared_ptr<JobShmReader> reader;
  StepFrameEncoder encoder;
  StepFrameDecoder decoder{nullptr, nullptr};
};

std::unique_ptr<ShmFdServer> Server() {
  absl::StatusOr<std::unique_ptr<ShmFdServer>> server = ShmFdServer::Create();
  EXPECT_TRUE(server.ok()) << server.status();
  return *std::move(server);
}

TEST(JobShmSegmentTest, ThreeTrainersReadTheBytesOfTcpFromOneCopyPerStep) {
  std::unique_ptr<ShmFdServer> server = Server();
  auto segment = JobShmSegment::Create(size_t{4} << 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (const char* key : {"trainer-a", "trainer-b", "trainer-c"}) {
    trainers.push_back(std::make_unique<Trainer>(*server, *segment, key));
  }
  const JobShmCounts before = ProcessJobShmCounts();
  constexpr int kSteps = 6;
  for (int i = 0; i < kSteps; ++i) {
    std::vector<std::shared_ptr<const TaskStep>> step = {ImageStep(i)};
    const StepFrame tcp = OverTcp(step);
    for (auto& t : trainers) {
      StepFrame got;
      bool placed = false;
      size_t frame_bytes = 0;
      ASSERT_TRUE(t->Receive(step, &got, &placed, &frame_bytes).ok());
      EXPECT_TRUE(placed) << t->key << " step " << i;
      EXPECT_LT(frame_bytes, 256u) << "a placed frame is its header alone";
      ExpectSameFrame(got, tcp);
      // The numeric tensors are views of the mapped segment.
      const Tensor& features = got.steps[0].pieces[0][2];
      const uint8_t* base = t->reader->segment()->data();
      const uint8_t* at = static_cast<const uint8_t*>(features.raw_data());
      EXPECT_TRUE(at >= base && at < base + t->reader->segment()->size());
    }
  }
  // One copy per step however many trainers read it.
  EXPECT_EQ((*segment)->steps_written(), kSteps);
  EXPECT_EQ(ProcessJobShmCounts().steps_written - before.steps_written, kSteps);
  EXPECT_EQ(ProcessJobShmCounts().frames_placed - before.frames_placed, 3 * kSteps);
  // A frame of two steps is not placed (a region holds one step): inline, the same bytes.
  std::vector<std::shared_ptr<const TaskStep>> two = {ImageStep(10), ImageStep(11)};
  StepFrame got;
  bool placed = true;
  ASSERT_TRUE(trainers[0]->Receive(two, &got, &placed).ok());
  EXPECT_FALSE(placed);
  ExpectSameFrame(got, OverTcp(two));
}

// Trainer A keeps the tensors of step 0 while B reads on over many laps of a small segment:
// A's numeric views (of the segment) keep their bytes, and step 0's region is never written
// again until A releases it.
TEST(JobShmSegmentTest, AHeldViewStaysIntactWhileOthersAdvance) {
  std::unique_ptr<ShmFdServer> server = Server();
  const size_t step_bytes =
      JobShmStepBytes(ImageStep(0)->pieces.data(), ImageStep(0)->pieces.size());
  auto segment = JobShmSegment::Create(3 * ((step_bytes + 4095) / 4096) * 4096);
  ASSERT_TRUE(segment.ok()) << segment.status();
  Trainer a(*server, *segment, "trainer-a");
  Trainer b(*server, *segment, "trainer-b");
  StepFrame held;
  {
    std::vector<std::shared_ptr<const TaskStep>> step0 = {ImageStep(0)};
    bool placed = false;
    ASSERT_TRUE(a.Receive(step0, &held, &placed).ok());
    ASSERT_TRUE(placed);
    StepFrame dropped;
    ASSERT_TRUE(b.Receive(step0, &dropped).ok());
  }  // the window dropped step 0, and B its tensors
  ASSERT_TRUE(b.ReportReleases(**segment).ok());
  const StepFrame expected = OverTcp({ImageStep(0)});
  int placed_steps = 0;
  for (int i = 1; i <= 40; ++i) {
    std::vector<std::shared_ptr<const TaskStep>> step = {ImageStep(i)};
    StepFrame got;
    bool placed = false;
    ASSERT_TRUE(b.Receive(step, &got, &placed).ok());
    placed_steps += placed ? 1 : 0;
    ExpectSameFrame(got, OverTcp(step));
    got = StepFrame();
    ASSERT_TRUE(b.ReportReleases(**segment).ok());
  }
  EXPECT_GE(placed_steps, 40) << "the rest of the segment is reused lap after lap";
  ExpectSameFrame(held, expected);  // A's views were never overwritten
  EXPECT_EQ((*segment)->held_by("trainer-a"), 1u);
  held = StepFrame();
  ASSERT_TRUE(a.ReportReleases(**segment).ok());
  EXPECT_EQ((*segment)->held_by("trainer-a"), 0u);
  EXPECT_EQ((*segment)->live_regions(), 0u);
}

// A consumer process that is killed frees what it held, and nothing another trainer views.
TEST(JobShmSegmentTest, AKilledTrainerFreesNothingOthersView) {
  std::unique_ptr<ShmFdServer> server = Server();
  const size_t step_bytes =
      JobShmStepBytes(ImageStep(0)->pieces.data(), ImageStep(0)->pieces.size());
  const size_t region = (step_bytes + 63) / 64 * 64;
  auto segment = JobShmSegment::Create(2 * region);
  ASSERT_TRUE(segment.ok()) << segment.status();
  // Room for exactly two steps (the segment is a whole number of pages).
  ASSERT_LT((*segment)->segment()->size(), 3 * region);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    while (true) pause();  // the "trainer" the test kills
  }
  // Killed and reaped however the test ends (a failed assertion returns early).
  bool child_reaped = false;
  std::unique_ptr<pid_t, std::function<void(pid_t*)>> stop_child(
      new pid_t(child), [&child_reaped](pid_t* pid) {
        if (!child_reaped) {
          kill(*pid, SIGKILL);
          waitpid(*pid, nullptr, 0);
        }
        delete pid;
      });
  Trainer doomed(*server, *segment, "doomed", child);
  Trainer live(*server, *segment, "live");
  StepFrame live_view, doomed_view0, doomed_view1;
  uint64_t offset1 = 0;
  {
    std::vector<std::shared_ptr<const TaskStep>> step0 = {ImageStep(0)};
    std::vector<std::shared_ptr<const TaskStep>> step1 = {ImageStep(1)};
    ASSERT_TRUE(live.Receive(step0, &live_view).ok());
    ASSERT_TRUE(doomed.Receive(step0, &doomed_view0).ok());
    bool placed = false;
    ASSERT_TRUE(doomed.Receive(step1, &doomed_view1, &placed).ok());
    ASSERT_TRUE(placed);
    offset1 = static_cast<uint64_t>(static_cast<const uint8_t*>(
                                        doomed_view1.steps[0].pieces[0][1].raw_data()) -
                                    doomed.reader->segment()->data());
  }  // both steps dropped by the window; "doomed" never releases (it is killed)
  std::vector<std::shared_ptr<const TaskStep>> step2 = {ImageStep(2)};
  StepFrame got;
  bool placed = true;
  ASSERT_TRUE(live.Receive(step2, &got, &placed).ok());
  EXPECT_FALSE(placed) << "no room while the doomed process lives";
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  child_reaped = true;
  const int64_t reaped = ProcessJobShmCounts().holders_reaped;
  std::vector<std::shared_ptr<const TaskStep>> step3 = {ImageStep(3)};
  ASSERT_TRUE(live.Receive(step3, &got, &placed).ok());
  EXPECT_TRUE(placed) << "the killed process's regions are free again";
  EXPECT_EQ(ProcessJobShmCounts().holders_reaped - reaped, 1);
  ExpectSameFrame(got, OverTcp(step3));
  // Step 3 took step 1's region (only the doomed process held it); step 0's, which "live"
  // views, was not reused.
  EXPECT_EQ(static_cast<const uint8_t*>(got.steps[0].pieces[0][1].raw_data()) -
                live.reader->segment()->data(),
            static_cast<ptrdiff_t>(offset1));
  ExpectSameFrame(live_view, OverTcp({ImageStep(0)}));
  EXPECT_EQ((*segment)->held_by("live"), 2u);
}

// Hostile values: a worker's header naming a region outside the segment, unaligned, of
// another segment or disagreeing with the tensors it describes is DATA_LOSS; a consumer's
// release of a region it does not hold is INVALID_ARGUMENT.
TEST(JobShmSegmentTest, HostileRegionsAndReleasesAreRefused) {
  std::unique_ptr<ShmFdServer> server = Server();
  auto segment = JobShmSegment::Create(size_t{1} << 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  Trainer t(*server, *segment, "trainer");
  const uint64_t size = (*segment)->segment()->size();
  const uint64_t id = (*segment)->id();
  struct Bad {
    uint64_t segment_id, offset, bytes;
  };
  for (const Bad& bad : {Bad{id + 1, 0, 64}, Bad{id, 32, 64}, Bad{id, size, 64},
                         Bad{id, size - 64, 128}, Bad{id, 64, ~uint64_t{0}}, Bad{id, 0, 0}}) {
    proto::JobShmPayload p;
    p.set_segment_id(bad.segment_id);
    p.set_offset(bad.offset);
    p.set_bytes(bad.bytes);
    absl::StatusOr<std::shared_ptr<TensorBuffer>> r = t.reader->Resolve(p);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss)
        << bad.segment_id << " " << bad.offset << " " << bad.bytes;
  }
  EXPECT_EQ(t.reader->held(), 0u);

  // A header whose tensors need more (or fewer) bytes than the region it names.
  std::vector<std::shared_ptr<const TaskStep>> step = {ImageStep(0)};
  grpc::ByteBuffer bb;
  ASSERT_TRUE(t.encoder.Encode(WholeStepViews(step), false, absl::OkStatus(), &bb).ok());
  ASSERT_TRUE(t.encoder.last_job_placed());
  const std::string frame = Flatten(bb);
  uint32_t len = 0;
  std::memcpy(&len, frame.data(), 4);
  proto::StepFrameHeader header;
  ASSERT_TRUE(header.ParseFromArray(frame.data() + 4, static_cast<int>(len)));
  for (int64_t delta : {-1, 1, 64}) {
    proto::StepFrameHeader h = header;
    h.mutable_job_shm_payload()->set_bytes(header.job_shm_payload().bytes() + delta);
    std::string edited(4, '\0');
    const uint32_t n = static_cast<uint32_t>(h.ByteSizeLong());
    std::memcpy(edited.data(), &n, 4);
    edited += h.SerializeAsString();
    StepFrame out;
    EXPECT_EQ(t.decoder.Decode(FromString(edited), &out).code(), absl::StatusCode::kDataLoss)
        << delta;
  }
  // Bytes after a placed frame's header, or no job segment on the stream.
  {
    StepFrame out;
    EXPECT_EQ(t.decoder.Decode(FromString(frame + "x"), &out).code(),
              absl::StatusCode::kDataLoss);
    StepFrameDecoder plain(nullptr, nullptr);
    EXPECT_EQ(plain.Decode(FromString(frame), &out).code(), absl::StatusCode::kDataLoss);
  }
  StepFrame ok;
  ASSERT_TRUE(t.decoder.Decode(FromString(frame), &ok).ok());
  ExpectSameFrame(ok, OverTcp(step));

  // Releases: an offset the process does not hold, or a process that holds nothing.
  const uint64_t offset = header.job_shm_payload().offset();
  EXPECT_EQ((*segment)->Release("trainer", {offset + 64}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*segment)->Release("stranger", {offset}).code(), absl::StatusCode::kInvalidArgument);
  // Held twice (a second frame of the step, as after a reconnect): released twice, not three
  // times.
  ASSERT_TRUE(t.encoder.Encode(WholeStepViews(step), false, absl::OkStatus(), &bb).ok());
  ASSERT_TRUE(t.encoder.last_job_placed());
  EXPECT_EQ((*segment)->held_by("trainer"), 2u);
  EXPECT_TRUE((*segment)->Release("trainer", {offset, offset}).ok());
  EXPECT_EQ((*segment)->Release("trainer", {offset}).code(), absl::StatusCode::kInvalidArgument);
}

// A call that breaks with frames in flight (sent, never received): when the consumer calls
// again saying how many steps it received, the worker frees its process's holds of those frames
// and of no other; the regions it still views stay held, the steps sent again are held again,
// and once everything is released and the steps are gone every region is free.
TEST(JobShmSegmentTest, FramesLostInABrokenCallAreFreedWhenItsConsumerCallsAgain) {
  std::unique_ptr<ShmFdServer> server = Server();
  auto segment = JobShmSegment::Create(size_t{1} << 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  constexpr uint64_t kConsumer = 7;
  Trainer a(*server, *segment, "process-a", 0, kConsumer, 0);
  // Another consumer of the same process, and another process, receive every step.
  Trainer a2(*server, *segment, "process-a", 0, kConsumer + 1, 0);
  Trainer b(*server, *segment, "process-b", 0, kConsumer, 0);
  std::vector<std::shared_ptr<const TaskStep>> steps;
  for (int i = 0; i < 6; ++i) steps.push_back(ImageStep(i));
  std::vector<StepFrame> a_views(3), a2_views(6), b_views(6);
  for (int i = 0; i < 6; ++i) {
    if (i < 3) {
      ASSERT_TRUE(a.Receive({steps[i]}, &a_views[i]).ok());
    } else {
      a.Lose({steps[i]});  // the call broke with steps 3..5 in flight
    }
    ASSERT_TRUE(a2.Receive({steps[i]}, &a2_views[i]).ok());
    ASSERT_TRUE(b.Receive({steps[i]}, &b_views[i]).ok());
  }
  a.sink->Acknowledge(2);  // its last grant acknowledged 2 steps
  EXPECT_EQ((*segment)->held_by("process-a"), 12u);
  const int64_t freed = ProcessJobShmCounts().lost_frames_freed;

  // It calls again having received 3: frames 3..5 were lost.
  ASSERT_TRUE((*segment)->Resume("process-a", kConsumer, 3).ok());
  EXPECT_EQ((*segment)->lost_frames_freed(), 3);
  EXPECT_EQ(ProcessJobShmCounts().lost_frames_freed - freed, 3);
  EXPECT_EQ((*segment)->held_by("process-a"), 9u) << "a's 3 views and a2's 6 stay held";
  EXPECT_EQ((*segment)->held_by("process-b"), 6u);
  EXPECT_EQ(a.reader->held(), 3u);
  // Calling again with the same count frees nothing more.
  ASSERT_TRUE((*segment)->Resume("process-a", kConsumer, 3).ok());
  EXPECT_EQ((*segment)->held_by("process-a"), 9u);

  // The new call sends 3..5 again (the window gives them back): held again as received.
  a.CallAgain(*segment, kConsumer, 3);
  a_views.resize(6);
  for (int i = 3; i < 6; ++i) {
    ASSERT_TRUE(a.Receive({steps[i]}, &a_views[i]).ok());
    ExpectSameFrame(a_views[i], OverTcp({steps[i]}));
  }
  EXPECT_EQ((*segment)->held_by("process-a"), 12u);

  // Everyone drops everything, the window drops the steps: every region is free, and no
  // release was refused (nothing freed twice, nothing left held).
  steps.clear();
  a_views.clear();
  a2_views.clear();
  b_views.clear();
  ASSERT_TRUE(a.ReportReleases(**segment).ok());
  ASSERT_TRUE(a2.ReportReleases(**segment).ok());
  ASSERT_TRUE(b.ReportReleases(**segment).ok());
  EXPECT_EQ((*segment)->held_by("process-a"), 0u);
  EXPECT_EQ((*segment)->held_by("process-b"), 0u);
  EXPECT_EQ((*segment)->live_regions(), 0u);
}

// A hostile resume position (negative, below what the consumer acknowledged, beyond what it was
// sent, overflowing) is INVALID_ARGUMENT and frees nothing; a count naming another process's
// consumer, or another consumer of this process, frees nothing of theirs.
TEST(JobShmSegmentTest, AHostileResumePositionIsRefusedAndFreesNothing) {
  std::unique_ptr<ShmFdServer> server = Server();
  auto segment = JobShmSegment::Create(size_t{1} << 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  constexpr uint64_t kConsumer = 7;
  constexpr int64_t kStart = 100;  // steps it received from earlier calls
  Trainer a(*server, *segment, "process-a", 0, kConsumer, kStart);
  Trainer a2(*server, *segment, "process-a", 0, kConsumer + 1, 0);
  Trainer b(*server, *segment, "process-b", 0, kConsumer + 2, 0);
  std::vector<std::shared_ptr<const TaskStep>> steps;
  for (int i = 0; i < 4; ++i) steps.push_back(ImageStep(i));
  std::vector<StepFrame> views(12);
  for (int i = 0; i < 4; ++i) {
    a.Lose({steps[i]});
    ASSERT_TRUE(a2.Receive({steps[i]}, &views[i]).ok());
    ASSERT_TRUE(b.Receive({steps[i]}, &views[4 + i]).ok());
  }
  a.sink->Acknowledge(kStart + 1);
  const size_t held_a = (*segment)->held_by("process-a");
  ASSERT_EQ(held_a, 8u);
  for (int64_t bad : {int64_t{-1}, kStart - 1, kStart, kStart + 5, kStart + 1000,
                      std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    const absl::Status s = (*segment)->Resume("process-a", kConsumer, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
    EXPECT_NE(s.message().find(absl::StrCat("start_step ", bad)), std::string::npos) << s;
  }
  // Claims about consumers that are not this one: another process's consumer id under this
  // key, this consumer's id under another key, an unknown id.
  EXPECT_TRUE((*segment)->Resume("process-a", kConsumer + 2, 0).ok());
  EXPECT_TRUE((*segment)->Resume("process-b", kConsumer, kStart).ok());
  EXPECT_TRUE((*segment)->Resume("process-a", 999, 0).ok());
  EXPECT_EQ((*segment)->held_by("process-a"), held_a);
  EXPECT_EQ((*segment)->held_by("process-b"), 4u);
  EXPECT_EQ((*segment)->lost_frames_freed(), 0);
  // Its true position frees its own lost frames only (a2's 4 views stay held).
  ASSERT_TRUE((*segment)->Resume("process-a", kConsumer, kStart + 1).ok());
  EXPECT_EQ((*segment)->held_by("process-a"), 4u + 1u);
  // A start_step whose count would overflow logs nothing, and never wraps.
  Trainer c(*server, *segment, "process-c", 0, kConsumer, std::numeric_limits<int64_t>::max() - 1);
  c.Lose({steps[0]});
  c.Lose({steps[1]});
  EXPECT_TRUE((*segment)->Resume("process-c", kConsumer, std::numeric_limits<int64_t>::max()).ok());
  EXPECT_EQ((*segment)->held_by("process-c"), 1u) << "the frame numbered max was lost";
}

// A superseded call that still sends after its consumer's new call began (the worker had not
// yet seen the break) logs its frames under the numbers it has; the consumer's next call is
// still accepted at its true position and frees every frame it did not receive, the
// superseded call's included.
TEST(JobShmSegmentTest, ASupersededCallStillSendingNeverBlocksTheNextResume) {
  std::unique_ptr<ShmFdServer> server = Server();
  auto segment = JobShmSegment::Create(size_t{1} << 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  constexpr uint64_t kConsumer = 7;
  Trainer a(*server, *segment, "process-a", 0, kConsumer, 0);  // its first call
  std::vector<std::shared_ptr<const TaskStep>> steps;
  for (int i = 0; i < 5; ++i) steps.push_back(ImageStep(i));
  std::vector<StepFrame> views(3);
  ASSERT_TRUE(a.Receive({steps[0]}, &views[0]).ok());
  ASSERT_TRUE(a.Receive({steps[1]}, &views[1]).ok());
  a.Lose({steps[2]});
  a.Lose({steps[3]});
  // The consumer calls again having received 2 (frames 2 and 3 are freed) ...
  ASSERT_TRUE((*segment)->Resume("process-a", kConsumer, 2).ok());
  EXPECT_EQ((*segment)->lost_frames_freed(), 2);
  // ... while its first call, superseded, still sends step 4 (never received).
  a.Lose({steps[4]});
  // The new call sends 2 and 3 again: 2 arrives, 3 is lost when this call breaks too.
  JobShmStreamSink sink(*segment, "process-a", kConsumer, 2);
  StepFrameEncoder encoder;
  encoder.set_job_payload(&sink);
  for (int i = 2; i < 4; ++i) {
    grpc::ByteBuffer bb;
    ASSERT_TRUE(encoder.Encode(WholeStepViews({steps[i]}), false, absl::OkStatus(), &bb).ok());
    ASSERT_TRUE(encoder.last_job_placed());
    sink.Sent(1);
    if (i == 2) ASSERT_TRUE(a.decoder.Decode(bb, &views[2]).ok());
  }
  sink.Acknowledge(3);
  // Its third call, having received 3: accepted, and what it did not receive is freed.
  const absl::Status resumed = (*segment)->Resume("process-a", kConsumer, 3);
  EXPECT_TRUE(resumed.ok()) << resumed;
  EXPECT_EQ((*segment)->lost_frames_freed(), 4) << "and the new call's 3, the superseded 4";
  EXPECT_EQ((*segment)->held_by("process-a"), 3u) << "the 3 frames it views";
  EXPECT_EQ(a.reader->held(), 3u);
}

}  // namespace
}  // namespace sluice
