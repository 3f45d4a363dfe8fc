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
#include "core/util/status_macros.h"

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

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max()
                                                     : a + b;
}

}  // namespace

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

int64_t ElementOverhead(const Element& e) {
  // A string tensor's std::string objects are the allocator's (Tensor::TryFromStrings charges
  // them with the characters), so only the nodes and the tensors are left.
  if (e.is_leaf()) return kElementOverhead + kLeafOverhead;
  int64_t bytes = kElementOverhead;
  for (const Element& c : e.children()) bytes += ElementOverhead(c);
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

absl::Status MemoryReservation::GrowElement(int64_t footprint, int64_t charge,
                                            absl::string_view describe) {
  const int64_t element = SaturatingAdd(element_, footprint);
  RETURN_IF_ERROR(budget_->CheckElement(element, what_, describe));
  RETURN_IF_ERROR(Grow(charge));
  element_ = element;
  return absl::OkStatus();
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
  element_ = 0;
}

}  // namespace sluice
