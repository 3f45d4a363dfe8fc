// CpuCollective between threads of one process (each rank its own TCP connection on loopback),
// the replicated-step codec, and EndOfDataAgreement / ReplicationGroupSource in-process. The
// same behaviour between real processes: tests/collective/.
#include "client/cpu_collective.h"

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/end_of_data_agreement.h"
#include "client/replication_group.h"
#include "sluice/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/service.h"
#include "sluice/strategy.h"
#include "tests/collective/fake_step_source.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

// Makes a group of `size` CpuCollectives in this process (rank 0 on 127.0.0.1:0).
std::vector<std::unique_ptr<CpuCollective>> MakeGroup(int size,
                                                      absl::Duration op_timeout = absl::Minutes(2)) {
  std::vector<std::unique_ptr<CpuCollective>> group(size);
  std::vector<absl::Status> status(size);
  absl::Notification listening;
  int port = 0;
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    CpuCollectiveOptions o;
    o.rank = 0;
    o.size = size;
    o.address = "127.0.0.1:0";
    o.op_timeout = op_timeout;
    o.on_listening = [&](int p) {
      port = p;
      listening.Notify();
    };
    auto c = CpuCollective::Create(o);
    if (!listening.HasBeenNotified()) listening.Notify();
    status[0] = c.status();
    if (c.ok()) group[0] = *std::move(c);
  });
  listening.WaitForNotificationWithTimeout(absl::Seconds(60));
  for (int r = 1; r < size; ++r) {
    threads.emplace_back([&, r] {
      CpuCollectiveOptions o;
      o.rank = r;
      o.size = size;
      o.address = absl::StrCat("127.0.0.1:", port);
      o.op_timeout = op_timeout;
      auto c = CpuCollective::Create(o);
      status[r] = c.status();
      if (c.ok()) group[r] = *std::move(c);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  return group;
}

// Runs fn(rank) on one thread per rank and returns their statuses.
std::vector<absl::Status> OnEachRank(int size, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> out(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { out[r] = fn(r); });
  for (std::thread& t : threads) t.join();
  return out;
}

TEST(CpuCollectiveTest, SingleRankIsTrivial) {
  CpuCollectiveOptions o;
  auto c = CpuCollective::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<int64_t> v = {3, -4};
  ASSERT_TRUE((*c)->AllReduceSum(std::span<int64_t>(v)).ok());
  EXPECT_EQ(v, (std::vector<int64_t>{3, -4}));
  std::string b = "x";
  ASSERT_TRUE((*c)->Broadcast(0, &b).ok());
  EXPECT_EQ(b, "x");
  EXPECT_TRUE((*c)->Barrier().ok());
  EXPECT_EQ((*c)->Broadcast(1, &b).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuCollectiveTest, RejectsBadOptions) {
  CpuCollectiveOptions o;
  o.rank = 3;
  o.size = 2;
  o.address = "127.0.0.1:0";
  EXPECT_EQ(CpuCollective::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.rank = 1;
  o.address = "";
  EXPECT_EQ(CpuCollective::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.address = "no-port";
  EXPECT_EQ(CpuCollective::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuCollectiveTest, AllReduceBroadcastBarrierAcrossFourRanks) {
  constexpr int kSize = 4;
  auto group = MakeGroup(kSize);
  ASSERT_EQ(group.size(), kSize);
  std::vector<std::vector<int64_t>> sums(kSize);
  std::vector<std::string> from0(kSize), from2(kSize), empty(kSize);
  auto statuses = OnEachRank(kSize, [&](int r) -> absl::Status {
    Collective* c = group[r].get();
    for (int round = 0; round < 3; ++round) {
      std::vector<int64_t> v = {r, 10 * r, int64_t{1} << 40, -r};
      if (absl::Status s = c->AllReduceSum(std::span<int64_t>(v)); !s.ok()) return s;
      sums[r] = v;
    }
    from0[r] = r == 0 ? std::string(1 << 20, 'a') : "junk";
    if (absl::Status s = c->Broadcast(0, &from0[r]); !s.ok()) return s;
    from2[r] = r == 2 ? std::string("rank two\0bytes", 14) : "";
    if (absl::Status s = c->Broadcast(2, &from2[r]); !s.ok()) return s;
    empty[r] = r == 3 ? "" : "not empty";
    if (absl::Status s = c->Broadcast(3, &empty[r]); !s.ok()) return s;
    return c->Barrier();
  });
  for (int r = 0; r < kSize; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    EXPECT_EQ(sums[r], (std::vector<int64_t>{6, 60, int64_t{4} << 40, -6})) << r;
    EXPECT_EQ(from0[r], std::string(1 << 20, 'a')) << r;
    EXPECT_EQ(from2[r], std::string("rank two\0bytes", 14)) << r;
    EXPECT_EQ(empty[r], "") << r;
    EXPECT_EQ(group[r]->rank(), r);
    EXPECT_EQ(group[r]->size(), kSize);
  }
}

TEST(CpuCollectiveTest, RanksDisagreeingOnTheOperationFail) {
  auto group = MakeGroup(2);
  ASSERT_EQ(group.size(), 2u);
  auto statuses = OnEachRank(2, [&](int r) -> absl::Status {
    if (r == 0) {
      std::vector<int64_t> v = {1};
      return group[r]->AllReduceSum(std::span<int64_t>(v));
    }
    return group[r]->Barrier();
  });
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kFailedPrecondition) << statuses[0];
  EXPECT_THAT(statuses[0].message(), HasSubstr("rank 1"));
  EXPECT_FALSE(statuses[1].ok());
  // Sticky: a broken group stays broken.
  EXPECT_FALSE(group[0]->Barrier().ok());
  EXPECT_FALSE(group[1]->Barrier().ok());
}

TEST(CpuCollectiveTest, DifferentSpanLengthsFail) {
  auto group = MakeGroup(2);
  ASSERT_EQ(group.size(), 2u);
  auto statuses = OnEachRank(2, [&](int r) -> absl::Status {
    std::vector<int64_t> v(r + 1, 1);
    return group[r]->AllReduceSum(std::span<int64_t>(v));
  });
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kFailedPrecondition) << statuses[0];
  EXPECT_FALSE(statuses[1].ok());
}

TEST(CpuCollectiveTest, ClosedPeerIsUnavailableNamingItsRank) {
  auto group = MakeGroup(3);
  ASSERT_EQ(group.size(), 3u);
  group[2].reset();  // rank 2 goes away
  auto statuses = OnEachRank(2, [&](int r) -> absl::Status {
    std::vector<int64_t> v = {1};
    return group[r]->AllReduceSum(std::span<int64_t>(v));
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kUnavailable) << statuses[r];
    EXPECT_THAT(statuses[r].message(), HasSubstr("rank 2")) << r;
  }
}

TEST(CpuCollectiveTest, SilentPeerTimesOutNamingItsRank) {
  auto group = MakeGroup(2, /*op_timeout=*/absl::Milliseconds(300));
  ASSERT_EQ(group.size(), 2u);
  absl::Status s = group[0]->Barrier();  // rank 1 never calls
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr("rank 1"));
}

TEST(CpuCollectiveTest, MissingRanksAtStartupAreNamed) {
  CpuCollectiveOptions o;
  o.size = 3;
  o.address = "127.0.0.1:0";
  o.connect_timeout = absl::Milliseconds(300);
  auto c = CpuCollective::Create(o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("ranks 1, 2"));
}

TEST(CpuCollectiveTest, UnreachableRootIsUnavailable) {
  // A port nobody listens on: bind one, note it, close it.
  CpuCollectiveOptions root;
  root.address = "127.0.0.1:0";
  int port = 0;
  root.on_listening = [&](int p) { port = p; };
  { ASSERT_TRUE(CpuCollective::Create(root).ok()); }
  CpuCollectiveOptions o;
  o.rank = 1;
  o.size = 2;
  o.address = absl::StrCat("127.0.0.1:", port);
  o.connect_timeout = absl::Milliseconds(300);
  auto c = CpuCollective::Create(o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("rank 0"));
}

TEST(ReplicatedStepCodecTest, RoundTripsStepsEndAndErrors) {
  std::vector<Element> step = {
      Element(Tensor::FromVector<int64_t>({1, 2, 3})),
      Element::Tuple({Element(Tensor::FromStrings({"a", "bc"}, Shape({2}))),
                      Element(Tensor::FromVector<float>({0.5f}))})};
  absl::Status leader;
  bool end = true;
  std::vector<Element> got;
  ASSERT_TRUE(
      DecodeReplicatedStep(EncodeReplicatedStep(absl::OkStatus(), false, step), &leader, &end, &got)
          .ok());
  EXPECT_TRUE(leader.ok());
  EXPECT_FALSE(end);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].leaf().Equals(step[0].leaf()));
  ASSERT_EQ(got[1].children().size(), 2u);
  EXPECT_TRUE(got[1].children()[0].leaf().Equals(step[1].children()[0].leaf()));
  EXPECT_TRUE(got[1].children()[1].leaf().Equals(step[1].children()[1].leaf()));

  ASSERT_TRUE(DecodeReplicatedStep(EncodeReplicatedStep(absl::OkStatus(), true, {}), &leader, &end,
                                   &got)
                  .ok());
  EXPECT_TRUE(end);
  ASSERT_TRUE(DecodeReplicatedStep(EncodeReplicatedStep(absl::NotFoundError("no file x"), false,
                                                        {}),
                                   &leader, &end, &got)
                  .ok());
  EXPECT_EQ(leader, absl::NotFoundError("no file x"));

  std::string bytes = EncodeReplicatedStep(absl::OkStatus(), false, step);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{5}, bytes.size() - 1}) {
    EXPECT_EQ(DecodeReplicatedStep(bytes.substr(0, cut), &leader, &end, &got).code(),
              absl::StatusCode::kDataLoss)
        << cut;
  }
  EXPECT_EQ(DecodeReplicatedStep(bytes + "x", &leader, &end, &got).code(),
            absl::StatusCode::kDataLoss);
}

// Reads `source` to the end (bounded), describing each step; the error if any.
absl::Status Drain(StepSource* source, std::vector<std::string>* steps) {
  for (int i = 0; i < 1000; ++i) {
    std::vector<Element> step;
    bool end = false;
    if (absl::Status s = source->GetNextStep(&step, &end); !s.ok()) return s;
    if (end) return absl::OkStatus();
    steps->push_back(DescribeStep(step));
  }
  return absl::InternalError("source did not end");
}

TEST(EndOfDataAgreementTest, AllRanksEndTogetherWithDummies) {
  constexpr int kSize = 3;
  const int64_t kSteps[kSize] = {2, 4, 0};
  auto group = MakeGroup(kSize);
  ASSERT_EQ(group.size(), kSize);
  std::vector<std::vector<std::string>> seen(kSize);
  auto statuses = OnEachRank(kSize, [&](int r) {
    EndOfDataAgreement agreed(std::make_unique<FakeStepSource>(r, kSteps[r], 2, nullptr),
                              group[r].get(), FakePieceSpec(), 2);
    absl::Status s = Drain(&agreed, &seen[r]);
    // After the end, end again (no further collective needed).
    std::vector<Element> step;
    bool end = false;
    if (s.ok()) s = agreed.GetNextStep(&step, &end);
    if (s.ok() && !end) s = absl::InternalError("data after the end");
    return s;
  });
  for (int r = 0; r < kSize; ++r) ASSERT_TRUE(statuses[r].ok()) << r << ": " << statuses[r];
  EXPECT_EQ(seen[0], (std::vector<std::string>{"[0,0,0] [0,0,1]", "[0,1,0] [0,1,1]", "[] []",
                                               "[] []"}));
  EXPECT_EQ(seen[1], (std::vector<std::string>{"[1,0,0] [1,0,1]", "[1,1,0] [1,1,1]",
                                               "[1,2,0] [1,2,1]", "[1,3,0] [1,3,1]"}));
  EXPECT_EQ(seen[2], (std::vector<std::string>(4, "[] []")));
}

TEST(EndOfDataAgreementTest, OneRanksFailureFailsEveryRankAtTheSameStep) {
  constexpr int kSize = 2;
  auto group = MakeGroup(kSize);
  ASSERT_EQ(group.size(), kSize);
  std::vector<std::vector<std::string>> seen(kSize);
  auto statuses = OnEachRank(kSize, [&](int r) {
    EndOfDataAgreement agreed(
        std::make_unique<FakeStepSource>(r, 5, 1, nullptr, /*fail_at=*/r == 1 ? 2 : -1),
        group[r].get(), FakePieceSpec(), 1);
    return Drain(&agreed, &seen[r]);
  });
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kInternal) << statuses[1];
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kUnavailable) << statuses[0];
  EXPECT_THAT(statuses[0].message(), HasSubstr("1 other process"));
  EXPECT_EQ(seen[0].size(), 2u);
  EXPECT_EQ(seen[1].size(), 2u);
}

TEST(ReplicationGroupTest, MembersSeeTheLeadersStepsAndErrors) {
  constexpr int kSize = 3;
  auto group = MakeGroup(kSize);
  ASSERT_EQ(group.size(), kSize);
  int64_t fetches = 0;
  std::vector<std::vector<std::string>> seen(kSize);
  auto statuses = OnEachRank(kSize, [&](int r) -> absl::Status {
    std::unique_ptr<StepSource> inner;
    if (r == 0) inner = std::make_unique<FakeStepSource>(7, 3, 2, &fetches, /*fail_at=*/3);
    auto source = ReplicationGroupSource::Create(group[r].get(), std::move(inner));
    if (!source.ok()) return source.status();
    return Drain(source->get(), &seen[r]);
  });
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(statuses[r], absl::InternalError("fake failure at 3")) << r;
    EXPECT_EQ(seen[r], seen[0]) << r;
  }
  EXPECT_EQ(seen[0].size(), 3u);
  EXPECT_EQ(fetches, 4);
}

TEST(ReplicationGroupTest, OnlyTheLeaderMayRead) {
  auto group = MakeGroup(2);
  ASSERT_EQ(group.size(), 2u);
  EXPECT_EQ(ReplicationGroupSource::Create(group[0].get(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReplicationGroupSource::Create(group[1].get(),
                                           std::make_unique<FakeStepSource>(0, 1, 1, nullptr))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ServiceEndOfDataCollectiveTest, ValidatedBeforeContactingTheService) {
  auto strategy = MirroredStrategy::Create({"CPU:0"});
  ASSERT_TRUE(strategy.ok()) << strategy.status();
  auto group = MakeGroup(1);
  ASSERT_EQ(group.size(), 1u);
  ServiceOptions options;
  options.coordinator_address = "127.0.0.1:1";  // never reached: validation comes first
  options.end_of_data_collective = group[0].get();
  auto coordinated = DistributeDatasetFromService(*strategy, Dataset::Range(4).Batch(2), options);
  EXPECT_EQ(coordinated.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(coordinated.status().message(), HasSubstr("independent"));
  options.read_mode = ServiceReadMode::kIndependent;
  options.num_consumers = 2;
  auto wrong_size = DistributeDatasetFromService(*strategy, Dataset::Range(4).Batch(2), options);
  EXPECT_EQ(wrong_size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_size.status().message(), HasSubstr("rank 0 of 1"));
}

}  // namespace
}  // namespace sluice
