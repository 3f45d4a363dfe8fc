// Adding context to an error without losing what callers decide on.
//
// An error travels up through ops, tasks and RPCs, each naming where it is ("op 3 (map)",
// "task 7 (job 2, index 0/2)"). Rebuilding it as absl::Status(code, context + message) would
// drop its payloads, and with them what a caller decides on: that only one element is spoiled
// (MarkElementError), or that an element was refused at the element limit whatever the
// process held (ElementLimitError). WithContext keeps them.
#ifndef SLUICE_CORE_UTIL_STATUS_CONTEXT_H_
#define SLUICE_CORE_UTIL_STATUS_CONTEXT_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sluice {

// "<context>: <message of status>", with status's code and payloads. OK stays OK.
inline absl::Status WithContext(absl::string_view context, const absl::Status& status) {
  if (status.ok()) return status;
  absl::Status out(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload([&out](absl::string_view type_url, const absl::Cord& payload) {
    out.SetPayload(type_url, payload);
  });
  return out;
}

}  // namespace sluice

#endif  // SLUICE_CORE_UTIL_STATUS_CONTEXT_H_
