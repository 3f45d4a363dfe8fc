// libsluice_sentencepiece.so: the SentencePiece library behind a C interface, loaded by
// sentencepiece_library.cc with dlopen(RTLD_LOCAL | RTLD_DEEPBIND) (that file says why). Built
// as a module of its own (core/CMakeLists.txt), not part of sluice::data. Only the functions
// below are exported; no Abseil header may be included here.
#include <sentencepiece_processor.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#define SLUICE_SPM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// Copies `message` into error[0, error_size), NUL-terminated.
void SetError(const std::string& message, char* error, size_t error_size) {
  if (error_size == 0) return;
  const size_t n = std::min(message.size(), error_size - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

}  // namespace

// A processor for the serialized model, or null with `error` set.
SLUICE_SPM_EXPORT void* sluice_spm_load(const char* model, size_t model_size, char* error,
                                        size_t error_size) {
  auto* p = new sentencepiece::SentencePieceProcessor();
  const auto s = p->LoadFromSerializedProto(std::string_view(model, model_size));
  if (!s.ok()) {
    SetError(s.ToString(), error, error_size);
    delete p;
    return nullptr;
  }
  return p;
}

SLUICE_SPM_EXPORT void sluice_spm_free(void* processor) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(processor);
}

// Encodes `text`; on success returns the number of ids n and writes min(n, capacity) of them to
// ids (call again with capacity >= n when n > capacity). -1 with `error` set on failure.
SLUICE_SPM_EXPORT int64_t sluice_spm_encode(const void* processor, const char* text,
                                            size_t text_size, int32_t* ids, int64_t capacity,
                                            char* error, size_t error_size) {
  std::vector<int> out;
  const auto s = static_cast<const sentencepiece::SentencePieceProcessor*>(processor)->Encode(
      std::string_view(text, text_size), &out);
  if (!s.ok()) {
    SetError(s.ToString(), error, error_size);
    return -1;
  }
  const int64_t n = static_cast<int64_t>(out.size());
  for (int64_t i = 0; i < n && i < capacity; ++i) ids[i] = out[static_cast<size_t>(i)];
  return n;
}

// which: 0 <s> id, 1 </s> id, 2 vocabulary size.
SLUICE_SPM_EXPORT int sluice_spm_info(const void* processor, int which) {
  const auto* p = static_cast<const sentencepiece::SentencePieceProcessor*>(processor);
  return which == 0 ? p->bos_id() : which == 1 ? p->eos_id() : p->GetPieceSize();
}
