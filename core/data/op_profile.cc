#include "core/data/op_profile.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/data/ops/output_slot.h"

namespace sluice {

OpProfile::Counters* OpProfile::For(int position, const std::string& label) {
  absl::MutexLock lock(&mu_);
  for (Slot& s : slots_) {
    if (s.position == position) return &s.counters;
  }
  slots_.emplace_back();
  slots_.back().position = position;
  slots_.back().label = label;
  return &slots_.back().counters;
}

std::vector<OpProfile::OpStats> OpProfile::Snapshot() const {
  std::vector<OpStats> out;
  {
    absl::MutexLock lock(&mu_);
    for (const Slot& s : slots_) {
      OpStats st;
      st.position = s.position;
      st.label = s.label;
      st.calls = s.counters.calls.load(std::memory_order_relaxed);
      st.elements = s.counters.elements.load(std::memory_order_relaxed);
      st.total_ns = s.counters.nanos.load(std::memory_order_relaxed);
      out.push_back(std::move(st));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const OpStats& a, const OpStats& b) { return a.position < b.position; });
  for (size_t i = 0; i < out.size(); ++i) {
    const bool has_input = i > 0 && out[i - 1].position == out[i].position - 1;
    const int64_t below = has_input ? out[i - 1].total_ns : 0;
    out[i].self_ns = std::max<int64_t>(out[i].total_ns - below, 0);
  }
  return out;
}

std::string OpProfile::ToTable() const {
  const std::vector<OpStats> ops = Snapshot();
  int64_t self_sum = 0;
  for (const OpStats& s : ops) self_sum += s.self_ns;
  std::string out = "| op | elements | calls | total ms | self ms | self % |\n|---|---|---|---|---|---|\n";
  for (const OpStats& s : ops) {
    absl::StrAppendFormat(&out, "| %s | %d | %d | %.1f | %.1f | %.0f%% |\n", s.label, s.elements,
                          s.calls, s.total_ns / 1e6, s.self_ns / 1e6,
                          self_sum > 0 ? 100.0 * s.self_ns / self_sum : 0.0);
  }
  return out;
}

namespace {

class ProfilingIterator : public Iterator {
 public:
  ProfilingIterator(std::unique_ptr<Iterator> inner, OpProfile::Counters* counters)
      : inner_(std::move(inner)), counters_(counters) {}

  absl::Status GetNext(Element* out, bool* end_of_sequence) override {
    const auto start = std::chrono::steady_clock::now();
    ForwardSlotOffer(this, inner_.get());  // batch's output slot (ops/output_slot.h)
    absl::Status s = inner_->GetNext(out, end_of_sequence);
    Count(start, s.ok() && !*end_of_sequence ? 1 : 0);
    return s;
  }

  // Passed on (Iterator::Skip): dropped elements are not the op's output, so not counted.
  absl::Status Skip(int64_t count, int64_t* skipped, bool* end_of_sequence) override {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = inner_->Skip(count, skipped, end_of_sequence);
    Count(start, 0);
    return s;
  }

  bool SupportsBlocks() const override { return inner_->SupportsBlocks(); }
  bool BlocksPullableOnPool() const override { return inner_->BlocksPullableOnPool(); }
  bool Rewind() override { return inner_->Rewind(); }

  absl::Status GetNextBlock(int64_t max_elements, Element* out, int64_t* n,
                            bool* end_of_sequence) override {
    const auto start = std::chrono::steady_clock::now();
    ForwardSlotOffer(this, inner_.get());  // batch's destinations (ops/batch_destinations.h)
    absl::Status s = inner_->GetNextBlock(max_elements, out, n, end_of_sequence);
    Count(start, s.ok() && !*end_of_sequence ? *n : 0);
    return s;
  }

 private:
  void Count(std::chrono::steady_clock::time_point start, int64_t elements) {
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count();
    counters_->calls.fetch_add(1, std::memory_order_relaxed);
    counters_->elements.fetch_add(elements, std::memory_order_relaxed);
    counters_->nanos.fetch_add(ns, std::memory_order_relaxed);
  }

  std::unique_ptr<Iterator> inner_;
  OpProfile::Counters* const counters_;
};

}  // namespace

namespace {
absl::Mutex process_profile_mu(absl::kConstInit);
std::shared_ptr<OpProfile>& ProcessProfileSlot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_profile_mu) {
  static auto* slot = new std::shared_ptr<OpProfile>();
  return *slot;
}
}  // namespace

void SetProcessOpProfile(std::shared_ptr<OpProfile> profile) {
  absl::MutexLock lock(&process_profile_mu);
  ProcessProfileSlot() = std::move(profile);
}

std::shared_ptr<OpProfile> ProcessOpProfile() {
  absl::MutexLock lock(&process_profile_mu);
  return ProcessProfileSlot();
}

std::unique_ptr<Iterator> NewProfilingIterator(std::unique_ptr<Iterator> inner, int position,
                                               const std::string& label, OpProfile* profile) {
  return std::make_unique<ProfilingIterator>(std::move(inner), profile->For(position, label));
}

}  // namespace sluice
