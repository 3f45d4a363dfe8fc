// sluicectl bench in local mode, run as a user runs it: exactly one JSON line on stdout whose
// counts follow from the pipeline (steps as asked, elements = steps x global batch, bytes =
// elements x element bytes), --seconds and the end of data stop it, nothing else on stdout and
// no progress line when stderr is not a terminal; bad flags are usage errors naming the flag.
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "core/util/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

SubprocessResult Sluicectl(std::vector<std::string> args) {
  args.insert(args.begin(), BuildPath("bin/sluicectl"));
  absl::StatusOr<SubprocessResult> r = RunSubprocess(args);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SubprocessResult{};
}

// The one JSON line of a successful bench.
JsonValue BenchJson(const std::vector<std::string>& args) {
  SubprocessResult r = Sluicectl(args);
  EXPECT_EQ(r.exit_code, 0) << r.Describe() << "\n" << r.stderr_text;
  std::vector<std::string> lines = absl::StrSplit(r.stdout_text, '\n');
  EXPECT_EQ(lines.size(), 2u) << "exactly one line, newline-terminated: " << r.stdout_text;
  EXPECT_TRUE(lines.empty() || lines.back().empty()) << r.stdout_text;
  // Not a terminal: no progress line (carriage returns) on stderr.
  EXPECT_EQ(r.stderr_text.find('\r'), std::string::npos) << r.stderr_text;
  absl::StatusOr<JsonValue> j = ParseJson(lines.empty() ? "" : lines[0]);
  EXPECT_TRUE(j.ok()) << j.status() << "\n" << r.stdout_text;
  return j.ok() ? *j : JsonValue();
}

int64_t Int(const JsonValue& j, const char* key) {
  const JsonValue* v = j.Find(key);
  EXPECT_NE(v, nullptr) << key << " in " << j.ToString();
  if (v == nullptr) return -1;
  EXPECT_TRUE(v->int_value().has_value()) << key << " in " << j.ToString();
  return v->int_value().value_or(-1);
}

double Num(const JsonValue& j, const char* key) {
  const JsonValue* v = j.Find(key);
  EXPECT_TRUE(v != nullptr && v->is_number()) << key << " in " << j.ToString();
  return v != nullptr ? v->number() : -1;
}

// Rates are the counts over the measured seconds.
void ExpectRatesConsistent(const JsonValue& j) {
  const double s = Num(j, "seconds");
  ASSERT_GT(s, 0) << j.ToString();
  EXPECT_NEAR(Num(j, "steps_per_second"), Int(j, "steps") / s, 1e-6 * Int(j, "steps") / s);
  EXPECT_NEAR(Num(j, "elements_per_second"), Int(j, "elements") / s,
              1e-6 * Int(j, "elements") / s);
  EXPECT_NEAR(Num(j, "bytes_per_second"), Int(j, "bytes") / s, 1e-6 * Int(j, "bytes") / s);
  const JsonValue* wait = j.Find("wait_seconds");
  ASSERT_NE(wait, nullptr);
  const double p50 = Num(*wait, "p50"), p99 = Num(*wait, "p99"), max = Num(*wait, "max");
  EXPECT_GE(p50, 0);
  EXPECT_LE(p50, p99);
  EXPECT_LE(p99, max);
  EXPECT_LE(max, s);  // each wait is inside the measured time
  ASSERT_NE(j.Find("ops"), nullptr);  // null without --profile
  EXPECT_TRUE(j["ops"].is_null());
}

TEST(SluicectlBenchTest, FixedPipelineCountsFollowFromTheShapes) {
  // 1 KiB of uint8 per element, global batch 8 over two replicas: 4 KiB per replica per step.
  const std::string pipeline =
      "from_tensors(tf.constant(7, dtype=tf.uint8, shape=[1024])).repeat().batch(8)";
  JsonValue j = BenchJson({"bench", "--pipeline=" + pipeline, "--devices=GPU:0,GPU:1",
                           "--steps=50", "--warmup_steps=3"});
  EXPECT_EQ(Int(j, "steps"), 50);
  EXPECT_EQ(Int(j, "elements"), 50 * 8);
  EXPECT_EQ(Int(j, "bytes"), 50 * 8 * 1024);
  EXPECT_FALSE(j["end_of_data"].bool_value());
  ExpectRatesConsistent(j);
  const JsonValue& p = j["parameters"];
  EXPECT_EQ(p["pipeline"].string_value(), pipeline);
  EXPECT_EQ(p["mode"].string_value(), "local");
  EXPECT_EQ(p["devices"].ToString(), "[\"GPU:0\", \"GPU:1\"]");
  EXPECT_EQ(Int(p, "steps"), 50);
  EXPECT_EQ(Int(p, "warmup_steps"), 3);
  EXPECT_TRUE(p["seconds"].is_null());
  EXPECT_TRUE(p["coordinator"].is_null());
}

TEST(SluicectlBenchTest, DtypeAndComponentsCountInBytes) {
  // A tuple of float64 [3] and int32 scalar, batch 4 on one CPU replica: (24 + 4) bytes and one
  // element per row.
  JsonValue j = BenchJson({"bench",
                           "--pipeline=from_tensors((tf.constant(1.5, dtype=tf.float64, "
                           "shape=[3]), 2)).repeat().batch(4)",
                           "--devices=CPU:0", "--steps=10"});
  EXPECT_EQ(Int(j, "steps"), 10);
  EXPECT_EQ(Int(j, "elements"), 40);
  EXPECT_EQ(Int(j, "bytes"), 40 * (3 * 8 + 4));
  ExpectRatesConsistent(j);
}

// The op of `ops` (the --profile array) whose label contains `name`; null if none.
const JsonValue* FindOp(const JsonValue& ops, const std::string& name) {
  for (const JsonValue& op : ops.items()) {
    if (op["op"].string_value().find(name) != std::string::npos) return &op;
  }
  return nullptr;
}

TEST(SluicectlBenchTest, ProfileCountsEachOpsElements) {
  // 1,000 elements cast and batched by 10 on one CPU replica, run to the end: the source hands
  // out 1,000 elements, map 1,000 and batch 100, each op's self time within its total.
  SubprocessResult r = Sluicectl({"bench", "--pipeline=range(1000).map(cast(tf.int32)).batch(10)",
                                  "--devices=CPU:0", "--profile"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe() << "\n" << r.stderr_text;
  absl::StatusOr<JsonValue> j = ParseJson(r.stdout_text);
  ASSERT_TRUE(j.ok()) << j.status() << "\n" << r.stdout_text;
  EXPECT_EQ(Int(*j, "steps"), 100);
  const JsonValue& ops = (*j)["ops"];
  ASSERT_TRUE(ops.is_array()) << j->ToString();
  const JsonValue* range = FindOp(ops, "range");
  const JsonValue* map = FindOp(ops, "map");
  const JsonValue* batch = FindOp(ops, "batch");
  ASSERT_TRUE(range != nullptr && map != nullptr && batch != nullptr) << ops.ToString();
  EXPECT_EQ(Int(*range, "elements"), 1000);
  EXPECT_EQ(Int(*map, "elements"), 1000);
  EXPECT_EQ(Int(*batch, "elements"), 100);
  for (const JsonValue& op : ops.items()) {
    EXPECT_GE(Num(op, "self_seconds"), 0) << op.ToString();
    EXPECT_GE(Num(op, "seconds"), Num(op, "self_seconds")) << op.ToString();
  }
}

TEST(SluicectlBenchTest, ProfileThroughTheServiceIsAUsageErrorNamingTheWorkerFlag) {
  SubprocessResult r = Sluicectl({"bench", "--pipeline=range(10)", "--devices=CPU:0",
                                  "--coordinator=localhost:1", "--profile"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_THAT(r.stderr_text, HasSubstr("--op_metrics"));
}

TEST(SluicectlBenchTest, EndOfDataStopsItAndIsReported) {
  // range(10).batch(4): batches of 4, 4 and 2 (int64), split over two replicas.
  JsonValue j = BenchJson({"bench", "--pipeline=range(10).batch(4)", "--devices=CPU:0,CPU:1"});
  EXPECT_EQ(Int(j, "steps"), 3);
  EXPECT_EQ(Int(j, "elements"), 10);
  EXPECT_EQ(Int(j, "bytes"), 10 * 8);
  EXPECT_TRUE(j["end_of_data"].bool_value());
  EXPECT_TRUE(j["parameters"]["steps"].is_null());
  // --steps beyond the data: the steps there were.
  JsonValue more = BenchJson(
      {"bench", "--pipeline=range(10).batch(4)", "--devices=CPU:0,CPU:1", "--steps=100"});
  EXPECT_EQ(Int(more, "steps"), 3);
  EXPECT_TRUE(more["end_of_data"].bool_value());
}

TEST(SluicectlBenchTest, SecondsBoundsAnInfinitePipeline) {
  JsonValue j = BenchJson({"bench", "--pipeline=range(1000000).repeat().batch(2)",
                           "--devices=CPU:0", "--seconds=0.2"});
  EXPECT_GT(Int(j, "steps"), 0);
  EXPECT_GE(Num(j, "seconds"), 0.2);
  EXPECT_EQ(Int(j, "elements"), 2 * Int(j, "steps"));
  EXPECT_FALSE(j["end_of_data"].bool_value());
  EXPECT_EQ(Num(j["parameters"], "seconds"), 0.2);
  // With both limits, --steps comes first here.
  JsonValue both = BenchJson({"bench", "--pipeline=range(5).repeat()", "--devices=CPU:0",
                              "--steps=7", "--seconds=600"});
  EXPECT_EQ(Int(both, "steps"), 7);
  EXPECT_EQ(Int(both, "elements"), 7);  // scalars: one element per replica per step
}

// --step_interval paces it as a trainer whose step takes that long: each GetNext comes at least
// that long after the one before (a lower bound on the time, which a loaded machine only
// lengthens), and the steps it takes are still all counted.
TEST(SluicectlBenchTest, StepIntervalPacesTheLoop) {
  JsonValue j = BenchJson({"bench", "--pipeline=range(1000).batch(2)", "--devices=CPU:0",
                           "--steps=11", "--step_interval=0.02"});
  EXPECT_EQ(Int(j, "steps"), 11);
  EXPECT_EQ(Int(j, "elements"), 22);
  // Ten full intervals between the first GetNext and the last, and the last one's pause.
  EXPECT_GE(Num(j, "seconds"), 10 * 0.02);
  EXPECT_EQ(Num(j["parameters"], "step_interval"), 0.02);
}

TEST(SluicectlBenchTest, BadFlagsAreClearErrors) {
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--pipeline=range(4)", "--steps=-3"}, 2, "--steps must be non-negative, got -3"},
      {{"--pipeline=range(4)", "--seconds=-1"}, 2, "--seconds must be a non-negative number"},
      {{"--pipeline=range(4)", "--seconds=abc"}, 2, "--seconds"},
      {{"--pipeline=range(4)", "--warmup_steps=-1"}, 2, "--warmup_steps must be non-negative"},
      {{"--pipeline=range(4)", "--step_interval=-0.5"}, 2, "--step_interval must be in [0, 3600]"},
      {{"--pipeline=range(4)", "--format=json"}, 2, "unknown flag --format"},
      {{"--devices=CPU:0"}, 2, "--pipeline is required"},
      {{"--pipeline=range(4).repeat()", "--devices=CPU:0"}, 1,
       "is infinite (it repeats forever); pass --steps=N or --seconds=T"},
      {{"--pipeline=range(4).batch(0)", "--devices=CPU:0"}, 1, "batch_size must be positive"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.insert(args.begin(), "bench");
    SubprocessResult r = Sluicectl(args);
    EXPECT_EQ(r.exit_code, c.exit_code) << args[1] << " " << r.stderr_text;
    EXPECT_THAT(r.stderr_text, HasSubstr(c.message)) << args[1];
    EXPECT_EQ(r.stdout_text, "") << args[1];
  }
}

// Runs `sluicectl args` with its stdout and stderr on a pseudo-terminal; everything it wrote
// there, and its exit status (-1 on failure to run). Bounded: gives up after ~60 s of silence.
std::pair<std::string, int> RunOnTerminal(std::vector<std::string> args) {
  args.insert(args.begin(), BuildPath("bin/sluicectl"));
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) return {"forkpty failed", -1};
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, 60000) <= 0) break;  // silence: give up (the test then fails)
    const ssize_t n = read(master, buf, sizeof(buf));
    if (n <= 0) break;  // EIO once the child has exited and closed the terminal
    out.append(buf, static_cast<size_t>(n));
  }
  close(master);
  int status = 0;
  waitpid(pid, &status, 0);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

TEST(SluicectlBenchTest, ProgressLineOnlyOnATerminal) {
  // Runs 1.5 s, so the progress line (redrawn every 0.5 s) is drawn at least once, then erased.
  auto [out, code] = RunOnTerminal({"bench", "--pipeline=range(1000000).repeat().batch(2)",
                                    "--devices=CPU:0", "--seconds=1.5"});
  ASSERT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("\rsluicectl bench: ")) << out;
  EXPECT_THAT(out, HasSubstr(" steps/s ")) << out;
  EXPECT_THAT(out, HasSubstr("\r\033[K")) << "the line is erased at the end: " << out;
  // The JSON line follows, whole.
  const size_t json = out.find("{\"steps\": ");
  ASSERT_NE(json, std::string::npos) << out;
  std::string line = out.substr(json, out.find('\n', json) - json);
  if (!line.empty() && line.back() == '\r') line.pop_back();  // the terminal's CR LF
  absl::StatusOr<JsonValue> j = ParseJson(line);
  EXPECT_TRUE(j.ok()) << j.status() << "\n" << line;
  // Not a terminal (the other tests): no progress, see BenchJson.
}

TEST(SluicectlBenchTest, HelpListsTheCommand) {
  SubprocessResult r = Sluicectl({"help", "bench"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.stdout_text, HasSubstr("--seconds"));
  EXPECT_THAT(r.stdout_text, HasSubstr("--warmup_steps"));
  SubprocessResult all = Sluicectl({"help"});
  EXPECT_THAT(all.stdout_text, HasSubstr("bench --pipeline=EXPR"));
}

}  // namespace
}  // namespace sluice
