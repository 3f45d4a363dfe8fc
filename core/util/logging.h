// Structured logs: one line per event with a timestamp, a level, the component and key=value
// fields, as text or as JSON (one object a line).
//
//   text: 2026-12-02T21:30:00.123456Z INFO coordinator: worker registered worker=1 address=127.0.0.1:5001
//   json: {"ts": "2026-12-02T21:30:00.123456Z", "level": "INFO", "component": "coordinator",
//          "msg": "worker registered", "worker": "1", "address": "127.0.0.1:5001"}
//
// Text values with spaces, quotes, '=' or control characters are written quoted (JSON string
// escaping); plain ones as they are. The binaries configure the process-wide logger from
// --log_level (debug|info|warning|error) and --log_format (text|json) and route the
// coordinator's and workers' event lines through it (LogLineSink).
//
//   ConfigureLogging({.min_level = LogLevel::kDebug});
//   LogEvent(LogLevel::kInfo, "worker", "task started", {{"task", "12"}, {"job", "3"}});
//
// Thread safety: thread-safe; each event is written with one write so lines never interleave.
#ifndef SLUICE_CORE_LOGGING_H_
#define SLUICE_CORE_LOGGING_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/util/clock.h"

namespace sluice {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kText, kJson };

using LogFields = std::vector<std::pair<std::string, std::string>>;

// "debug", "info", "warning" (or "warn"), "error", any case. INVALID_ARGUMENT naming the text.
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view text);
// "text" or "json". INVALID_ARGUMENT naming the text.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text);
// "DEBUG", "INFO", "WARNING", "ERROR".
absl::string_view LogLevelName(LogLevel level);

struct LoggingOptions {
  // Events below this level are dropped.
  LogLevel min_level = LogLevel::kInfo;
  LogFormat format = LogFormat::kText;
  // Receives each formatted line (without the newline). Unset: stderr.
  std::function<void(absl::string_view)> sink;
  // Timestamps. Borrowed, must outlive its use; nullptr: the real clock.
  Clock* clock = nullptr;
};

// Replaces the process-wide logger's options.
void ConfigureLogging(LoggingOptions options);
// ConfigureLogging from the flags' texts. INVALID_ARGUMENT naming the bad flag value.
absl::Status ConfigureLoggingFromFlags(absl::string_view level, absl::string_view format);

// True when an event at `level` would be written.
bool LogEnabled(LogLevel level);
// Writes one event through the process-wide logger.
void LogEvent(LogLevel level, absl::string_view component, absl::string_view message,
              const LogFields& fields = {});
// The line LogEvent writes, without the newline (for tests and other sinks).
std::string FormatLogLine(LogFormat format, absl::Time time, LogLevel level,
                          absl::string_view component, absl::string_view message,
                          const LogFields& fields);

// The level of a free-form event line from the servers' `log` callbacks: WARNING when it
// reports a failure (dead worker, failed heartbeat or task, error), INFO otherwise.
LogLevel GuessLogLevel(absl::string_view line);
// A callback for CoordinatorOptions::log / WorkerServerOptions::log: each line becomes one
// event of `component` at GuessLogLevel(line).
std::function<void(absl::string_view)> LogLineSink(std::string component);

}  // namespace sluice

#endif  // SLUICE_CORE_LOGGING_H_
