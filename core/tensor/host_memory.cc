#include "core/tensor/host_memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

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

// The address-space limit (ulimit -v), or 0 when there is none.
int64_t AddressSpaceLimitBytes() {
  struct rlimit r;
  if (getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 0;
  if (r.rlim_cur >= (rlim_t{1} << 62)) return 0;
  return static_cast<int64_t>(r.rlim_cur);
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
  for (int64_t limit : {CgroupLimitBytes(), AddressSpaceLimitBytes()}) {
    if (limit > 0) machine = std::min(machine, limit);
  }
  MemoryLimits limits;
  limits.process_bytes = machine / 4 * 3;
  limits.element_bytes = limits.process_bytes / 4;
  return limits;
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

absl::Status MemoryBudget::CheckElement(int64_t bytes, absl::string_view what,
                                        absl::string_view describe) const {
  const int64_t limit = element_bytes_.load(std::memory_order_relaxed);
  if (bytes <= limit) return absl::OkStatus();
  return ElementLimitError(absl::StrCat(what, ": ", describe,
                                        " needs more than the memory limit of one element, ",
                                        limit, " bytes (--max_element_bytes)"),
                           limit);
}

bool MemoryBudget::TryCharge(int64_t bytes) {
  if (bytes > element_bytes_.load(std::memory_order_relaxed)) return false;
  // One atomic add when it fits (the common case); taken back when it does not.
  const int64_t used = in_use_.fetch_add(bytes, std::memory_order_relaxed);
  if (SaturatingAdd(used, bytes) <= process_bytes_.load(std::memory_order_relaxed)) return true;
  in_use_.fetch_sub(bytes, std::memory_order_relaxed);
  return false;
}

absl::Status MemoryBudget::Refusal(int64_t bytes, absl::string_view what,
                                   absl::string_view describe) const {
  const int64_t element_limit = element_bytes_.load(std::memory_order_relaxed);
  if (bytes > element_limit) {
    return ElementLimitError(
        absl::StrCat(what, ": ", describe, " needs ", bytes,
                     " bytes, more than the memory limit of one element, ", element_limit,
                     " bytes (--max_element_bytes)"),
        element_limit);
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      what, ": ", describe, " needs ", bytes, " bytes, but ", in_use(),
      " of the process's memory limit of ", process_bytes_.load(std::memory_order_relaxed),
      " bytes are in use (--memory_limit)"));
}

absl::Status MemoryBudget::Charge(int64_t bytes, absl::string_view what,
                                  absl::string_view describe) {
  if (TryCharge(bytes)) return absl::OkStatus();
  return Refusal(bytes, what, describe);
}

namespace {
constexpr absl::string_view kElementLimitPayload = "type.sluice.dev/element_limit";
}  // namespace

absl::Status ElementLimitError(absl::string_view message, int64_t limit) {
  absl::Status status = absl::ResourceExhaustedError(message);
  status.SetPayload(kElementLimitPayload, absl::Cord(absl::StrCat(limit)));
  return status;
}

std::optional<int64_t> RefusedElementLimit(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kResourceExhausted) return std::nullopt;
  const auto payload = status.GetPayload(kElementLimitPayload);
  int64_t limit = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &limit)) {
    return std::nullopt;
  }
  return limit;
}

MemoryBudget& ProcessMemoryBudget() {
  static MemoryBudget* const budget = new MemoryBudget(DefaultMemoryLimits());
  return *budget;
}

}  // namespace sluice
