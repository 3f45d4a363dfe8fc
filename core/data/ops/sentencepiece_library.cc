#include "core/data/ops/sentencepiece_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace sluice {
namespace {

using LoadFn = void* (*)(const char*, size_t, char*, size_t);
using FreeFn = void (*)(void*);
using EncodeFn = int64_t (*)(const void*, const char*, size_t, int32_t*, int64_t, char*, size_t);
using InfoFn = int (*)(const void*, int);

struct Module {
  LoadFn load = nullptr;
  FreeFn free = nullptr;
  EncodeFn encode = nullptr;
  InfoFn info = nullptr;
  std::string error;  // why it could not be loaded; empty when loaded
};

std::vector<std::string> Candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("SLUICE_SENTENCEPIECE_MODULE"); env != nullptr && *env) {
    out.push_back(env);
  }
#ifdef SLUICE_SENTENCEPIECE_MODULE_BUILD_PATH
  out.push_back(SLUICE_SENTENCEPIECE_MODULE_BUILD_PATH);
#endif
#ifdef SLUICE_SENTENCEPIECE_MODULE_INSTALL_PATH
  out.push_back(SLUICE_SENTENCEPIECE_MODULE_INSTALL_PATH);
#endif
  return out;
}

Module LoadModule() {
  Module m;
  std::string tried;
  for (const std::string& path : Candidates()) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (h == nullptr) {
      const char* e = dlerror();
      tried += "\n  " + path + ": " + (e != nullptr ? e : "?");
      continue;
    }
    m.load = reinterpret_cast<LoadFn>(dlsym(h, "sluice_spm_load"));
    m.free = reinterpret_cast<FreeFn>(dlsym(h, "sluice_spm_free"));
    m.encode = reinterpret_cast<EncodeFn>(dlsym(h, "sluice_spm_encode"));
    m.info = reinterpret_cast<InfoFn>(dlsym(h, "sluice_spm_info"));
    if (m.load && m.free && m.encode && m.info) return m;
    tried += "\n  " + path + ": not a Sluice SentencePiece module";
  }
  m.load = nullptr;
  m.error = "the SentencePiece module libsluice_sentencepiece.so could not be loaded "
            "(set SLUICE_SENTENCEPIECE_MODULE; tried:" + tried + ")";
  return m;
}

// Loaded once per process, on first use; never unloaded.
const Module& TheModule() {
  static const Module* module = new Module(LoadModule());
  return *module;
}

}  // namespace

struct SentencePieceProcessorHandle {
  void* processor = nullptr;
  ~SentencePieceProcessorHandle() { TheModule().free(processor); }
};

std::shared_ptr<const SentencePieceProcessorHandle> SentencePieceLoad(
    const std::string& serialized, std::string* error) {
  const Module& m = TheModule();
  if (m.load == nullptr) {
    *error = m.error;
    return nullptr;
  }
  char message[512] = {0};
  void* p = m.load(serialized.data(), serialized.size(), message, sizeof(message));
  if (p == nullptr) {
    *error = message;
    return nullptr;
  }
  auto handle = std::make_shared<SentencePieceProcessorHandle>();
  handle->processor = p;
  return handle;
}

bool SentencePieceEncode(const SentencePieceProcessorHandle& p, std::string_view text,
                         std::vector<int32_t>* ids, std::string* error) {
  const Module& m = TheModule();
  char message[512] = {0};
  // At most one id per byte (byte fallback); the second call is for a library that gives more.
  ids->resize(text.size() + 1);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int64_t n = m.encode(p.processor, text.data(), text.size(), ids->data(),
                               static_cast<int64_t>(ids->size()), message, sizeof(message));
    if (n < 0) {
      *error = message;
      return false;
    }
    const bool fits = n <= static_cast<int64_t>(ids->size());
    ids->resize(static_cast<size_t>(n));
    if (fits) return true;
  }
  *error = "the encoder's output size changed between two calls";
  return false;
}

int SentencePieceBosId(const SentencePieceProcessorHandle& p) {
  return TheModule().info(p.processor, 0);
}
int SentencePieceEosId(const SentencePieceProcessorHandle& p) {
  return TheModule().info(p.processor, 1);
}
int SentencePieceVocabSize(const SentencePieceProcessorHandle& p) {
  return TheModule().info(p.processor, 2);
}

}  // namespace sluice
