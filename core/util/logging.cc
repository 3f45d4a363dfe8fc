#include "core/util/logging.h"

#include <unistd.h>

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/util/json_value.h"

namespace sluice {
namespace {

struct Logger {
  absl::Mutex mu;
  LoggingOptions options ABSL_GUARDED_BY(mu);
};

Logger& TheLogger() {
  static Logger* const logger = new Logger();
  return *logger;
}

bool NeedsQuotes(absl::string_view v) {
  if (v.empty()) return true;
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || static_cast<unsigned char>(c) < 0x20 ||
        c == 0x7f) {
      return true;
    }
  }
  return false;
}

std::string TextValue(absl::string_view v) { return NeedsQuotes(v) ? JsonQuote(v) : std::string(v); }

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(text);
  if (t == "debug") return LogLevel::kDebug;
  if (t == "info") return LogLevel::kInfo;
  if (t == "warning" || t == "warn") return LogLevel::kWarning;
  if (t == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("log level '", text, "': expected debug, info, warning or error"));
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(text);
  if (t == "text") return LogFormat::kText;
  if (t == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(absl::StrCat("log format '", text, "': expected text or json"));
}

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "INFO";
}

void ConfigureLogging(LoggingOptions options) {
  Logger& logger = TheLogger();
  absl::MutexLock lock(&logger.mu);
  logger.options = std::move(options);
}

absl::Status ConfigureLoggingFromFlags(absl::string_view level, absl::string_view format) {
  absl::StatusOr<LogLevel> l = ParseLogLevel(level);
  if (!l.ok()) return absl::InvalidArgumentError(absl::StrCat("--log_level: ", l.status().message()));
  absl::StatusOr<LogFormat> f = ParseLogFormat(format);
  if (!f.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--log_format: ", f.status().message()));
  }
  LoggingOptions options;
  options.min_level = *l;
  options.format = *f;
  ConfigureLogging(std::move(options));
  return absl::OkStatus();
}

bool LogEnabled(LogLevel level) {
  Logger& logger = TheLogger();
  absl::MutexLock lock(&logger.mu);
  return level >= logger.options.min_level;
}

std::string FormatLogLine(LogFormat format, absl::Time time, LogLevel level,
                          absl::string_view component, absl::string_view message,
                          const LogFields& fields) {
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", time, absl::UTCTimeZone());
  if (format == LogFormat::kJson) {
    std::string out = absl::StrCat("{\"ts\": ", JsonQuote(ts), ", \"level\": ",
                                   JsonQuote(LogLevelName(level)), ", \"component\": ",
                                   JsonQuote(component), ", \"msg\": ", JsonQuote(message));
    for (const auto& [k, v] : fields) absl::StrAppend(&out, ", ", JsonQuote(k), ": ", JsonQuote(v));
    out += "}";
    return out;
  }
  std::string out = absl::StrCat(ts, " ", LogLevelName(level), " ", component, ": ", message);
  for (const auto& [k, v] : fields) absl::StrAppend(&out, " ", k, "=", TextValue(v));
  return out;
}

void LogEvent(LogLevel level, absl::string_view component, absl::string_view message,
              const LogFields& fields) {
  Logger& logger = TheLogger();
  std::function<void(absl::string_view)> sink;
  std::string line;
  {
    absl::MutexLock lock(&logger.mu);
    const LoggingOptions& o = logger.options;
    if (level < o.min_level) return;
    Clock* clock = o.clock != nullptr ? o.clock : Clock::Real();
    line = FormatLogLine(o.format, clock->Now(), level, component, message, fields);
    sink = o.sink;
  }
  if (sink) {
    sink(line);
    return;
  }
  line += "\n";
  // One write(2) per line: lines from several threads or processes sharing stderr stay whole.
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

LogLevel GuessLogLevel(absl::string_view line) {
  const std::string lower = absl::AsciiStrToLower(line);
  for (absl::string_view word : {"failed", "is dead", "error", "cannot", "refused"}) {
    if (absl::StrContains(lower, word)) return LogLevel::kWarning;
  }
  return LogLevel::kInfo;
}

std::function<void(absl::string_view)> LogLineSink(std::string component) {
  return [component = std::move(component)](absl::string_view line) {
    LogEvent(GuessLogLevel(line), component, line);
  };
}

}  // namespace sluice
