// A SentencePiece model for tokenize(): loaded once per process per path and shared by every
// pipeline and thread of the process. Unigram and BPE models are encoded by Sluice's own
// encoder (sentencepiece_encoder.h: the same ids, about 5x faster); the others (word and char
// models, BPE with unused pieces) by Debian's libsentencepiece, with a warning logged once per
// model saying so.
//
//   ASSIGN_OR_RETURN(std::shared_ptr<const SentencePieceModel> m,
//                    SentencePieceModel::Get("/data/spm.model"));
//   ASSIGN_OR_RETURN(Tensor ids, m->Encode("hello world", /*add_bos=*/false, /*add_eos=*/true));
//
// The file is read through core/io (local paths, s3://, ...), so workers read it where the
// pipeline names it. Ids are those of SentencePieceProcessor::Encode (what `spm_encode
// --output_format=id` prints); add_bos / add_eos put the model's <s> / </s> ids first / last,
// as seqio's SentencePieceVocabulary does.
//
// Thread safety: Get is thread-safe; a model is immutable and Encode may run on many threads at
// once (Sluice's encoder keeps per-thread caches; SentencePieceProcessor::Encode is const and
// keeps its state on the stack).
#ifndef SLUICE_CORE_DATA_OPS_SENTENCEPIECE_MODEL_H_
#define SLUICE_CORE_DATA_OPS_SENTENCEPIECE_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/data/ops/sentencepiece_encoder.h"
#include "core/data/ops/sentencepiece_library.h"
#include "sluice/tensor.h"

namespace sluice {

class SentencePieceModel {
 public:
  // The model at `path`, loaded on the first call for that path and kept for the process's
  // life. Errors name the path: NOT_FOUND (missing) or the read's code; INVALID_ARGUMENT "not a
  // SentencePiece model" for a corrupt file (with the byte offset or the bad piece); RESOURCE_EXHAUSTED for a file larger than the
  // element limit. A failed load is not remembered (a later call tries again).
  static absl::StatusOr<std::shared_ptr<const SentencePieceModel>> Get(const std::string& path);

  ~SentencePieceModel();
  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;

  // The ids of `text` as an int32 vector [n]. INVALID_ARGUMENT when add_bos / add_eos is asked
  // of a model without that piece, or when the encoder fails (its message).
  absl::StatusOr<Tensor> Encode(absl::string_view text, bool add_bos, bool add_eos) const;

  const std::string& path() const { return path_; }
  int vocab_size() const;
  // What encodes: "sluice" (sentencepiece_encoder.h) or "libsentencepiece".
  absl::string_view encoder_name() const;

 private:
  // Exactly one of `encoder` and `processor` is set.
  SentencePieceModel(std::string path, std::unique_ptr<const SentencePieceEncoder> encoder,
                     std::shared_ptr<const SentencePieceProcessorHandle> processor);
  int bos_id() const;
  int eos_id() const;

  const std::string path_;
  const std::unique_ptr<const SentencePieceEncoder> encoder_;
  const std::shared_ptr<const SentencePieceProcessorHandle> processor_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_SENTENCEPIECE_MODEL_H_
