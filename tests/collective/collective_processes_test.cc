// Collectives between real trainer processes: each rank is a fork()ed child of the test with
// its own CpuCollective over loopback TCP. Children report what they saw in a file and exit;
// the parent asserts. Every wait is bounded: children that outlive kChildDeadline are killed
// and the test fails instead of hanging.
//
// Rendezvous: a group's rank 0 binds port 0 and publishes the port in a file; the other ranks
// wait (bounded) for that file.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cpu_collective.h"
#include "client/end_of_data_agreement.h"
#include "client/replication_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/collective/fake_step_source.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kChildDeadline = absl::Seconds(120);

class ProcessGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = absl::StrCat(::testing::TempDir(), "/collective_", info->name(), "_", getpid());
    ASSERT_EQ(system(absl::StrCat("rm -rf '", dir_, "' && mkdir -p '", dir_, "'").c_str()), 0);
  }
  void TearDown() override {
    system(absl::StrCat("rm -rf '", dir_, "'").c_str());
  }

  void PublishPort(const std::string& key, int port) {
    std::string tmp = absl::StrCat(dir_, "/", key, ".tmp");
    std::ofstream(tmp) << port;
    std::rename(tmp.c_str(), absl::StrCat(dir_, "/", key).c_str());
  }
  int WaitPort(const std::string& key) {
    absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      std::ifstream in(absl::StrCat(dir_, "/", key));
      int port = 0;
      if (in >> port) return port;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return 0;
  }

  // Joins group `key` of `size` ranks as `rank` (rank 0 binds and publishes its port).
  absl::StatusOr<std::unique_ptr<CpuCollective>> Join(const std::string& key, int rank, int size) {
    CpuCollectiveOptions o;
    o.rank = rank;
    o.size = size;
    o.op_timeout = absl::Seconds(60);
    o.connect_timeout = absl::Seconds(60);
    if (rank == 0) {
      o.address = "127.0.0.1:0";
      o.on_listening = [this, key](int port) { PublishPort(key, port); };
    } else {
      o.address = absl::StrCat("127.0.0.1:", WaitPort(key));
    }
    return CpuCollective::Create(o);
  }

  // Forks `n` children running body(i); returns what each wrote as its result ("" if it
  // died), after all exited or were killed at kChildDeadline. *exit_codes gets each child's
  // exit code, or -signal.
  std::vector<std::string> RunChildren(int n, const std::function<std::string(int)>& body,
                                       std::vector<int>* exit_codes = nullptr) {
    std::vector<pid_t> pids;
    for (int i = 0; i < n; ++i) {
      pid_t pid = fork();
      if (pid == 0) {
        std::string result = body(i);
        std::ofstream(absl::StrCat(dir_, "/result_", i)) << result;
        _exit(0);
      }
      pids.push_back(pid);
    }
    std::vector<int> codes(n, -1000);
    int running = n;
    absl::Time deadline = absl::Now() + kChildDeadline;
    while (running > 0) {
      for (int i = 0; i < n; ++i) {
        if (pids[i] < 0) continue;
        int st = 0;
        if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
          codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
          pids[i] = -1;
          --running;
        }
      }
      if (running == 0) break;
      if (absl::Now() > deadline) {
        ADD_FAILURE() << "children still running after " << kChildDeadline << ": killed (a hang)";
        for (int i = 0; i < n; ++i) {
          if (pids[i] < 0) continue;
          kill(pids[i], SIGKILL);
          int st = 0;
          waitpid(pids[i], &st, 0);
          pids[i] = -1;
        }
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    std::vector<std::string> results(n);
    for (int i = 0; i < n; ++i) {
      std::ifstream in(absl::StrCat(dir_, "/result_", i));
      std::stringstream ss;
      ss << in.rdbuf();
      results[i] = ss.str();
    }
    if (exit_codes != nullptr) *exit_codes = codes;
    return results;
  }

  std::string dir_;
};

// Reads `source` to the end: one line per step, then "end" or "error: <status>".
std::string DrainToText(StepSource* source) {
  std::vector<std::string> lines;
  for (int i = 0; i < 1000; ++i) {
    std::vector<Element> step;
    bool end = false;
    absl::Status s = source->GetNextStep(&step, &end);
    if (!s.ok()) {
      lines.push_back(absl::StrCat("error: ", s.ToString()));
      break;
    }
    if (end) {
      lines.push_back("end");
      break;
    }
    lines.push_back(DescribeStep(step));
  }
  return absl::StrJoin(lines, "\n");
}

TEST_F(ProcessGroupTest, EndOfDataAgreementAtAPartialLastStep) {
  // Three trainer processes reading independently, with 5, 3 and 0 steps of data and two local
  // replicas each: all see exactly 5 steps, dummies where they had no data, and end together.
  const int64_t kSteps[3] = {5, 3, 0};
  std::vector<std::string> got = RunChildren(3, [&](int rank) -> std::string {
    auto c = Join("all", rank, 3);
    if (!c.ok()) return absl::StrCat("error: ", c.status().ToString());
    EndOfDataAgreement agreed(std::make_unique<FakeStepSource>(rank, kSteps[rank], 2, nullptr),
                              c->get(), FakePieceSpec(), 2);
    return DrainToText(&agreed);
  });
  EXPECT_EQ(got[0],
            "[0,0,0] [0,0,1]\n[0,1,0] [0,1,1]\n[0,2,0] [0,2,1]\n[0,3,0] [0,3,1]\n"
            "[0,4,0] [0,4,1]\nend");
  EXPECT_EQ(got[1], "[1,0,0] [1,0,1]\n[1,1,0] [1,1,1]\n[1,2,0] [1,2,1]\n[] []\n[] []\nend");
  EXPECT_EQ(got[2], "[] []\n[] []\n[] []\n[] []\n[] []\nend");
}

TEST_F(ProcessGroupTest, ReplicationGroupsFetchOncePerGroupAndAgreeOnTheEnd) {
  // Four processes in two replication groups {0,1} and {2,3}. Each group's leader reads its own
  // source (group A: 4 steps, group B: 2 steps), the leaders agree on the end of data among
  // themselves, and broadcast to their group. Every member of a group sees identical steps; each
  // step is fetched once per group; both groups see 4 steps.
  const int64_t kGroupSteps[2] = {4, 2};
  std::vector<std::string> got = RunChildren(4, [&](int process) -> std::string {
    const int group = process / 2;
    const int member = process % 2;
    auto g = Join(absl::StrCat("group", group), member, 2);
    if (!g.ok()) return absl::StrCat("error: ", g.status().ToString());
    std::unique_ptr<Collective> leaders;
    int64_t fetches = 0;
    std::unique_ptr<StepSource> inner;
    if (member == 0) {
      auto l = Join("leaders", group, 2);
      if (!l.ok()) return absl::StrCat("error: ", l.status().ToString());
      leaders = *std::move(l);
      inner = std::make_unique<EndOfDataAgreement>(
          std::make_unique<FakeStepSource>(group, kGroupSteps[group], 2, &fetches),
          leaders.get(), FakePieceSpec(), 2);
    }
    auto source = ReplicationGroupSource::Create(g->get(), std::move(inner));
    if (!source.ok()) return absl::StrCat("error: ", source.status().ToString());
    std::string text = DrainToText(source->get());
    if (member == 0) text += absl::StrCat("\nfetches=", fetches);
    return text;
  });
  const std::string group_a =
      "[0,0,0] [0,0,1]\n[0,1,0] [0,1,1]\n[0,2,0] [0,2,1]\n[0,3,0] [0,3,1]\nend";
  const std::string group_b = "[1,0,0] [1,0,1]\n[1,1,0] [1,1,1]\n[] []\n[] []\nend";
  EXPECT_EQ(got[0], group_a + "\nfetches=5");  // 4 steps and the end, once
  EXPECT_EQ(got[1], group_a);
  EXPECT_EQ(got[2], group_b + "\nfetches=3");  // 2 steps and the end, once
  EXPECT_EQ(got[3], group_b);
}

TEST_F(ProcessGroupTest, APeerThatDiesGivesTheOthersAClearError) {
  // Rank 2 dies (SIGKILL) after two steps; ranks 0 and 1 must fail naming rank 2, not hang.
  std::vector<int> codes;
  std::vector<std::string> got = RunChildren(
      3,
      [&](int rank) -> std::string {
        auto c = Join("all", rank, 3);
        if (!c.ok()) return absl::StrCat("error: ", c.status().ToString());
        EndOfDataAgreement agreed(std::make_unique<FakeStepSource>(rank, 10, 1, nullptr),
                                  c->get(), FakePieceSpec(), 1);
        std::vector<Element> step;
        bool end = false;
        for (int i = 0; i < 2; ++i) {
          absl::Status s = agreed.GetNextStep(&step, &end);
          if (!s.ok()) return absl::StrCat("early error: ", s.ToString());
        }
        if (rank == 2) raise(SIGKILL);
        return DrainToText(&agreed);
      },
      &codes);
  EXPECT_EQ(codes[2], -SIGKILL);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(got[rank], HasSubstr("error: UNAVAILABLE")) << rank;
    EXPECT_THAT(got[rank], HasSubstr("rank 2")) << rank;
    EXPECT_EQ(codes[rank], 0);
  }
}

TEST_F(ProcessGroupTest, RankZeroDyingFailsTheOthersNamingIt) {
  std::vector<int> codes;
  std::vector<std::string> got = RunChildren(
      3,
      [&](int rank) -> std::string {
        auto c = Join("all", rank, 3);
        if (!c.ok()) return absl::StrCat("error: ", c.status().ToString());
        if (!(*c)->Barrier().ok()) return "early error";
        if (rank == 0) raise(SIGKILL);
        std::vector<int64_t> v = {1};
        absl::Status s = (*c)->AllReduceSum(std::span<int64_t>(v));
        return s.ToString();
      },
      &codes);
  EXPECT_EQ(codes[0], -SIGKILL);
  for (int rank = 1; rank < 3; ++rank) {
    EXPECT_THAT(got[rank], HasSubstr("UNAVAILABLE")) << rank;
    EXPECT_THAT(got[rank], HasSubstr("rank 0")) << rank;
  }
}

}  // namespace
}  // namespace sluice
