#include "tests/adversarial/hostile_pipelines.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/seeded_rng.h"

namespace sluice {
namespace {

using absl::StatusCode;

using Rng = SeededRng;

const std::vector<StatusCode> kUsual = {StatusCode::kInvalidArgument,
                                        StatusCode::kResourceExhausted,
                                        StatusCode::kFailedPrecondition};
// Decoders and readers may also find the (deliberately) truncated data first.
const std::vector<StatusCode> kWithDataLoss = {
    StatusCode::kInvalidArgument, StatusCode::kResourceExhausted,
    StatusCode::kFailedPrecondition, StatusCode::kDataLoss, StatusCode::kOutOfRange};

HostileCase Case(std::string family, std::string pipeline, std::vector<std::string> names,
                 std::vector<StatusCode> codes = kUsual) {
  HostileCase c;
  c.family = std::move(family);
  c.pipeline = std::move(pipeline);
  c.names = std::move(names);
  c.codes = std::move(codes);
  return c;
}

// ---- bombs ----------------------------------------------------------------------------------

uint32_t Crc32(absl::string_view data) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void PutBE32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>((v >> shift) & 0xFF));
}
void PutBE16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v & 0xFF));
}

std::string PngChunk(absl::string_view type, absl::string_view data) {
  std::string out;
  PutBE32(&out, static_cast<uint32_t>(data.size()));
  std::string body = absl::StrCat(type, data);
  out += body;
  PutBE32(&out, Crc32(body));
  return out;
}

// A 512-byte ustar header; `size_field` is the 12 bytes of the size (octal or base-256).
std::string TarHeader(absl::string_view name, char type, const std::string& size_field) {
  std::string h(512, '\0');
  const absl::string_view n = name.substr(0, 99);
  h.replace(0, n.size(), n.data(), n.size());
  h.replace(100, 8, "0000644", 8);
  h.replace(108, 8, "0000000", 8);
  h.replace(116, 8, "0000000", 8);
  h.replace(124, 12, size_field);
  h.replace(136, 12, "00000000000", 12);
  h[156] = type;
  h.replace(257, 6, "ustar", 6);  // "ustar\0"
  h.replace(263, 2, "00");
  h.replace(148, 8, "        ");
  uint64_t sum = 0;
  for (unsigned char c : h) sum += c;
  const std::string chk = absl::StrFormat("%06o", sum);
  h.replace(148, 6, chk);
  h[154] = '\0';
  h[155] = ' ';
  return h;
}

std::string OctalSize(uint64_t size) {
  std::string s = absl::StrFormat("%011o", size);
  s.push_back('\0');
  return s;
}

std::string Base256Size(uint64_t size) {
  std::string s(12, '\0');
  s[0] = static_cast<char>(0x80);
  for (int i = 11; i >= 4; --i) {
    s[i] = static_cast<char>(size & 0xFF);
    size >>= 8;
  }
  return s;
}

std::string Padded(absl::string_view data) {
  std::string out(data);
  out.resize((out.size() + 511) / 512 * 512, '\0');
  return out;
}

std::string PaxRecord(absl::string_view key, absl::string_view value) {
  // "LEN key=value\n" where LEN counts the whole record, itself included.
  const size_t body = key.size() + value.size() + 3;  // ' ', '=', '\n'
  size_t len = body + 1;
  while (absl::StrCat(len).size() + body != len) ++len;
  return absl::StrCat(len, " ", key, "=", value, "\n");
}

constexpr uint64_t kTwoGiB = uint64_t{1} << 31;
constexpr uint64_t kOneTiB = uint64_t{1} << 40;

std::vector<std::string> TarBombContents() {
  const std::string filler(1024, 'z');
  std::vector<std::string> out;
  // 0: a valid field, then one claiming 2 GiB.
  out.push_back(absl::StrCat(TarHeader("s0.cls", '0', OctalSize(1)), Padded("3"),
                             TarHeader("s0.jpg", '0', OctalSize(kTwoGiB)), filler));
  // 1: 2^40 bytes in base-256.
  out.push_back(absl::StrCat(TarHeader("s0.jpg", '0', Base256Size(kOneTiB)), filler));
  // 2: a GNU long name of 2 GiB.
  out.push_back(absl::StrCat(TarHeader("././@LongLink", 'L', OctalSize(kTwoGiB)), filler));
  // 3: a pax header of 2 GiB.
  out.push_back(absl::StrCat(TarHeader("PaxHeaders/s0.jpg", 'x', OctalSize(kTwoGiB)), filler));
  // 4: a pax size record of 2^40 for the next member.
  const std::string pax = absl::StrCat(PaxRecord("path", "s0.jpg"),
                                       PaxRecord("size", absl::StrCat(kOneTiB)));
  out.push_back(absl::StrCat(TarHeader("PaxHeaders/s0.jpg", 'x', OctalSize(pax.size())),
                             Padded(pax), TarHeader("s0.jpg", '0', OctalSize(0)), filler));
  return out;
}

// ---- sources and pieces ---------------------------------------------------------------------

// A source with at least 10^11 elements (so that no batch below is cut short by the data), and
// how many bytes each element's payload has at least.
std::string EndlessSource(Rng& rng, int64_t* min_bytes) {
  switch (rng.In(0, 6)) {
    case 0:
      *min_bytes = 8;
      return "range(100000000000)";
    case 1:
      *min_bytes = 8;
      return absl::StrCat("range(", rng.In(-1000, 1000), ", 1000000000000, ", rng.In(1, 3), ")");
    case 2:
      *min_bytes = 4;
      return "range(100000000000).map(cast(tf.int32))";
    case 3:
      *min_bytes = 1;
      return "range(100000000000).map(cast(tf.uint8))";
    case 4:
      *min_bytes = 12;
      return "from_tensors([1, 2, 3]).repeat()";
    case 5:
      *min_bytes = 8;
      return "from_tensor_slices([[1.5, 2.5], [3.5, 4.5]]).repeat()";
    default:
      *min_bytes = 8;
      return "range(100000000000).shard(2, 1)";
  }
}

// An op between the source and the hostile one that keeps the element count huge.
std::string Passthrough(Rng& rng) {
  static const std::vector<std::string> kOps = {
      "skip(3)", "take(90000000000)", "prefetch(2)", "shard(3, 0)", "repeat()",
      "map(cast(tf.int64))"};
  // cast only applies to numbers, which every EndlessSource is.
  return rng.Pick(kOps);
}

// A batch size B with B * min_bytes far over 256 MiB, up to 1e10.
int64_t HugeBatch(Rng& rng, int64_t min_bytes) {
  const int64_t floor = (int64_t{3} << 30) / min_bytes;  // 3 GiB of payload at least
  static const std::vector<int64_t> kSizes = {400000000,  1000000000, 2147483648,
                                              3000000000, 4294967296, 10000000000};
  int64_t b = rng.Pick(kSizes);
  if (b < floor) b = floor + rng.In(0, 1000);
  return std::min<int64_t>(b, 10000000000);
}

const char* kImage = "from_tensors(tf.constant(7, dtype=tf.uint8, shape=[8, 8, 3])).repeat(2)";

// ---- families -------------------------------------------------------------------------------

HostileCase BatchCase(Rng& rng) {
  int64_t min_bytes = 8;
  std::string p = EndlessSource(rng, &min_bytes);
  for (int64_t i = rng.In(0, 2); i > 0; --i) absl::StrAppend(&p, ".", Passthrough(rng));
  const int64_t b = HugeBatch(rng, min_bytes);
  switch (rng.In(0, 5)) {
    case 0:
      return Case("batch", absl::StrCat(p, ".batch(", b, ", drop_remainder=True)"), {"batch"});
    case 1:
      return Case("batch", absl::StrCat(p, ".padded_batch(", b, ")"), {"padded_batch"});
    case 2:
      return Case("batch", absl::StrCat(p, ".batch(2).rebatch(", b, ")"), {"rebatch"});
    case 3: {
      // Sizes that are wrong rather than big: the parser or validation names the op.
      static const std::vector<std::string> kBad = {"0", "-5", "-10000000000",
                                                    "9223372036854775807", "2**64",
                                                    "18446744073709551616", "1.5e10"};
      return Case("batch", absl::StrCat(p, ".batch(", rng.Pick(kBad), ")"), {"batch"});
    }
    default:
      return Case("batch", absl::StrCat(p, ".batch(", b, ")", rng.Chance(30) ? ".prefetch(1)" : ""),
                  {"batch"});
  }
}

HostileCase ShapeCase(Rng& rng) {
  switch (rng.In(0, 6)) {
    case 0: {  // one_hot: depth alone over any element limit, negative, or overflowing
      static const std::vector<std::string> kDepth = {
          "1000000000", "100000000000", "4611686018427387904", "9223372036854775807", "-7"};
      const bool vector = rng.Chance(50);
      return Case("shape",
                  absl::StrCat(vector ? "from_tensors([1, 2, 3]).repeat(4)" : "range(1000000)",
                               ".map(one_hot(", rng.Pick(kDepth), ")).batch(2)"),
                  {"one_hot"});
    }
    case 1: {  // resize
      static const std::vector<std::string> kDims = {"200000", "1000000", "2147483647",
                                                     "1099511627776", "-1", "-200000"};
      return Case("shape",
                  absl::StrCat(kImage, ".map(resize([", rng.Pick(kDims), ", ", rng.Pick(kDims),
                               "])).batch(2)"),
                  {"resize"});
    }
    case 2: {  // padded_batch
      static const std::vector<std::string> kDims = {"10000000000", "1099511627776",
                                                     "4611686018427387904", "-5", "-1099511627776"};
      if (rng.Chance(50)) {
        return Case("shape",
                    absl::StrCat("from_tensors([1, 2, 3]).repeat(8).padded_batch(", rng.In(2, 4),
                                 ", padded_shapes=[", rng.Pick(kDims), "])"),
                    {"padded_batch"});
      }
      return Case("shape",
                  absl::StrCat("from_tensors([[1, 2], [3, 4]]).repeat(8).padded_batch(2, "
                               "padded_shapes=[",
                               rng.Pick(kDims), ", ", rng.Pick(kDims), "])"),
                  {"padded_batch"});
    }
    case 3: {  // reshape whose product overflows int64 (to 0 for an empty input)
      static const std::vector<std::string> kShapes = {
          "[4611686018427387904, 4]", "[4294967296, 4294967296]", "[2147483648, 2147483648, 4]",
          "[-1, 4611686018427387904]", "[10000000000, 10000000000]"};
      const bool empty = rng.Chance(50);
      return Case("shape",
                  absl::StrCat(empty ? "from_tensors(tf.constant([], dtype=tf.float32, "
                                       "shape=(0,))).repeat(2)"
                                     : "from_tensors([1, 2, 3, 4]).repeat(2)",
                               ".map(reshape(", rng.Pick(kShapes), ")).batch(2)"),
                  {"reshape"});
    }
    case 4: {  // tf.constant filled at parse time (by the client and the coordinator)
      static const std::vector<std::string> kShapes = {
          "[100000, 100000, 100]", "[4611686018427387904, 4]", "[10000000000]", "[-3, 4]",
          "[3037000500, 3037000500]"};
      const std::string source = rng.Chance(50) ? "from_tensors" : "from_tensor_slices";
      return Case("shape",
                  absl::StrCat(source, "(tf.constant(0, dtype=tf.int64, shape=",
                               rng.Pick(kShapes), ")).batch(2)"),
                  {"tf.constant", "constant", source});
    }
    case 5: {  // random_crop larger than the image
      return Case("shape",
                  absl::StrCat(kImage, ".map(random_crop([", rng.Pick(std::vector<std::string>{
                                                                 "200000", "2147483648",
                                                                 "-4"}),
                               ", 4, 3], seed=", rng.In(0, 9), ")).batch(2)"),
                  {"random_crop"});
    }
    default: {  // one_hot then a padded_batch: the product of the two
      return Case("shape",
                  absl::StrCat("range(1000000).map(one_hot(100000)).padded_batch(",
                               rng.In(3000, 100000), ")"),
                  {"padded_batch"});
    }
  }
}

HostileCase NestingCase(Rng& rng) {
  switch (rng.In(0, 3)) {
    case 0: {  // nested batches whose product is far over the element limit
      std::string p = "range(100000000000)";
      int64_t product = 1;
      const int64_t depth = rng.In(2, 4);
      for (int64_t i = 0; i < depth; ++i) {
        int64_t b = rng.In(2, 100000);
        if (i == depth - 1) {
          const int64_t need = (int64_t{1} << 33) / 8 / product + 1;  // 8 GiB of int64
          if (b < need) b = std::min<int64_t>(need, 10000000000);
        }
        product = std::min<int64_t>(product * b, int64_t{1} << 40);
        absl::StrAppend(&p, ".batch(", b, ")");
      }
      return Case("nesting", p, {"batch"});
    }
    case 1: {  // many maps, then a huge batch
      std::string p = "range(100000000000)";
      const int64_t maps = rng.In(50, 400);
      for (int64_t i = 0; i < maps; ++i) {
        absl::StrAppend(&p, i % 2 == 0 ? ".map(cast(tf.int32))" : ".map(cast(tf.int64))");
      }
      absl::StrAppend(&p, ".batch(", HugeBatch(rng, 4), ")");
      return Case("nesting", p, {"batch"});
    }
    case 2: {  // a chain just under the graph's op limit (10000), then a huge batch: stacks
      std::string p = "range(100000000000)";
      const int64_t ops = rng.In(2000, 9900);
      static const std::vector<std::string> kOps = {".skip(0)", ".take(-1)",
                                                    ".map(cast(tf.int64))"};
      const std::string op = rng.Pick(kOps);
      if (ops % 5 == 0) {
        // Valid: the same depth over a small input must be served exactly (or refused by a
        // depth limit), not overflow a worker thread's stack.
        std::string small = "range(100)";
        for (int64_t i = 0; i < ops; ++i) small += op;
        small += ".batch(10)";
        HostileCase c = Case("nesting", small, {"max_ops", "depth", "nesting"},
                             {StatusCode::kInvalidArgument});
        c.valid = true;
        c.max_steps = 2;
        c.expected_output =
            "{\"step\": 0, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [5], \"values\": "
            "[0, 1, 2, 3, 4]}, {\"dtype\": \"int64\", \"shape\": [5], \"values\": [5, 6, 7, 8, "
            "9]}]}\n"
            "{\"step\": 1, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [5], \"values\": "
            "[10, 11, 12, 13, 14]}, {\"dtype\": \"int64\", \"shape\": [5], \"values\": [15, 16, "
            "17, 18, 19]}]}\n";
        return c;
      }
      for (int64_t i = 0; i < ops; ++i) p += op;
      absl::StrAppend(&p, ".batch(", HugeBatch(rng, 8), ")");
      return Case("nesting", p, {"batch", "max_ops", "depth", "nesting"});
    }
    default: {  // over the op limit
      std::string p = "range(10)";
      const int64_t ops = rng.In(10001, 20000);
      for (int64_t i = 0; i < ops; ++i) p += ".skip(0)";
      p += ".batch(2)";
      HostileCase c = Case("nesting", p, {"max_ops", "ops"}, {StatusCode::kInvalidArgument,
                                                            StatusCode::kResourceExhausted});
      c.service_only = true;  // a long but valid pipeline in process (no graph limits there)
      return c;
    }
  }
}

HostileCase BufferCase(Rng& rng, const HostileFiles& files) {
  static const std::vector<std::string> kHuge = {"100000000", "1000000000", "10000000000",
                                                 "4611686018427387904"};
  switch (rng.In(0, 4)) {
    case 0: {
      int64_t min_bytes = 8;
      const std::string source = EndlessSource(rng, &min_bytes);
      return Case("buffer",
                  absl::StrCat(source, ".shuffle(", rng.Pick(kHuge), ", seed=", rng.In(0, 99),
                               ").batch(2)"),
                  {"shuffle"});
    }
    case 1: {  // valid in TF: the first steps are the first elements
      HostileCase c = Case("buffer",
                           absl::StrCat("range(1000000000000).prefetch(", rng.Pick(kHuge),
                                        ").batch(2)"),
                           {"prefetch"});
      c.max_steps = 2;
      c.valid = true;
      c.expected_output =
          "{\"step\": 0, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [1], \"values\": "
          "[0]}, {\"dtype\": \"int64\", \"shape\": [1], \"values\": [1]}]}\n"
          "{\"step\": 1, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [1], \"values\": "
          "[2]}, {\"dtype\": \"int64\", \"shape\": [1], \"values\": [3]}]}\n";
      return c;
    }
    case 2: {  // valid in TF: one file, whatever the cycle
      const std::string huge = rng.Pick(kHuge);
      const bool parallel = rng.Chance(50);
      HostileCase c = Case(
          "buffer",
          absl::StrCat("from_tensor_slices(['", files.text_file,
                       "']).interleave(text_line_dataset, cycle_length=", huge, ", block_length=",
                       rng.Pick(kHuge), parallel ? absl::StrCat(", num_parallel_calls=", huge) : "",
                       ").batch(4)"),
          {"interleave"});
      c.one_task = true;
      c.valid = true;
      c.expected_output =
          "{\"step\": 0, \"per_replica\": [{\"dtype\": \"string\", \"shape\": [2], \"values\": "
          "[\"a\", \"b\"]}, {\"dtype\": \"string\", \"shape\": [2], \"values\": [\"c\", "
          "\"d\"]}]}\n";
      return c;
    }
    case 3: {  // valid in TF: a parallel map with an absurd parallelism
      HostileCase c = Case("buffer",
                           absl::StrCat("range(1000000000000).map(cast(tf.int32), "
                                        "num_parallel_calls=",
                                        rng.Pick(kHuge), ").batch(2)"),
                           {"map", "num_parallel_calls"});
      c.max_steps = 1;
      c.valid = true;
      c.expected_output =
          "{\"step\": 0, \"per_replica\": [{\"dtype\": \"int32\", \"shape\": [1], \"values\": "
          "[0]}, {\"dtype\": \"int32\", \"shape\": [1], \"values\": [1]}]}\n";
      return c;
    }
    default: {  // cache() of an endless input of 4 MiB elements: over 1 GiB within 300 steps
      HostileCase c = Case("buffer",
                           "from_tensors(tf.constant(1, dtype=tf.uint8, shape=[4194304])).repeat()"
                           ".cache().batch(2)",
                           // The process's limit is shared: the op that asks last (the batch)
                           // may be the one refused.
                           {"cache", "batch"});
      c.max_steps = 300;
      return c;
    }
  }
}

HostileCase ImageBombCase(Rng& rng) {
  static const std::vector<std::pair<uint32_t, uint32_t>> kPng = {
      {60000, 60000}, {2147483647, 1}, {1, 2147483647}, {100000, 100000}, {65535, 65535}};
  static const std::vector<std::pair<uint16_t, uint16_t>> kJpeg = {
      {60000, 60000}, {65535, 65535}, {65500, 60000}};
  const bool png = rng.Chance(50);
  std::string bomb;
  if (png) {
    const auto [w, h] = rng.Pick(kPng);
    bomb = PngBomb(w, h, static_cast<int>(rng.Pick(std::vector<int64_t>{0, 2, 6})));
  } else {
    const auto [w, h] = rng.Pick(kJpeg);
    bomb = JpegBomb(w, h, rng.Chance(50) ? 3 : 1);
  }
  if (!png && rng.Chance(25)) {
    // The fused window decode (random_resized_crop taking flip and normalize over:
    // core/data/ops/map_fusion.h) refuses the header before it decodes or allocates.
    return Case("image_bomb",
                absl::StrCat("from_tensors(", BytesLiteral(bomb),
                             ").repeat(2).map(random_resized_crop([224, 224], seed=1))"
                             ".map(random_flip_left_right(seed=2))"
                             ".map(normalize(mean=[0.5], std=[2.0])).batch(2)"),
                {"random_resized_crop"}, kWithDataLoss);
  }
  static const std::vector<std::string> kFns = {"decode_image", "decode_png", "decode_jpeg",
                                                "tf.io.decode_image", "tf.image.decode_png"};
  std::string fn = rng.Pick(kFns);
  if (!png && fn.find("png") != std::string::npos) fn = "decode_jpeg";
  if (png && fn.find("jpeg") != std::string::npos) fn = "decode_png";
  const int64_t channels = rng.Pick(std::vector<int64_t>{-1, 0, 1, 3, 4});
  std::string p = absl::StrCat("from_tensors(", BytesLiteral(bomb), ").repeat(2).map(", fn, "(",
                               channels < 0 ? "" : absl::StrCat("channels=", channels), "))");
  if (rng.Chance(40)) p += ".map(resize([224, 224]))";
  p += ".batch(2)";
  return Case("image_bomb", p, {"decode_image", "decode_png", "decode_jpeg"}, kWithDataLoss);
}

HostileCase TarBombCase(Rng& rng, const HostileFiles& files) {
  const std::string& file = rng.Pick(files.tar_bombs);
  const std::string base = file.substr(file.rfind('/') + 1);
  // Without keys= the parser reads the first sample itself (in the client and the coordinator).
  const std::string keys = rng.Chance(70) ? ", keys=['jpg']" : "";
  HostileCase c = Case("tar_bomb",
                       absl::StrCat("webdataset_dataset(['", file, "']", keys, ").batch(2)"),
                       {"webdataset_dataset", base}, kWithDataLoss);
  c.one_task = true;
  return c;
}

HostileCase LiteralCase(Rng& rng) {
  if (rng.Chance(15)) {
    // Over the coordinator's 16 MiB limit on a pipeline (a valid, merely large, pipeline in
    // process).
    HostileCase c = Case("literal",
                         absl::StrCat("from_tensors(b'", std::string((int64_t{17} << 20), 'q'),
                                      "').batch(2)"),
                         {"max_bytes", "larger than max", "limit"},
                         {StatusCode::kInvalidArgument, StatusCode::kResourceExhausted});
    c.service_only = true;
    return c;
  }
  // A literal of 64 KiB to 12 MiB, repeated into a batch of many GiB.
  const int64_t bytes = rng.Pick(std::vector<int64_t>{int64_t{64} << 10, int64_t{1} << 20,
                                                      int64_t{3} << 20, int64_t{12} << 20});
  const int64_t batch = (int64_t{4} << 30) / bytes + rng.In(0, 100);
  const bool list = rng.Chance(30);
  std::string literal = absl::StrCat("b'", std::string(static_cast<size_t>(bytes), 'x'), "'");
  if (list) literal = absl::StrCat("[", literal, ", ", literal, "]");
  return Case("literal",
              absl::StrCat("from_tensors(", literal, ").repeat().batch(", batch, ")"),
              {"batch", "max_bytes", "larger than max", "limit"});
}

HostileCase OverflowCase(Rng& rng) {
  switch (rng.In(0, 3)) {
    case 0:
      return Case("overflow",
                  "range(-9223372036854775808, 9223372036854775807).batch(4611686018427387904)",
                  {"batch", "range"});
    case 1:
      return Case("overflow",
                  absl::StrCat("range(100000000000).repeat(", rng.Pick(std::vector<std::string>{
                                                                  "1000000000000000000",
                                                                  "9223372036854775807"}),
                               ").batch(", HugeBatch(rng, 8), ")"),
                  {"batch", "repeat"});
    case 2:
      return Case("overflow",
                  absl::StrCat("range(10).repeat().take(9223372036854775807).batch(",
                               HugeBatch(rng, 8), ")"),
                  {"batch", "take"});
    default: {  // valid: skipping past the end leaves nothing
      HostileCase c = Case("overflow", "range(100000000000).skip(9223372036854775807).batch(2)",
                           {"skip"});
      c.valid = true;  // must succeed, with no steps
      c.codes = {};
      return c;
    }
  }
}

}  // namespace

std::string HostileCase::Describe(size_t max_pipeline_chars) const {
  if (pipeline.size() <= max_pipeline_chars) return absl::StrCat(family, ": ", pipeline);
  return absl::StrCat(family, ": ", pipeline.substr(0, max_pipeline_chars / 2), " ...[",
                      pipeline.size(), " chars]... ",
                      pipeline.substr(pipeline.size() - max_pipeline_chars / 2));
}

std::string PngBomb(uint32_t width, uint32_t height, int color_type) {
  std::string out("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  PutBE32(&ihdr, width);
  PutBE32(&ihdr, height);
  ihdr.push_back(8);
  ihdr.push_back(static_cast<char>(color_type));
  ihdr.append(3, '\0');  // deflate, adaptive filtering, no interlace
  out += PngChunk("IHDR", ihdr);
  // zlib header, then a stored (uncompressed), non-final block of 64 zero bytes: the stream
  // ends long before the image does.
  std::string idat("\x78\x01\x00\x40\x00\xbf\xff", 7);
  idat.append(64, '\0');
  out += PngChunk("IDAT", idat);
  out += PngChunk("IEND", "");
  return out;
}

std::string JpegBomb(uint16_t width, uint16_t height, int components) {
  std::string out("\xff\xd8", 2);
  // DQT: table 0, 8-bit, all ones.
  out.append("\xff\xdb", 2);
  PutBE16(&out, 67);
  out.push_back('\0');
  out.append(64, '\x01');
  // SOF0.
  out.append("\xff\xc0", 2);
  PutBE16(&out, static_cast<uint16_t>(8 + 3 * components));
  out.push_back(8);
  PutBE16(&out, height);
  PutBE16(&out, width);
  out.push_back(static_cast<char>(components));
  for (int c = 1; c <= components; ++c) {
    out.push_back(static_cast<char>(c));
    out.push_back('\x11');
    out.push_back('\0');
  }
  // SOS.
  out.append("\xff\xda", 2);
  PutBE16(&out, static_cast<uint16_t>(6 + 2 * components));
  out.push_back(static_cast<char>(components));
  for (int c = 1; c <= components; ++c) {
    out.push_back(static_cast<char>(c));
    out.push_back('\0');
  }
  out.push_back('\0');
  out.push_back('\x3f');
  out.push_back('\0');
  out.append(64, '\0');
  return out;
}

std::string BytesLiteral(absl::string_view bytes) {
  std::string out = "b'";
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
    }
  }
  return out + "'";
}

absl::StatusOr<HostileFiles> WriteHostileFiles(const std::string& dir) {
  HostileFiles files;
  auto write = [](const std::string& path, const std::string& data) -> absl::Status {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
    return absl::OkStatus();
  };
  const std::vector<std::string> bombs = TarBombContents();
  for (size_t i = 0; i < bombs.size(); ++i) {
    const std::string path = absl::StrCat(dir, "/bomb-", i, ".tar");
    absl::Status s = write(path, bombs[i]);
    if (!s.ok()) return s;
    files.tar_bombs.push_back(path);
  }
  files.text_file = dir + "/lines.txt";
  absl::Status s = write(files.text_file, "a\nb\nc\nd\n");
  if (!s.ok()) return s;
  return files;
}

std::vector<HostileCase> IssueReproductions(const HostileFiles& files) {
  std::vector<HostileCase> out;
  out.push_back(Case("issue", "range(100000000000).batch(10000000000)", {"batch"}));
  out.push_back(
      Case("issue", "range(100000000000).map(cast(tf.int32)).batch(3000000000)", {"batch"}));
  out.push_back(
      Case("issue", "range(100000000000).shuffle(10000000000, seed=1).batch(2)", {"shuffle"}));
  out.push_back(Case("issue", absl::StrCat(kImage, ".map(resize([200000, 200000])).batch(2)"),
                     {"resize"}));
  out.push_back(Case("issue",
                     absl::StrCat("from_tensors(", BytesLiteral(PngBomb(60000, 60000)),
                                  ").repeat(2).map(decode_image()).batch(2)"),
                     {"decode_image"}, kWithDataLoss));
  out.push_back(
      Case("issue", "range(100000000000).batch(100000).batch(100000)", {"batch"}));
  {
    // Two nested batches that fit: must be served, exactly.
    HostileCase c = Case("issue", "range(8).batch(2).batch(2)", {"batch"});
    c.valid = true;
    c.codes = {};
    c.expected_output =
        "{\"step\": 0, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [1, 2], \"values\": "
        "[[0, 1]]}, {\"dtype\": \"int64\", \"shape\": [1, 2], \"values\": [[2, 3]]}]}\n"
        "{\"step\": 1, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [1, 2], \"values\": "
        "[[4, 5]]}, {\"dtype\": \"int64\", \"shape\": [1, 2], \"values\": [[6, 7]]}]}\n";
    out.push_back(c);
  }
  out.push_back(Case("issue",
                     absl::StrCat("from_tensors(", BytesLiteral(JpegBomb(60000, 60000)),
                                  ").repeat(2).map(decode_image(channels=3)).batch(2)"),
                     {"decode_image"}, kWithDataLoss));
  {
    const std::string& file = files.tar_bombs[0];
    HostileCase c = Case("issue",
                         absl::StrCat("webdataset_dataset(['", file, "'], keys=['cls', 'jpg'])"
                                      ".batch(2)"),
                         {"webdataset_dataset", file.substr(file.rfind('/') + 1)},
                         kWithDataLoss);
    c.one_task = true;
    out.push_back(c);
  }
  return out;
}

HostileCase GenerateHostileCase(uint64_t seed, int64_t index, const HostileFiles& files) {
  Rng rng(seed ^ (static_cast<uint64_t>(index) * 0xD1B54A32D192ED03ull));
  rng.Next();
  // Weights: the families that reach allocation paths most often come most often.
  const int64_t roll = rng.In(0, 99);
  if (roll < 20) return BatchCase(rng);
  if (roll < 40) return ShapeCase(rng);
  if (roll < 52) return NestingCase(rng);
  if (roll < 66) return BufferCase(rng, files);
  if (roll < 80) return ImageBombCase(rng);
  if (roll < 88) return TarBombCase(rng, files);
  if (roll < 94) return LiteralCase(rng);
  return OverflowCase(rng);
}

}  // namespace sluice
