#include "tests/integration/step_model.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/util/json_value.h"

namespace sluice {

absl::StatusOr<std::vector<ModelStep>> ParseRunJson(const std::string& stdout_text) {
  std::vector<ModelStep> steps;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(stdout_text, '\n', absl::SkipEmpty())) {
    ++line_number;
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(
          absl::StrCat("run output line ", line_number, ": ", what, ": ", line));
    };
    absl::StatusOr<JsonValue> json = ParseJson(line);
    if (!json.ok()) return bad(std::string(json.status().message()));
    const JsonValue* step = json->Find("step");
    const JsonValue* per_replica = json->Find("per_replica");
    const JsonValue* plain = json->Find("value");  // one device on one worker: TF's plain value
    const bool replicas_ok = per_replica != nullptr && per_replica->is_array();
    if (step == nullptr || (plain == nullptr && !replicas_ok)) {
      return bad(R"(expected {"step": S, "per_replica": [...]} or {"step": S, "value": V})");
    }
    if (step->int_value() != static_cast<int64_t>(steps.size())) return bad("step out of order");
    ModelStep model;
    const std::vector<JsonValue> replicas =
        plain != nullptr ? std::vector<JsonValue>{*plain} : per_replica->items();
    for (const JsonValue& value : replicas) {
      const JsonValue* values = value.Find("values");
      if (values == nullptr || !values->is_array()) return bad("replica value is not a tensor");
      std::vector<int64_t> piece;
      for (const JsonValue& v : values->items()) {
        int64_t x = 0;
        if (v.is_number() && v.int_value().has_value()) {
          x = *v.int_value();
        } else if (!(v.is_string() && absl::SimpleAtoi(v.string_value(), &x))) {
          return bad("values are neither integers nor decimal strings");
        }
        piece.push_back(x);
      }
      model.push_back(std::move(piece));
    }
    steps.push_back(std::move(model));
  }
  return steps;
}

std::vector<ModelStep> TaskSteps(const std::vector<int64_t>& elements,
                                 const std::vector<int64_t>& period, int64_t pieces_per_step) {
  std::vector<ModelStep> steps;
  size_t pos = 0;
  size_t piece_index = 0;
  while (pos < elements.size()) {
    ModelStep step;
    for (int64_t k = 0; k < pieces_per_step; ++k, ++piece_index) {
      const size_t size = static_cast<size_t>(period[piece_index % period.size()]);
      const size_t take = std::min(size, elements.size() - pos);
      step.emplace_back(elements.begin() + pos, elements.begin() + pos + take);
      pos += take;
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

std::vector<ModelStep> RoundRobin(const std::vector<std::vector<ModelStep>>& tasks) {
  std::vector<ModelStep> global;
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (const auto& task : tasks) {
      if (round < task.size()) {
        global.push_back(task[round]);
        any = true;
      }
    }
    if (!any) break;
  }
  return global;
}

std::vector<ModelStep> ConsumerView(const std::vector<ModelStep>& global, int64_t consumer,
                                    int64_t replicas_per_consumer) {
  std::vector<ModelStep> view;
  for (const ModelStep& step : global) {
    view.emplace_back(step.begin() + consumer * replicas_per_consumer,
                      step.begin() + (consumer + 1) * replicas_per_consumer);
  }
  return view;
}

absl::StatusOr<std::vector<ModelStep>> JoinConsumers(
    const std::vector<std::vector<ModelStep>>& views) {
  std::vector<ModelStep> global;
  if (views.empty()) return global;
  for (size_t c = 1; c < views.size(); ++c) {
    if (views[c].size() != views[0].size()) {
      return absl::InvalidArgumentError(absl::StrCat("consumer 0 read ", views[0].size(),
                                                     " steps, consumer ", c, " read ",
                                                     views[c].size()));
    }
  }
  for (size_t s = 0; s < views[0].size(); ++s) {
    ModelStep step;
    for (const auto& view : views) step.insert(step.end(), view[s].begin(), view[s].end());
    global.push_back(std::move(step));
  }
  return global;
}

std::vector<int64_t> PieceSizes(const ModelStep& step) {
  std::vector<int64_t> sizes;
  for (const auto& piece : step) sizes.push_back(static_cast<int64_t>(piece.size()));
  return sizes;
}

bool FollowsTfRule(const std::vector<int64_t>& sizes, const std::vector<int64_t>& period,
                   int64_t pieces_per_step) {
  if (static_cast<int64_t>(sizes.size()) != pieces_per_step) return false;
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  for (size_t row = 0; row + pieces_per_step <= period.size(); row += pieces_per_step) {
    int64_t left = total;
    bool match = true;
    for (int64_t k = 0; k < pieces_per_step; ++k) {
      const int64_t want = std::min(period[row + k], left);
      left -= want;
      if (sizes[k] != want) {
        match = false;
        break;
      }
    }
    if (match && left == 0) return true;
  }
  return false;
}

std::string DescribeSteps(const std::vector<ModelStep>& steps, size_t max_steps) {
  std::vector<std::string> out;
  for (size_t s = 0; s < steps.size() && s < max_steps; ++s) {
    std::vector<std::string> pieces;
    for (const auto& piece : steps[s]) {
      pieces.push_back(absl::StrCat("[", absl::StrJoin(piece, " "), "]"));
    }
    out.push_back(absl::StrJoin(pieces, " "));
  }
  if (steps.size() > max_steps) out.push_back("...");
  return absl::StrJoin(out, " | ");
}

namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

uint64_t SplitMix64Finalizer(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ULL;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return z;
}

}  // namespace

int64_t ModelFullShufflePosition(int64_t n, uint64_t seed, int64_t epoch, int64_t position) {
  if (n <= 1) return position;
  const uint64_t key =
      SplitMix64Finalizer(seed ^ SplitMix64Finalizer(static_cast<uint64_t>(epoch) ^ kGolden));
  // h bits per half: the smallest 2^(2h) >= n.
  int h = 0;
  while ((uint64_t{1} << (2 * h)) < static_cast<uint64_t>(n)) ++h;
  const uint64_t mask = (uint64_t{1} << h) - 1;
  auto encrypt = [&](uint64_t x) {
    uint64_t left = x >> h;
    uint64_t right = x & mask;
    for (int r = 0; r < 8; ++r) {
      const uint64_t round_key = SplitMix64Finalizer(key + static_cast<uint64_t>(r + 1) * kGolden);
      const uint64_t f = SplitMix64Finalizer(right ^ round_key) & mask;
      const uint64_t new_right = left ^ f;
      left = right;
      right = new_right;
    }
    return (left << h) | right;
  };
  uint64_t y = encrypt(static_cast<uint64_t>(position));
  for (int walk = 0; y >= static_cast<uint64_t>(n) && walk < 1000000; ++walk) y = encrypt(y);
  return static_cast<int64_t>(y);
}

std::vector<std::vector<ModelStep>> PipelineOrderViews(int64_t elements, int64_t batch,
                                                       int64_t consumers, int64_t replicas,
                                                       std::optional<uint64_t> shuffle_seed) {
  const int64_t n = consumers * replicas;
  const int64_t piece = batch / n;
  std::vector<std::vector<ModelStep>> views(static_cast<size_t>(consumers));
  for (int64_t s = 0; s * batch < elements; ++s) {
    for (int64_t c = 0; c < consumers; ++c) {
      ModelStep step;
      for (int64_t r = 0; r < replicas; ++r) {
        std::vector<int64_t> values;
        for (int64_t i = 0; i < piece; ++i) {
          const int64_t position = s * batch + (c * replicas + r) * piece + i;
          values.push_back(shuffle_seed.has_value()
                               ? ModelFullShufflePosition(elements, *shuffle_seed, 0, position)
                               : position);
        }
        step.push_back(std::move(values));
      }
      views[static_cast<size_t>(c)].push_back(std::move(step));
    }
  }
  return views;
}

}  // namespace sluice
