#include "core/data/op_registry.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"

namespace sluice {
namespace {

// "'tf_record' (SourceDef field 5)": how errors name a kind without a registration.
std::string KindField(const google::protobuf::Descriptor* message, int kind) {
  const google::protobuf::FieldDescriptor* f = message->FindFieldByNumber(kind);
  return absl::StrCat("'", f != nullptr ? f->name() : "?", "' (", message->name(), " field ", kind,
                      ")");
}

class ErrorIterator : public Iterator {
 public:
  explicit ErrorIterator(absl::Status status) : status_(std::move(status)) {}
  absl::Status GetNext(Element*, bool*) override { return status_; }

 private:
  const absl::Status status_;
};

// The rule of `rules` (every registration's `parse`) spelled `name`.
template <typename Map, typename Rule>
const Rule* FindRule(const Map& registrations, absl::string_view name) {
  for (const auto& [kind, registration] : registrations) {
    for (const Rule& rule : registration.parse) {
      if (rule.name == name) return &rule;
      for (const std::string& alias : rule.aliases) {
        if (alias == name) return &rule;
      }
    }
  }
  return nullptr;
}

template <typename Map>
std::string RuleNames(const Map& registrations) {
  std::vector<std::pair<int, std::string>> names;
  for (const auto& [kind, registration] : registrations) {
    for (const auto& rule : registration.parse) names.emplace_back(rule.list_order, rule.name);
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> out;
  for (auto& [order, name] : names) out.push_back(std::move(name));
  return absl::StrJoin(out, ", ");
}

}  // namespace

const SourceParseRule* OpRegistry::FindSourceParser(absl::string_view name) const {
  return FindRule<decltype(sources_), SourceParseRule>(sources_, name);
}
const OpParseRule* OpRegistry::FindOpParser(absl::string_view name) const {
  return FindRule<decltype(ops_), OpParseRule>(ops_, name);
}
const MapFnParseRule* OpRegistry::FindMapFnParser(absl::string_view name) const {
  return FindRule<decltype(map_fns_), MapFnParseRule>(map_fns_, name);
}
std::string OpRegistry::SourceParserNames() const { return RuleNames(sources_); }
std::string OpRegistry::OpParserNames() const { return RuleNames(ops_); }
std::string OpRegistry::MapFnParserNames() const { return RuleNames(map_fns_); }

std::vector<std::string> OpRegistry::ListedSourceAliases() const {
  std::vector<std::pair<int, std::string>> names;
  for (const auto& [kind, registration] : sources_) {
    for (const SourceParseRule& rule : registration.parse) {
      for (const std::string& a : rule.listed_aliases) names.emplace_back(rule.list_order, a);
    }
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> out;
  for (auto& [order, name] : names) out.push_back(std::move(name));
  return out;
}

const OpRegistry& OpRegistry::Global() {
  static const OpRegistry* const registry = [] {
    auto* r = new OpRegistry;
    RegisterBuiltinOps(*r);
    return r;
  }();
  return *registry;
}

const SourceRegistration* OpRegistry::FindSource(proto::SourceDef::KindCase kind) const {
  auto it = sources_.find(static_cast<int>(kind));
  return it == sources_.end() ? nullptr : &it->second;
}

const OpRegistration* OpRegistry::FindOp(proto::OpDef::KindCase kind) const {
  auto it = ops_.find(static_cast<int>(kind));
  return it == ops_.end() ? nullptr : &it->second;
}

const MapFnRegistration* OpRegistry::FindMapFn(proto::MapOp::FnCase fn) const {
  auto it = map_fns_.find(static_cast<int>(fn));
  return it == map_fns_.end() ? nullptr : &it->second;
}

void OpRegistry::AddMapFn(proto::MapOp::FnCase fn, MapFnRegistration registration) {
  if (!map_fns_.emplace(static_cast<int>(fn), std::move(registration)).second) {
    duplicates_.push_back(absl::StrCat("map fn ", KindField(proto::MapOp::descriptor(), fn)));
  }
}

void OpRegistry::AddSource(proto::SourceDef::KindCase kind, SourceRegistration registration) {
  if (!sources_.emplace(static_cast<int>(kind), std::move(registration)).second) {
    duplicates_.push_back(absl::StrCat("source ", KindField(proto::SourceDef::descriptor(), kind)));
  }
}

void OpRegistry::AddOp(proto::OpDef::KindCase kind, OpRegistration registration) {
  if (!ops_.emplace(static_cast<int>(kind), std::move(registration)).second) {
    duplicates_.push_back(absl::StrCat("op ", KindField(proto::OpDef::descriptor(), kind)));
  }
}

absl::StatusOr<const SourceRegistration*> FindSourceRegistration(const proto::SourceDef& source) {
  if (source.kind_case() == proto::SourceDef::KIND_NOT_SET) {
    return absl::InvalidArgumentError("no source set");
  }
  const SourceRegistration* r = OpRegistry::Global().FindSource(source.kind_case());
  if (r == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the source kind ", KindField(proto::SourceDef::descriptor(), source.kind_case()),
        " has no registration in this build"));
  }
  return r;
}

absl::StatusOr<const OpRegistration*> FindOpRegistration(const proto::OpDef& op) {
  if (op.kind_case() == proto::OpDef::KIND_NOT_SET) {
    return absl::InvalidArgumentError("no op set (written by a newer build?)");
  }
  const OpRegistration* r = OpRegistry::Global().FindOp(op.kind_case());
  if (r == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the op kind ", KindField(proto::OpDef::descriptor(), op.kind_case()),
                     " has no registration in this build"));
  }
  return r;
}

absl::StatusOr<const MapFnRegistration*> FindMapFnRegistration(const proto::MapOp& map) {
  if (map.fn_case() == proto::MapOp::FN_NOT_SET) {
    return absl::InvalidArgumentError("map: no function set (written by a newer build?)");
  }
  const MapFnRegistration* r = OpRegistry::Global().FindMapFn(map.fn_case());
  if (r == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("map: the function ", KindField(proto::MapOp::descriptor(), map.fn_case()),
                     " has no registration in this build"));
  }
  return r;
}

int64_t CountOrUnknown(__int128 n) {
  return n > std::numeric_limits<int64_t>::max() ? kUnknownCardinality : static_cast<int64_t>(n);
}

std::unique_ptr<Iterator> OrErrorIterator(absl::StatusOr<std::unique_ptr<Iterator>> it) {
  if (!it.ok()) return std::make_unique<ErrorIterator>(it.status());
  return *std::move(it);
}

absl::StatusOr<IteratorFactory> CheckedFactory(IteratorFactory input, MakeOpIterator make) {
  absl::StatusOr<std::unique_ptr<Iterator>> probe = make(nullptr);
  if (!probe.ok()) return probe.status();
  return IteratorFactory([input = std::move(input), make = std::move(make)]() {
    return OrErrorIterator(make(input ? input() : nullptr));
  });
}

}  // namespace sluice
