#include "core/data/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

// Heap cost of the structure around payloads, per element and per leaf: the Nest node, the
// Tensor with its shape and buffer handle, the buffer's control block and the allocator's
// rounding. Measured: `from_tensors([1]).repeat().batch(n)` holds ~370 bytes per element.
constexpr int64_t kElementOverhead = 96;
constexpr int64_t kLeafOverhead = 256;
constexpr int64_t kStringOverhead = 32;  // a std::string beside its characters

// Reservations are taken from the shared counter in chunks, so that a batch of small elements
// costs one atomic operation per chunk, not per element.
constexpr int64_t kChunk = int64_t{1} << 20;

// The cgroup's limit in bytes, or 0 when there is none (or it reads "max").
int64_t CgroupLimitBytes() {
  for (const char* path : {"/sys/fs/cgroup/memory.max",                     // cgroup v2
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {  // v1
    std::ifstream in(path);
    std::string text;
    if (!(in >> text)) continue;
    int64_t v = 0;
    // v1 reports "no limit" as a number near 2^63.
    if (absl::SimpleAtoi(text, &v) && v > 0 && v < (int64_t{1} << 60)) return v;
  }
  return 0;
}

int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return int64_t{8} << 30;
  return static_cast<int64_t>(pages) * page;
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max()
                                                     : a + b;
}

}  // namespace

MemoryLimits DefaultMemoryLimits() {
  int64_t machine = PhysicalMemoryBytes();
  const int64_t cgroup = CgroupLimitBytes();
  if (cgroup > 0) machine = std::min(machine, cgroup);
  MemoryLimits limits;
  limits.process_bytes = machine / 4 * 3;
  limits.element_bytes = limits.process_bytes / 4;
  return limits;
}

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text, absl::string_view flag) {
  auto invalid = [&]() {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": '", text, "' is not a size in bytes (e.g. 4GiB, 512MiB, 1e9, 1000000)"));
  };
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  int shift = 0;
  for (auto [suffix, bits] : {std::pair{"kib", 10}, {"mib", 20}, {"gib", 30}, {"tib", 40},
                              {"k", 10}, {"m", 20}, {"g", 30}, {"t", 40}, {"b", 0}}) {
    if (absl::EndsWith(s, suffix) && s.size() > std::string(suffix).size()) {
      s.resize(s.size() - std::string(suffix).size());
      shift = bits;
      break;
    }
  }
  double v = 0;
  if (s.empty() || !absl::SimpleAtod(s, &v) || !std::isfinite(v) || v < 0) return invalid();
  v = std::ldexp(v, shift);
  if (v >= 9.2e18) return invalid();
  return static_cast<int64_t>(v);
}

absl::Status ConfigureProcessMemoryBudget(absl::string_view memory_limit,
                                          absl::string_view max_element_bytes) {
  MemoryLimits limits = DefaultMemoryLimits();
  if (!memory_limit.empty()) {
    absl::StatusOr<int64_t> v = ParseByteSize(memory_limit, "--memory_limit");
    if (!v.ok()) return v.status();
    limits.process_bytes = *v;
    limits.element_bytes = *v / 4;
  }
  if (!max_element_bytes.empty()) {
    absl::StatusOr<int64_t> v = ParseByteSize(max_element_bytes, "--max_element_bytes");
    if (!v.ok()) return v.status();
    limits.element_bytes = *v;
  }
  if (limits.element_bytes > limits.process_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_element_bytes (", limits.element_bytes, ") is above --memory_limit (",
        limits.process_bytes, ")"));
  }
  ProcessMemoryBudget().SetLimits(limits);
  return absl::OkStatus();
}

void MemoryBudget::SetLimits(MemoryLimits limits) {
  process_bytes_.store(std::max<int64_t>(limits.process_bytes, 0), std::memory_order_relaxed);
  element_bytes_.store(std::max<int64_t>(limits.element_bytes, 0), std::memory_order_relaxed);
}

MemoryLimits MemoryBudget::limits() const {
  MemoryLimits l;
  l.process_bytes = process_bytes_.load(std::memory_order_relaxed);
  l.element_bytes = element_bytes_.load(std::memory_order_relaxed);
  return l;
}

absl::Status MemoryBudget::Reserve(int64_t bytes, absl::string_view what) {
  const int64_t limit = process_bytes_.load(std::memory_order_relaxed);
  int64_t used = in_use_.load(std::memory_order_relaxed);
  while (true) {
    if (SaturatingAdd(used, bytes) > limit) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, ": needs ", bytes, " more bytes, but ", used, " of the process's memory limit of ",
          limit, " bytes are in use (--memory_limit)"));
    }
    if (in_use_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed)) {
      return absl::OkStatus();
    }
  }
}

void MemoryBudget::Release(int64_t bytes) { in_use_.fetch_sub(bytes, std::memory_order_relaxed); }

absl::Status MemoryBudget::CheckElement(int64_t bytes, absl::string_view what,
                                        absl::string_view describe) const {
  const int64_t limit = element_bytes_.load(std::memory_order_relaxed);
  if (bytes <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      what, ": ", describe, " needs more than the memory limit of one element, ", limit,
      " bytes (--max_element_bytes)"));
}

MemoryBudget& ProcessMemoryBudget() {
  static MemoryBudget* const budget = new MemoryBudget(DefaultMemoryLimits());
  return *budget;
}

int64_t TensorFootprint(const Tensor& t) {
  int64_t bytes = kLeafOverhead + static_cast<int64_t>(t.payload_bytes());
  if (t.dtype() == DType::kString) bytes += kStringOverhead * t.num_elements();
  return bytes;
}

int64_t AllocationFootprint(DType dtype, int64_t num_elements) {
  const int64_t per = dtype == DType::kString ? kStringOverhead : DTypeSize(dtype);
  if (num_elements > (std::numeric_limits<int64_t>::max() - kLeafOverhead) / std::max<int64_t>(per, 1)) {
    return std::numeric_limits<int64_t>::max();
  }
  return kLeafOverhead + per * num_elements;
}

int64_t ElementFootprint(const Element& e) {
  if (e.is_leaf()) return kElementOverhead + TensorFootprint(e.leaf());
  int64_t bytes = kElementOverhead;
  for (const Element& c : e.children()) bytes += ElementFootprint(c);
  return bytes;
}

MemoryReservation::MemoryReservation(std::string what, MemoryBudget* budget)
    : what_(std::move(what)), budget_(budget) {}

absl::Status MemoryReservation::Grow(int64_t bytes) {
  const int64_t want = SaturatingAdd(bytes_, bytes);
  if (want > reserved_) {
    const int64_t more = SaturatingAdd(want - reserved_, kChunk - 1) / kChunk * kChunk;
    // The chunk rounding must not fail a reservation that fits exactly.
    absl::Status s = budget_->Reserve(more, what_);
    if (!s.ok()) {
      s = budget_->Reserve(want - reserved_, what_);
      if (!s.ok()) return s;
      reserved_ = want;
    } else {
      reserved_ = SaturatingAdd(reserved_, more);
    }
  }
  bytes_ = want;
  return absl::OkStatus();
}

absl::Status MemoryReservation::GrowElement(int64_t bytes, absl::string_view describe) {
  const absl::Status s = budget_->CheckElement(SaturatingAdd(bytes_, bytes), what_, describe);
  if (!s.ok()) return s;
  return Grow(bytes);
}

void MemoryReservation::Shrink(int64_t bytes) {
  bytes_ = std::max<int64_t>(bytes_ - bytes, 0);
  // Give back whole chunks beyond what is held, keeping one for the next growth.
  if (reserved_ - bytes_ > 2 * kChunk) {
    const int64_t keep = (bytes_ + kChunk - 1) / kChunk * kChunk + kChunk;
    budget_->Release(reserved_ - keep);
    reserved_ = keep;
  }
}

void MemoryReservation::Clear() {
  if (reserved_ > 0) budget_->Release(reserved_);
  reserved_ = 0;
  bytes_ = 0;
}

}  // namespace sluice
