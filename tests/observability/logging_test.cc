// Structured logs: levels, text and JSON lines, the level guess for event lines.
#include "core/util/logging.h"

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "core/util/json_value.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

class Captured {
 public:
  std::function<void(absl::string_view)> Sink() {
    return [this](absl::string_view line) {
      absl::MutexLock lock(&mu_);
      lines_.emplace_back(line);
    };
  }
  std::vector<std::string> lines() {
    absl::MutexLock lock(&mu_);
    return lines_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> lines_;
};

const absl::Time kTime = absl::FromUnixMicros(1764711000123456);  // 2025-12-02T21:30:00.123456Z

TEST(LoggingTest, TextLine) {
  EXPECT_EQ(FormatLogLine(LogFormat::kText, kTime, LogLevel::kWarning, "worker", "task failed",
                          {{"task", "12"}, {"error", "no such file: a b"}, {"empty", ""}}),
            "2025-12-02T21:30:00.123456Z WARNING worker: task failed task=12 "
            "error=\"no such file: a b\" empty=\"\"");
}

TEST(LoggingTest, JsonLineParses) {
  const std::string line = FormatLogLine(LogFormat::kJson, kTime, LogLevel::kInfo, "coordinator",
                                         "job \"x\" created", {{"job", "3"}});
  EXPECT_EQ(line,
            "{\"ts\": \"2025-12-02T21:30:00.123456Z\", \"level\": \"INFO\", \"component\": "
            "\"coordinator\", \"msg\": \"job \\\"x\\\" created\", \"job\": \"3\"}");
  EXPECT_TRUE(ParseJson(line).ok());
}

TEST(LoggingTest, LevelsFilter) {
  Captured captured;
  FakeClock clock(kTime);
  ConfigureLogging({.min_level = LogLevel::kWarning, .sink = captured.Sink(), .clock = &clock});
  LogEvent(LogLevel::kDebug, "c", "debug line");
  LogEvent(LogLevel::kInfo, "c", "info line");
  LogEvent(LogLevel::kWarning, "c", "warning line");
  LogEvent(LogLevel::kError, "c", "error line");
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  ASSERT_EQ(captured.lines().size(), 2u);
  EXPECT_EQ(captured.lines()[0], "2025-12-02T21:30:00.123456Z WARNING c: warning line");
  EXPECT_EQ(captured.lines()[1], "2025-12-02T21:30:00.123456Z ERROR c: error line");

  Captured all;
  ConfigureLogging({.min_level = LogLevel::kDebug, .sink = all.Sink(), .clock = &clock});
  LogEvent(LogLevel::kDebug, "c", "debug line");
  EXPECT_EQ(all.lines().size(), 1u);
  ConfigureLogging({});
}

TEST(LoggingTest, FlagsParse) {
  EXPECT_EQ(*ParseLogLevel("DEBUG"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("warn"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  absl::Status bad = ConfigureLoggingFromFlags("loud", "text");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--log_level"), std::string::npos);
  EXPECT_NE(bad.message().find("loud"), std::string::npos);
  EXPECT_EQ(ConfigureLoggingFromFlags("info", "xml").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ConfigureLoggingFromFlags("info", "text").ok());
}

TEST(LoggingTest, EventLinesFromServers) {
  EXPECT_EQ(GuessLogLevel("worker 2 (127.0.0.1:5) is dead: no heartbeat for 10s"),
            LogLevel::kWarning);
  EXPECT_EQ(GuessLogLevel("heartbeat to coordinator x failed (retrying with backoff)"),
            LogLevel::kWarning);
  EXPECT_EQ(GuessLogLevel("job 3 created"), LogLevel::kInfo);
  Captured captured;
  FakeClock clock(kTime);
  ConfigureLogging({.min_level = LogLevel::kInfo, .sink = captured.Sink(), .clock = &clock});
  LogLineSink("coordinator")("dataset ds-1 registered");
  ASSERT_EQ(captured.lines().size(), 1u);
  EXPECT_EQ(captured.lines()[0], "2025-12-02T21:30:00.123456Z INFO coordinator: dataset ds-1 registered");
  ConfigureLogging({});
}

}  // namespace
}  // namespace sluice
