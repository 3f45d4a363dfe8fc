// Fuzz target: the pipeline-expression parser (core/data/pipeline_parser.h), which reads what
// clients send the coordinator (RegisterDatasetRequest.pipeline) and what users type. On any
// bytes: no crash, no hang; a failure is INVALID_ARGUMENT; a success is a graph whose
// ToExpression() parses back to the same graph (fingerprint), and whose static element spec and
// cardinality can be asked for without crashing. Nothing is executed (no file is read).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "sluice/dataset.h"
#include "core/data/dataset_limits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // What the coordinator does first with a client's expression.
  if (!sluice::CheckPipelineLimits(text).ok()) return 0;
  absl::StatusOr<sluice::Dataset> parsed = sluice::Dataset::Parse(text);
  if (!parsed.ok()) {
    if (!absl::IsInvalidArgument(parsed.status())) std::abort();
    return 0;
  }
  const std::string again = parsed->ToExpression();
  absl::StatusOr<sluice::Dataset> reparsed = sluice::Dataset::Parse(again);
  if (!reparsed.ok() || reparsed->Fingerprint() != parsed->Fingerprint()) std::abort();
  (void)parsed->element_spec();
  (void)parsed->Cardinality();
  return 0;
}
