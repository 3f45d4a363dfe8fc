#include "tests/conformance/pipeline_generator.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/seeded_rng.h"

namespace sluice {
namespace {

using Rng = SeededRng;

enum class Kind { kScalar, kVector, kDict, kTuple, kString };

std::string IntList(Rng& rng, int64_t n, int64_t lo, int64_t hi) {
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(absl::StrCat(rng.In(lo, hi)));
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

// Rows of `width` numbers; floats as "x.5" or "x.0" so that they print exactly.
std::string Rows(Rng& rng, int64_t n, int64_t width, bool floats) {
  std::vector<std::string> rows;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<std::string> row;
    for (int64_t j = 0; j < width; ++j) {
      row.push_back(floats ? absl::StrCat(rng.In(-20, 20), rng.Chance(50) ? ".5" : ".0")
                           : absl::StrCat(rng.In(-50, 50)));
    }
    rows.push_back(absl::StrCat("[", absl::StrJoin(row, ", "), "]"));
  }
  return absl::StrCat("[", absl::StrJoin(rows, ", "), "]");
}

std::string Source(Rng& rng, const GeneratorOptions& options, bool indexed, Kind* kind) {
  const int choice = static_cast<int>(rng.In(0, indexed || options.text_files.empty() ? 5 : 6));
  const int64_t n = rng.In(0, 24);
  switch (choice) {
    case 0:
      *kind = Kind::kScalar;
      return absl::StrCat("range(", n, ")");
    case 1: {
      *kind = Kind::kScalar;
      const int64_t start = rng.In(-5, 5), step = rng.In(1, 3);
      return absl::StrCat("range(", start, ", ", start + n * step, ", ", step, ")");
    }
    case 2:
      *kind = Kind::kScalar;
      return absl::StrCat("from_tensor_slices(", IntList(rng, std::max<int64_t>(n, 1), -99, 99),
                          ")");
    case 3:
      *kind = Kind::kVector;
      if (rng.Chance(30)) return absl::StrCat("from_tensors(", IntList(rng, rng.In(1, 4), 0, 9), ")");
      return absl::StrCat("from_tensor_slices(", Rows(rng, std::max<int64_t>(n, 1), 2, false), ")");
    case 4: {
      *kind = Kind::kDict;
      const int64_t m = std::max<int64_t>(n, 1);
      return absl::StrCat("from_tensor_slices({'a': ", IntList(rng, m, 0, 30), ", 'b': ",
                          Rows(rng, m, 2, true), "})");
    }
    case 5: {
      *kind = Kind::kTuple;
      const int64_t m = std::max<int64_t>(n, 1);
      return absl::StrCat("from_tensor_slices((", IntList(rng, m, 0, 30), ", ",
                          Rows(rng, m, 3, false), "))");
    }
    default: {
      *kind = Kind::kString;
      std::vector<std::string> files;
      for (const std::string& f : options.text_files) {
        if (files.empty() || rng.Chance(60)) files.push_back(absl::StrCat("'", f, "'"));
      }
      return absl::StrCat("text_line_dataset([", absl::StrJoin(files, ", "), "])");
    }
  }
}

std::string CastFn(Rng& rng) {
  static const char* kTypes[] = {"tf.float32", "tf.int32", "tf.int64", "tf.float64"};
  return absl::StrCat("map(cast(", kTypes[rng.In(0, 3)], "))");
}

// An element op before the batch; *repeated bounds the repeats.
std::string ElementOp(Rng& rng, Kind kind, bool indexed, bool* repeated) {
  if (indexed) {
    // Only element-wise ops keep a random-access (RANGES) pipeline.
    if (kind == Kind::kString) return "prefetch(2)";
    return rng.Chance(70) ? CastFn(rng) : "prefetch(2)";
  }
  switch (rng.In(0, 8)) {
    case 0:
      if (*repeated) return "prefetch(2)";
      *repeated = true;
      return absl::StrCat("repeat(", rng.In(2, 3), ")");
    case 1:
      return absl::StrCat("take(", rng.In(0, 20), ")");
    case 2:
      return absl::StrCat("skip(", rng.In(0, 5), ")");
    case 3: {
      const int64_t n = rng.In(2, 3);
      return absl::StrCat("shard(", n, ", ", rng.In(0, n - 1), ")");
    }
    case 4:
      return absl::StrCat("shuffle(", rng.In(2, 8), ", seed=", rng.In(0, 1000), ")");
    case 5:
      if (kind == Kind::kString) return "prefetch(1)";
      if (kind == Kind::kDict && rng.Chance(50)) return "map(cast(tf.int32), key='a')";
      return CastFn(rng);
    case 6:
      switch (kind) {
        case Kind::kScalar:
          return absl::StrCat("filter(less(", rng.In(-10, 40), "))");
        case Kind::kDict:
          return absl::StrCat("filter(greater_equal(", rng.In(0, 20), "), key='a')");
        case Kind::kTuple:
          return absl::StrCat("filter(not_equal(", rng.In(0, 30), "), key=0)");
        case Kind::kString:
          return "filter(not_empty())";
        case Kind::kVector:
          return "prefetch(3)";
      }
      return "prefetch(1)";
    default:
      return "prefetch(2)";
  }
}

// An op after the (first) batch.
std::string BatchOp(Rng& rng, Kind kind, bool indexed, bool* repeated) {
  if (indexed || kind == Kind::kString) {
    if (kind != Kind::kString && rng.Chance(70)) return CastFn(rng);
    return "prefetch(1)";
  }
  switch (rng.In(0, 8)) {
    case 0:
    case 1:
      return CastFn(rng);  // a map after the batch: TF's ComputeBatchSize stops there
    case 2:
      if (*repeated) return "prefetch(1)";
      *repeated = true;
      return "repeat(2)";
    case 3:
      return absl::StrCat("take(", rng.In(0, 8), ")");
    case 4:
      return absl::StrCat("skip(", rng.In(0, 2), ")");
    case 5:
      return absl::StrCat("unbatch().batch(", rng.In(1, 7),
                          rng.Chance(30) ? ", drop_remainder=True)" : ")");
    case 6:
      return absl::StrCat("rebatch(", rng.In(1, 6), ")");
    case 7:
      return rng.Chance(50) ? "filter(not_empty())" : "padded_batch(2)";
    default:
      return "prefetch(1)";
  }
}

constexpr char kParseExample[] =
    "map(parse_example({'label': FixedLenFeature([], tf.int64), "
    "'bbox': FixedLenFeature([2], tf.float32), 'name': FixedLenFeature([], tf.string)}))";

// The TFRecord idiom: records, element ops, batch, parse_example after the batch (or before).
// `splits`: DYNAMIC (no drop_remainder, see GenerateCase).
std::string RecordPipeline(Rng& rng, const GeneratorOptions& options, bool indexed, bool splits) {
  std::vector<std::string> files;
  for (const std::string& f : options.record_files) {
    if (files.empty() || rng.Chance(60)) files.push_back(absl::StrCat("'", f, "'"));
  }
  std::string expr = absl::StrCat("tf_record_dataset([", absl::StrJoin(files, ", "), "])");
  const bool parse_first = rng.Chance(30);
  if (!indexed) {
    const int64_t ops = rng.In(0, 2);
    for (int64_t i = 0; i < ops; ++i) {
      switch (rng.In(0, 4)) {
        case 0:
          expr += absl::StrCat(".take(", rng.In(1, 15), ")");
          break;
        case 1:
          expr += absl::StrCat(".skip(", rng.In(0, 3), ")");
          break;
        case 2:
          expr += absl::StrCat(".shuffle(", rng.In(2, 6), ", seed=", rng.In(0, 99), ")");
          break;
        case 3:
          expr += ".repeat(2)";
          break;
        default:
          expr += ".prefetch(2)";
      }
    }
  }
  if (parse_first) expr += absl::StrCat(".", kParseExample);
  const bool drop = rng.Chance(25) && !splits;
  expr += absl::StrCat(".batch(", rng.In(1, 7), drop ? ", drop_remainder=True)" : ")");
  if (!parse_first) expr += absl::StrCat(".", kParseExample);
  if (rng.Chance(40)) expr += ".map(cast(tf.float64), key='bbox')";
  if (!indexed && rng.Chance(30)) expr += absl::StrCat(".take(", rng.In(1, 6), ")");
  if (rng.Chance(30)) expr += ".prefetch(1)";
  return expr;
}

}  // namespace

std::string ConformanceCase::Describe() const {
  return absl::StrCat("seed ", seed, ": ", consumers, " consumer(s) x ", replicas,
                      " replica(s), service ", policy, independent ? " independent" : "",
                      " with ", num_tasks, " task(s) vs in-process ", local_policy,
                      resume_after > 0 ? absl::StrCat(", resumed after ", resume_after, " steps")
                                       : "",
                      multiset_only ? " (multiset)" : "", "\n  pipeline: ", pipeline);
}

ConformanceCase GenerateCase(uint64_t seed, const GeneratorOptions& options) {
  Rng rng(seed);
  ConformanceCase c;
  c.seed = seed;
  c.replicas = rng.In(1, 4);
  const int64_t p = rng.In(0, 99);
  c.policy = p < 30 ? "DATA" : p < 50 ? "AUTO" : p < 60 ? "OFF" : p < 70 ? "HINT"
           : p < 85 ? "RANGES" : p < 93 ? "DYNAMIC" : "FILE";
  // DYNAMIC splits run the pipeline on parts of the source, so only element-wise ops keep the
  // multiset: it gets the RANGES shape too.
  const bool indexed = c.policy == "DYNAMIC" || (c.policy == "RANGES" && rng.Chance(70));

  Kind kind = Kind::kScalar;
  std::string expr = Source(rng, options, indexed, &kind);
  if (!options.record_files.empty() && rng.Chance(15)) {
    kind = Kind::kString;  // a file source: AUTO shards by FILE
    expr = RecordPipeline(rng, options, indexed, c.policy == "DYNAMIC");
  } else if (c.policy == "FILE" && !options.text_files.empty()) {
    kind = Kind::kString;
    expr = absl::StrCat("text_line_dataset(['", absl::StrJoin(options.text_files, "', '"),
                        "'])");
  } else if (c.policy == "FILE") {
    c.policy = "OFF";
  }
  const bool record = expr.rfind("tf_record_dataset(", 0) == 0;
  bool repeated = false;
  const bool needs_repeat = expr.rfind("from_tensors(", 0) == 0;
  if (needs_repeat) {
    expr += absl::StrCat(".repeat(", rng.In(1, 12), ")");
    repeated = true;
  }
  const int64_t pre = record ? 0 : rng.In(0, 3);
  for (int64_t i = 0; i < pre; ++i) {
    expr += "." + ElementOp(rng, kind, indexed, &repeated);
  }
  if (c.policy == "HINT" && rng.Chance(70)) expr += ".shard(SHARD_HINT, SHARD_HINT)";
  const int64_t b = rng.In(1, 9);
  // DYNAMIC runs the pipeline per split, so a dropped remainder would be dropped per split.
  const bool drop = rng.Chance(30) && c.policy != "DYNAMIC";
  if (record) {
    // Batched already.
  } else if (rng.Chance(15) && kind != Kind::kString) {
    expr += absl::StrCat(".padded_batch(", b, drop ? ", drop_remainder=True)" : ")");
  } else {
    expr += absl::StrCat(".batch(", b, drop ? ", drop_remainder=True)" : ")");
  }
  const int64_t post = record ? 0 : rng.In(0, 3);
  for (int64_t i = 0; i < post; ++i) expr += "." + BatchOp(rng, kind, indexed, &repeated);
  c.pipeline = expr;

  // The layout, and the in-process mode it must equal.
  c.local_policy = c.policy;
  if (c.policy == "RANGES" || c.policy == "DYNAMIC") c.local_policy = "AUTO";
  const bool data_like =
      c.policy == "DATA" || (c.policy == "AUTO" && kind != Kind::kString);
  // Policies whose tasks each cut their own stream equal in-process mode with one task.
  c.num_tasks = (data_like || c.policy == "RANGES" || c.policy == "DYNAMIC") ? rng.In(1, 3) : 1;
  // C coordinated consumers: compared with one in-process worker with C x R replicas under
  // DATA (the legacy cut), consumer c's share.
  if ((data_like || (c.policy == "RANGES" && kind != Kind::kString)) && rng.Chance(25)) {
    c.consumers = 2;
    c.local_policy = "DATA";
  }
  if (c.consumers == 1 && c.policy == "DATA" && rng.Chance(15)) {
    c.independent = true;  // steps of several tasks would arrive in timing order
    c.num_tasks = 1;
  }
  if (c.consumers == 1 && !c.independent && (c.policy == "DATA" || c.policy == "RANGES") &&
      rng.Chance(20)) {
    c.resume_after = rng.In(1, 3);
  }
  c.multiset_only = c.policy == "DYNAMIC";
  return c;
}

}  // namespace sluice
