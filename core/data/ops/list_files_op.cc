// list_files(patterns, shuffle, seed): the registration of the source (core/data/op_registry.h);
// the iterator is in list_files.h.
#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_expression.h"
#include "core/data/op_registry.h"
#include "core/data/ops/list_files.h"

namespace sluice {

SLUICE_REGISTER_OPS(list_files_op) {
  SourceRegistration r;
  r.name = "list_files";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    const proto::ListFilesSource& l = s.list_files();
    if (l.patterns_size() == 0) {
      return absl::InvalidArgumentError("list_files: no file pattern given");
    }
    if (l.num_shards() < 0 ||
        (l.num_shards() > 0 && (l.shard_index() < 0 || l.shard_index() >= l.num_shards()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "list_files: shard ", l.shard_index(), " of ", l.num_shards(), " is out of range"));
    }
    return ElementSpec(TensorSpec{DType::kString, Shape()});
  };
  // Cardinality: unknown without matching the patterns.
  r.expression = [](const proto::SourceDef& s) {
    const proto::ListFilesSource& l = s.list_files();
    std::string out = absl::StrCat("list_files(", StringList(l.patterns()),
                                   ", shuffle=", PyBool(l.shuffle()),
                                   ", seed=", l.has_seed() ? absl::StrCat(l.seed()) : "None");
    if (l.num_shards() > 0) {
      absl::StrAppend(&out, ", num_shards=", l.num_shards(), ", shard_index=", l.shard_index());
    }
    return out + ")";
  };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::ListFilesSource l = args.source.list_files();
    // Each new iterator (epoch) reshuffles, as shuffle(reshuffle_each_iteration=True) does.
    auto iterations = std::make_shared<std::atomic<int64_t>>(0);
    return IteratorFactory([label, l, iterations] {
      return OrErrorIterator(NewListFilesIterator(label, l, iterations->fetch_add(1)));
    });
  };
  registry.AddSource(proto::SourceDef::kListFiles, std::move(r));
}

}  // namespace sluice
