// tokenize(model, add_bos, add_eos): the ids equal those of the `spm_encode` binary (Debian's
// sentencepiece) for the same model and text, on a model trained here by `spm_train`; the model
// is shared by a parallel map's threads; a missing or corrupt model is an error naming it.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/data/data_roots.h"
#include "core/data/ops/sentencepiece_model.h"
#include "proto/dataset.pb.h"
#include "gtest/gtest.h"
#include "iterator_test_util.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

// Per process: CTest runs each test in a process of its own, two at a time, and each trains
// the model.
std::string Dir() { return absl::StrCat(::testing::TempDir(), "/tokenize_test_", getpid()); }

// Texts with ASCII, accents, CJK, emoji, whitespace runs; one per line (no '\n' inside).
std::vector<std::string> Texts() {
  return {"Hello world, this is Sluice.",
          "  leading and   repeated   spaces ",
          "caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9",
          "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88",
          "emoji \xf0\x9f\x98\x80 and unknown \xe2\x98\x83 symbols",
          "x",
          "The quick brown fox jumps over the lazy dog 1234567890"};
}

class TokenizeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", Dir()).c_str()), 0);
    // A corpus of words in many combinations (fixed, no randomness).
    std::ofstream corpus(Dir() + "/corpus.txt");
    const std::vector<std::string> words = {"hello", "world", "sluice", "data", "pipeline",
                                            "token", "caf\xc3\xa9", "the", "quick", "brown",
                                            "fox", "lazy", "dog", "\xe6\x97\xa5\xe6\x9c\xac"};
    for (size_t i = 0; i < 2000; ++i) {
      corpus << words[i % words.size()] << " " << words[(i * 7) % words.size()] << " "
             << words[(i * 13 + 5) % words.size()] << " " << i % 97 << "\n";
    }
    corpus.close();
    const std::string train = absl::StrCat(
        "spm_train --input=", Dir(), "/corpus.txt --model_prefix=", Dir(),
        "/m --vocab_size=120 --hard_vocab_limit=false --model_type=unigram "
        "--character_coverage=1.0 "
        "--num_threads=1 --seed_sentencepiece_size=5000 > ", Dir(), "/train.log 2>&1");
    ASSERT_EQ(std::system(train.c_str()), 0) << "spm_train failed: see " << Dir() << "/train.log";
  }

  static void TearDownTestSuite() {
    EXPECT_EQ(std::system(absl::StrCat("rm -rf ", Dir()).c_str()), 0);
  }

  static std::string Model() { return Dir() + "/m.model"; }

  // What `spm_encode --output_format=id` prints for each text.
  static std::vector<std::vector<int32_t>> SpmEncode(const std::vector<std::string>& texts) {
    {
      std::ofstream in(Dir() + "/input.txt");
      for (const std::string& t : texts) in << t << "\n";
    }
    const std::string cmd = absl::StrCat("spm_encode --model=", Model(),
                                         " --output_format=id < ", Dir(), "/input.txt > ", Dir(),
                                         "/ids.txt");
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    std::ifstream out(Dir() + "/ids.txt");
    std::vector<std::vector<int32_t>> ids;
    std::string line;
    while (std::getline(out, line)) {
      std::vector<int32_t> row;
      for (absl::string_view piece : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
        row.push_back(std::atoi(std::string(piece).c_str()));
      }
      ids.push_back(row);
    }
    return ids;
  }
};

std::vector<int32_t> Ids(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kInt32);
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.num_elements());
}

TEST_F(TokenizeTest, IdsEqualSpmEncode) {
  const std::vector<std::string> texts = Texts();
  const std::vector<std::vector<int32_t>> want = SpmEncode(texts);
  ASSERT_EQ(want.size(), texts.size());
  const std::string file = Dir() + "/texts.txt";
  {
    std::ofstream f(file);
    for (const std::string& t : texts) f << t << "\n";
  }
  auto ds = Dataset::Parse(absl::StrCat("text_line_dataset('", file, "').map(tokenize('", Model(),
                                        "'), num_parallel_calls=4)"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto spec = ds->element_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->leaf().dtype, DType::kInt32);
  EXPECT_EQ(spec->leaf().shape, Shape({kUnknownDim}));
  auto rows = testing_util::RunDataset(*ds);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(Ids((*rows)[i].leaf()), want[i]) << texts[i];
    EXPECT_FALSE(want[i].empty());
  }
}

TEST_F(TokenizeTest, AddBosAndEosAsSeqio) {
  auto model = SentencePieceModel::Get(Model());
  ASSERT_TRUE(model.ok()) << model.status();
  auto plain = (*model)->Encode("hello world", false, false);
  auto both = (*model)->Encode("hello world", true, true);
  ASSERT_TRUE(plain.ok() && both.ok());
  std::vector<int32_t> want = {1};  // spm_train's defaults: <s> = 1, </s> = 2
  for (int32_t id : Ids(*plain)) want.push_back(id);
  want.push_back(2);
  EXPECT_EQ(Ids(*both), want);
  auto ds = Dataset::Parse(absl::StrCat("from_tensors('hello world').map(tokenize('", Model(),
                                        "', add_bos=True, add_eos=True))"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto reparsed = Dataset::Parse(ds->ToExpression());
  ASSERT_TRUE(reparsed.ok()) << reparsed.status();
  EXPECT_EQ(reparsed->ToExpression(), ds->ToExpression());
  auto rows = testing_util::RunDataset(*ds);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(Ids((*rows)[0].leaf()), want);
}

TEST_F(TokenizeTest, SharedModelFromManyThreads) {
  // 2000 texts through 8 parallel calls: every element's ids equal the sequential encoding.
  std::vector<std::string> texts;
  for (int i = 0; i < 2000; ++i) texts.push_back(Texts()[i % Texts().size()] + std::to_string(i));
  const std::string file = Dir() + "/many.txt";
  {
    std::ofstream f(file);
    for (const std::string& t : texts) f << t << "\n";
  }
  auto model = SentencePieceModel::Get(Model());
  ASSERT_TRUE(model.ok());
  auto ds = Dataset::Parse(absl::StrCat("text_line_dataset('", file, "').map(tokenize('", Model(),
                                        "'), num_parallel_calls=8)"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto rows = testing_util::RunDataset(*ds);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    auto want = (*model)->Encode(texts[i], false, false);
    ASSERT_TRUE(want.ok());
    ASSERT_EQ(Ids((*rows)[i].leaf()), Ids(*want)) << texts[i];
  }
}

TEST_F(TokenizeTest, MissingOrCorruptModelIsAnErrorNamingIt) {
  const std::string missing = Dir() + "/missing.model";
  auto ds = Dataset::Parse(absl::StrCat("from_tensors('a').map(tokenize('", missing, "'))"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto rows = testing_util::RunDataset(*ds);
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kNotFound) << rows.status();
  EXPECT_NE(rows.status().message().find(missing), std::string::npos) << rows.status();

  const std::string corrupt = Dir() + "/corrupt.model";
  std::ofstream(corrupt) << "this is not a protobuf \xff\xff\xff";
  ds = Dataset::Parse(absl::StrCat("from_tensors('a').map(tokenize('", corrupt, "'))"));
  ASSERT_TRUE(ds.ok());
  rows = testing_util::RunDataset(*ds);
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument) << rows.status();
  EXPECT_NE(rows.status().message().find(corrupt + " is not a SentencePiece model"),
            std::string::npos)
      << rows.status();
}

// A model that cannot be loaded fails the pipeline when it is built, so ignore_errors() cannot
// skip every element and leave an empty dataset (silently dropped data); the spec, which a
// client computes without the file, is still known.
TEST_F(TokenizeTest, UnloadableModelFailsThePipelineEvenUnderIgnoreErrors) {
  const std::string missing = Dir() + "/missing.model";
  const std::string corrupt = Dir() + "/corrupt_for_ignore.model";
  std::ofstream(corrupt) << "this is not a protobuf \xff\xff\xff";
  const std::vector<std::pair<std::string, absl::StatusCode>> models = {
      {missing, absl::StatusCode::kNotFound}, {corrupt, absl::StatusCode::kInvalidArgument}};
  for (const auto& [model, code] : models) {
    SCOPED_TRACE(model);
    auto ds = Dataset::Parse(absl::StrCat("from_tensors('a').repeat(5).map(tokenize('", model,
                                          "')).ignore_errors()"));
    ASSERT_TRUE(ds.ok()) << ds.status();
    auto spec = ds->element_spec();
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->leaf().dtype, DType::kInt32);
    auto it = MakeIterator(*ds, ExecutorOptions());
    ASSERT_FALSE(it.ok()) << "the pipeline was built with an unloadable model";
    EXPECT_EQ(it.status().code(), code) << it.status();
    EXPECT_NE(it.status().message().find(model), std::string::npos) << it.status();
  }
}

TEST_F(TokenizeTest, DataRootsConfineTheModelPath) {
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", Dir(), "/allowed").c_str()), 0);
  auto roots = DataRoots::Create({Dir() + "/allowed"});
  ASSERT_TRUE(roots.ok()) << roots.status();
  auto ds = Dataset::Parse(absl::StrCat("from_tensors('a').map(tokenize('", Model(), "'))"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::Status s = roots->CheckDataset(ds->def());
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find(Model()), std::string::npos) << s;
}

TEST_F(TokenizeTest, NonScalarInputIsInvalidArgument) {
  auto ds = Dataset::Parse(absl::StrCat("from_tensors(['a', 'b']).map(tokenize('", Model(), "'))"));
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ds.status().message().find("the input must be a string scalar"), std::string::npos)
      << ds.status();
}

}  // namespace
}  // namespace sluice
