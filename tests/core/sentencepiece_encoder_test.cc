// Sluice's SentencePiece encoder against libsentencepiece (the reference, loaded as tokenize
// loads it for the models Sluice's encoder does not handle): models trained here by spm_train
// (unigram and BPE; nmt_nfkc, nmt_nfkc_cf and identity normalization; byte_fallback on and off;
// user-defined and control symbols; whitespace options; a model whose pieces span words and one
// with whitespace as a suffix), over generated texts with CJK, combining marks, emoji,
// fullwidth forms, malformed UTF-8, NUL, runs of spaces, tabs and newlines, each text encoded
// with and without the word cache. Also: long texts (the path score grows, so the cache's
// reuse rule is exercised), a tiny cache (eviction), corrupt and mutated model files (an error
// or the library's ids, never a crash), and char models falling back to the library.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/ops/sentencepiece_encoder.h"
#include "core/data/ops/sentencepiece_library.h"
#include "core/data/ops/sentencepiece_model.h"
#include "core/data/ops/sentencepiece_model_proto.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

constexpr uint32_t kCorpusSeed = 31001;
constexpr uint32_t kTextSeed = 31002;
constexpr uint32_t kMutationSeed = 31003;

std::string Dir() {
  return absl::StrCat(::testing::TempDir(), "/sentencepiece_encoder_test_", getpid());
}

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Text of many kinds of words and separators. `for_training` leaves out what spm_train cannot
// take (malformed UTF-8, NUL, newlines inside a line).
class TextGenerator {
 public:
  explicit TextGenerator(uint32_t seed) : rng_(seed) {
    const std::vector<std::string> syllables = {"ka", "lo", "mi", "ne", "ru", "sa", "to", "vi",
                                                "th", "ing", "er", "qu", "caf\xc3\xa9", "\xc3\xbc",
                                                "\xc3\x9f", "ab", "12", "7"};
    for (int i = 0; i < 300; ++i) {
      std::string w;
      const int n = 1 + Uniform(3);
      for (int j = 0; j < n; ++j) w += syllables[Uniform(syllables.size())];
      words_.push_back(w);
    }
  }

  std::string Word(bool for_training) {
    switch (Uniform(for_training ? 9 : 12)) {
      case 0: {  // CJK
        std::string s;
        for (int i = 0, n = 1 + Uniform(4); i < n; ++i) s += Utf8(0x4E00 + Uniform(60));
        return s;
      }
      case 1:  // a letter with combining marks
        return "e" + Utf8(0x0301) + (Uniform(2) ? Utf8(0x0308) : "") + "x";
      case 2:  // emoji, sometimes a ZWJ sequence
        return Utf8(0x1F600 + Uniform(40)) + (Uniform(2) ? Utf8(0x200D) + Utf8(0x1F466) : "");
      case 3: {  // fullwidth letters and digits
        std::string s;
        for (int i = 0, n = 1 + Uniform(4); i < n; ++i) s += Utf8(0xFF21 + Uniform(40));
        return s;
      }
      case 4:
        return Uniform(2) ? "<sep>" : "[MASK]";  // user-defined symbols of some models
      case 9:  // malformed UTF-8: a stray byte, a truncated sequence, a surrogate, overlong
        return std::vector<std::string>{"\xff", "\xc3", "\xe6\x97", "\xed\xa0\x80", "\xc0\xaf",
                                        "a\x80z"}[Uniform(6)];
      case 10:
        return std::string("x\0y", 3);
      case 11:
        return "<s></s><ctl>";  // control pieces' spellings are plain text
      default:
        return words_[Uniform(words_.size())];
    }
  }

  std::string Separator(bool for_training) {
    switch (Uniform(10)) {
      case 0: return "   ";
      case 1: return "\t";
      case 2: return for_training ? " " : "\n";
      case 3: return Utf8(0x3000);  // ideographic space
      case 4: return "";
      default: return " ";
    }
  }

  std::string Text(int words, bool for_training) {
    std::string s = Uniform(8) == 0 ? "  " : "";
    for (int i = 0; i < words; ++i) s += Word(for_training) + Separator(for_training);
    return s;
  }

  int Uniform(size_t n) { return static_cast<int>(rng_() % n); }

 private:
  std::mt19937 rng_;
  std::vector<std::string> words_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// name -> spm_train flags.
const std::map<std::string, std::string>& ModelFlags() {
  static const auto* flags = new std::map<std::string, std::string>{
      {"unigram_nfkc", "--vocab_size=400 --model_type=unigram"},
      {"unigram_identity_bytes",
       "--model_type=unigram --vocab_size=800 --normalization_rule_name=identity --byte_fallback=true "
       "--user_defined_symbols='<sep>,[MASK]' --control_symbols='<ctl>'"},
      {"unigram_nfkc_cf_raw_spaces",
       "--vocab_size=400 --model_type=unigram --normalization_rule_name=nmt_nfkc_cf "
       "--remove_extra_whitespaces=false --add_dummy_prefix=false --split_digits=true"},
      {"unigram_suffix", "--vocab_size=400 --model_type=unigram --treat_whitespace_as_suffix=true"},
      {"bpe_nfkc", "--vocab_size=400 --model_type=bpe --user_defined_symbols='<sep>'"},
      {"bpe_identity_bytes",
       "--model_type=bpe --vocab_size=800 --normalization_rule_name=identity --byte_fallback=true "
       "--user_defined_symbols='<sep>,[MASK]'"},
      {"bpe_across_words", "--vocab_size=400 --model_type=bpe --split_by_whitespace=false"},
      {"unigram_across_words", "--vocab_size=400 --model_type=unigram --split_by_whitespace=false"},
      {"char", "--vocab_size=400 --model_type=char"},
  };
  return *flags;
}

class SentencePieceEncoderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::cout << "corpus seed " << kCorpusSeed << ", text seed " << kTextSeed
              << ", mutation seed " << kMutationSeed << "\n";
    ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", Dir()).c_str()), 0);
    TextGenerator gen(kCorpusSeed);
    {
      std::ofstream corpus(Dir() + "/corpus.txt");
      for (int i = 0; i < 1500; ++i) corpus << gen.Text(5 + gen.Uniform(20), true) << "\n";
    }
  }

  // The path of model `name` of ModelFlags(), trained on its first use in this process (each
  // test trains only the models it uses).
  static std::string ModelPath(const std::string& name) {
    static auto* trained = new std::map<std::string, bool>();
    const std::string path = absl::StrCat(Dir(), "/", name, ".model");
    if ((*trained)[name]) return path;
    const std::string train = absl::StrCat(
        "spm_train --input=", Dir(), "/corpus.txt --model_prefix=", Dir(), "/", name,
        " --hard_vocab_limit=false --num_threads=1 ", ModelFlags().at(name), " > ", Dir(), "/",
        name, ".log 2>&1");
    EXPECT_EQ(std::system(train.c_str()), 0)
        << "spm_train failed for " << name << ": "
        << ReadFile(absl::StrCat(Dir(), "/", name, ".log"));
    (*trained)[name] = true;
    return path;
  }

  static void TearDownTestSuite() {
    EXPECT_EQ(std::system(absl::StrCat("rm -rf ", Dir()).c_str()), 0);
  }

  static std::string ModelBytes(const std::string& name) { return ReadFile(ModelPath(name)); }

  static std::shared_ptr<const SentencePieceProcessorHandle> Library(const std::string& bytes) {
    std::string error;
    auto p = SentencePieceLoad(bytes, &error);
    EXPECT_NE(p, nullptr) << error;
    return p;
  }

  static std::vector<int32_t> LibraryIds(const SentencePieceProcessorHandle& p,
                                         const std::string& text) {
    std::vector<int32_t> ids;
    std::string error;
    EXPECT_TRUE(SentencePieceEncode(p, text, &ids, &error)) << error;
    return ids;
  }

  static std::vector<int32_t> SluiceIds(const SentencePieceEncoder& e, const std::string& text) {
    std::vector<int32_t> ids;
    e.Encode(text, &ids);
    return ids;
  }

  static std::string Printable(const std::string& text) {
    std::string out;
    for (unsigned char c : text) {
      if (c < 0x20 || c >= 0x7f) {
        absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
      } else {
        out += static_cast<char>(c);
      }
    }
    return out;
  }

  // Sluice's encoder for the model `bytes`; null (and a test failure) when it does not load.
  static std::unique_ptr<SentencePieceEncoder> EncoderFor(
      const std::string& bytes, SentencePieceEncoderOptions options = {}) {
    auto proto = ParseSentencePieceModelProto(bytes);
    if (!proto.ok()) {
      ADD_FAILURE() << proto.status();
      return nullptr;
    }
    auto e = SentencePieceEncoder::Create(*proto, options);
    if (!e.ok()) {
      ADD_FAILURE() << e.status();
      return nullptr;
    }
    return std::move(*e);
  }

  // Encodes `texts` with the library and with Sluice's encoder with and without the cache,
  // twice (the second time from the cache); reports each difference (at most 5).
  static void ExpectSameIds(const std::string& name, const std::vector<std::string>& texts) {
    SCOPED_TRACE(name);
    const std::string bytes = ModelBytes(name);
    auto library = Library(bytes);
    ASSERT_NE(library, nullptr);
    auto cached = EncoderFor(bytes);
    auto whole = EncoderFor(bytes, {.word_cache = false});
    ASSERT_TRUE(cached != nullptr && whole != nullptr);
    int failures = 0;
    for (int pass = 0; pass < 2; ++pass) {  // the second pass hits the cache
      for (const std::string& text : texts) {
        const std::vector<int32_t> want = LibraryIds(*library, text);
        EXPECT_EQ(SluiceIds(*cached, text), want) << "cached, text: " << Printable(text);
        EXPECT_EQ(SluiceIds(*whole, text), want) << "whole, text: " << Printable(text);
        if (SluiceIds(*cached, text) != want || SluiceIds(*whole, text) != want) {
          ASSERT_LT(++failures, 5) << "stopping after 5 differing texts";
        }
      }
    }
  }

  static std::vector<std::string> Texts(uint32_t seed, int count, int max_words) {
    TextGenerator gen(seed);
    std::vector<std::string> texts = {"", " ", "   \t\n ", "a", "\xe2\x96\x81", "\xef\xbf\xbd",
                                      std::string(1, '\0')};
    for (int i = 0; i < count; ++i) texts.push_back(gen.Text(1 + gen.Uniform(max_words), false));
    std::string long_word = "a ";  // past the cache's longest word: segmented in place
    for (int i = 0; i < 100; ++i) long_word += gen.Word(false);
    texts.push_back(long_word + " b " + long_word);
    return texts;
  }
};

TEST_F(SentencePieceEncoderTest, SameIdsAsLibraryOnEveryKindOfModel) {
  const std::vector<std::string> texts = Texts(kTextSeed, 300, 40);
  for (const auto& [name, flags] : ModelFlags()) {
    if (name == "char") continue;
    ExpectSameIds(name, texts);
  }
}

TEST_F(SentencePieceEncoderTest, SameIdsOnLongTextsWhereFloatScoresLosePrecision) {
  // Thousands of words: the path score reaches |score| > 10^4, where float spacing is ~10^-3
  // and the library's choices among near-equal segmentations depend on the position.
  const std::vector<std::string> texts = Texts(kTextSeed + 1, 6, 6000);
  for (const char* name : {"unigram_nfkc", "unigram_identity_bytes", "bpe_nfkc"}) {
    ExpectSameIds(name, texts);
  }
}

TEST_F(SentencePieceEncoderTest, WordsAreCachedOnlyWherePiecesStayInsideWords) {
  std::map<std::string, bool> want = {{"unigram_nfkc", true},          {"bpe_nfkc", true},
                                      {"unigram_identity_bytes", true}, {"unigram_suffix", false},
                                      {"bpe_across_words", false}};
  for (const auto& [name, splits] : want) {
    auto e = EncoderFor(ModelBytes(name));
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->splits_words(), splits) << name;
  }
}

TEST_F(SentencePieceEncoderTest, TinyCacheEvictsAndStaysCorrect) {
  const std::string bytes = ModelBytes("unigram_nfkc");
  auto library = Library(bytes);
  ASSERT_NE(library, nullptr);
  auto e = EncoderFor(bytes, {.word_cache = true, .word_cache_bytes = 2000});
  ASSERT_NE(e, nullptr);
  for (const std::string& text : Texts(kTextSeed + 2, 200, 30)) {
    ASSERT_EQ(SluiceIds(*e, text), LibraryIds(*library, text)) << Printable(text);
  }
  SentencePieceWordCache cache(2000);
  for (int i = 0; i < 1000; ++i) {
    cache.Insert(absl::StrCat("word", i), WordSegmentation{.ids = {i, i + 1}, .path_scores = {}});
    ASSERT_LE(cache.bytes(), 2000u);
  }
  EXPECT_GT(cache.size(), 1u);
  ASSERT_NE(cache.Find("word999"), nullptr);
  EXPECT_EQ(cache.Find("word999")->ids, (std::vector<int32_t>{999, 1000}));
  EXPECT_EQ(cache.Find("word0"), nullptr);
}

TEST_F(SentencePieceEncoderTest, CharModelsFallBackToTheLibrary) {
  auto proto = ParseSentencePieceModelProto(ModelBytes("char"));
  ASSERT_TRUE(proto.ok());
  EXPECT_EQ(SentencePieceEncoder::Create(*proto).status().code(),
            absl::StatusCode::kUnimplemented);
  auto model = SentencePieceModel::Get(ModelPath("char"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->encoder_name(), "libsentencepiece");
  auto ids = (*model)->Encode("abc", false, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->num_elements(), 4);  // ▁ a b c
  auto unigram = SentencePieceModel::Get(ModelPath("unigram_nfkc"));
  ASSERT_TRUE(unigram.ok());
  EXPECT_EQ((*unigram)->encoder_name(), "sluice");
}

TEST_F(SentencePieceEncoderTest, CorruptModelsAreInvalidArgumentNamingWhere) {
  const std::string bytes = ModelBytes("unigram_identity_bytes");
  // Truncated inside a piece: a length past the end.
  auto truncated = ParseSentencePieceModelProto(bytes.substr(0, bytes.size() / 2));
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(truncated.status().message().find("at byte "), std::string::npos)
      << truncated.status();
  // A well-formed message that is not a model: no pieces.
  auto empty = ParseSentencePieceModelProto("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(SentencePieceEncoder::Create(*empty).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A byte piece in a model without byte_fallback, as the library refuses.
  auto proto = ParseSentencePieceModelProto(bytes);
  ASSERT_TRUE(proto.ok());
  proto->byte_fallback = false;
  auto e = SentencePieceEncoder::Create(*proto);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("<0x00>"), std::string::npos) << e.status();
  // Through tokenize's loader: the file is named.
  const std::string path = Dir() + "/truncated.model";
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  auto model = SentencePieceModel::Get(path);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find(path + " is not a SentencePiece model"),
            std::string::npos)
      << model.status();
}

// The byte offset where the top-level fields after the pieces (ModelProto field 1) begin.
size_t EndOfPieces(const std::string& model) {
  size_t at = 0;
  const auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0; at < model.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(model[at++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
    }
    return v;
  };
  while (at < model.size()) {
    const size_t field_start = at;
    if ((varint() >> 3) != 1) return field_start;
    at += varint();
  }
  return model.size();
}

TEST_F(SentencePieceEncoderTest, MutatedPiecesNeverCrashAndAgreeWhenBothAccept) {
  // Random bytes among a real model's pieces overwritten: each mutant either fails to load in
  // Sluice's encoder (an error, no crash) or, where the library also loads it, encodes as it
  // does. (Only the pieces: libsentencepiece itself crashes on some mutated charsmaps.)
  std::mt19937 rng(kMutationSeed);
  const std::string original = ModelBytes("unigram_nfkc");
  const size_t pieces_end = EndOfPieces(original);
  ASSERT_GT(pieces_end, 1000u);
  const std::vector<std::string> texts = Texts(kTextSeed + 3, 20, 10);
  int loaded = 0;
  for (int round = 0; round < 200; ++round) {
    std::string bytes = original;
    for (int i = 0, n = 1 + static_cast<int>(rng() % 4); i < n; ++i) {
      bytes[rng() % pieces_end] = static_cast<char>(rng());
    }
    auto proto = ParseSentencePieceModelProto(bytes);
    if (!proto.ok()) {
      EXPECT_EQ(proto.status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    auto e = SentencePieceEncoder::Create(*proto);
    if (!e.ok()) continue;
    std::string error;
    auto library = SentencePieceLoad(bytes, &error);
    if (library == nullptr) continue;
    ++loaded;
    for (const std::string& text : texts) {
      ASSERT_EQ(SluiceIds(**e, text), LibraryIds(*library, text))
          << "mutation round " << round << ", text: " << Printable(text);
    }
  }
  std::cout << loaded << " of 200 mutants loaded by both\n";
  EXPECT_GT(loaded, 50);
}

TEST_F(SentencePieceEncoderTest, MutatedModelsAnywhereNeverCrashSluicesEncoder) {
  // Anywhere, the charsmap included: Sluice's encoder loads the mutant or says why, and
  // encodes any text without crashing (no reference: the library may crash on these).
  std::mt19937 rng(kMutationSeed + 1);
  for (const char* name : {"unigram_nfkc", "bpe_identity_bytes"}) {
    const std::string original = ModelBytes(name);
    const std::vector<std::string> texts = Texts(kTextSeed + 4, 10, 10);
    for (int round = 0; round < 100; ++round) {
      std::string bytes = original;
      for (int i = 0, n = 1 + static_cast<int>(rng() % 8); i < n; ++i) {
        bytes[rng() % bytes.size()] = static_cast<char>(rng());
      }
      if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
      auto proto = ParseSentencePieceModelProto(bytes);
      if (!proto.ok()) continue;
      auto e = SentencePieceEncoder::Create(*proto);
      if (!e.ok()) continue;
      for (const std::string& text : texts) {
        std::vector<int32_t> ids = SluiceIds(**e, text);
        for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < (*e)->vocab_size()) << id;
      }
    }
  }
}

// A serialized ModelProto (identity normalization) with the given normal pieces after <unk>,
// <s> and </s>.
std::string HandMadeUnigramModel(const std::vector<std::pair<std::string, float>>& pieces) {
  const auto varint = [](uint64_t v) {
    std::string out;
    for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7f) | 0x80);
    return out + static_cast<char>(v);
  };
  const auto bytes_field = [&](int field, const std::string& b) {
    return varint(static_cast<uint64_t>(field) << 3 | 2) + varint(b.size()) + b;
  };
  const auto piece = [&](const std::string& text, float score, int type) {
    std::string score_bits(4, '\0');
    std::memcpy(score_bits.data(), &score, 4);
    return bytes_field(1, bytes_field(1, text) + varint(2 << 3 | 5) + score_bits +
                              varint(3 << 3 | 0) + varint(static_cast<uint64_t>(type)));
  };
  std::string model = piece("<unk>", 0, 2) + piece("<s>", 0, 3) + piece("</s>", 0, 3);
  for (const auto& [text, score] : pieces) model += piece(text, score, 1);
  model += bytes_field(2, varint(3 << 3 | 0) + varint(1));  // trainer_spec: unigram
  model += bytes_field(3, bytes_field(1, "identity"));       // normalizer_spec
  return model;
}

TEST_F(SentencePieceEncoderTest, NearTiesResolveAsTheLibrarysFloatSearchDoes) {
  // "▁ab" segments as ▁a + b (-3.375) or ▁ + ab (-3.375 - 2^-20): ▁a + b is better by 1e-6,
  // less than the float spacing of a path score past 8; the library, summing in float, picks
  // either depending on the score before the word. A cached segmentation computed exactly
  // would differ from it; the encoder must redo such words from the real running score.
  const std::string model = HandMadeUnigramModel({{"\xe2\x96\x81", -2.375f},
                                                  {"a", -5.0f},
                                                  {"b", -2.125f},
                                                  {"\xe2\x96\x81" "a", -1.25f},
                                                  {"ab", -1.0f - 0x1p-20f}});
  auto library = Library(model);
  ASSERT_NE(library, nullptr);
  auto e = EncoderFor(model);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->splits_words());
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "ab ";
  const std::vector<int32_t> want = LibraryIds(*library, text);
  // The library does take both segmentations somewhere (else this test shows nothing).
  const int64_t ab = std::count(want.begin(), want.end(), 7);
  EXPECT_GT(ab, 0);
  EXPECT_LT(ab, 20000);
  EXPECT_EQ(SluiceIds(*e, text), want);
  EXPECT_EQ(SluiceIds(*e, text), want);  // from the cache
}

TEST_F(SentencePieceEncoderTest, ExtremeOrNanScoresAreSearchedWholeAndMatchTheLibrary) {
  // Float path scores that overflow to -inf, or NaN, tie where exact ones do not: the word
  // cache's reuse rule does not cover them, so such models are never cached.
  const std::vector<std::string> texts = Texts(kTextSeed + 5, 30, 20);
  for (float extreme : {-3e38f, std::numeric_limits<float>::quiet_NaN()}) {
    const std::string model = HandMadeUnigramModel({{"\xe2\x96\x81", -2.0f},
                                                    {"a", extreme},
                                                    {"b", -2.0f},
                                                    {"\xe2\x96\x81" "a", extreme},
                                                    {"ab", -3e38f}});
    auto library = Library(model);
    ASSERT_NE(library, nullptr);
    auto e = EncoderFor(model);
    ASSERT_NE(e, nullptr);
    EXPECT_FALSE(e->splits_words()) << extreme;
    for (const std::string& text : texts) {
      ASSERT_EQ(SluiceIds(*e, text), LibraryIds(*library, text)) << Printable(text);
    }
  }
}

}  // namespace
}  // namespace sluice
