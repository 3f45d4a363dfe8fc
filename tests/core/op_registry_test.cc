// The op registry (core/data/op_registry.h): every source and op kind of the protos has a
// complete registration, so a new kind without one fails here rather than at run time.
#include "core/data/op_registry.h"

#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "core/data/executor.h"
#include "core/data/map_fns.h"
#include "core/data/spec_inference.h"
#include "proto/dataset.pb.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

// The fields of `message`'s oneof `oneof`.
std::vector<const google::protobuf::FieldDescriptor*> KindFields(
    const google::protobuf::Descriptor* message, const std::string& oneof = "kind") {
  const google::protobuf::OneofDescriptor* kind = message->FindOneofByName(oneof);
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  if (kind == nullptr) return fields;
  for (int i = 0; i < kind->field_count(); ++i) fields.push_back(kind->field(i));
  return fields;
}

TEST(OpRegistryTest, EverySourceKindIsRegistered) {
  auto fields = KindFields(proto::SourceDef::descriptor());
  ASSERT_GE(fields.size(), 11u);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    SCOPED_TRACE(f->name());
    const SourceRegistration* r = OpRegistry::Global().FindSource(
        static_cast<proto::SourceDef::KindCase>(f->number()));
    ASSERT_NE(r, nullptr) << "SourceDef." << f->name() << " has no registration: add "
                          << "core/data/ops/" << f->name() << "_op.cc";
    EXPECT_FALSE(r->name.empty());
    EXPECT_TRUE(r->infer_spec);
    EXPECT_TRUE(r->expression);
    EXPECT_TRUE(r->build);
  }
}

TEST(OpRegistryTest, EveryOpKindIsRegistered) {
  auto fields = KindFields(proto::OpDef::descriptor());
  ASSERT_GE(fields.size(), 15u);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    SCOPED_TRACE(f->name());
    const OpRegistration* r =
        OpRegistry::Global().FindOp(static_cast<proto::OpDef::KindCase>(f->number()));
    ASSERT_NE(r, nullptr) << "OpDef." << f->name() << " has no registration: add "
                          << "core/data/ops/" << f->name() << "_op.cc";
    EXPECT_FALSE(r->name.empty());
    EXPECT_TRUE(r->infer_spec);
    EXPECT_TRUE(r->expression);
    EXPECT_TRUE(r->build);
    // A global order must know whether each op keeps record positions.
    EXPECT_TRUE(r->global_order_conflict);
  }
}

TEST(OpRegistryTest, EveryMapFnIsRegistered) {
  auto fields = KindFields(proto::MapOp::descriptor(), "fn");
  ASSERT_GE(fields.size(), 8u);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    SCOPED_TRACE(f->name());
    const MapFnRegistration* r =
        OpRegistry::Global().FindMapFn(static_cast<proto::MapOp::FnCase>(f->number()));
    ASSERT_NE(r, nullptr) << "MapOp." << f->name() << " has no registration: add "
                          << "core/data/ops/" << f->name() << "_fn.cc";
    EXPECT_FALSE(r->name.empty());
    EXPECT_TRUE(r->make);
    EXPECT_TRUE(r->expression);
  }
}

TEST(OpRegistryTest, NoKindIsRegisteredTwice) {
  EXPECT_THAT(OpRegistry::Global().duplicates(), ::testing::IsEmpty());
}

TEST(OpRegistryTest, ASecondRegistrationIsReportedAndTheFirstKept) {
  OpRegistry registry;
  OpRegistration first;
  first.name = "first";
  registry.AddOp(proto::OpDef::kBatch, first);
  OpRegistration second;
  second.name = "second";
  registry.AddOp(proto::OpDef::kBatch, second);
  ASSERT_NE(registry.FindOp(proto::OpDef::kBatch), nullptr);
  EXPECT_EQ(registry.FindOp(proto::OpDef::kBatch)->name, "first");
  EXPECT_THAT(registry.duplicates(), ::testing::ElementsAre("op 'batch' (OpDef field 1)"));
  EXPECT_EQ(registry.FindOp(proto::OpDef::kRepeat), nullptr);
  EXPECT_EQ(registry.FindSource(proto::SourceDef::kRange), nullptr);
}

TEST(OpRegistryTest, NamesComeFromTheRegistrations) {
  proto::SourceDef source;
  source.mutable_tf_record();
  EXPECT_EQ(SourceKindName(source), "tf_record_dataset");
  proto::OpDef op;
  op.mutable_rebatch()->set_legacy_num_replicas(2);
  EXPECT_EQ(OpKindName(op), "legacy_rebatch");
  op.mutable_rebatch()->set_legacy_num_replicas(0);
  EXPECT_EQ(OpKindName(op), "rebatch");
  EXPECT_EQ(OpKindName(proto::OpDef()), "unset");
  proto::MapOp map;
  map.mutable_image()->mutable_resize();
  EXPECT_EQ(MapFnName(map), "resize");
  map.mutable_cast();
  EXPECT_EQ(MapFnName(map), "cast");
  EXPECT_EQ(MapFnName(proto::MapOp()), "unset");
  EXPECT_EQ(SourceKindName(proto::SourceDef()), "unset");
}

TEST(OpRegistryTest, EmptyKindsAreClearErrors) {
  EXPECT_THAT(FindOpRegistration(proto::OpDef()).status().message(), HasSubstr("no op set"));
  EXPECT_THAT(FindSourceRegistration(proto::SourceDef()).status().message(),
              HasSubstr("no source set"));
  EXPECT_THAT(MakeComponentFn(proto::MapOp()).status().message(),
              HasSubstr("map: no function set"));
  proto::DatasetDef def = Dataset::Range(0, 3).def();
  def.add_ops();  // an op with no kind
  absl::Status s = InferElementSpecs(def).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("op 1 (unset): no op set"));
}

TEST(OpRegistryTest, CheckedFactoryReportsArgumentErrorsWhenBuilt) {
  absl::StatusOr<IteratorFactory> f =
      CheckedFactory(nullptr, [](std::unique_ptr<Iterator>)
                                  -> absl::StatusOr<std::unique_ptr<Iterator>> {
        return absl::InvalidArgumentError("op 1 (x): bad argument");
      });
  EXPECT_THAT(f.status().message(), HasSubstr("bad argument"));
}

TEST(OpRegistryTest, CountOrUnknownSaturates) {
  EXPECT_EQ(CountOrUnknown(5), 5);
  EXPECT_EQ(CountOrUnknown(static_cast<__int128>(1) << 70), kUnknownCardinality);
}

// Every op and map() function, and every source the pipeline syntax can write (all but the
// permuted source, which only a global order writes), registers a parse rule; each rule's name
// and aliases find that rule and no other, and each rule parses what its expression prints.
TEST(OpRegistryTest, EveryKindHasAParseRuleThatItsNameFinds) {
  const OpRegistry& registry = OpRegistry::Global();
  for (const auto* f : KindFields(proto::OpDef::descriptor())) {
    SCOPED_TRACE(f->name());
    const OpRegistration* r = registry.FindOp(static_cast<proto::OpDef::KindCase>(f->number()));
    ASSERT_NE(r, nullptr);
    ASSERT_FALSE(r->parse.empty()) << "OpDef." << f->name() << " has no parse rule";
    for (const OpParseRule& rule : r->parse) {
      EXPECT_TRUE(rule.parse);
      EXPECT_EQ(registry.FindOpParser(rule.name), &rule);
      for (const std::string& a : rule.aliases) EXPECT_EQ(registry.FindOpParser(a), &rule);
    }
  }
  for (const auto* f : KindFields(proto::SourceDef::descriptor())) {
    SCOPED_TRACE(f->name());
    const SourceRegistration* r =
        registry.FindSource(static_cast<proto::SourceDef::KindCase>(f->number()));
    ASSERT_NE(r, nullptr);
    // Whether the source has random access is the source's to say.
    EXPECT_TRUE(r->random_access || !r->no_random_access.empty());
    if (f->number() == proto::SourceDef::kPermuted) {
      EXPECT_TRUE(r->parse.empty());
      continue;
    }
    ASSERT_FALSE(r->parse.empty()) << "SourceDef." << f->name() << " has no parse rule";
    for (const SourceParseRule& rule : r->parse) {
      EXPECT_TRUE(rule.parse);
      EXPECT_EQ(registry.FindSourceParser(rule.name), &rule);
      for (const std::string& a : rule.aliases) EXPECT_EQ(registry.FindSourceParser(a), &rule);
    }
  }
  for (const auto* f : KindFields(proto::MapOp::descriptor(), "fn")) {
    SCOPED_TRACE(f->name());
    const MapFnRegistration* r =
        registry.FindMapFn(static_cast<proto::MapOp::FnCase>(f->number()));
    ASSERT_NE(r, nullptr);
    ASSERT_FALSE(r->parse.empty()) << "MapOp." << f->name() << " has no parse rule";
    for (const MapFnParseRule& rule : r->parse) {
      EXPECT_TRUE(rule.parse || rule.parse_text);
      EXPECT_EQ(registry.FindMapFnParser(rule.name), &rule);
      for (const std::string& a : rule.aliases) EXPECT_EQ(registry.FindMapFnParser(a), &rule);
    }
  }
  EXPECT_THAT(registry.duplicates(), ::testing::IsEmpty());
}

TEST(OpRegistryTest, ParseCallBindsLikePython) {
  ParseContext context;
  context.text = "f(1, b=True)";
  std::vector<ParsedArg> args(2);
  args[0].value.kind = PyValue::Kind::kInt;
  args[0].value.magnitude = 1;
  args[0].value.float_value = 1;
  args[0].at = 2;
  args[0].value.begin = 2;
  args[0].value.end = 3;
  args[1].keyword = "b";
  args[1].value.kind = PyValue::Kind::kBool;
  args[1].value.bool_value = true;
  args[1].at = 5;
  args[1].value.begin = 7;
  args[1].value.end = 11;
  absl::StatusOr<ParseCall> call =
      ParseCall::Bind(context, "f", 0, args, {{"a", true}, {"b", false}, {"c", false}});
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(*call->Int("a", *call->arg(0)), 1);
  EXPECT_TRUE(*call->Bool("b", *call->arg(1)));
  EXPECT_FALSE(call->given(2));
  EXPECT_EQ(call->slot(1), &call->args()[1]);
  EXPECT_EQ(call->Bool("a", *call->arg(0)).status().message(),
            "pipeline expression, column 3: f: a must be True or False, got 1");
  EXPECT_EQ(ParseCall::Bind(context, "f", 0, args, {{"b", false}}).status().message(),
            "pipeline expression, column 6: f: argument b given twice");
  EXPECT_EQ(ParseCall::Bind(context, "f", 0, {}, {{"a", true}}).status().message(),
            "pipeline expression, column 1: f: missing required argument a");
}

}  // namespace
}  // namespace sluice
