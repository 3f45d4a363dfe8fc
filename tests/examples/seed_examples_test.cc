// The seed's five examples, written in C++ with the public API (examples/seed_*.cc), print byte
// for byte what the seed shows (tests/testdata/seed/<name>.txt, copied from the seed's output
// blocks). On a machine without a GPU the strategy's one-time warning goes to stderr, so stdout
// stays exact.
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"

namespace sluice {
namespace {

class SeedExampleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SeedExampleTest, PrintsTheSeedOutputExactly) {
  const std::string name = GetParam();
  absl::StatusOr<std::string> golden =
      ReadFileToString(SourcePath("tests/testdata/seed/" + name + ".txt"));
  ASSERT_TRUE(golden.ok()) << golden.status();
  absl::StatusOr<SubprocessResult> r = RunSubprocess({BuildPath("examples/" + name)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->Describe() << "\nstderr:\n" << r->stderr_text;
  EXPECT_EQ(r->stdout_text, *golden) << "stderr:\n" << r->stderr_text;
}

INSTANTIATE_TEST_SUITE_P(Seed, SeedExampleTest,
                         ::testing::Values("seed_for_loop", "seed_explicit_iterator",
                                           "seed_input_signature", "seed_element_spec",
                                           "seed_iter"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// The quick start's trainer loop runs every epoch to the end of data and learns.
TEST(TrainerLoopTest, RunsAllEpochsOverEveryExample) {
  absl::StatusOr<SubprocessResult> r = RunSubprocess({BuildPath("examples/trainer_loop")});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->Describe() << "\nstderr:\n" << r->stderr_text;
  // 50 examples in global batches of 8: 7 steps per epoch, the last one partial; and the
  // model learns: every epoch's mean loss is below the one before.
  double previous_loss = 1e30;
  for (int epoch = 1; epoch <= 5; ++epoch) {
    const std::string prefix = "epoch " + std::to_string(epoch) + ": 7 steps, 50 examples, ";
    size_t at = r->stdout_text.find(prefix);
    ASSERT_NE(at, std::string::npos) << r->stdout_text;
    double loss = 0;
    ASSERT_EQ(std::sscanf(r->stdout_text.c_str() + at + prefix.size(), "mean loss %lf", &loss), 1)
        << r->stdout_text;
    EXPECT_LT(loss, previous_loss) << r->stdout_text;
    previous_loss = loss;
  }
  EXPECT_NE(r->stdout_text.find("replicas in sync: 2"), std::string::npos) << r->stdout_text;
}

}  // namespace
}  // namespace sluice
