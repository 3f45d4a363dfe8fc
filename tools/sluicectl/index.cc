// sluicectl index: builds or checks the record index of TFRecord files (core/io/record_index.h).
//
//   sluicectl index FILE... [--index_cache_dir=DIR]
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "core/io/record_index.h"
#include "tools/sluicectl/commands.h"

ABSL_FLAG(std::string, index_cache_dir, "",
          "index: where index files go (default: next to each data file).");

namespace sluice {
namespace {

int IndexMain(const std::vector<std::string>& args) {
  if (args.empty()) return ReportUsageError("index", "needs at least one FILE");
  RecordIndexOptions o;
  o.cache_dir = absl::GetFlag(FLAGS_index_cache_dir);
  for (const std::string& file : args) {
    bool built = false;
    absl::StatusOr<RecordIndex> index = RecordIndex::LoadOrBuild(file, o, &built);
    if (!index.ok()) return ReportError(index.status());
    std::printf("%s: %" PRId64 " records, index %s (%s)\n", file.c_str(), index->num_records(),
                RecordIndexPath(file, o).c_str(), built ? "built" : "up to date");
  }
  return kExitOk;
}

}  // namespace

SLUICECTL_REGISTER_COMMAND({
    .name = "index",
    .synopsis = "index FILE... [--index_cache_dir=DIR]",
    .help = "Builds (or checks) the record index of each uncompressed TFRecord file: the offset\n"
            "of every record, cached as FILE.sluice-idx (or in DIR) for random access and record\n"
            "ranges. A file changed since its index was built is re-indexed.",
    .flags = {"index_cache_dir"},
    .run = &IndexMain,
});

}  // namespace sluice
