// Runs every case of tests/testdata/distribute/index.json (written by TensorFlow 2.15 through
// tools/golden/gen_distribute_goldens.py) through MirroredStrategy and compares the per-replica
// values of every step and the element_spec with TF's, structurally.
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/strategy.h"

namespace sluice {
namespace {

// A minimal JSON value and reader, enough for the golden files (tests only).
struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  bool b = false;
  double number = 0;
  std::string str;
  std::vector<Json> items;                           // array
  std::vector<std::pair<std::string, Json>> fields;  // object

  const Json* Find(const std::string& key) const {
    for (const auto& [k, v] : fields) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  std::string Str(const std::string& key, const std::string& fallback = "") const {
    const Json* v = Find(key);
    return v != nullptr && v->kind == Kind::kString ? v->str : fallback;
  }
  int64_t Int(const std::string& key, int64_t fallback = 0) const {
    const Json* v = Find(key);
    return v != nullptr && v->kind == Kind::kNumber ? static_cast<int64_t>(v->number) : fallback;
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}
  bool Read(Json* out) {
    bool ok = Value(out);
    Space();
    return ok && pos_ == s_.size();
  }

 private:
  void Space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }
  bool String(std::string* out) {
    if (pos_ >= s_.size() || s_[pos_] != '"') return false;
    ++pos_;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return false;
      char e = s_[pos_++];
      switch (e) {
        case 'n': out->push_back('\n'); break;
        case 't': out->push_back('\t'); break;
        case 'r': out->push_back('\r'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return false;
          unsigned code = static_cast<unsigned>(std::stoul(s_.substr(pos_, 4), nullptr, 16));
          pos_ += 4;
          if (code < 0x80) {
            out->push_back(static_cast<char>(code));
          } else if (code < 0x800) {
            out->push_back(static_cast<char>(0xC0 | (code >> 6)));
            out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
          } else {
            out->push_back(static_cast<char>(0xE0 | (code >> 12)));
            out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
          }
          break;
        }
        default: out->push_back(e); break;
      }
    }
    if (pos_ >= s_.size()) return false;
    ++pos_;
    return true;
  }
  bool Value(Json* out) {
    Space();
    if (pos_ >= s_.size()) return false;
    char c = s_[pos_];
    if (c == 'n') return Literal("null");
    if (c == 't' || c == 'f') {
      out->kind = Json::Kind::kBool;
      out->b = c == 't';
      return Literal(c == 't' ? "true" : "false");
    }
    if (c == '"') {
      out->kind = Json::Kind::kString;
      return String(&out->str);
    }
    if (c == '[') {
      out->kind = Json::Kind::kArray;
      ++pos_;
      Space();
      if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
      while (true) {
        out->items.emplace_back();
        if (!Value(&out->items.back())) return false;
        Space();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        return pos_ < s_.size() && s_[pos_++] == ']';
      }
    }
    if (c == '{') {
      out->kind = Json::Kind::kObject;
      ++pos_;
      Space();
      if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
      while (true) {
        Space();
        std::string key;
        if (!String(&key)) return false;
        Space();
        if (pos_ >= s_.size() || s_[pos_++] != ':') return false;
        out->fields.emplace_back(std::move(key), Json());
        if (!Value(&out->fields.back().second)) return false;
        Space();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        return pos_ < s_.size() && s_[pos_++] == '}';
      }
    }
    out->kind = Json::Kind::kNumber;
    char* end = nullptr;
    out->number = std::strtod(s_.c_str() + pos_, &end);
    if (end == s_.c_str() + pos_) return false;
    pos_ = static_cast<size_t>(end - s_.c_str());
    return true;
  }

  const std::string& s_;
  size_t pos_ = 0;
};

const char kDir[] = "tests/testdata/distribute/";

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

bool ParseJson(const std::string& text, Json* out) { return JsonReader(text).Read(out); }

double NumberAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kBool: return t.data<bool>()[i] ? 1 : 0;
    case DType::kInt8: return t.data<int8_t>()[i];
    case DType::kInt16: return t.data<int16_t>()[i];
    case DType::kInt32: return t.data<int32_t>()[i];
    case DType::kInt64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kUInt8: return t.data<uint8_t>()[i];
    case DType::kUInt16: return t.data<uint16_t>()[i];
    case DType::kUInt32: return t.data<uint32_t>()[i];
    case DType::kUInt64: return static_cast<double>(t.data<uint64_t>()[i]);
    case DType::kFloat16: return HalfToFloat(t.data<uint16_t>()[i]);
    case DType::kBFloat16: return BFloat16ToFloat(t.data<uint16_t>()[i]);
    case DType::kFloat32: return t.data<float>()[i];
    case DType::kFloat64: return t.data<double>()[i];
    default: return 0;
  }
}

void FlattenValues(const Json& v, std::vector<const Json*>* out) {
  if (v.kind == Json::Kind::kArray) {
    for (const Json& item : v.items) FlattenValues(item, out);
  } else {
    out->push_back(&v);
  }
}

std::string ShapeText(const Json& shape) {
  std::string out = "[";
  for (const Json& d : shape.items) {
    if (out.size() > 1) out += ", ";
    out += d.kind == Json::Kind::kNull ? "null" : std::to_string(static_cast<int64_t>(d.number));
  }
  return out + "]";
}

std::string ShapeText(const Shape& shape) {
  std::string out = "[";
  for (int i = 0; i < shape.rank(); ++i) {
    if (i > 0) out += ", ";
    out += shape.dim(i) == kUnknownDim ? "null" : std::to_string(shape.dim(i));
  }
  return out + "]";
}

void ExpectTensor(const Tensor& t, const Json& want, const std::string& where) {
  ASSERT_EQ(want.kind, Json::Kind::kObject) << where << ": expected a tensor";
  EXPECT_EQ(std::string(DTypeName(t.dtype())), want.Str("dtype")) << where;
  const Json* shape = want.Find("shape");
  ASSERT_NE(shape, nullptr) << where;
  EXPECT_EQ(ShapeText(t.shape()), ShapeText(*shape)) << where;
  std::vector<const Json*> values;
  const Json* v = want.Find("values");
  ASSERT_NE(v, nullptr) << where;
  FlattenValues(*v, &values);
  ASSERT_EQ(static_cast<int64_t>(values.size()), t.num_elements()) << where;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const Json& w = *values[static_cast<size_t>(i)];
    if (t.dtype() == DType::kString) {
      EXPECT_EQ(t.string_at(i), w.str) << where << " element " << i;
    } else if (t.dtype() == DType::kBool) {
      EXPECT_EQ(t.data<bool>()[i], w.b) << where << " element " << i;
    } else {
      EXPECT_EQ(NumberAt(t, i), w.number) << where << " element " << i;
    }
  }
}

void ExpectElement(const Element& e, const Json& want, const std::string& where) {
  if (e.is_leaf()) {
    ExpectTensor(e.leaf(), want, where);
    return;
  }
  if (e.kind() == NestKind::kDict) {
    ASSERT_EQ(want.kind, Json::Kind::kObject) << where << ": expected a dict";
    ASSERT_EQ(want.fields.size(), e.children().size()) << where;
    for (size_t i = 0; i < e.children().size(); ++i) {
      const Json* child = want.Find(e.keys()[i]);
      ASSERT_NE(child, nullptr) << where << ": no key " << e.keys()[i];
      ExpectElement(e.children()[i], *child, where + "['" + e.keys()[i] + "']");
    }
    return;
  }
  ASSERT_EQ(want.kind, Json::Kind::kArray) << where << ": expected a tuple";
  ASSERT_EQ(want.items.size(), e.children().size()) << where;
  for (size_t i = 0; i < e.children().size(); ++i) {
    ExpectElement(e.children()[i], want.items[i], where + "[" + std::to_string(i) + "]");
  }
}

void ExpectSpec(const DistributedElementSpec& spec, const Json& want, const std::string& where) {
  if (spec.is_leaf()) {
    const Json* per_replica = want.Find("per_replica");
    ASSERT_NE(per_replica, nullptr) << where << ": expected a PerReplicaSpec";
    ASSERT_EQ(per_replica->items.size(), spec.leaf().specs.size()) << where;
    for (size_t r = 0; r < spec.leaf().specs.size(); ++r) {
      const TensorSpec& s = spec.leaf().specs[r];
      const Json& w = per_replica->items[r];
      EXPECT_EQ(std::string(DTypeName(s.dtype)), w.Str("dtype")) << where << " replica " << r;
      const Json* shape = w.Find("shape");
      ASSERT_NE(shape, nullptr) << where;
      EXPECT_EQ(ShapeText(s.shape), ShapeText(*shape)) << where << " replica " << r;
    }
    return;
  }
  if (spec.kind() == NestKind::kDict) {
    ASSERT_EQ(want.kind, Json::Kind::kObject) << where;
    ASSERT_EQ(want.fields.size(), spec.children().size()) << where;
    for (size_t i = 0; i < spec.children().size(); ++i) {
      const Json* child = want.Find(spec.keys()[i]);
      ASSERT_NE(child, nullptr) << where << ": no key " << spec.keys()[i];
      ExpectSpec(spec.children()[i], *child, where + "['" + spec.keys()[i] + "']");
    }
    return;
  }
  ASSERT_EQ(want.kind, Json::Kind::kArray) << where;
  ASSERT_EQ(want.items.size(), spec.children().size()) << where;
  for (size_t i = 0; i < spec.children().size(); ++i) {
    ExpectSpec(spec.children()[i], want.items[i], where + "[" + std::to_string(i) + "]");
  }
}

std::vector<Json> LoadCases() {
  std::string text;
  Json index;
  if (!ReadFile(std::string(kDir) + "index.json", &text) || !ParseJson(text, &index)) {
    ADD_FAILURE() << "cannot read " << kDir << "index.json";
    return {};
  }
  const Json* cases = index.Find("cases");
  return cases == nullptr ? std::vector<Json>() : cases->items;
}

// The distributed dataset for a case, or its error.
absl::StatusOr<DistributedDataset> Build(const Json& c) {
  std::vector<std::string> devices;
  for (int64_t i = 0; i < c.Int("devices"); ++i) devices.push_back("CPU:" + std::to_string(i));
  absl::StatusOr<MirroredStrategy> strategy = MirroredStrategy::Create(
      devices, InputWorkerLayout{c.Int("num_workers", 1), c.Int("worker_index")});
  if (!strategy.ok()) return strategy.status();
  absl::StatusOr<Dataset> ds = Dataset::Parse(c.Str("expression"));
  if (!ds.ok()) return ds.status();
  InputOptions options;
  absl::StatusOr<AutoShardPolicy> policy = ParseAutoShardPolicy(c.Str("policy", "AUTO"));
  if (!policy.ok()) return policy.status();
  options.auto_shard_policy = *policy;
  if (c.Str("replication_mode") == "PER_REPLICA") {
    options.experimental_replication_mode = InputReplicationMode::kPerReplica;
  }
  if (c.Str("api") == "from_function") {
    Dataset fixed = *ds;
    return strategy->DistributeDatasetsFromFunction(
        [fixed](const InputContext&) -> absl::StatusOr<Dataset> { return fixed; }, options);
  }
  return strategy->ExperimentalDistributeDataset(*ds, options);
}

TEST(DistributeGoldenTest, EveryCaseMatchesTensorFlow) {
  std::vector<Json> cases = LoadCases();
  ASSERT_GE(cases.size(), 40u);
  for (const Json& c : cases) {
    const std::string name = c.Str("name");
    SCOPED_TRACE(name + ": " + c.Str("expression"));
    absl::StatusOr<DistributedDataset> dist = Build(c);
    if (c.Find("error_contains") != nullptr) {
      absl::Status status = dist.status();
      if (dist.ok()) {  // TF fails at the first step; Sluice may fail earlier
        absl::StatusOr<DistributedIterator> it = dist->MakeIterator();
        status = it.ok() ? it->GetNext().status() : it.status();
      }
      EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr(c.Str("error_contains")));
      continue;
    }
    ASSERT_TRUE(dist.ok()) << dist.status();

    std::string text;
    Json spec;
    ASSERT_TRUE(ReadFile(kDir + name + ".spec.json", &text) && ParseJson(text, &spec));
    ExpectSpec(dist->element_spec(), spec, "element_spec");

    ASSERT_TRUE(ReadFile(kDir + name + ".jsonl", &text));
    std::vector<Json> steps;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      steps.emplace_back();
      ASSERT_TRUE(ParseJson(line, &steps.back())) << line;
    }
    absl::StatusOr<DistributedIterator> it = dist->MakeIterator();
    ASSERT_TRUE(it.ok()) << it.status();
    for (size_t s = 0; s < steps.size(); ++s) {
      absl::StatusOr<PerReplica<Element>> x = it->GetNext();
      ASSERT_TRUE(x.ok()) << "step " << s << ": " << x.status();
      const Json* per_replica = steps[s].Find("per_replica");
      ASSERT_NE(per_replica, nullptr);
      ASSERT_EQ(x->num_replicas(), per_replica->items.size()) << "step " << s;
      for (size_t r = 0; r < x->num_replicas(); ++r) {
        ExpectElement((*x)[r], per_replica->items[r],
                      "step " + std::to_string(s) + " replica " + std::to_string(r));
      }
    }
    if (static_cast<int64_t>(steps.size()) < c.Int("max_steps")) {
      absl::StatusOr<PerReplica<Element>> x = it->GetNext();
      EXPECT_TRUE(absl::IsOutOfRange(x.status()))
          << "TF ends after " << steps.size() << " steps; Sluice goes on: " << x.status();
    }
  }
}

}  // namespace
}  // namespace sluice
