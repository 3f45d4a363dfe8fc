// The SentencePiece library behind sentencepiece_model.h, loaded at run time.
//
// Why not linked: Debian's libsentencepiece.so.0 carries its own copy of protobuf-lite and
// exports its symbols, which interpose on the process's libprotobuf (a process linking both
// crashes in libprotobuf's static initialisation); and its header declares
// `namespace absl { using std::string_view; }`, which clashes with Debian's Abseil. So the
// library is used only by a module of its own, libsluice_sentencepiece.so
// (sentencepiece_module.cc, a C interface), which this file loads on first use with
// dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND): the module and libsentencepiece resolve their
// symbols among themselves first and stay out of the process's global scope. The module is
// looked for at $SLUICE_SENTENCEPIECE_MODULE, then where the build put it, then where `cmake
// --install` puts it (<libdir>/sluice/). RTLD_DEEPBIND is refused under AddressSanitizer, so
// tokenize does not run in ASan builds (the error says so).
//
// Thread safety: SentencePieceLoad and the functions below may be called from any thread; a
// handle is immutable and Encode may run on many threads at once (the library's Encode is
// const).
#ifndef SLUICE_CORE_DATA_OPS_SENTENCEPIECE_LIBRARY_H_
#define SLUICE_CORE_DATA_OPS_SENTENCEPIECE_LIBRARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

struct SentencePieceProcessorHandle;

// A processor for the serialized ModelProto `serialized`; null with *error set when the module
// cannot be loaded (naming where it looked) or the model is not valid (the library's message).
std::shared_ptr<const SentencePieceProcessorHandle> SentencePieceLoad(
    const std::string& serialized, std::string* error);

// The ids of `text` into *ids; false with *error set when the library fails.
bool SentencePieceEncode(const SentencePieceProcessorHandle& p, std::string_view text,
                         std::vector<int32_t>* ids, std::string* error);

// The model's <s> and </s> ids (-1 when it has none) and its vocabulary size.
int SentencePieceBosId(const SentencePieceProcessorHandle& p);
int SentencePieceEosId(const SentencePieceProcessorHandle& p);
int SentencePieceVocabSize(const SentencePieceProcessorHandle& p);

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_SENTENCEPIECE_LIBRARY_H_
