// list_files(patterns, shuffle, seed): the registration of the source (core/data/op_registry.h);
// the iterator is in list_files.h.
#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/list_files.h"
#include "core/util/status_macros.h"

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
      return absl::InvalidArgumentError(absl::StrCat("list_files: shard ", l.shard_index(), " of ",
                                                     l.num_shards(), " is out of range"));
    }
    return ElementSpec(TensorSpec{DType::kString, Shape()});
  };
  // Cardinality: unknown without matching the patterns.
  r.expression = [](const proto::SourceDef& s) {
    const proto::ListFilesSource& l = s.list_files();
    std::string out =
        absl::StrCat("list_files(", StringList(l.patterns()), ", shuffle=", PyBool(l.shuffle()),
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
  {
    SourceParseRule p;
    p.name = "list_files";
    p.list_order = 9;
    p.params = {{"file_pattern", true},
                {"shuffle", false},
                {"seed", false},
                {"num_shards", false},
                {"shard_index", false}};
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      proto::ListFilesSource* l = source->mutable_list_files();
      RETURN_IF_ERROR(c.Filenames(*c.arg(0), l->mutable_patterns()));
      if (c.given(1)) {
        ASSIGN_OR_RETURN(bool s, c.Bool("shuffle", *c.arg(1)));
        l->set_shuffle(s);
      }
      if (c.given(2)) {
        ASSIGN_OR_RETURN(int64_t seed, c.Int("seed", *c.arg(2)));
        l->set_seed(seed);
        l->set_has_seed(true);
      }
      if (c.given(3)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("num_shards", *c.arg(3)));
        l->set_num_shards(n);
      }
      if (c.given(4)) {
        ASSIGN_OR_RETURN(int64_t i, c.Int("shard_index", *c.arg(4)));
        l->set_shard_index(i);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  r.no_random_access =
      "its elements exist only once its patterns are expanded, and the files it names are read "
      "by a nested pipeline";
  registry.AddSource(proto::SourceDef::kListFiles, std::move(r));
}

}  // namespace sluice
