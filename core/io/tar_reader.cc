#include "core/io/tar_reader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

constexpr size_t kBlock = 512;
constexpr uint64_t kMaxTarSizeField = uint64_t{1} << 62;

// A NUL- or space-terminated octal field; base-256 (GNU) when the high bit of the first byte is
// set.
bool ParseNumber(const char* field, size_t n, uint64_t* out) {
  const unsigned char first = static_cast<unsigned char>(field[0]);
  if (first & 0x80) {
    uint64_t v = first & 0x7f;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | static_cast<unsigned char>(field[i]);
    }
    *out = v;
    return true;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < n && field[i] == ' ') ++i;
  bool any = false;
  for (; i < n && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v >> 61) return false;
    v = v * 8 + static_cast<uint64_t>(field[i] - '0');
    any = true;
  }
  if (i < n && field[i] != '\0' && field[i] != ' ') return false;
  *out = v;
  return any || field[0] == '\0' || field[0] == ' ';
}

std::string Field(const char* p, size_t n) { return std::string(p, strnlen(p, n)); }

// The `path` and `size` of a pax extended header's records ("LEN key=value\n").
void ParsePax(absl::string_view data, std::string* path, uint64_t* size, bool* has_size) {
  while (!data.empty()) {
    const size_t space = data.find(' ');
    uint64_t len = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtoi(data.substr(0, space), &len) ||
        len <= space + 1 || len > data.size()) {
      return;
    }
    absl::string_view record = data.substr(space + 1, len - space - 2);  // no trailing '\n'
    const size_t eq = record.find('=');
    if (eq != absl::string_view::npos) {
      absl::string_view key = record.substr(0, eq), value = record.substr(eq + 1);
      if (key == "path") *path = std::string(value);
      if (key == "size" && absl::SimpleAtoi(value, size)) *has_size = true;
    }
    data.remove_prefix(len);
  }
}

}  // namespace

absl::Status TarReader::ReadExact(char* dst, size_t n, bool* at_end) {
  size_t done = 0;
  while (done < n) {
    ASSIGN_OR_RETURN(size_t got, in_->Read(dst + done, n - done));
    if (got == 0) break;
    done += got;
  }
  pos_ += done;
  if (done == n) return absl::OkStatus();
  if (done == 0 && at_end != nullptr) {
    *at_end = true;
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat("truncated tar archive ", name(), ": it ends at byte ",
                                          pos_, current_.empty() ? "" : ", inside member '",
                                          current_, current_.empty() ? "" : "'"));
}

absl::Status TarReader::SkipRest() {
  const uint64_t skip = data_left_ + padding_;
  data_left_ = padding_ = 0;
  if (skip == 0) return absl::OkStatus();
  // Seek, then read one byte before the target to find truncation where a seek cannot.
  RETURN_IF_ERROR(in_->Seek(pos_ + skip - 1));
  pos_ += skip - 1;
  char c;
  return ReadExact(&c, 1, nullptr);
}

absl::Status TarReader::Next(TarMember* member) {
  // What the metadata entries read so far say about the next entry; used up by that entry.
  std::string long_name;
  uint64_t pax_size = 0;
  bool has_pax_size = false;
  while (true) {
    RETURN_IF_ERROR(SkipRest());
    current_.clear();
    char h[kBlock];
    bool at_end = false;
    const uint64_t header_at = pos_;
    RETURN_IF_ERROR(ReadExact(h, kBlock, &at_end));
    if (at_end) return absl::OutOfRangeError("end of tar archive");
    bool zero = true;
    for (char c : h) zero &= c == '\0';
    if (zero) return absl::OutOfRangeError("end of tar archive");
    uint64_t stored = 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    }
    if (!ParseNumber(h + 148, 8, &stored) || stored != sum) {
      return absl::DataLossError(absl::StrCat(
          "corrupt tar header at byte offset ", header_at, " of ", name(),
          " (checksum mismatch", header_at == 0 ? "; not a tar archive?" : "", ")"));
    }
    uint64_t size = 0;
    if (!ParseNumber(h + 124, 12, &size)) {
      return absl::DataLossError(
          absl::StrCat("corrupt tar header at byte offset ", header_at, " of ", name(),
                       " (bad size field)"));
    }
    const char type = h[156];
    const bool metadata = type == 'L' || type == 'K' || type == 'x' || type == 'g';
    if (!metadata && has_pax_size) size = pax_size;
    // Positions stay far from wrapping (a size near 2^64 would make the skip go backwards).
    if (size > kMaxTarSizeField) {
      return absl::DataLossError(
          absl::StrCat("corrupt tar header at byte offset ", header_at, " of ", name(),
                       " (size ", size, " is over 2^62)"));
    }
    std::string entry_name = Field(h, 100);
    if (std::memcmp(h + 257, "ustar", 5) == 0) {
      const std::string prefix = Field(h + 345, 155);
      if (!prefix.empty()) entry_name = absl::StrCat(prefix, "/", entry_name);
    }
    data_left_ = size;
    padding_ = (kBlock - size % kBlock) % kBlock;
    if (metadata) {
      current_ = absl::StrCat("(", std::string(1, type), " header)");
      if (type == 'K' || type == 'g') continue;  // read past (SkipRest), not applied
      if (size > kMaxTarMetadataBytes) {
        return absl::DataLossError(absl::StrCat(
            "corrupt tar header at byte offset ", header_at, " of ", name(), " (a ",
            type == 'L' ? "GNU long-name" : "pax", " header of ", size, " bytes; at most ",
            kMaxTarMetadataBytes, ")"));
      }
      std::string data;
      RETURN_IF_ERROR(ReadChunked(&data));
      if (type == 'L') {
        long_name = Field(data.data(), data.size());
      } else {
        ParsePax(data, &long_name, &pax_size, &has_pax_size);
      }
      continue;
    }
    if (!long_name.empty()) entry_name = long_name;
    current_ = entry_name;
    // This entry uses up what the metadata said, whether it is returned or passed over.
    long_name.clear();
    has_pax_size = false;
    if (type != '0' && type != '\0' && type != '7') continue;  // not a regular file
    member->name = std::move(entry_name);
    member->size = size;
    member->offset = pos_;
    return absl::OkStatus();
  }
}

absl::Status TarReader::ReadChunked(std::string* out) {
  // Grown as bytes arrive: the header's size is a claim, what the stream holds is the fact.
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  out->clear();
  while (data_left_ > 0) {
    const size_t n = static_cast<size_t>(std::min(data_left_, kChunk));
    const size_t at = out->size();
    out->resize(at + n);
    RETURN_IF_ERROR(ReadExact(out->data() + at, n, nullptr));
    data_left_ -= n;
  }
  return absl::OkStatus();
}

absl::Status TarReader::ReadData(std::string* out) {
  if (data_left_ > options_.max_member_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "tar member '", current_, "' of ", name(), " at byte offset ", pos_, " claims ",
        data_left_, " bytes, more than the limit of ", options_.max_member_bytes,
        " bytes for one member"));
  }
  return ReadChunked(out);
}

}  // namespace sluice
