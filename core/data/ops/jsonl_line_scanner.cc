#include "core/data/ops/jsonl_line_scanner.h"

#include <cstring>
#include <utility>

#include "simdjson.h"

namespace sluice {
namespace {

bool IsBlank(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return false;
  }
  return true;
}

size_t TrimCr(const char* p, size_t n) { return n > 0 && p[n - 1] == '\r' ? n - 1 : n; }

}  // namespace

JsonlLineScanner::JsonlLineScanner(size_t block_bytes) : block_bytes_(block_bytes) {}

void JsonlLineScanner::Reset(ReadFn read, uint64_t offset, int64_t lines_before) {
  read_ = std::move(read);
  if (block_.empty()) block_.resize(block_bytes_ + simdjson::SIMDJSON_PADDING);
  pos_ = end_ = 0;
  carry_size_ = 0;
  next_offset_ = offset;
  lines_ = lines_before;
}

void JsonlLineScanner::Append(const char* p, size_t n) {
  if (carry_.size() < carry_size_ + n) carry_.resize(carry_size_ + n);
  std::memcpy(carry_.data() + carry_size_, p, n);
  carry_size_ += n;
}

absl::Status JsonlLineScanner::Next(size_t max_line_bytes, Line* line, bool* have) {
  const uint64_t start = next_offset_;
  bool skipping = false;
  bool blank = true;
  carry_size_ = 0;
  auto emit = [&](const char* data, size_t n, bool too_long) {
    line->data = too_long ? nullptr : data;
    line->length = too_long ? 0 : TrimCr(data, n);
    line->too_long = too_long;
    line->blank = blank;
    line->number = ++lines_;
    line->offset = start;
    *have = true;
    return absl::OkStatus();
  };
  // Makes the carried line readable past its end (simdjson's padding) and returns it.
  auto emit_carried = [&] {
    if (!skipping) carry_.resize(carry_size_ + simdjson::SIMDJSON_PADDING);
    return emit(carry_.data(), carry_size_, skipping);
  };
  while (true) {
    if (pos_ < end_) {
      const char* begin = block_.data() + pos_;
      const char* newline = static_cast<const char*>(std::memchr(begin, '\n', end_ - pos_));
      const size_t n = newline != nullptr ? static_cast<size_t>(newline - begin) : end_ - pos_;
      const size_t consumed = n + (newline != nullptr ? 1 : 0);
      pos_ += consumed;
      next_offset_ += consumed;
      blank = blank && IsBlank(begin, n);
      if (newline != nullptr && carry_size_ == 0 && !skipping) {
        return emit(begin, n, n > max_line_bytes);
      }
      if (!skipping && carry_size_ + n > max_line_bytes) {
        skipping = true;
        carry_size_ = 0;
        carry_.clear();
        carry_.shrink_to_fit();
      }
      if (!skipping) Append(begin, n);
      if (newline != nullptr) return emit_carried();
      continue;
    }
    absl::StatusOr<size_t> n = read_(block_.data(), block_bytes_);
    if (!n.ok()) return n.status();
    pos_ = 0;
    end_ = *n;
    if (*n == 0) {
      // A last line without '\n' is still a line.
      if (carry_size_ > 0 || skipping) return emit_carried();
      *have = false;
      return absl::OkStatus();
    }
  }
}

}  // namespace sluice
