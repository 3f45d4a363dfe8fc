// The fields of a SentencePiece .model file (a serialized sentencepiece.ModelProto, proto2) that
// encoding needs, decoded from the protobuf wire format by hand: Debian's libsentencepiece
// carries its own protobuf, so Sluice does not link its generated code (sentencepiece_library.h
// says why). Field numbers are those of sentencepiece_model.proto (0.1.97):
//
//   ModelProto       pieces = 1 (repeated SentencePiece), trainer_spec = 2, normalizer_spec = 3
//   SentencePiece    piece = 1, score = 2 (float), type = 3 (enum, default NORMAL)
//   TrainerSpec      model_type = 3, treat_whitespace_as_suffix = 24, byte_fallback = 35,
//                    unk_piece = 45, bos_piece = 46, eos_piece = 47
//   NormalizerSpec   name = 1, precompiled_charsmap = 2, add_dummy_prefix = 3,
//                    remove_extra_whitespaces = 4, escape_whitespaces = 5
//
// Every other field is skipped. As protobuf does: a singular field seen twice keeps the last
// value, a message seen twice is merged, an enum value outside the enum leaves the field as it
// was, and a field whose wire type does not match its declaration is skipped as unknown.
//
//   ASSIGN_OR_RETURN(SentencePieceModelProto proto, ParseSentencePieceModelProto(bytes));
//
// Thread safety: a pure function over its argument.
#ifndef SLUICE_CORE_DATA_OPS_SENTENCEPIECE_MODEL_PROTO_H_
#define SLUICE_CORE_DATA_OPS_SENTENCEPIECE_MODEL_PROTO_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice {

struct SentencePieceModelProto {
  // ModelProto.SentencePiece.Type.
  enum class PieceType {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
  };
  // TrainerSpec.ModelType.
  enum class ModelType { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

  struct Piece {
    std::string piece;
    float score = 0.0f;
    PieceType type = PieceType::kNormal;
  };

  // The vocabulary; a piece's id is its index.
  std::vector<Piece> pieces;

  // TrainerSpec (the defaults are the proto's).
  ModelType model_type = ModelType::kUnigram;
  bool treat_whitespace_as_suffix = false;
  bool byte_fallback = false;
  std::string unk_piece = "<unk>";
  std::string bos_piece = "<s>";
  std::string eos_piece = "</s>";

  // NormalizerSpec (the defaults are the proto's). An empty charsmap normalizes nothing
  // ("identity").
  std::string normalizer_name;
  std::string precompiled_charsmap;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// The model in `bytes`. INVALID_ARGUMENT naming the byte offset and the field for bytes that
// are not a well-formed protobuf message (a truncated varint or field, a length past the end,
// a group or an unknown wire type). The caller adds the file's name.
absl::StatusOr<SentencePieceModelProto> ParseSentencePieceModelProto(absl::string_view bytes);

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_SENTENCEPIECE_MODEL_PROTO_H_
