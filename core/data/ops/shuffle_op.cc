// shuffle(buffer_size, seed, reshuffle_each_iteration): the registration of the op
// (core/data/op_registry.h); the iterator is in shuffle_iterator.h.
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/shuffle_iterator.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(shuffle_op) {
  OpRegistration r;
  r.takes_composites = true;  // elements pass through whole
  r.name = "shuffle";
  r.infer_spec = [](const proto::OpDef& op,
                    const ElementSpec& input) -> absl::StatusOr<ElementSpec> {
    if (op.shuffle().buffer_size() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer_size must be positive, got ", op.shuffle().buffer_size()));
    }
    return input;
  };
  r.cardinality = [](const proto::OpDef&, const ElementSpec&, int64_t n) { return n; };
  r.expression = [](const proto::OpDef& op) {
    const proto::ShuffleOp& s = op.shuffle();
    return absl::StrCat("shuffle(", s.buffer_size(),
                        ", seed=", s.has_seed() ? absl::StrCat(s.seed()) : "None",
                        ", reshuffle_each_iteration=", PyBool(s.reshuffle_each_iteration()), ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const proto::ShuffleOp s = args.op.shuffle();
    if (s.buffer_size() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": buffer_size must be positive, got ", s.buffer_size()));
    }
    // Without a seed, as in TF, a nondeterministic one chosen once per executor graph.
    const uint64_t seed = s.has_seed() ? static_cast<uint64_t>(s.seed())
                                       : (static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                             std::random_device{}();
    auto iterations = std::make_shared<std::atomic<int64_t>>(0);
    const bool reshuffle = s.reshuffle_each_iteration();
    return IteratorFactory([label, input, s, seed, iterations, reshuffle] {
      const int64_t iteration = reshuffle ? iterations->fetch_add(1) : 0;
      return OrErrorIterator(NewShuffleIterator(label, input(), s.buffer_size(),
                                                ShuffleIterationSeed(seed, iteration)));
    });
  };
  // A seed without has_seed carries no meaning.
  r.canonicalize = [](proto::OpDef* op) {
    if (!op->shuffle().has_seed()) op->mutable_shuffle()->clear_seed();
  };
  r.keeps_batch_size = true;
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "is a buffer shuffle: use the job's GlobalOrder.shuffle instead";
  };
  {
    OpParseRule p;
    p.name = "shuffle";
    p.list_order = 5;
    p.params = {{"buffer_size", true}, {"seed", false}, {"reshuffle_each_iteration", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      proto::ShuffleOp* s = op->mutable_shuffle();
      ASSIGN_OR_RETURN(int64_t buffer_size, c.Int("buffer_size", *c.arg(0)));
      s->set_buffer_size(buffer_size);
      if (c.given(1)) {
        ASSIGN_OR_RETURN(int64_t seed, c.Int("seed", *c.arg(1)));
        s->set_seed(seed);
        s->set_has_seed(true);
      }
      bool reshuffle = true;
      if (c.given(2)) {
        ASSIGN_OR_RETURN(reshuffle, c.Bool("reshuffle_each_iteration", *c.arg(2)));
      }
      s->set_reshuffle_each_iteration(reshuffle);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kShuffle, std::move(r));
}

}  // namespace sluice
