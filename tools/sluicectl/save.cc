// sluicectl save --coordinator=HOST:PORT --pipeline=EXPR --path=DIR: a distributed snapshot of
// the pipeline, written by the service's workers (include/sluice/snapshot_save.h,
// docs/SNAPSHOTS.md). Prints "saved N elements in C chunks to DIR" when the manifest says done.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sluice/dataset.h"
#include "sluice/snapshot_save.h"
#include "tools/sluicectl/commands.h"
#include "tools/sluicectl/security.h"

ABSL_FLAG(std::string, path, "",
          "save: the snapshot's directory (local or a shared mount every worker sees, created "
          "when missing; or s3://BUCKET/PREFIX, gs://BUCKET/PREFIX: docs/SNAPSHOTS.md).");
ABSL_FLAG(bool, resume, false,
          "save: continue an interrupted save of the same pipeline to --path (its save.lock is "
          "still there) instead of refusing it.");

ABSL_FLAG(int64_t, split_size, 0,
          "save: a source of elements: source elements per chunk (0: 4096); a source of files "
          "writes one chunk per file.");

namespace sluice {
namespace {

int SaveMain(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    return ReportUsageError("save", absl::StrCat("unexpected argument '", positional[0],
                                                 "' (flags take the form --name=value)"));
  }
  SnapshotSaveOptions options;
  options.service.coordinator_address = absl::GetFlag(FLAGS_coordinator);
  if (options.service.coordinator_address.empty()) {
    return ReportUsageError("save", "--coordinator is required");
  }
  const std::string pipeline = absl::GetFlag(FLAGS_pipeline);
  if (pipeline.empty()) return ReportUsageError("save", "--pipeline is required");
  const std::string path = absl::GetFlag(FLAGS_path);
  if (path.empty()) return ReportUsageError("save", "--path is required");
  options.compression = absl::GetFlag(FLAGS_compression);
  options.resume = absl::GetFlag(FLAGS_resume);
  options.split_size = absl::GetFlag(FLAGS_split_size);
  options.service.retry_deadline = absl::GetFlag(FLAGS_retry_deadline);
  absl::StatusOr<ServiceSecurity> security = SluicectlSecurity();
  if (!security.ok()) return ReportError(security.status());
  options.service.security = *security;
  absl::StatusOr<Dataset> dataset = Dataset::Parse(pipeline);
  if (!dataset.ok()) return ReportError(dataset.status());
  absl::StatusOr<SnapshotSaveResult> result = SaveSnapshot(*dataset, path, options);
  if (!result.ok()) return ReportError(result.status());
  std::cout << "saved " << result->num_elements << " elements in " << result->num_chunks
            << " chunks to " << path << "\n";
  return kExitOk;
}

}  // namespace

SLUICECTL_REGISTER_COMMAND({
    .name = "save",
    .synopsis = "save --coordinator=HOST:PORT --pipeline=EXPR --path=DIR [--compression=GZIP] "
                "[--resume] [--split_size=N]",
    .help = "Runs a job whose workers write the pipeline's elements to DIR as chunk files (one\n"
            "per DYNAMIC split) beside a manifest with the element spec; `load('DIR')` reads\n"
            "them back. Two saves to one DIR are refused; --resume continues an interrupted one.\n"
            "DIR may be an object store's (s3://BUCKET/PREFIX): chunks are uploaded whole\n"
            "(SLUICE_UPLOAD_PART_BYTES per multipart part), the manifest last.",
    .flags = {"coordinator", "pipeline", "path", "compression", "resume", "split_size",
              "retry_deadline"},
    .run = &SaveMain,
});

}  // namespace sluice
