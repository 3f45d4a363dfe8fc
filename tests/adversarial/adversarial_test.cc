// The adversarial suite (issue 25, item 6; CTest label `adversarial`): hostile pipelines
// (tests/adversarial/hostile_pipelines.h: the issue's reproductions, then seeded generated
// cases) against a real coordinator and two real workers, and against the in-process executor.
//
// What a user relies on, checked per case: a pipeline that asks for more than a server can give
// ends in an error (INVALID_ARGUMENT / RESOURCE_EXHAUSTED / FAILED_PRECONDITION, DATA_LOSS for
// a lying file) whose message names the op at fault, within a bounded time (a hang fails the
// case), never OK with made-up data; every server process is still running after it; and after
// the whole run a normal job is served with exact values and every server exits 0 on SIGTERM.
// In process the same cases must not kill the process (a trainer) running them.
//
// Each case runs in tests/adversarial/adversarial_runner (a client process) with a deadline.
// The servers run with --memory_limit=768MiB --max_element_bytes=192MiB, and every process this
// test starts (servers and runners) inherits a memory limit (RLIMIT_DATA: private writable
// memory, heap and mmap alike; set on this process for the test's duration), so that a
// regression that allocates without asking fails its case (std::bad_alloc, a dead process)
// instead of exhausting the machine CI shares. RLIMIT_DATA rather than RLIMIT_AS: a worker
// reserves ~1 GiB of address space it never touches (thread stacks, malloc arenas), which
// RLIMIT_AS would count and RLIMIT_DATA does not (a worker at rest holds ~100 MiB of data). A case
// that kills a server or hangs is reported, and the cluster is restarted for the next case, so
// one run reports every failing case.
//
// Environment:
//   SLUICE_ADVERSARIAL_SEED   seed of the generated cases (default kDefaultSeed; printed)
//   SLUICE_ADVERSARIAL_CASES  generated cases per test (default kDefaultCases)
//   SLUICE_ADVERSARIAL_ONLY   comma-separated case ids to run alone ("issue-3,gen-17")
//   SLUICE_ADVERSARIAL_LIST=1 print the cases, run none
//   SLUICE_ADVERSARIAL_CASE_TIMEOUT_S  per-case deadline (default 45)
//   SLUICE_ADVERSARIAL_BUDGET_S        whole-test time budget (default 420)
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/adversarial/hostile_pipelines.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

constexpr uint64_t kDefaultSeed = 25;
constexpr int64_t kDefaultCases = 24;
constexpr char kWorkerMemoryLimit[] = "768MiB";
constexpr char kMaxElementBytes[] = "192MiB";
// Private writable memory of every process the test starts: room for the 768 MiB budget, a
// 192 MiB element in flight with two copies and the process's own ~100 MiB, far below the
// machine, and below 2 GiB, so that honouring a file's claim of a 2 GiB member (a tar bomb)
// fails instead of passing unnoticed.
constexpr rlim_t kDataLimit = rlim_t{1792} << 20;
// How long after a case's client has its answer the servers are checked.
constexpr absl::Duration kSettle = absl::Milliseconds(500);

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  int64_t out = 0;
  if (v == nullptr || !absl::SimpleAtoi(v, &out)) return fallback;
  return out;
}

uint64_t Seed() {
  const char* v = std::getenv("SLUICE_ADVERSARIAL_SEED");
  uint64_t out = 0;
  if (v == nullptr || !absl::SimpleAtoi(v, &out)) return kDefaultSeed;
  return out;
}

// Lowers this process's soft RLIMIT_DATA for its lifetime; children started meanwhile inherit
// it.
class ScopedDataLimit {
 public:
  explicit ScopedDataLimit(rlim_t bytes) {
    if (getrlimit(RLIMIT_DATA, &saved_) != 0) return;
    rlimit lowered = saved_;
    lowered.rlim_cur = std::min(bytes, saved_.rlim_max);
    active_ = setrlimit(RLIMIT_DATA, &lowered) == 0;
  }
  ~ScopedDataLimit() {
    if (active_) setrlimit(RLIMIT_DATA, &saved_);
  }
  bool active() const { return active_; }

 private:
  rlimit saved_{};
  bool active_ = false;
};

// A temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp",
                                     "/sluice-adversarial-XXXXXX");
    if (mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct NamedCase {
  std::string id;  // "issue-3", "gen-17"
  HostileCase c;
};

// The reproductions, then the generated cases; SLUICE_ADVERSARIAL_ONLY keeps the ids it lists.
std::vector<NamedCase> Cases(const HostileFiles& files, bool service) {
  const uint64_t seed = Seed();
  const int64_t count = std::clamp<int64_t>(EnvInt("SLUICE_ADVERSARIAL_CASES", kDefaultCases),
                                            0, 100000);
  std::set<std::string> only;
  int64_t generate = count;  // enough for every "gen-K" listed in SLUICE_ADVERSARIAL_ONLY
  if (const char* v = std::getenv("SLUICE_ADVERSARIAL_ONLY"); v != nullptr && v[0] != '\0') {
    for (absl::string_view id : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
      id = absl::StripAsciiWhitespace(id);
      only.insert(std::string(id));
      int64_t k = 0;
      if (absl::ConsumePrefix(&id, "gen-") && absl::SimpleAtoi(id, &k) && k < 100000) {
        generate = std::max(generate, k + 1);
      }
    }
  }
  std::vector<NamedCase> out;
  const std::vector<HostileCase> issue = IssueReproductions(files);
  for (size_t i = 0; i < issue.size(); ++i) out.push_back({absl::StrCat("issue-", i), issue[i]});
  for (int64_t i = 0; i < generate; ++i) {
    if (!only.empty() && only.count(absl::StrCat("gen-", i)) == 0) continue;
    out.push_back({absl::StrCat("gen-", i), GenerateHostileCase(seed, i, files)});
  }
  std::vector<NamedCase> kept;
  for (NamedCase& n : out) {
    if (!only.empty() && only.count(n.id) == 0) continue;
    if (!service && n.c.service_only) continue;
    kept.push_back(std::move(n));
  }
  std::cout << "adversarial: seed " << seed
            << " (SLUICE_ADVERSARIAL_SEED to change), " << count
            << " generated cases (SLUICE_ADVERSARIAL_CASES), " << kept.size() << " to run "
            << (service ? "through the service" : "in process") << std::endl;
  return kept;
}

struct RunnerOutcome {
  SubprocessResult process;
  bool has_status = false;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  std::string message;
  std::string steps;  // the step lines, each with its '\n'
};

std::string Tail(const std::string& s, size_t n = 1500) {
  return s.size() <= n ? s : absl::StrCat("...", s.substr(s.size() - n));
}

std::optional<absl::StatusCode> CodeFromName(absl::string_view name) {
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    if (absl::StatusCodeToString(code) == name) return code;
  }
  return std::nullopt;
}

// Runs the runner on `pipeline` (written to `dir`/pipeline.txt) and reads its report.
absl::StatusOr<RunnerOutcome> RunRunner(const std::string& dir, const std::string& pipeline,
                                        const std::string& coordinator, int64_t steps,
                                        bool one_task, absl::Duration timeout) {
  const std::string file = dir + "/pipeline.txt";
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << pipeline;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", file));
  }
  std::vector<std::string> argv = {BuildPath("tests/adversarial/adversarial_runner"),
                                   "--pipeline_file=" + file, absl::StrCat("--steps=", steps)};
  if (coordinator.empty()) {
    argv.push_back(absl::StrCat("--memory_limit=", kWorkerMemoryLimit));
    argv.push_back(absl::StrCat("--max_element_bytes=", kMaxElementBytes));
  } else {
    argv.push_back("--coordinator=" + coordinator);
    if (one_task) argv.push_back("--num_tasks=1");
  }
  SubprocessOptions options;
  options.timeout = timeout;
  absl::StatusOr<SubprocessResult> r = RunSubprocess(argv, options);
  if (!r.ok()) return r.status();
  RunnerOutcome out;
  out.process = *r;
  const std::string& text = r->stdout_text;
  // The first line that starts with "STATUS " (step lines start with '{').
  size_t at = 0;
  if (!absl::StartsWith(text, "STATUS ")) {
    at = text.find("\nSTATUS ");
    if (at == std::string::npos) return out;
    ++at;
  }
  const size_t eol = text.find('\n', at);
  const std::string name = text.substr(at + 7, eol == std::string::npos ? std::string::npos
                                                                         : eol - at - 7);
  std::optional<absl::StatusCode> code = CodeFromName(name);
  if (!code.has_value()) return out;
  out.has_status = true;
  out.code = *code;
  out.message = eol == std::string::npos ? "" : text.substr(eol + 1);
  out.steps = text.substr(0, at);
  return out;
}

// "" when the outcome keeps the case's contract, else what went wrong.
std::string Judge(const HostileCase& c, const RunnerOutcome& o, absl::Duration timeout) {
  if (o.process.timed_out) {
    return absl::StrCat("HANG: no result within ", absl::FormatDuration(timeout),
                        " (runner killed); its stderr: ", Tail(o.process.stderr_text, 600));
  }
  if (o.process.term_signal != 0 || !o.has_status) {
    return absl::StrCat("CLIENT CRASH: the runner (",
                        "the client library or in-process executor) ended with ",
                        o.process.Describe(), " and no status; stderr: ",
                        Tail(o.process.stderr_text, 800));
  }
  const std::string message(absl::StripTrailingAsciiWhitespace(o.message));
  if (o.code == absl::StatusCode::kOk) {
    if (c.valid && o.steps == c.expected_output) return "";
    if (c.valid) {
      return absl::StrCat("WRONG OUTPUT: ended OK with\n", Tail(o.steps, 1200), "\nexpected\n",
                          c.expected_output);
    }
    const int64_t steps = std::count(o.steps.begin(), o.steps.end(), '\n');
    return absl::StrCat("NO ERROR: ended OK after ", steps, " steps (read at most ", c.max_steps,
                        "): ", Tail(o.steps, 600));
  }
  if (std::find(c.codes.begin(), c.codes.end(), o.code) == c.codes.end()) {
    return absl::StrCat("WRONG CODE: ", absl::StatusCodeToString(o.code), ": ",
                        Tail(message, 800));
  }
  const std::string lower = absl::AsciiStrToLower(message);
  for (const std::string& name : c.names) {
    if (absl::StrContains(lower, absl::AsciiStrToLower(name))) return "";
  }
  return absl::StrCat("UNNAMED: ", absl::StatusCodeToString(o.code), " names none of {",
                      absl::StrJoin(c.names, ", "), "}: ", Tail(message, 800));
}

// range(100).batch(10) over 2 replicas: step i is [10i .. 10i+4] and [10i+5 .. 10i+9].
std::string NormalJobOutput() {
  std::string out;
  for (int step = 0; step < 10; ++step) {
    std::vector<std::string> halves;
    for (int r = 0; r < 2; ++r) {
      std::vector<int> v;
      for (int k = 0; k < 5; ++k) v.push_back(10 * step + 5 * r + k);
      halves.push_back(absl::StrCat("{\"dtype\": \"int64\", \"shape\": [5], \"values\": [",
                                    absl::StrJoin(v, ", "), "]}"));
    }
    absl::StrAppend(&out, "{\"step\": ", step, ", \"per_replica\": [",
                    absl::StrJoin(halves, ", "), "]}\n");
  }
  return out;
}

class Harness {
 public:
  explicit Harness(bool service) : service_(service) {}

  // Runs every case; ADD_FAILURE for each one that breaks its contract.
  void Run() {
    ASSERT_FALSE(dir_.path().empty()) << "mkdtemp failed";
    ASSERT_TRUE(limit_.active()) << "could not set RLIMIT_DATA";
    absl::StatusOr<HostileFiles> files = WriteHostileFiles(dir_.path());
    ASSERT_TRUE(files.ok()) << files.status();
    const std::vector<NamedCase> cases = Cases(*files, service_);
    if (EnvInt("SLUICE_ADVERSARIAL_LIST", 0) != 0) {
      for (const NamedCase& n : cases) std::cout << n.id << " " << n.c.Describe() << "\n";
      GTEST_SKIP() << "SLUICE_ADVERSARIAL_LIST: cases listed, none run";
    }
    const absl::Duration timeout =
        absl::Seconds(EnvInt("SLUICE_ADVERSARIAL_CASE_TIMEOUT_S", 45));
    const absl::Time budget_end =
        absl::Now() + absl::Seconds(EnvInt("SLUICE_ADVERSARIAL_BUDGET_S", 420));
    if (service_) {
      ASSERT_NO_FATAL_FAILURE(StartCluster());
    }

    std::vector<std::string> failures;
    std::string previous;  // the id of the case run last, for deaths found late
    for (size_t i = 0; i < cases.size(); ++i) {
      const NamedCase& n = cases[i];
      if (absl::Now() > budget_end) {
        ADD_FAILURE() << "adversarial: out of time (SLUICE_ADVERSARIAL_BUDGET_S) after " << i
                      << " of " << cases.size() << " cases";
        break;
      }
      if (service_ && !previous.empty()) {
        // A server that died after the last case's client had its answer: that case's doing.
        absl::Status alive = cluster_->CheckRunning();
        if (!alive.ok()) {
          failures.push_back(absl::StrCat(previous, ": SERVER DIED after the case ended: ",
                                          alive.message()));
          ADD_FAILURE() << failures.back();
          ASSERT_NO_FATAL_FAILURE(StartCluster());
        }
      }
      std::cout << "adversarial case " << n.id << " " << n.c.Describe() << std::endl;
      const absl::Time start = absl::Now();
      absl::StatusOr<RunnerOutcome> o =
          RunRunner(dir_.path(), n.c.pipeline, service_ ? cluster_->coordinator() : "",
                    n.c.max_steps, n.c.one_task, timeout);
      ASSERT_TRUE(o.ok()) << o.status();
      std::string failure = Judge(n.c, *o, timeout);
      bool restart = o->process.timed_out;
      if (service_) {
        // A client that fails early can leave its job's tasks running on the workers: give
        // them a moment, so that a death they cause is this case's.
        absl::SleepFor(kSettle);
        absl::Status alive = cluster_->CheckRunning();
        if (!alive.ok()) {
          failure = absl::StrCat("SERVER DIED (the client got: ",
                                 failure.empty() ? "what the case allows" : failure, "): ",
                                 alive.message());
          restart = true;
        }
      }
      std::cout << "  -> " << (o->has_status ? absl::StatusCodeToString(o->code) : "no status")
                << " in " << absl::FormatDuration(absl::Now() - start)
                << (failure.empty() ? "" : " FAILED") << std::endl;
      if (!failure.empty()) {
        failures.push_back(absl::StrCat(n.id, " [", n.c.Describe(200), "]: ", failure));
        // The servers' side of it (each process's tail), while they are the ones that ran it.
        ADD_FAILURE() << "case " << failures.back()
                      << (service_ ? absl::StrCat("\nserver logs:\n", cluster_->Logs()) : "");
      }
      previous = n.id;
      if (service_ && restart) {
        ASSERT_NO_FATAL_FAILURE(StartCluster());
      }
    }
    if (service_ && !previous.empty()) {
      absl::Status alive = cluster_->CheckRunning();
      if (!alive.ok()) {
        failures.push_back(absl::StrCat(previous, ": SERVER DIED after the case ended: ",
                                        alive.message()));
        ADD_FAILURE() << failures.back();
        ASSERT_NO_FATAL_FAILURE(StartCluster());
      }
    }
    ExpectNormalJobServed(timeout);
    if (service_) {
      absl::Status stopped = cluster_->StopAll();
      EXPECT_TRUE(stopped.ok()) << stopped;
    }
    std::cout << "adversarial: " << failures.size() << " of " << cases.size()
              << " cases failed (seed " << Seed() << ")\n";
    for (const std::string& f : failures) std::cout << "  FAILED " << f.substr(0, 300) << "\n";
    std::cout.flush();
  }

 private:
  void StartCluster() {
    cluster_.reset();  // SIGKILLs whatever is left of the last one
    ProcessClusterOptions options;
    options.num_workers = 2;
    options.worker_flags = {absl::StrCat("--memory_limit=", kWorkerMemoryLimit),
                            absl::StrCat("--max_element_bytes=", kMaxElementBytes),
                            "--data_root=" + dir_.path()};
    options.coordinator_flags = {"--data_root=" + dir_.path()};
    auto cluster = ProcessCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    ++starts_;
    ASSERT_LE(starts_, 60) << "adversarial: restarted the cluster too often";
  }

  // After everything: a normal job, exact values.
  void ExpectNormalJobServed(absl::Duration timeout) {
    absl::StatusOr<RunnerOutcome> o =
        RunRunner(dir_.path(), "range(100).batch(10)", service_ ? cluster_->coordinator() : "",
                  /*steps=*/100, /*one_task=*/false, timeout);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_TRUE(o->has_status && o->code == absl::StatusCode::kOk)
        << o->process.Describe() << ": " << o->message << "\n"
        << o->process.stderr_text << (service_ ? cluster_->Logs() : "");
    EXPECT_EQ(o->steps, NormalJobOutput());
    if (service_) {
      absl::Status alive = cluster_->CheckRunning();
      EXPECT_TRUE(alive.ok()) << alive;
    }
  }

  const bool service_;
  ScopedDataLimit limit_{kDataLimit};
  TempDir dir_;
  std::unique_ptr<ProcessCluster> cluster_;
  int starts_ = 0;
};

TEST(AdversarialTest, HostilePipelinesThroughTheServiceFailCleanlyAndEveryServerSurvives) {
  Harness(/*service=*/true).Run();
}

TEST(AdversarialTest, HostilePipelinesInProcessFailCleanlyWithoutKillingTheProcess) {
  Harness(/*service=*/false).Run();
}

}  // namespace
}  // namespace sluice
