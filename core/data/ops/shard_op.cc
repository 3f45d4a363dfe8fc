// shard(num_shards, index), and its shard(SHARD_HINT, SHARD_HINT) placeholder: the registration
// of the op (core/data/op_registry.h); the iterator is in simple_op_iterators.h.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/simple_op_iterators.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(shard_op) {
  OpRegistration r;
  r.takes_composites = true;  // elements pass through whole
  r.name = "shard";
  r.infer_spec = [](const proto::OpDef& op,
                    const ElementSpec& input) -> absl::StatusOr<ElementSpec> {
    const proto::ShardOp& s = op.shard();
    if (!s.num_shards_is_hint() && s.num_shards() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_shards must be positive, got ", s.num_shards()));
    }
    if (!s.index_is_hint()) {
      if (s.index() < 0) {
        return absl::InvalidArgumentError(absl::StrCat("index must be >= 0, got ", s.index()));
      }
      if (!s.num_shards_is_hint() && s.index() >= s.num_shards()) {
        return absl::InvalidArgumentError(
            absl::StrCat("index must be in [0, ", s.num_shards(), "), got ", s.index()));
      }
    }
    return input;
  };
  r.cardinality = [](const proto::OpDef& op, const ElementSpec&, int64_t n) -> int64_t {
    const proto::ShardOp& s = op.shard();
    if (s.num_shards_is_hint() || s.index_is_hint()) return kUnknownCardinality;
    if (n < 0) return n;
    return n / s.num_shards() + (s.index() < n % s.num_shards() ? 1 : 0);
  };
  r.expression = [](const proto::OpDef& op) {
    const proto::ShardOp& s = op.shard();
    return absl::StrCat("shard(",
                        s.num_shards_is_hint() ? "SHARD_HINT" : absl::StrCat(s.num_shards()), ", ",
                        s.index_is_hint() ? "SHARD_HINT" : absl::StrCat(s.index()), ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::ShardOp s = args.op.shard();
    if (s.num_shards_is_hint() || s.index_is_hint()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label,
                       ": shard(SHARD_HINT, SHARD_HINT) can only run after the HINT auto-shard "
                       "policy has replaced it with a worker's shard"));
    }
    return CheckedFactory(std::move(args.input), [label, s](std::unique_ptr<Iterator> in) {
      return NewShardIterator(label, std::move(in), s.num_shards(), s.index());
    });
  };
  // The sizes of a hinted shard carry no meaning.
  r.canonicalize = [](proto::OpDef* op) {
    if (op->shard().num_shards_is_hint()) op->mutable_shard()->clear_num_shards();
    if (op->shard().index_is_hint()) op->mutable_shard()->clear_index();
  };
  r.keeps_batch_size = true;
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "splits the data between workers: ranges of global steps do that";
  };
  {
    OpParseRule p;
    p.name = "shard";
    p.list_order = 4;
    p.params = {{"num_shards", true}, {"index", true}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      proto::ShardOp* s = op->mutable_shard();
      ASSIGN_OR_RETURN(int64_t num_shards, c.Int("num_shards", *c.arg(0)));
      ASSIGN_OR_RETURN(int64_t index, c.Int("index", *c.arg(1)));
      // SHARD_HINT is -1 in TF, so a literal -1 is the placeholder too.
      if (num_shards == -1) {
        s->set_num_shards_is_hint(true);
      } else {
        s->set_num_shards(num_shards);
      }
      if (index == -1) {
        s->set_index_is_hint(true);
      } else {
        s->set_index(index);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kShard, std::move(r));
}

}  // namespace sluice
