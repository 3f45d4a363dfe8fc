#include "tests/observability/prometheus_text.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sluice::testing {
namespace {

bool IsNameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

bool ReadName(const std::string& s, size_t* i, std::string* out) {
  const size_t start = *i;
  while (*i < s.size() && IsNameChar(s[*i], *i == start)) ++*i;
  *out = s.substr(start, *i - start);
  return !out->empty();
}

bool ParseValue(const std::string& text, double* out) {
  if (text == "+Inf") {
    *out = HUGE_VAL;
    return true;
  }
  if (text == "-Inf") {
    *out = -HUGE_VAL;
    return true;
  }
  if (text == "NaN") {
    *out = NAN;
    return true;
  }
  if (text.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

absl::Status ParseSample(const std::string& line, PromSample* sample) {
  size_t i = 0;
  if (!ReadName(line, &i, &sample->name)) return absl::InvalidArgumentError("bad metric name");
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      std::string label;
      if (!ReadName(line, &i, &label)) return absl::InvalidArgumentError("bad label name");
      if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
        return absl::InvalidArgumentError("expected =\" after a label name");
      }
      i += 2;
      std::string value;
      bool closed = false;
      while (i < line.size()) {
        const char c = line[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\') {
          if (i >= line.size()) return absl::InvalidArgumentError("dangling backslash");
          const char e = line[i++];
          if (e == 'n') {
            value += '\n';
          } else if (e == '\\' || e == '"') {
            value += e;
          } else {
            return absl::InvalidArgumentError("bad escape in a label value");
          }
        } else if (c == '\n') {
          return absl::InvalidArgumentError("raw newline in a label value");
        } else {
          value += c;
        }
      }
      if (!closed) return absl::InvalidArgumentError("unterminated label value");
      if (sample->labels.count(label) > 0) return absl::InvalidArgumentError("repeated label");
      sample->labels[label] = value;
      if (i < line.size() && line[i] == ',') {
        ++i;
      } else if (i >= line.size() || line[i] != '}') {
        return absl::InvalidArgumentError("expected , or } after a label");
      }
    }
  }
  if (i >= line.size() || line[i] != ' ') return absl::InvalidArgumentError("expected a space");
  std::vector<std::string> rest = absl::StrSplit(line.substr(i + 1), ' ');
  if (rest.empty() || rest.size() > 2) return absl::InvalidArgumentError("expected value [ts]");
  if (!ParseValue(rest[0], &sample->value)) return absl::InvalidArgumentError("bad value");
  if (rest.size() == 2) {
    char* end = nullptr;
    std::strtoll(rest[1].c_str(), &end, 10);
    if (rest[1].empty() || end != rest[1].c_str() + rest[1].size()) {
      return absl::InvalidArgumentError("bad timestamp");
    }
  }
  return absl::OkStatus();
}

bool Matches(const PromSample& s, const std::string& name,
             const std::map<std::string, std::string>& match) {
  if (s.name != name) return false;
  for (const auto& [k, v] : match) {
    auto it = s.labels.find(k);
    if (it == s.labels.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace

double PromText::Sum(const std::string& name,
                     const std::map<std::string, std::string>& match) const {
  double sum = 0;
  for (const PromSample& s : samples) {
    if (Matches(s, name, match)) sum += s.value;
  }
  return sum;
}

int PromText::Count(const std::string& name,
                    const std::map<std::string, std::string>& match) const {
  int n = 0;
  for (const PromSample& s : samples) n += Matches(s, name, match) ? 1 : 0;
  return n;
}

absl::StatusOr<PromText> ParsePromText(const std::string& text) {
  PromText out;
  if (!text.empty() && text.back() != '\n') {
    return absl::InvalidArgumentError("the exposition does not end with a newline");
  }
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty()) lines.pop_back();  // after the final newline
  for (size_t n = 0; n < lines.size(); ++n) {
    const std::string& line = lines[n];
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", n + 1, " (", why, "): ", line));
    };
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      if (parts.size() >= 3 && parts[1] == "TYPE") {
        if (parts.size() != 4) return bad("TYPE without a type");
        static const char* kTypes[] = {"counter", "gauge", "histogram", "summary", "untyped"};
        bool ok = false;
        for (const char* t : kTypes) ok = ok || parts[3] == t;
        if (!ok) return bad("unknown type");
        if (out.types.count(parts[2]) > 0) return bad("second TYPE for a family");
        out.types[parts[2]] = parts[3];
      } else if (parts.size() >= 3 && parts[1] == "HELP") {
        if (out.help.count(parts[2]) > 0) return bad("second HELP for a family");
        out.help[parts[2]] = parts.size() == 4 ? parts[3] : "";
      }
      continue;
    }
    PromSample sample;
    absl::Status s = ParseSample(line, &sample);
    if (!s.ok()) return bad(s.message());
    out.samples.push_back(std::move(sample));
  }
  return out;
}

}  // namespace sluice::testing
