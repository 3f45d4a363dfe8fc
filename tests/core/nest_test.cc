#include "sluice/nest.h"

#include <string>

#include "sluice/element.h"
#include "core/tensor/proto_convert.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(NestTest, DictFlattensInSortedKeyOrderButKeepsInsertionOrder) {
  Nest<int> n = Nest<int>::Dict({{"b", Nest<int>(1)}, {"a", Nest<int>(2)}});
  EXPECT_EQ(n.keys(), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(n.Flatten(), (std::vector<int>{2, 1}));
  auto packed = Nest<int>::Pack(n, {20, 10});
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->children()[0].leaf(), 10);  // "b"
  EXPECT_EQ(packed->children()[1].leaf(), 20);  // "a"
}

TEST(NestTest, MapAndSameStructure) {
  Nest<int> n = Nest<int>::Tuple({Nest<int>(1), Nest<int>::List({Nest<int>(2), Nest<int>(3)})});
  Nest<std::string> s = n.Map([](int v) { return std::to_string(v * 10); });
  EXPECT_TRUE(n.SameStructure(s));
  EXPECT_EQ(s.Flatten(), (std::vector<std::string>{"10", "20", "30"}));
  EXPECT_FALSE(n.SameStructure(Nest<int>::Tuple({Nest<int>(1)})));
}

TEST(NestTest, PackRejectsWrongCount) {
  Nest<int> n = Nest<int>::Tuple({Nest<int>(1), Nest<int>(2)});
  EXPECT_FALSE(Nest<int>::Pack(n, {1}).ok());
}

TEST(NestTest, ElementSpecProtoRoundTrip) {
  ElementSpec spec = ElementSpec::Dict(
      {{"y", ElementSpec(TensorSpec{DType::kInt32, Shape({kUnknownDim})})},
       {"x", ElementSpec(TensorSpec{DType::kFloat32, Shape({kUnknownDim, 1})})}});
  auto back = ElementSpecFromProto(ElementSpecToProto(spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->SameStructure(spec));
  EXPECT_EQ(back->Flatten(), spec.Flatten());
}

}  // namespace
}  // namespace sluice
