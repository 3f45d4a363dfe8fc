#include "core/rpc/trainer_id.h"

#include "absl/strings/str_cat.h"

namespace sluice {

std::string QuoteTrainerId(absl::string_view trainer_id) {
  constexpr size_t kShown = 40;
  std::string out;
  for (char c : trainer_id.substr(0, kShown)) out.push_back(c >= 0x21 && c <= 0x7e ? c : '?');
  if (trainer_id.size() > kShown) absl::StrAppend(&out, "...");
  return absl::StrCat("'", out, "'");
}

absl::Status ValidateTrainerId(absl::string_view trainer_id, absl::string_view where,
                               size_t max_bytes) {
  if (trainer_id.empty()) return absl::InvalidArgumentError(absl::StrCat(where, " is empty"));
  if (trainer_id.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " ", QuoteTrainerId(trainer_id), " has ", trainer_id.size(),
                     " bytes, more than the ", max_bytes, " allowed"));
  }
  for (size_t i = 0; i < trainer_id.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(trainer_id[i]);
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " ", QuoteTrainerId(trainer_id), " has byte ", static_cast<int>(c),
          " at offset ", i, "; only printable ASCII without spaces is allowed"));
    }
  }
  return absl::OkStatus();
}

}  // namespace sluice
