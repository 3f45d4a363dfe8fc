// A strict reader of the Prometheus text exposition format 0.0.4, for tests: every line must be
// a HELP or TYPE comment or a sample `name{label="value",...} value`, with label values escaped
// as the format says.
#ifndef SLUICE_TESTS_OBSERVABILITY_PROMETHEUS_TEXT_H_
#define SLUICE_TESTS_OBSERVABILITY_PROMETHEUS_TEXT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice::testing {

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromText {
  std::vector<PromSample> samples;
  std::map<std::string, std::string> types;  // family name -> counter|gauge|...
  std::map<std::string, std::string> help;

  // Sum of the samples named `name` whose labels include every pair of `match`.
  double Sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const;
  // Number of such samples.
  int Count(const std::string& name, const std::map<std::string, std::string>& match = {}) const;
};

// INVALID_ARGUMENT naming the line number and text of the first malformed line.
absl::StatusOr<PromText> ParsePromText(const std::string& text);

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_OBSERVABILITY_PROMETHEUS_TEXT_H_
