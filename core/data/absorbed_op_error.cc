#include "core/data/absorbed_op_error.h"

#include <utility>

namespace sluice {
namespace {

thread_local std::optional<absl::Status> deferred;

}  // namespace

void DeferAbsorbedOpError(absl::Status error) { deferred = std::move(error); }

std::optional<absl::Status> TakeAbsorbedOpError() {
  std::optional<absl::Status> e = std::move(deferred);
  deferred.reset();
  return e;
}

}  // namespace sluice
