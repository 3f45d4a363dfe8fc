#include "core/data/ops/sentencepiece_model.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/data/ops/sentencepiece_model_proto.h"
#include "core/io/input_stream.h"
#include "core/tensor/host_memory.h"
#include "core/util/logging.h"

namespace sluice {
namespace {

// The file's bytes, at most the element limit of them.
absl::StatusOr<std::string> ReadModelFile(const std::string& path) {
  absl::StatusOr<std::unique_ptr<InputStream>> stream = OpenFileStream(path);
  if (!stream.ok()) return stream.status();
  const size_t limit = static_cast<size_t>(ProcessMemoryBudget().limits().element_bytes);
  std::string bytes;
  std::vector<char> block(1 << 20);
  while (true) {
    absl::StatusOr<size_t> n = (*stream)->Read(block.data(), block.size());
    if (!n.ok()) return n.status();
    if (*n == 0) return bytes;
    if (bytes.size() + *n > limit) {
      return ElementLimitError(
          absl::StrCat("the SentencePiece model ", path, " is larger than the memory limit of "
                       "one element, ", limit, " bytes (--max_element_bytes)"),
          static_cast<int64_t>(limit));
    }
    bytes.append(block.data(), *n);
  }
}

class ModelCache {
 public:
  absl::StatusOr<std::shared_ptr<const SentencePieceModel>> Find(const std::string& path) {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(path);
    if (it == models_.end()) return absl::NotFoundError(path);
    return it->second;
  }
  // Keeps the first model stored for `path` (two threads may load it at once).
  std::shared_ptr<const SentencePieceModel> Store(const std::string& path,
                                                  std::shared_ptr<const SentencePieceModel> m) {
    absl::MutexLock lock(&mu_);
    return models_.emplace(path, std::move(m)).first->second;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const SentencePieceModel>> models_
      ABSL_GUARDED_BY(mu_);
};

ModelCache& Cache() {
  static ModelCache* cache = new ModelCache();
  return *cache;
}

}  // namespace

SentencePieceModel::SentencePieceModel(
    std::string path, std::unique_ptr<const SentencePieceEncoder> encoder,
    std::shared_ptr<const SentencePieceProcessorHandle> processor)
    : path_(std::move(path)), encoder_(std::move(encoder)), processor_(std::move(processor)) {}

SentencePieceModel::~SentencePieceModel() = default;

absl::StatusOr<std::shared_ptr<const SentencePieceModel>> SentencePieceModel::Get(
    const std::string& path) {
  absl::StatusOr<std::shared_ptr<const SentencePieceModel>> found = Cache().Find(path);
  if (found.ok()) return found;
  // Loaded outside the lock: a slow read does not hold up the models already loaded.
  absl::StatusOr<std::string> bytes = ReadModelFile(path);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("cannot read the SentencePiece model ", path, ": ",
                                     bytes.status().message()));
  }
  absl::StatusOr<SentencePieceModelProto> proto = ParseSentencePieceModelProto(*bytes);
  if (!proto.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a SentencePiece model: ",
                                                   proto.status().message()));
  }
  absl::StatusOr<std::unique_ptr<SentencePieceEncoder>> encoder =
      SentencePieceEncoder::Create(*proto);
  std::shared_ptr<const SentencePieceProcessorHandle> processor;
  if (encoder.ok()) {
    std::shared_ptr<const SentencePieceModel> model(
        new SentencePieceModel(path, std::move(*encoder), nullptr));
    return Cache().Store(path, std::move(model));
  }
  if (!absl::IsUnimplemented(encoder.status())) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a SentencePiece model: ",
                                                   encoder.status().message()));
  }
  std::string error;
  processor = SentencePieceLoad(*bytes, &error);
  if (processor == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a SentencePiece model: ", error));
  }
  std::shared_ptr<const SentencePieceModel> model(
      new SentencePieceModel(path, nullptr, std::move(processor)));
  std::shared_ptr<const SentencePieceModel> stored = Cache().Store(path, std::move(model));
  if (stored->processor_ != nullptr) {
    // Once per path: the cache keeps the model for the process's life.
    static absl::Mutex* logged_mu = new absl::Mutex();
    static auto* logged = new absl::flat_hash_set<std::string>();
    absl::MutexLock lock(logged_mu);
    if (logged->insert(path).second) {
      LogEvent(LogLevel::kWarning, "tokenize",
               "SentencePiece model encoded by libsentencepiece (slower)",
               {{"model", path}, {"reason", std::string(encoder.status().message())}});
    }
  }
  return stored;
}

int SentencePieceModel::vocab_size() const {
  return encoder_ != nullptr ? encoder_->vocab_size() : SentencePieceVocabSize(*processor_);
}
int SentencePieceModel::bos_id() const {
  return encoder_ != nullptr ? encoder_->bos_id() : SentencePieceBosId(*processor_);
}
int SentencePieceModel::eos_id() const {
  return encoder_ != nullptr ? encoder_->eos_id() : SentencePieceEosId(*processor_);
}
absl::string_view SentencePieceModel::encoder_name() const {
  return encoder_ != nullptr ? "sluice" : "libsentencepiece";
}

absl::StatusOr<Tensor> SentencePieceModel::Encode(absl::string_view text, bool add_bos,
                                                  bool add_eos) const {
  const int bos = bos_id();
  const int eos = eos_id();
  if (add_bos && bos < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("add_bos: the model ", path_, " has no beginning-of-sentence piece"));
  }
  if (add_eos && eos < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("add_eos: the model ", path_, " has no end-of-sentence piece"));
  }
  // Reused by the thread's next text: no allocation once it has grown.
  thread_local std::vector<int32_t> ids;
  ids.clear();
  if (encoder_ != nullptr) {
    encoder_->Encode(text, &ids);
  } else {
    std::string error;
    if (!SentencePieceEncode(*processor_, std::string_view(text.data(), text.size()), &ids,
                             &error)) {
      return absl::InvalidArgumentError(absl::StrCat("SentencePiece: ", error));
    }
  }
  const int64_t n = static_cast<int64_t>(ids.size()) + (add_bos ? 1 : 0) + (add_eos ? 1 : 0);
  absl::StatusOr<Tensor> out = Tensor::TryAllocate(DType::kInt32, Shape({n}), "tokenize");
  if (!out.ok()) return out.status();
  int32_t* dst = out->mutable_data<int32_t>();
  if (add_bos) *dst++ = bos;
  if (!ids.empty()) std::memcpy(dst, ids.data(), ids.size() * sizeof(int32_t));
  if (add_eos) dst[ids.size()] = eos;
  if (ids.capacity() > (1 << 20)) ids = std::vector<int32_t>();  // a long text's, not kept
  return out;
}

}  // namespace sluice
