// pack(sequence_length, keys=None, max_open_rows=8): the registration of the op
// (core/data/op_registry.h); the packer and its algorithm are in pack_iterator.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/pack_iterator.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(pack_op) {
  OpRegistration r;
  r.name = "pack";
  r.infer_spec = [](const proto::OpDef& op, const ElementSpec& input) {
    return InferPackSpec(op.pack(), input);
  };
  // Cardinality: unknown, it depends on the lengths (an empty input stays empty).
  r.cardinality = [](const proto::OpDef&, const ElementSpec&, int64_t n) -> int64_t {
    return n == 0 ? 0 : kUnknownCardinality;
  };
  r.expression = [](const proto::OpDef& op) {
    const proto::PackOp& p = op.pack();
    std::string out = absl::StrCat("pack(", p.sequence_length());
    if (p.keys_size() > 0) absl::StrAppend(&out, ", keys=", StringList(p.keys()));
    if (p.max_open_rows() != 0) absl::StrAppend(&out, ", max_open_rows=", p.max_open_rows());
    return out + ")";
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const proto::PackOp p = args.op.pack();
    return IteratorFactory([label, input, p] { return NewPackIterator(label, input(), p); });
  };
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "packs a varying number of elements into each row";
  };
  {
    OpParseRule p;
    p.name = "pack";
    p.list_order = 16;
    p.params = {{"sequence_length", true}, {"keys", false}, {"max_open_rows", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      proto::PackOp* p = op->mutable_pack();
      ASSIGN_OR_RETURN(int64_t n, c.Int("sequence_length", *c.arg(0)));
      p->set_sequence_length(n);
      if (c.given(1)) {
        const PyValue& keys = *c.arg(1);
        if (keys.kind == PyValue::Kind::kStr) {
          p->add_keys(keys.text);
        } else if (keys.kind == PyValue::Kind::kList || keys.kind == PyValue::Kind::kTuple) {
          for (const PyValue& k : keys.items) {
            ASSIGN_OR_RETURN(std::string s, c.Str("keys", k));
            p->add_keys(s);
          }
        } else {
          return c.Error(keys.begin, absl::StrCat("pack: keys must be a list of names, got ",
                                                  c.Text(keys)));
        }
      }
      if (c.given(2)) {
        ASSIGN_OR_RETURN(int64_t m, c.Int("max_open_rows", *c.arg(2)));
        if (m <= 0) {
          return c.Error(c.arg(2)->begin,
                         absl::StrCat("pack: max_open_rows must be positive, got ", m));
        }
        p->set_max_open_rows(m);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kPack, std::move(r));
}

}  // namespace sluice
