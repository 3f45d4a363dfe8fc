// cache(filename): the registration of the op (core/data/op_registry.h); the iterators are in
// cache_iterator.h.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/cache_iterator.h"
#include "core/format/python_literal.h"
#include "core/util/status_macros.h"
#include "sluice/dataset.h"

namespace sluice {

SLUICE_REGISTER_OPS(cache_op) {
  OpRegistration r;
  r.takes_composites = true;  // elements pass through whole
  r.name = "cache";
  r.infer_spec = [](const proto::OpDef&, const ElementSpec& input) -> absl::StatusOr<ElementSpec> {
    return input;
  };
  r.cardinality = [](const proto::OpDef&, const ElementSpec&, int64_t n) { return n; };
  r.expression = [](const proto::OpDef& op) -> std::string {
    if (op.cache().filename().empty()) return "cache()";
    return absl::StrCat("cache(", PythonStringLiteral(op.cache().filename()), ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    if (args.op.cache().filename().empty()) {
      auto store = std::make_shared<CacheStore>();
      return IteratorFactory(
          [label, input, store] { return NewMemoryCacheIterator(label, store, input); });
    }
    // The cache file records the fingerprint of the graph up to the op.
    absl::StatusOr<Dataset> up = Dataset::FromDef(args.upstream);
    const std::string fingerprint = up.ok() ? up->Fingerprint() : "";
    const std::string filename = args.op.cache().filename();
    return IteratorFactory([label, input, filename, fingerprint] {
      return NewFileCacheIterator(label, filename, fingerprint, input);
    });
  };
  r.keeps_batch_size = true;
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "keeps a whole pass, but a range reads only part of an epoch";
  };
  {
    OpParseRule p;
    p.name = "cache";
    p.list_order = 13;
    p.params = {{"filename", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      op->mutable_cache();
      if (c.given(0)) {
        ASSIGN_OR_RETURN(std::string f, c.Str("filename", *c.arg(0)));
        op->mutable_cache()->set_filename(f);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kCache, std::move(r));
}

}  // namespace sluice
